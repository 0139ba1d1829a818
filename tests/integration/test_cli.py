"""``skuferry`` run as a user runs it: a subprocess, a config file, the sandbox as the API.

The exit codes, the JSON summary, the lock, dry runs and the guards are promises of the
interface contract (product-brief.md); each is checked here from the outside, and what
reached the API is read from the sandbox's own counts.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from skuferry.sandbox import Sandbox
from tests.integration.conftest import (
    KEY,
    assert_each_once,
    catalog_keys,
    catalog_rows,
    clean_env,
    closed_port_url,
)

pytestmark = pytest.mark.integration

Run = Callable[..., subprocess.CompletedProcess[str]]
CONTRACT_KEYS = {
    "created",
    "updated",
    "adopted",
    "unchanged",
    "rejected",
    "failed",
    "requests",
    "duration_s",
}
# Three broken rows after 20 good ones (the header is line 1, so these are lines 22-24):
# an empty key, a price that is not a decimal, and a name the API refuses (422).
BROKEN_ROWS = ',Nameless drill,10.00,1\nSKU-90001,Hammer,"12,50",3\nSKU-90002,,5.00,2\n'


def last_json(stdout: str) -> dict[str, object]:
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert isinstance(summary, dict)
    return summary


def writes(sandbox: Sandbox) -> int:
    return sandbox.stats().requests_by_key.get(KEY, {}).get("write", 0)


@pytest.fixture
def setup(
    sandbox: Sandbox, write_catalog: Callable[..., Path], write_config: Callable[..., Path]
) -> Path:
    """20 good products in the catalog; returns the config file."""
    write_catalog(catalog_rows(20))
    return write_config(sandbox.url)


# -- help ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((), ["sync", "plan", "run", "status", "check", "demo", "sandbox"]),
        (
            ("sync",),
            [
                "--config",
                "--dry-run",
                "--json",
                "--quiet",
                "--force",
                "--allow-empty-source",
                "SKUFERRY_CONFIG",
            ],
        ),
        (("check",), ["--config", "authenticated read"]),
    ],
    ids=["skuferry", "sync", "check"],
)
def test_help_lists_the_commands_and_options(
    args: tuple[str, ...], expected: list[str], run_cli: Run
) -> None:
    result = run_cli(*args, "--help")
    assert result.returncode == 0, result.stderr
    for word in expected:
        assert word in result.stdout


def test_help_cuts_no_summary_and_points_to_the_exit_codes_and_the_docs(run_cli: Run) -> None:
    """Issue 40 item 16: six of nine summaries ended in "..."; no exit codes, no docs."""
    result = run_cli("--help", env={"COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert max(len(line) for line in out.splitlines()) <= 80
    commands = out.split("Commands:")[1].split("Exit codes:")[0]
    assert "..." not in commands and "\u2026" not in commands
    assert "make one authenticated read against the API." in " ".join(commands.split())
    said = " ".join(out.split())
    for code in ("0 in step", "1 some products", "2 usage", "3 the API", "75 another", "130"):
        assert code in said
    assert "docs/operations/exit-codes.md" in said and "skuferry COMMAND --help" in said


# -- sync: JSON summary and exit codes ---------------------------------------------------------


def test_sync_json_prints_the_contract_summary_last_and_exits_0(
    sandbox: Sandbox, setup: Path, run_cli: Run
) -> None:
    result = run_cli("sync", "--json", "--config", str(setup))

    assert result.returncode == 0, result.stderr
    summary = last_json(result.stdout)
    assert set(summary) >= CONTRACT_KEYS
    assert summary["created"] == 20
    assert summary["failed"] == summary["rejected"] == 0
    assert isinstance(summary["requests"], dict)
    assert summary["requests"]["write"] == writes(sandbox) == 20
    assert_each_once(sandbox, catalog_keys(20))

    again = run_cli("sync", "--json", "--config", str(setup))
    assert again.returncode == 0
    assert last_json(again.stdout)["unchanged"] == 20
    assert writes(sandbox) == 20, "a run with nothing changed made writes"


def test_rejected_rows_exit_1_listing_their_lines_and_the_good_rows_all_arrive(
    sandbox: Sandbox,
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    run_cli: Run,
) -> None:
    write_catalog(catalog_rows(20), extra=BROKEN_ROWS)
    config = write_config(sandbox.url)

    result = run_cli("sync", "--config", str(config))

    assert result.returncode == 1, result.stderr
    for line in ("line 22", "line 23", "line 24"):
        assert line in result.stdout, result.stdout
    assert "SKU-90002" in result.stdout and "422" in result.stdout
    # The sandbox holds the good rows once; the nameless product was refused by it.
    assert_each_once(sandbox, catalog_keys(20))


def test_a_config_with_two_mistakes_exits_2_reporting_both(
    sandbox: Sandbox, setup: Path, run_cli: Run
) -> None:
    text = setup.read_text(encoding="utf-8")
    text = text.replace('update_method = "patch"', 'update_method = "sideways"')
    text = text.replace("write_per_minute = ", "write_per_minute = -")
    setup.write_text(text, encoding="utf-8")

    result = run_cli("sync", "--config", str(setup))

    assert result.returncode == 2
    assert "api.update_method" in result.stderr
    assert "budget.write_per_minute" in result.stderr
    assert "Traceback" not in result.stderr
    assert sandbox.stats().requests == {}, "a config error reached the API"


def test_an_unreachable_api_exits_3_naming_the_url(
    write_catalog: Callable[..., Path], write_config: Callable[..., Path], run_cli: Run
) -> None:
    write_catalog(catalog_rows(5))
    url = closed_port_url()
    config = write_config(url, max_retries=0)

    result = run_cli("sync", "--config", str(config))

    assert result.returncode == 3
    assert url in result.stderr
    assert "check [api] base_url" in result.stderr, "the key to fix is named (issue 40 item 17)"
    assert "Traceback" not in result.stderr


@pytest.fixture
def lock_holder(setup: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the state's run lock (``skuferry.state.lock.run_lock``)."""
    state = setup.parent / "state" / "skuferry.db"
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from skuferry.state.lock import run_lock
        with run_lock(Path({str(state)!r})):
            print("held", flush=True)
            sys.stdin.read()
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline().strip() == "held"
    yield proc
    proc.stdin.close()
    proc.stdout.close()
    proc.wait(timeout=30)


