"""The quick lane (service/quick.py) through the CLI, as cron runs it (issue 23 items 1, 2).

- a skipped run by the quick lane is the engine's skipped run: the same stdout (JSON,
  table or quiet), the same log events at the default level, the same exit code, and
  the same row in the runs table, side by side with the full start (``SKUFERRY_QUICK=off``);
- it is not taken when anything it cannot see could change the run: the source, the
  config file, the environment (a ``$VAR`` in a path), pending work, a due auth check,
  a held lock, ``--full``; each time the full start does what it always did;
- configs whose skipped run does more (a metrics textfile) leave no record;
- no secret reaches the record, not even hashed into it.

Whether the lane was taken is read from its own debug event (``sync.quick``).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from skuferry import canonical
from skuferry.sandbox import Sandbox
from skuferry.sources.change_token import RACY_S
from skuferry.state.lock import run_lock
from tests.integration.conftest import KEY, WORKSPACE, catalog_rows

pytestmark = pytest.mark.integration

Run = Callable[..., subprocess.CompletedProcess[str]]
OFF = {"SKUFERRY_QUICK": "off"}


def _settle(path: Path) -> None:
    st = path.stat()
    age = time.time() - max(st.st_mtime, st.st_ctime)
    if age < RACY_S:
        time.sleep(RACY_S - age + 0.1)


def _events(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]


def _taken(result: subprocess.CompletedProcess[str]) -> bool:
    return any(e["event"] == "sync.quick" and e["taken"] for e in _events(result))


def _visible(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    """The log events a default (info) run shows, times and the run's own id left out."""
    drop = {"timestamp", "duration_s", "run_id"}
    return [
        {k: v for k, v in e.items() if k not in drop}
        for e in _events(result)
        if e["level"] != "debug"
    ]


