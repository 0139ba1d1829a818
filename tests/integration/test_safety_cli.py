"""A product whose data is in doubt keeps its last state on the CMS, as a user meets it:
``skuferry sync`` / ``rejected`` / ``status`` against the sandbox.

- a ``[[join]]`` file with a broken record: a product whose partner is missing may have
  lost it to that record, so it is held (not sent with the mapping's defaults);
- the column ``[source] where`` reads is renamed in the export: no product looks
  filtered out (so archived); each is held;
- the unchanged-source skip does not skip when a join's config, a join file or a table
  file changed (a join file rewritten in place, same size, its old mtime put back);
- ``status`` shows the dead letters waiting for ``retry``.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from skuferry.sandbox import Sandbox
from skuferry.sources.change_token import RACY_S
from tests.integration.conftest import KEY, WORKSPACE

pytestmark = pytest.mark.integration

Run = Callable[..., subprocess.CompletedProcess[str]]


def _config(tmp_path: Path, url: str, body: str) -> Path:
    path = tmp_path / "skuferry.toml"
    path.write_text(
        f'[api]\nbase_url = "{url}"\napi_key = "{KEY}"\nupdate_method = "patch"\n\n{body}\n'
        '[state]\npath = "state/skuferry.db"\n',
        encoding="utf-8",
    )
    path.chmod(0o600)
    return path


def _sync(run_cli: Run, config: Path, *args: str, code: int = 0) -> dict[str, Any]:
    result = run_cli("sync", "--json", "--config", str(config), *args)
    assert result.returncode == code, result.stdout + result.stderr
    summary: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return summary


def _by_sku(sandbox: Sandbox) -> dict[str, dict[str, Any]]:
    return {str(p["sku"]): p for p in sandbox.products(WORKSPACE)}


def _settle(*paths: Path) -> None:
    """Wait until ``paths`` are older than the racy window (a fresh file has no change token,
    so it is read whatever its stat says)."""
    newest = max(max(p.stat().st_mtime, p.stat().st_ctime) for p in paths)
    if (age := time.time() - newest) < RACY_S:
        time.sleep(RACY_S - age + 0.1)


# --- a join with a broken record -----------------------------------------------------------

ERP_PIM = """
[source]
type = "csv"
path = "erp.csv"
delimiter = ";"

[[join]]
name = "pim"
type = "jsonl"
path = "pim.jsonl"
key = "sku"
on = "Artikelnummer"

[mapping]
key = "sku"
[mapping.fields]
sku = "Artikelnummer"
price = { column = "VK-Preis", type = "decimal", decimal = "," }
name = { path = "pim.name", default = "Artikel" }
description = { path = "pim.description", default = "" }
"""


def _erp(path: Path, rows: list[tuple[str, str]]) -> None:
    path.write_text(
        "Artikelnummer;VK-Preis\n" + "".join(f"{sku};{price}\n" for sku, price in rows),
        encoding="utf-8",
    )


def _pim_line(sku: str, name: str) -> str:
    return json.dumps({"sku": sku, "name": name, "description": f"<p>{name}</p>"}) + "\n"


def test_a_product_whose_join_partner_may_be_a_broken_record_is_held(
    sandbox: Sandbox, tmp_path: Path, run_cli: Run
) -> None:
    erp, pim = tmp_path / "erp.csv", tmp_path / "pim.jsonl"
    _erp(erp, [("10001", "12,50"), ("10002", "49,90"), ("10003", "9,99")])
    pim.write_text(
        _pim_line("10001", "Cordless drill")
        + _pim_line("10002", "Jigsaw")
        + _pim_line("10003", "Drill bits"),
        encoding="utf-8",
    )
    config = _config(tmp_path, sandbox.url, ERP_PIM)
    assert _sync(run_cli, config)["created"] == 3

    # The PIM export breaks the line of 10002 (cut short); 10001 gets a new name. Sent
    # without its partner, 10002 would be renamed "Artikel" and lose its description.
    pim.write_text(
        _pim_line("10001", "Cordless drill 18V")
        + '{"sku": "10002", "name": "Jigsaw", "descr\n'
        + _pim_line("10003", "Drill bits"),
        encoding="utf-8",
    )
    summary = _sync(run_cli, config, code=1)

    assert (summary["updated"], summary["rejected"], summary["gone"]) == (1, 1, 0)
    remote = _by_sku(sandbox)
    assert remote["10001"]["name"] == "Cordless drill 18V"
    assert (remote["10002"]["name"], remote["10002"]["description"]) == ("Jigsaw", "<p>Jigsaw</p>")
    listed = run_cli("rejected", "--json", "--config", str(config))
    assert listed.returncode == 0, listed.stderr
    letters = [letter for letter in json.loads(listed.stdout) if letter["key"] == "10002"]
    assert [(letter["stage"], letter["line"]) for letter in letters] == [("map", 3)]
    assert letters[0]["reason"] == (
        "erp.csv line 3: its partner in join 'pim' (key '10002') is pim.jsonl:2, which could "
        "not be read: pim.jsonl line 2: not valid JSON "
        "(Unterminated string starting at at character 36)"
    )

    # The PIM is put right: 10002 syncs again, nothing is left rejected.
    pim.write_text(
        _pim_line("10001", "Cordless drill 18V")
        + _pim_line("10002", "Jigsaw pro")
        + _pim_line("10003", "Drill bits"),
        encoding="utf-8",
    )
    fixed = _sync(run_cli, config)
    assert (fixed["updated"], fixed["rejected"]) == (1, 0)
    assert _by_sku(sandbox)["10002"]["name"] == "Jigsaw pro"


# --- [source] where on a renamed column -------------------------------------------------------

FILTERED = """
[source]
type = "csv"
path = "catalog.csv"
where = "Status == 'active'"