def test_a_held_lock_exits_75_at_once_and_quiet_prints_nothing(
    sandbox: Sandbox, setup: Path, lock_holder: subprocess.Popen[str], run_cli: Run
) -> None:
    result = run_cli("sync", "--config", str(setup))
    assert result.returncode == 75
    assert "another skuferry run" in result.stderr
    assert str(lock_holder.pid) in result.stderr

    quiet = run_cli("sync", "--quiet", "--config", str(setup))
    assert quiet.returncode == 75
    assert quiet.stdout == quiet.stderr == ""
    assert sandbox.stats().requests == {}, "a locked-out run reached the API"


# -- config, secrets ----------------------------------------------------------------------------


def test_skuferry_config_stands_in_for_the_option(
    sandbox: Sandbox, setup: Path, run_cli: Run
) -> None:
    result = run_cli("sync", "--json", env={"SKUFERRY_CONFIG": str(setup)})

    assert result.returncode == 0, result.stderr
    assert last_json(result.stdout)["created"] == 20
    assert_each_once(sandbox, catalog_keys(20))


def test_the_api_key_never_appears_in_any_output(
    sandbox: Sandbox,
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    run_cli: Run,
) -> None:
    write_catalog(catalog_rows(20), extra=BROKEN_ROWS)
    inline = write_config(sandbox.url)
    from_env = write_config(sandbox.url, key=None, name="env.toml")
    wrong = write_config(sandbox.url, key=KEY + "-revoked", name="wrong.toml")
    outputs = [
        run_cli("-vv", "sync", "--config", str(wrong)),  # first: a fresh state must ask the API
        run_cli("-vv", "sync", "--config", str(inline)),
        run_cli("-vv", "sync", "--json", "--config", str(from_env), env={"SKUFERRY_API_KEY": KEY}),
        run_cli("-vv", "--log-format", "console", "status", "--config", str(inline)),
        run_cli("status", "--json", "--config", str(inline)),
        run_cli("-vv", "check", "--config", str(inline)),
        run_cli("plan", "--config", str(inline)),
    ]
    assert [r.returncode for r in outputs] == [3, 1, 1, 0, 0, 0, 1]
    assert "API key was refused" in outputs[0].stderr
    for result in outputs:
        assert KEY not in result.stdout
        assert KEY not in result.stderr