def _summary(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return found


def _db(config: Path) -> sqlite3.Connection:
    return sqlite3.connect(config.parent / "state" / "skuferry.db")


def _runs(config: Path) -> list[tuple[Any, ...]]:
    with _db(config) as conn:
        rows = conn.execute("SELECT status, exit_code, summary FROM runs ORDER BY id").fetchall()
    out = []
    for status, code, text in rows:
        data = json.loads(text)
        data.pop("duration_s")
        data.pop("run_id")  # the row's own id, not a figure of the run
        out.append((status, code, data))
    return out


def _meta(config: Path, name: str) -> str | None:
    with _db(config) as conn:
        row = conn.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
    return None if row is None else str(row[0])


@pytest.fixture
def synced(
    sandbox: Sandbox,
    tmp_path: Path,
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    run_cli: Run,
) -> Path:
    """A config whose catalog (20 rows and one bad price) was synced once, and settled."""
    catalog = write_catalog(catalog_rows(20), extra="SKU-BAD,Bad row,not-a-price,1\n")
    config = write_config(sandbox.url)
    _settle(catalog)
    first = run_cli("sync", "--json", "--config", str(config))
    assert first.returncode == 1, first.stderr  # the bad row
    assert (_summary(first)["created"], _summary(first)["rejected"]) == (20, 1)
    return config


def test_the_quick_lane_skips_exactly_as_the_engine_does(synced: Path, run_cli: Run) -> None:
    config = synced
    config.chmod(0o644)  # readable, with the key inline: loading it warns, every run
    cases = [["--json"], [], ["--quiet"]]
    for flags in cases:
        full = run_cli("-vv", "--log-format", "json", "sync", *flags, "-c", str(config), env=OFF)
        quick = run_cli("-vv", "--log-format", "json", "sync", *flags, "-c", str(config))
        assert not _taken(full)
        assert _taken(quick) or flags == ["--quiet"], quick.stderr  # quiet: no debug event
        assert quick.returncode == full.returncode == 1, flags  # the rejected row, carried
        if flags == ["--json"]:
            ours, theirs = _summary(quick), _summary(full)
            assert ours.pop("duration_s") >= 0 and theirs.pop("duration_s") >= 0
            assert ours.pop("run_id") == theirs.pop("run_id") + 1  # each run its own, in order
            assert ours == theirs
            assert ours["pull"] == "unchanged" and ours["problems"]
        else:  # the table (or nothing, quiet) with the same figures
            strip = [line for line in full.stdout.splitlines() if "duration" not in line]
            assert [x for x in quick.stdout.splitlines() if "duration" not in x] == strip
        assert _visible(quick) == _visible(full), flags
        warned = [e for e in _visible(quick) if e["event"] == "config.file.readable"]
        assert len(warned) == 1 and KEY not in json.dumps(warned)
    runs = _runs(config)
    assert len(runs) == 1 + 2 * len(cases)
    for full_row, quick_row in zip(runs[1::2], runs[2::2], strict=True):
        assert quick_row == full_row


def test_anything_it_cannot_see_sends_the_run_the_full_way(
    synced: Path, sandbox: Sandbox, tmp_path: Path, run_cli: Run
) -> None:
    config, catalog = synced, tmp_path / "catalog.csv"

    def sync(*flags: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return run_cli("-vv", "sync", "--json", *flags, "--config", str(config), env=env)

    assert _taken(sync())

    # the source: one price changed
    text = catalog.read_text(encoding="utf-8")
    catalog.write_text(text.replace("Cordless drill 3,", "Cordless drill 3 (2026),"), "utf-8")
    _settle(catalog)
    changed = sync()
    assert not _taken(changed) and _summary(changed)["updated"] == 1
    assert _taken(sync()), "the run that read the change left a new record"

    # the config file: a comment is no change (the lane hashes the TOML's data), a value is
    config.write_text(config.read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    assert _taken(sync())
    text = config.read_text(encoding="utf-8")
    config.write_text(text.replace("timeout_s = 5.0", "timeout_s = 6.0"), encoding="utf-8")
    edited = sync()
    assert not _taken(edited) and _summary(edited)["pull"] == "full"
    assert _taken(sync())

    # the environment: a setting from a variable
    env = {"SKUFERRY_SAFETY__MAX_CHANGE_RATIO": "0.9"}
    with_env = sync(env=env)
    assert not _taken(with_env) and _summary(with_env)["pull"] == "full"
    assert _taken(sync(env=env))
    assert not _taken(sync()), "the variable gone is a change too"

    # pending work: a product whose last write failed is retried
    with _db(config) as conn:
        conn.execute("UPDATE products SET state = 'failed' WHERE key = 'SKU-00005'")
    pending = sync()
    assert not _taken(pending) and _summary(pending)["pull"] == "full"

    # the auth check is due: the full start makes it (one read)
    with _db(config) as conn:
        conn.execute("UPDATE meta SET value = '0' WHERE name = 'api.last_contact'")
    reads = sandbox.stats().requests.get("read", 0)
    due = sync()
    assert not _taken(due) and _summary(due)["pull"] == "unchanged"
    assert sandbox.stats().requests.get("read", 0) == reads + 1

    # --full, and the switch
    assert _summary(sync("--full"))["pull"] == "full"
    assert _taken(sync())
    off = sync(env=OFF)
    assert not _taken(off) and _summary(off)["pull"] == "unchanged"

    # a held lock: the full start says so (exit 75), the lane stays out of the way
    with run_lock(config.parent / "state" / "skuferry.db"):
        held = sync()
    assert held.returncode == 75 and not _taken(held)

    # a state file that does not open: the full start words it, exactly as without the lane
    (config.parent / "state" / "skuferry.db").write_bytes(b"not a database" * 100)
    broken, off = sync(), sync(env=OFF)
    assert broken.returncode == off.returncode != 0
    assert [line for line in broken.stderr.splitlines() if not line.startswith("{")] == [
        line for line in off.stderr.splitlines() if not line.startswith("{")
    ]
    assert _visible(broken) == _visible(off)


def test_a_variable_in_the_source_path_is_part_of_the_record(
    sandbox: Sandbox,
    tmp_path: Path,
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    run_cli: Run,
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = write_catalog(catalog_rows(5), name="a/catalog.csv")
    second = write_catalog(catalog_rows(6), name="b/catalog.csv")
    config = write_config(sandbox.url, catalog="${EXPORT_DIR}/catalog.csv")
    _settle(first)
    _settle(second)

    def sync(folder: str) -> subprocess.CompletedProcess[str]:
        env = {"EXPORT_DIR": str(tmp_path / folder)}
        return run_cli("-vv", "sync", "--json", "--config", str(config), env=env)

    assert _summary(sync("a"))["created"] == 5
    assert _taken(sync("a"))
    moved = sync("b")  # same config bytes, another file
    assert not _taken(moved)
    assert _summary(moved)["created"] == 1


def test_a_mapping_changed_through_a_variable_in_any_case_is_read(
    synced: Path, sandbox: Sandbox, run_cli: Run
) -> None:
    """The loader takes ``SKUFERRY_*`` names in any case; so does the lane's reading (it is
    the same one): the changed mapping lands, as with the lane off."""
    config = synced

    def sync(env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return run_cli("-vv", "sync", "--json", "--config", str(config), env=env)

    assert _taken(sync())
    # every product's name is its SKU now (and the guard lets every product change)
    env = {"skuferry_mapping__fields__name": "SKU", "Skuferry_Safety__Max_Change_Ratio": "1"}
    changed = sync(env)
    assert not _taken(changed)
    assert (_summary(changed)["pull"], _summary(changed)["updated"]) == ("full", 20)
    assert {p["name"] for p in sandbox.products()} >= {"SKU-00001", "SKU-00020"}
    assert _taken(sync(env)), "the run that read it left the record for it"
    back = sync({"SKUFERRY_SAFETY__MAX_CHANGE_RATIO": "1"})  # the variable gone: "Name" again
    assert not _taken(back) and _summary(back)["updated"] == 20


def test_a_variable_inside_a_variable_s_value_is_part_of_the_record(
    sandbox: Sandbox,
    tmp_path: Path,
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    run_cli: Run,
) -> None:
    """``SKUFERRY_SOURCE__PATH=${CAT_DIR}/catalog.csv``: the loader expands ``$CAT_DIR``
    inside the variable's value; moved, the other file is read."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = write_catalog(catalog_rows(5), name="a/catalog.csv")
    second = write_catalog(catalog_rows(6), name="b/catalog.csv")
    config = write_config(sandbox.url, catalog="not-this.csv")  # the variable says where
    _settle(first)
    _settle(second)

    def sync(folder: str) -> subprocess.CompletedProcess[str]:
        env = {"SKUFERRY_SOURCE__PATH": "${CAT_DIR}/catalog.csv", "CAT_DIR": str(tmp_path / folder)}
        return run_cli("-vv", "sync", "--json", "--config", str(config), env=env)

    assert _summary(sync("a"))["created"] == 5
    assert _taken(sync("a"))
    moved = sync("b")  # the same config bytes and variable names, another file
    assert not _taken(moved)
    assert (_summary(moved)["pull"], _summary(moved)["created"]) == ("full", 1)
    assert _taken(sync("b"))


def _samples(textfile: Path) -> dict[str, str]:
    """The textfile's samples, the ones that tell a run's time left out."""
    timed = ("_duration_seconds", "last_success_timestamp")
    lines = textfile.read_text(encoding="utf-8").splitlines()
    pairs = [line.rsplit(" ", 1) for line in lines if line and not line.startswith("#")]
    return {name: value for name, value in pairs if not any(t in name for t in timed)}


def test_the_metrics_textfile_is_written_as_the_full_start_writes_it(
    sandbox: Sandbox,
    tmp_path: Path,
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    run_cli: Run,
) -> None:
    catalog = write_catalog(catalog_rows(5), extra="SKU-BAD,Bad row,not-a-price,1\n")
    textfile = tmp_path / "metrics" / "skuferry.prom"
    textfile.parent.mkdir()
    extra = f'[metrics]\ntextfile = "{textfile}"\nlabels = {{ workspace = "acme" }}\n'
    config = write_config(sandbox.url, extra=extra)
    _settle(catalog)
    assert run_cli("sync", "--config", str(config)).returncode == 1
    before = _samples(textfile)
    full = run_cli("-vv", "sync", "--json", "--config", str(config), env=OFF)
    after_full = _samples(textfile)
    quick = run_cli("-vv", "sync", "--json", "--config", str(config))
    assert _taken(quick) and not _taken(full)
    assert _summary(quick)["pull"] == _summary(full)["pull"] == "unchanged"
    after_quick = _samples(textfile)
    runs = 'skuferry_runs_total{result="partial",workspace="acme"}'
    assert (before[runs], after_full[runs], after_quick[runs]) == ("1.0", "2.0", "3.0")
    assert after_quick.keys() == after_full.keys() == before.keys()
    for name, value in after_quick.items():
        if "_total" in name:  # a counter: each run adds the same
            added = float(value) - float(after_full[name])
            assert added == float(after_full[name]) - float(before[name]), name
        else:  # a gauge: the same figure
            assert value == after_full[name], name
    text = textfile.read_text(encoding="utf-8")
    assert "skuferry_last_run_duration_seconds" in text, "the run's time is written too"


def test_no_secret_reaches_the_record(
    sandbox_factory: Callable[..., Sandbox],
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    run_cli: Run,
) -> None:
    sandbox = sandbox_factory(updates="patch", keys={KEY: WORKSPACE, KEY + "-rotated": WORKSPACE})
    catalog = write_catalog(catalog_rows(5))
    inline = write_config(sandbox.url)
    _settle(catalog)
    assert run_cli("sync", "--config", str(inline)).returncode == 0
    record = _meta(inline, "quick.record")
    assert record is not None and KEY not in record

    from_env = write_config(sandbox.url, key=None, name="env.toml")
    env = {"SKUFERRY_API_KEY": KEY}
    assert run_cli("sync", "--config", str(from_env), env=env).returncode == 0
    record = _meta(from_env, "quick.record")
    assert record is not None and KEY not in record
    assert _taken(run_cli("-vv", "sync", "--json", "--config", str(from_env), env=env))
    # A rotated key is no change of the config (the record holds no secret, not even
    # hashed), but it may name another CMS workspace (issue 37, item 9): the lane leaves
    # that run to the full start, which finds the state's products by id under the new
    # key, binds the state to it and skips; the next run takes the lane again.
    rotated = {"SKUFERRY_API_KEY": KEY + "-rotated"}
    first = run_cli("-vv", "sync", "--json", "--config", str(from_env), env=rotated)
    assert first.returncode == 0 and not _taken(first), first.stderr
    assert json.loads(first.stdout.splitlines()[-1])["pull"] == "unchanged"
    assert _taken(run_cli("-vv", "sync", "--json", "--config", str(from_env), env=rotated))
    env = rotated
    unrelated = {**env, "TZ": "UTC"}  # a variable the config does not name
    assert _taken(run_cli("-vv", "sync", "--json", "--config", str(from_env), env=unrelated))


def test_a_key_loaded_anew_for_every_run_keeps_the_lane(
    sandbox: Sandbox,
    tmp_path: Path,
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    run_cli: Run,
) -> None:
    """A systemd timer's ``LoadCredential=api_key:...`` (or a pod's Secret volume) writes the
    key file anew for every run: another inode, other times, the same key."""
    catalog = write_catalog(catalog_rows(5))
    config = write_config(sandbox.url, key=None)
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    env = {"CREDENTIALS_DIRECTORY": str(credentials)}

    def sync() -> subprocess.CompletedProcess[str]:
        key = credentials / "api_key"
        key.unlink(missing_ok=True)
        key.write_text(KEY + "\n", encoding="utf-8")
        key.chmod(0o400)
        return run_cli("-vv", "sync", "--json", "--config", str(config), env=env)

    _settle(catalog)
    assert _summary(sync())["created"] == 5
    assert _taken(sync())
    record = _meta(config, "quick.record")
    assert record is not None and KEY not in record


def test_an_archive_in_doubt_is_not_skipped_by_the_lane(
    sandbox: Sandbox,
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    run_cli: Run,
) -> None:
    catalog = write_catalog(catalog_rows(12))
    config = write_config(sandbox.url, extra='[gone]\naction = "patch"\npatch = { stock = 0 }\n')
    _settle(catalog)

    def sync() -> subprocess.CompletedProcess[str]:
        return run_cli("-vv", "sync", "--json", "--config", str(config))

    first = sync()
    assert first.returncode == 0, first.stderr
    assert _taken(sync()), "nothing changed, nothing pending: the lane skips"

    # the [gone] patch sent to a product whose answer was lost: archived, in doubt
    with sqlite3.connect(config.parent / "state" / "skuferry.db") as conn:
        conn.execute(
            # as the journal leaves it: the patch's digest where a refused one would be
            "UPDATE products SET state = 'archived', rejected_digest = ? WHERE key = 'SKU-00003'",
            (canonical.digest({"stock": 0}),),
        )
    pending = sync()
    assert not _taken(pending), "the record knows the patch: its archive in doubt is work"
    why = [e["why"] for e in _events(pending) if e["event"] == "sync.quick"]
    assert why == ["retries, creates in doubt or drift are pending"], pending.stderr
    summary = json.loads(pending.stdout.strip().splitlines()[-1])
    assert summary["pull"] == "full"