[gone]
action = "patch"
patch = { status = "archived" }

[safety]
max_gone_ratio = 1

[mapping]
key = "sku"
[mapping.fields]
sku = "SKU"
name = "Name"
price = { column = "Price", type = "decimal" }
"""


def _catalog(path: Path, status_column: str) -> None:
    path.write_text(
        f"SKU,Name,Price,{status_column}\n"
        "A-1,Claw hammer,12.90,active\n"
        "A-2,Tape measure,7.50,active\n"
        "A-3,Spirit level,19.00,active\n"
        "A-4,Old saw,5.00,discontinued\n",
        encoding="utf-8",
    )


def test_a_renamed_where_column_holds_every_product_and_archives_none(
    sandbox: Sandbox, tmp_path: Path, run_cli: Run
) -> None:
    catalog = tmp_path / "catalog.csv"
    _catalog(catalog, "Status")
    config = _config(tmp_path, sandbox.url, FILTERED)
    first = _sync(run_cli, config)
    assert (first["created"], first["skipped"]) == (3, 1)

    _catalog(catalog, "State")  # the ERP renamed the column: no record has it
    failed = run_cli("sync", "--json", "--config", str(config))

    assert failed.returncode == 3, failed.stdout + failed.stderr
    assert (
        "catalog.csv: [source] where reads 'Status', which none of the 4 record(s) it tested has "
        "(a renamed or dropped column?); nothing was synced" in failed.stderr
    ), failed.stderr
    remote = _by_sku(sandbox)
    assert {sku: p.get("status") for sku, p in remote.items()} == {
        "A-1": None,
        "A-2": None,
        "A-3": None,
    }, "nothing archived"

    # One short row lacks the column: it is unreadable (fewer fields than the header), so
    # that product is held, not archived; the rest sync.
    catalog.write_text(
        "SKU,Name,Price,Status\n"
        "A-1,Claw hammer,13.90,active\n"
        "A-2,Tape measure,7.50\n"
        "A-3,Spirit level,19.00,active\n",
        encoding="utf-8",
    )
    summary = _sync(run_cli, config, code=1)
    assert (summary["updated"], summary["rejected"], summary["archived"]) == (1, 1, 0)
    (problem,) = summary["problems"]
    assert (problem["key"], problem["reason"]) == (
        "A-2",
        "catalog.csv line 3: 3 field(s), the header has 4 (if the exporter drops trailing "
        'empty fields, set short_rows = "pad" in the table that reads this file)',
    )
    assert "status" not in _by_sku(sandbox)["A-2"], "held as it was"

    _catalog(catalog, "Status")  # put right: back in step, nothing held
    again = _sync(run_cli, config)
    assert (again["rejected"], again["archived"], again["updated"]) == (0, 0, 1)


# --- the unchanged-source skip and joins / tables -------------------------------------------

JOINED = """
[source]
type = "csv"
path = "catalog.csv"

[[join]]
name = "pim"
type = "jsonl"
path = "{pim}"
key = "sku"
on = "SKU"