# -- dry runs -------------------------------------------------------------------------------------


def _state_files(config: Path) -> dict[str, bytes]:
    """The state file and its lock; a WAL side file only when it holds anything.

    A read-only reader of a WAL database may create an empty ``-wal`` and its ``-shm``
    index (SQLite's doing, documented at ``_open_readonly``, where the state file is
    opened read-only); neither holds data.
    """
    folder = config.parent / "state"
    files = {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}
    files.pop("skuferry.db-shm", None)
    if files.get("skuferry.db-wal") == b"":
        del files["skuferry.db-wal"]
    return files


@pytest.mark.parametrize("command", [("plan",), ("sync", "--dry-run")], ids=["plan", "dry-run"])
def test_a_dry_run_leaves_the_state_byte_identical_and_writes_nothing(
    command: tuple[str, ...],
    sandbox: Sandbox,
    setup: Path,
    write_catalog: Callable[..., Path],
    run_cli: Run,
) -> None:
    assert run_cli("sync", "--config", str(setup)).returncode == 0
    rows = catalog_rows(30)  # 10 new products ...
    rows[:4] = catalog_rows(4, version=1)  # ... and 4 changed ones
    write_catalog(rows)
    before_state, before_writes = _state_files(setup), writes(sandbox)

    result = run_cli(*command, "--json", "--config", str(setup))

    assert result.returncode == 0, result.stderr
    summary = last_json(result.stdout)
    assert (summary["created"], summary["updated"]) == (10, 4)
    assert summary["dry_run"] is True
    assert _state_files(setup) == before_state
    assert writes(sandbox) == before_writes
    assert len(sandbox.products()) == 20


# -- status ---------------------------------------------------------------------------------------


def test_status_shows_counts_runs_and_rejected_products(
    sandbox: Sandbox,
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    run_cli: Run,
) -> None:
    write_catalog(catalog_rows(20), extra=BROKEN_ROWS)
    config = write_config(sandbox.url)
    assert run_cli("sync", "--config", str(config)).returncode == 1

    data = run_cli("status", "--json", "--config", str(config))
    text = run_cli("status", "--config", str(config))

    assert data.returncode == text.returncode == 0, data.stderr + text.stderr
    status = json.loads(data.stdout.strip().splitlines()[-1])
    assert sum(status["products"].values()) >= 20
    assert status["runs"] and status["runs"][0]["exit_code"] == 1
    rejected = {r["key"]: r["reason"] for r in status["rejected"]}
    assert "SKU-90002" in rejected and "name" in rejected["SKU-90002"]
    assert status["open_intents"] == []
    assert "SKU-90002" in text.stdout
    assert "rejected" in text.stdout
    # Rows the mapping refused never reach the API; status lists them from the last run.
    problems = " ".join(p["reason"] for p in status["last_run_problems"])
    assert "'12,50' is not a decimal" in problems and "key 'sku' is empty" in problems
    assert "'12,50' is not a decimal" in text.stdout
    assert all("problems" not in (r["summary"] or {}) for r in status["runs"])


# -- check ----------------------------------------------------------------------------------------


def test_check_exits_0_against_the_sandbox(sandbox: Sandbox, setup: Path, run_cli: Run) -> None:
    result = run_cli("check", "--config", str(setup))

    assert result.returncode == 0, result.stderr
    assert "20 valid record(s)" in result.stdout
    assert "api: ok" in result.stdout
    assert sandbox.stats().requests_by_key[KEY] == {"read": 1}


def test_check_show_config_prints_the_effective_config_with_the_key_masked(
    sandbox: Sandbox, setup: Path, run_cli: Run
) -> None:
    result = run_cli("check", "--show-config", "--config", str(setup))

    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout[: result.stdout.index("\n}\n") + 2])
    assert shown["api"]["base_url"] == sandbox.url
    assert shown["api"]["api_key"] == "***"
    assert KEY not in result.stdout + result.stderr


def test_check_exits_3_with_a_one_line_reason_when_the_api_is_unreachable(
    write_catalog: Callable[..., Path], write_config: Callable[..., Path], run_cli: Run
) -> None:
    write_catalog(catalog_rows(5))
    url = closed_port_url()
    config = write_config(url)

    result = run_cli("check", "--config", str(config))

    assert result.returncode == 3
    reasons = [line for line in result.stderr.splitlines() if line.startswith("skuferry:")]
    assert len(reasons) == 1 and url in reasons[0], result.stderr
    assert "check [api] base_url" in reasons[0]
    assert "Traceback" not in result.stderr


