"""Held, not gone, through the CLI: a broken export never takes products off sale.

A 300-product catalog is synced with ``[gone] action = "patch"``, then exported
again with three rows broken by hand: a bad byte in a name, a row with one field
too many, and a quote that is never closed and swallows the next two rows.
Nothing may be archived; every broken and swallowed row is reported with file,
line and reason; the run exits 1 and the valid rest is synced. Once the export
is fixed, the next run is clean and archives nothing.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

from skuferry.sandbox import Sandbox
from tests.integration.conftest import catalog_rows

GONE = """
[gone]
action = "patch"
patch = { status = "archived", stock = 0 }
restore = { status = "active" }
"""

Run = Callable[..., subprocess.CompletedProcess[str]]


def _line(row: dict[str, str]) -> str:
    return f"{row['SKU']},{row['Name']},{row['Price']},{row['Stock']}"


def _export(path: Path, rows: list[dict[str, str]], broken: dict[int, bytes]) -> None:
    """The catalog as an ERP writes it, with the rows at ``broken`` positions replaced."""
    lines = [b"SKU,Name,Price,Stock"]
    for i, row in enumerate(rows):
        lines.append(broken.get(i, _line(row).encode()))
    path.write_bytes(b"\n".join(lines) + b"\n")


def _repriced(rows: list[dict[str, str]], positions: tuple[int, ...]) -> list[dict[str, str]]:
    return [
        {**row, "Price": str(Decimal(row["Price"]) + 1)} if i in positions else row
        for i, row in enumerate(rows)
    ]


def _sync(run: Run, config: Path) -> tuple[int, dict[str, Any], str]:
    done = run("sync", "--json", "--config", str(config))
    return done.returncode, json.loads(done.stdout), done.stderr


def _archived(sandbox: Sandbox) -> list[str]:
    return sorted(str(p["sku"]) for p in sandbox.products("default") if p.get("status"))


def test_three_broken_rows_hold_their_products_and_nothing_is_archived(
    tmp_path: Path, sandbox: Sandbox, write_config: Callable[..., Path], run_cli: Run
) -> None:
    rows = catalog_rows(300)
    # a UTF-8 export: [source] encoding = "auto" (the default) reads it as UTF-8 on this
    # evidence, so the cp1252 byte below is a bad byte, not a cp1252 file
    rows[200] = {**rows[200], "Name": "Bohrer für Holz 201"}
    config = write_config(sandbox.url, extra=GONE)
    catalog = tmp_path / "catalog.csv"
    _export(catalog, rows, {})
    code, first, _ = _sync(run_cli, config)
    assert (code, first["created"]) == (0, 300)

    # The next export: a few prices changed, and three rows broken by hand. Row i of
    # the catalog is on line i + 2 of the file (line 1 is the header).
    bad_byte, extra_field, quote = 10, 20, 30  # SKU-00011 (line 12), -00021 (22), -00031 (32)
    held = (bad_byte, extra_field, quote, quote + 1, quote + 2)
    changed = _repriced(rows, (0, 100, *held))
    _export(
        catalog,
        changed,
        {
            bad_byte: b"SKU-00011,Cordless drill \xe9 11,19.99,5",
            extra_field: b"SKU-00021,Cordless drill, 21,20.00,5",  # an unquoted comma
            quote: b'SKU-00031,"Cordless drill 31,21.00,5',  # never closed ...
            quote + 2: b'SKU-00033,"Cordless drill 33",22.00,5',  # ... until this quote
        },
    )
    code, summary, stderr = _sync(run_cli, config)

    assert code == 1, stderr
    assert _archived(sandbox) == [], "a broken export took products off sale"
    assert (summary["archived"], summary["gone"]) == (0, 0)
    by_line = {p["line"]: p for p in summary["problems"]}
    assert sorted(by_line) == [12, 22, 32, 33, 34]
    assert by_line[12]["key"] == "SKU-00011"
    assert "catalog.csv line 12, column 'Name': invalid utf-8 (byte 0xe9)" in by_line[12]["reason"]
    assert by_line[22]["key"] == "SKU-00021"  # read by position: held, but not sure
    assert "catalog.csv line 22: 5 fields, the header has 4" in by_line[22]["reason"]
    assert by_line[32]["key"] == "SKU-00031"
    assert by_line[32]["reason"].startswith(
        "catalog.csv line 32: a quote opened here runs to line 34"
    )
    assert "lines 32\u201334 rejected" in by_line[32]["reason"]
    for line, key in ((33, "SKU-00032"), (34, "SKU-00033")):  # the swallowed rows, held
        assert by_line[line]["key"] == key
        assert by_line[line]["reason"].startswith(
            f"catalog.csv line {line}: inside the quote opened on line 32"
        )
    assert summary["rejected"] == 5
    # The row with a field too many could be another product: nothing is decided gone.
    assert (summary["rows_without_key"], summary["gone_skipped"]) == (1, True)
    assert any(n.startswith("gone decisions skipped: 1 row(s)") for n in summary["notes"])
    # The valid rest is synced; the held products keep what they had.
    assert (summary["updated"], summary["unchanged"]) == (2, 293)
    remote = {str(p["sku"]): p for p in sandbox.products("default")}
    for i in held:
        key = rows[i]["SKU"]
        assert Decimal(str(remote[key]["price"])) == Decimal(rows[i]["Price"]), f"{key} updated"
    for i in (0, 100):
        assert Decimal(str(remote[rows[i]["SKU"]]["price"])) == Decimal(changed[i]["Price"])

    # The export is fixed: a clean run, the held products updated, nothing archived.
    _export(catalog, changed, {})
    code, fixed, stderr = _sync(run_cli, config)
    assert code == 0, stderr
    assert (fixed["updated"], fixed["archived"], fixed["rejected"]) == (len(held), 0, 0)
    assert (fixed["rows_without_key"], fixed["gone_skipped"]) == (0, False)
    assert _archived(sandbox) == []

    # And gone decisions are back: a product that really left is archived.
    _export(catalog, changed[1:], {})
    code, left, _ = _sync(run_cli, config)
    assert (code, left["archived"]) == (0, 1)
    assert _archived(sandbox) == ["SKU-00001"]


def test_a_row_without_a_readable_key_archives_nothing_while_a_product_leaves(
    tmp_path: Path, sandbox: Sandbox, write_config: Callable[..., Path], run_cli: Run
) -> None:
    rows = catalog_rows(20)
    config = write_config(sandbox.url, extra=GONE)
    catalog = tmp_path / "catalog.csv"
    _export(catalog, rows, {})
    assert _sync(run_cli, config)[0] == 0

    # SKU-00020 leaves the export, and a stray quote in the first cell of line 4 makes
    # that row's key unreadable: it could be SKU-00020, so nothing is archived.
    _export(catalog, rows[:-1], {2: b'"SKU-00003"x,Cordless drill 3,21.00,5'})
    code, summary, stderr = _sync(run_cli, config)

    assert code == 1, stderr
    assert _archived(sandbox) == []
    assert summary["problems"] == [
        {"key": None, "line": 4, "reason": "catalog.csv line 4: ',' expected after '\"'"}
    ]
    assert (summary["rows_without_key"], summary["gone_skipped"]) == (1, True)
    assert "gone decisions skipped: 1 row(s) without a readable key" in " ".join(summary["notes"])