[mapping]
key = "sku"
[mapping.tables]
colours = {{ file = "colours.csv", key = "code", value = "label" }}
[mapping.fields]
sku = "SKU"
name = {{ path = "pim.name", required = true }}
colour = {{ path = "lookup('colours', Colour)" }}
"""


def test_a_changed_join_config_join_file_or_table_file_is_read_not_skipped(
    sandbox: Sandbox, tmp_path: Path, run_cli: Run
) -> None:
    catalog, colours = tmp_path / "catalog.csv", tmp_path / "colours.csv"
    catalog.write_text("SKU,Colour\nB-1,1\nB-2,2\n", encoding="utf-8")
    colours.write_text("code,label\n1,Red\n2,Blue\n", encoding="utf-8")
    pim, other = tmp_path / "pim.jsonl", tmp_path / "pim-nightly.jsonl"
    pim.write_text(_pim_line("B-1", "Bolt") + _pim_line("B-2", "Nut"), encoding="utf-8")
    other.write_text(_pim_line("B-1", "BOLT") + _pim_line("B-2", "NUT"), encoding="utf-8")
    config = _config(tmp_path, sandbox.url, JOINED.format(pim="pim.jsonl"))
    _settle(catalog, colours, pim, other)

    assert _sync(run_cli, config)["created"] == 2
    assert _sync(run_cli, config)["pull"] == "unchanged"

    # the join's config changes (another file): read, and the new names are sent
    _config(tmp_path, sandbox.url, JOINED.format(pim="pim-nightly.jsonl"))
    moved = _sync(run_cli, config)
    assert (moved["pull"], moved["updated"]) == ("full", 2)
    assert _by_sku(sandbox)["B-1"]["name"] == "BOLT"
    assert _sync(run_cli, config)["pull"] == "unchanged"

    # the join file is rewritten in place: same size, its old mtime put back (`cp -p`)
    before = other.stat()
    other.write_text(_pim_line("B-1", "Bolz") + _pim_line("B-2", "NUT"), encoding="utf-8")
    os.utime(other, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (other.stat().st_size, other.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    _settle(other)
    rewritten = _sync(run_cli, config)
    assert (rewritten["pull"], rewritten["updated"]) == ("full", 1), rewritten["notes"]
    assert _by_sku(sandbox)["B-1"]["name"] == "Bolz"
    assert _sync(run_cli, config)["pull"] == "unchanged"

    # a table file changes: the labels are sent
    colours.write_text("code,label\n1,Rot\n2,Blue\n", encoding="utf-8")
    _settle(colours)
    relabelled = _sync(run_cli, config)
    assert (relabelled["pull"], relabelled["updated"]) == ("full", 1)
    assert _by_sku(sandbox)["B-1"]["colour"] == "Rot"


# --- status shows the dead letters --------------------------------------------------------


def test_status_shows_the_dead_letters_waiting_for_retry_and_the_oldest(
    sandbox: Sandbox,
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    run_cli: Run,
) -> None:
    config = write_config(sandbox.url)
    rows = [
        {"SKU": f"D-{i}", "Name": f"Dowel {i}", "Price": "1.00", "Stock": "1"} for i in range(3)
    ]
    write_catalog([*rows[:2], {**rows[2], "Price": "cheap"}])
    assert run_cli("sync", "--config", str(config)).returncode == 1  # D-2 refused
    time.sleep(1.1)  # first_seen is kept in seconds: D-0 is refused one second later
    write_catalog([{**rows[0], "Name": ""}, rows[1], {**rows[2], "Price": "cheap"}])
    assert (
        run_cli("sync", "--config", str(config)).returncode == 1
    )  # D-2 still; the API refuses D-0

    data = run_cli("status", "--json", "--config", str(config))
    text = run_cli("status", "--config", str(config))

    assert data.returncode == text.returncode == 0, data.stderr + text.stderr
    letters = json.loads(data.stdout.strip().splitlines()[-1])["dead_letters"]
    assert (letters["count"], letters["by_stage"]) == (2, {"map": 1, "api": 1})
    oldest = letters["oldest"]
    assert (oldest["key"], oldest["stage"]) == ("D-2", "map")
    assert "'cheap' is not a decimal number" in oldest["reason"]
    listed = json.loads(run_cli("rejected", "--json", "--config", str(config)).stdout)
    assert oldest == next(letter for letter in listed if letter["key"] == "D-2")
    assert (
        "dead letters: 2 rejected or failed product(s) waiting for `skuferry retry` (map 1, api 1)"
        in text.stdout
    ), text.stdout
    assert f"oldest: D-2, refused since {oldest['first_seen']} (map):" in text.stdout

    write_catalog(rows)  # put right: nothing waits any more
    assert run_cli("sync", "--config", str(config)).returncode == 0
    after = json.loads(run_cli("status", "--json", "--config", str(config)).stdout)
    assert after["dead_letters"] == {"count": 0, "by_stage": {}, "oldest": None}
    assert "dead letters: none" in run_cli("status", "--config", str(config)).stdout