def test_check_leaves_no_state_file_behind_when_there_was_none(
    sandbox: Sandbox,
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    run_cli: Run,
    tmp_path: Path,
) -> None:
    """Issue 40 item 19: a check that failed on the source had made the state file."""
    config = write_config(sandbox.url, catalog="missing.csv")
    (tmp_path / "state").mkdir(exist_ok=True)
    state = tmp_path / "state" / "skuferry.db"
    failed = run_cli("check", "--config", str(config))
    assert failed.returncode != 0
    assert sorted(p.name for p in state.parent.iterdir()) == [], "no state, no -wal, no -shm"
    write_catalog(catalog_rows(3))
    config = write_config(sandbox.url)
    passed = run_cli("check", "--config", str(config))
    assert passed.returncode == 0, passed.stderr
    assert "none yet; the first sync creates it" in passed.stdout
    assert not state.exists()
    assert run_cli("sync", "--config", str(config)).returncode == 0
    before = state.stat().st_size
    assert run_cli("check", "--config", str(config)).returncode == 0
    assert state.exists() and state.stat().st_size == before, "an existing state stays"


# -- guards ---------------------------------------------------------------------------------------


def test_an_empty_source_is_refused_unless_allowed_and_nothing_is_deleted(
    sandbox: Sandbox, setup: Path, write_catalog: Callable[..., Path], run_cli: Run
) -> None:
    assert run_cli("sync", "--config", str(setup)).returncode == 0
    write_catalog([])  # the header only: an export that failed

    refused = run_cli("sync", "--config", str(setup))
    assert refused.returncode == 2
    assert "empty" in refused.stderr and "--allow-empty-source" in refused.stderr

    allowed = run_cli("sync", "--json", "--allow-empty-source", "--config", str(setup))
    assert allowed.returncode == 0, allowed.stderr
    assert last_json(allowed.stdout)["gone"] == 20
    assert writes(sandbox) == 20
    assert_each_once(sandbox, catalog_keys(20))  # gone from the source, kept on the remote


def test_the_change_guard_stops_a_mass_update_unless_forced(
    sandbox: Sandbox, setup: Path, write_catalog: Callable[..., Path], run_cli: Run
) -> None:
    assert run_cli("sync", "--config", str(setup)).returncode == 0
    write_catalog(catalog_rows(20, version=1))  # every price changed

    stopped = run_cli("sync", "--config", str(setup))
    assert stopped.returncode == 2
    assert "max_change_ratio" in stopped.stderr and "--force" in stopped.stderr
    assert writes(sandbox) == 20, "the guard let writes through"

    forced = run_cli("sync", "--json", "--force", "--config", str(setup))
    assert forced.returncode == 0, forced.stderr
    assert last_json(forced.stdout)["updated"] == 20
    assert writes(sandbox) == 40
    remote = {p["sku"]: p["price"] for p in sandbox.products()}
    assert remote == {r["SKU"]: Decimal(r["Price"]) for r in catalog_rows(20, version=1)}


# -- demo -----------------------------------------------------------------------------------------


def test_demo_syncs_the_sample_catalog_twice_and_exits_0(tmp_path: Path, run_cli: Run) -> None:
    result = run_cli("demo", "--workdir", str(tmp_path / "demo"), timeout=120)

    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    out = result.stdout
    assert "sandbox now holds 287 products, 0 duplicate keys" in out
    assert "'12,50' is not a decimal number" in out, "the broken rows are shown"
    assert "HTTP 422" in out, "so is a product the API refuses"
    assert "updated    5" in out, "the second sync sends only the changed products"
    assert "archived   1" in out, "and archives the product the catalog dropped"
    assert 'PATCH HT-00004 {"price":48.20}' in out, "each update carries only what changed"
    assert "description of HT-00004 survived the sync" in out, "create_only: the CMS's"
    assert (tmp_path / "demo" / "skuferry.db").exists()
    for name in ("skuferry.db", "skuferry.toml", "catalog.csv"):  # catalog data and the key
        assert (tmp_path / "demo" / name).stat().st_mode & 0o077 == 0, name
