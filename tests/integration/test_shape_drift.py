"""Generative drift: a synced catalog whose export changes shape never reaches the CMS as
data (issue 37).

For each example: a catalog of 12-30 products (keys with leading zeros or in lower case,
names with umlauts, decimal prices) is synced from a CSV file, an XLSX workbook, a JSON
Lines file or an HTTP API served on the loopback; then its export is changed as ERP
upgrades, spreadsheets and jobs change exports (a column or path renamed, dropped,
moved, duplicated or reordered; another delimiter, encoding or decimal style; keys
stripped of their zeros, upper-cased, prefixed; the header repeated; a BOM), and synced
again without and with ``--force``. Every change keeps the catalog's data, so:

- the CMS afterwards holds exactly what it held: no field nulled, defaulted or turned
  to mojibake, no product created under a reformatted key, nothing archived; the state
  marks nothing gone;
- a change that breaks the shape makes the run exit non-zero; one that does not (the
  columns reordered, a BOM, an encoding ``auto`` reads) makes it exit 0 with no write.

Each change of each format is its own test; ``SKUFERRY_DRIFT_EXAMPLES`` sets the
examples of each (default 6); ``--hypothesis-show-statistics`` shows what was drawn.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from skuferry import errors
from skuferry.config.load import settings_from_dict
from skuferry.models import RunOptions
from skuferry.state.mirror import Mirror
from skuferry.sync.engine import Adapters, run_once
from tests.fakes import FakeRemote
from tests.json_api import JsonApi

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("SKUFERRY_DRIFT_EXAMPLES", "6"))
NAMES = ("Müller Kaffee", "Crème brûlée", "Öl extra", "Kaffee", "Süßholz")
# the export's columns (CSV, XLSX) or names (JSON): key, name, price, stock
COLUMNS = ("ItemNo", "Description", "UnitPrice", "Stock")
JSON_NAMES = ("id", "title", "price", "stock")

# what each change does to a catalog that keeps its data: breaks the shape (the run must
# exit non-zero) or not (exit 0, nothing written); "maybe": the format decides (below)
BREAKS = {
    "rename": True,
    "drop": True,
    "duplicate": True,
    "move": True,
    "delimiter": True,
    "decimal_comma": True,
    "key_zeros": True,
    "key_case": True,
    "key_prefix": True,
    "repeat_header": True,
    "reorder": False,
    "bom": False,
    "encoding": None,  # "auto" reads the new encoding; a declared one refuses or rejects
}
CHANGES = {
    "csv": [
        "rename", "drop", "duplicate", "reorder", "delimiter", "encoding", "decimal_comma",
        "key_zeros", "key_case", "key_prefix", "repeat_header", "bom",
    ],
    "xlsx": [
        "rename", "drop", "duplicate", "reorder", "decimal_comma", "key_zeros", "key_case",
        "key_prefix", "repeat_header",
    ],
    "jsonl": ["rename", "drop", "move", "reorder", "decimal_comma", "key_zeros", "key_case",
              "key_prefix"],
    "http": ["rename", "drop", "move", "reorder", "decimal_comma", "key_zeros", "key_case",
             "key_prefix"],
}  # fmt: skip


@dataclass
class Catalog:
    """A catalog and how its export is written."""

    keys: list[str]
    names: list[str]
    prices: list[str]
    stocks: list[int]
    encoding: str = "utf-8"  # the file's bytes (CSV)
    declared: str = "auto"  # [source] encoding (CSV)
    columns: list[str] = field(default_factory=lambda: list(COLUMNS))
    delimiter: str = ","
    decimal_comma: bool = False
    repeat_header: bool = False
    bom: bool = False
    moved: bool = False  # JSON: price under pricing.amount
    duplicate: str | None = None  # a column written twice

    def rows(self) -> Iterator[list[Any]]:
        for key, name, price, stock in zip(
            self.keys, self.names, self.prices, self.stocks, strict=True
        ):
            shown = price.replace(".", ",") if self.decimal_comma else price
            yield [key, name, shown, stock]


@st.composite
def catalogs(draw: st.DrawFn) -> Catalog:
    size = draw(st.integers(12, 30))
    zeros = draw(st.booleans())
    keys = [f"{i:06d}" if zeros else f"art-{i}" for i in range(1, size + 1)]
    names = [f"{NAMES[i % len(NAMES)]} {i}" for i in range(size)]
    prices = [f"{draw(st.integers(1, 999))}.{draw(st.integers(10, 99))}" for _ in range(size)]
    stocks = [draw(st.integers(0, 500)) for _ in range(size)]
    encoding = draw(st.sampled_from(["utf-8", "cp1252"]))
    declared = draw(st.sampled_from(["auto", encoding]))
    return Catalog(keys, names, prices, stocks, encoding=encoding, declared=declared)


def mutate(catalog: Catalog, change: str, column: int) -> Catalog:
    """The same catalog, its export changed by ``change`` (``column``: which one)."""
    new = Catalog(
        list(catalog.keys), list(catalog.names), list(catalog.prices), list(catalog.stocks),
        catalog.encoding, catalog.declared, list(catalog.columns),
    )  # fmt: skip
    if change == "rename":
        new.columns[column] = new.columns[column] + " (new)"
    elif change == "drop":
        new.columns[column] = ""  # written without it
    elif change == "duplicate":
        new.duplicate = new.columns[column]
    elif change == "reorder":
        new.columns = [*new.columns[1:], new.columns[0]]
    elif change == "move":
        new.moved = True
    elif change == "delimiter":
        new.delimiter = ";"
    elif change == "encoding":
        new.encoding = "cp1252" if catalog.encoding == "utf-8" else "utf-8"
    elif change == "decimal_comma":
        new.decimal_comma = True
    elif change == "key_zeros":
        new.keys = [k.lstrip("0") or "0" for k in new.keys]
    elif change == "key_case":
        new.keys = [k.upper() for k in new.keys]
    elif change == "key_prefix":
        new.keys = ["DE-" + k for k in new.keys]
    elif change == "repeat_header":
        new.repeat_header = True
    elif change == "bom":
        new.bom = True
    return new


# --- writing an export --------------------------------------------------------------------


def _table(catalog: Catalog) -> tuple[list[str], list[list[Any]]]:
    """The header and rows as written: columns in ``catalog.columns`` order (which names
    ``COLUMNS``' fields by position), a dropped one left out, a duplicated one twice."""
    keep = [i for i, c in enumerate(catalog.columns) if c]
    header = [catalog.columns[i] for i in keep]
    rows = [[row[i] for i in keep] for row in catalog.rows()]
    if catalog.duplicate is not None:
        at = header.index(catalog.duplicate)
        header.append(catalog.duplicate)
        rows = [[*r, r[at]] for r in rows]
    return header, rows


def _reordered(catalog: Catalog) -> tuple[list[str], list[list[Any]]]:
    """Reordered columns keep each value under its name."""
    header, rows = _table(catalog)
    if catalog.columns == [*COLUMNS[1:], COLUMNS[0]]:
        rows = [[*r[1:], r[0]] for r in rows]
    return header, rows


def write_csv(catalog: Catalog, path: Path) -> None:
    header, rows = _reordered(catalog)
    out = io.StringIO()
    writer = csv.writer(out, delimiter=catalog.delimiter, lineterminator="\n")
    writer.writerow(header)
    half = len(rows) // 2
    writer.writerows(rows[:half])
    if catalog.repeat_header:
        writer.writerow(header)
    writer.writerows(rows[half:])
    data = out.getvalue().encode(catalog.encoding)
    path.write_bytes((b"\xef\xbb\xbf" if catalog.bom else b"") + data)


def write_xlsx(catalog: Catalog, path: Path) -> None:
    from openpyxl import Workbook

    header, rows = _reordered(catalog)
    book = Workbook()
    sheet = book.active
    sheet.append(header)
    half = len(rows) // 2
    key_at = header.index(COLUMNS[0]) if COLUMNS[0] in header else None
    for number, row in enumerate(rows):
        if catalog.repeat_header and number == half:
            sheet.append(header)
        cells = list(row)
        if key_at is not None and str(cells[key_at]).isdigit():
            cells[key_at] = int(cells[key_at])  # Excel keeps a number, zeros gone
            if catalog.keys[0].lstrip("0") != catalog.keys[0]:
                cells[key_at] = str(row[key_at])  # the keys as text, with their zeros
        sheet.append(cells)
    book.save(path)


def json_records(catalog: Catalog) -> list[dict[str, Any]]:
    names = list(JSON_NAMES)
    for position, column in enumerate(catalog.columns[: len(JSON_NAMES)]):
        if column == "":
            names[position] = ""
        elif column.endswith(" (new)"):
            names[position] = JSON_NAMES[position] + "_new"
    records = []
    for row in catalog.rows():
        record: dict[str, Any] = {}
        for name, value in zip(names, row, strict=True):
            if not name:
                continue
            if name == "price" and catalog.moved:
                record["pricing"] = {"amount": value, "currency": "EUR"}
            else:
                record[name] = value
        if catalog.columns == [*COLUMNS[1:], COLUMNS[0]]:
            record = dict(reversed(list(record.items())))
        records.append(record)
    return records


def write_jsonl(catalog: Catalog, path: Path) -> None:
    lines = [json.dumps(r, ensure_ascii=False) for r in json_records(catalog)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def api() -> Iterator[JsonApi]:
    served = JsonApi()
    yield served
    served.close()


# --- the configs -------------------------------------------------------------------------


def _config(kind: str, folder: Path, catalog: Catalog, api: JsonApi) -> dict[str, Any]:
    if kind in ("csv", "xlsx"):
        fields: dict[str, Any] = {
            "sku": COLUMNS[0],
            "name": {"column": COLUMNS[1], "default": "(no text)"},
            "price": {"column": COLUMNS[2], "type": "decimal"},
            "stock": {"column": COLUMNS[3], "type": "integer"},
        }
        source: dict[str, Any] = {"type": kind, "path": str(folder / f"export.{kind}")}
        if kind == "csv":
            source["encoding"] = catalog.declared
    else:
        fields = {
            "sku": {"path": "id"},
            "name": {"path": "title", "default": "(no text)"},
            "price": {"path": "price", "type": "decimal"},
            "stock": {"path": "stock", "type": "integer"},
        }
        source = (
            {"type": "jsonl", "path": str(folder / "export.jsonl")}
            if kind == "jsonl"
            else {"type": "http", "url": api.url, "items_path": "items", "pagination": "none"}
        )
    return {
        "api": {"base_url": "http://127.0.0.1:9", "api_key": "k-test", "max_in_flight": 2},
        "source": source,
        "mapping": {"key": "sku", "fields": fields},
        "gone": {"action": "patch", "patch": {"status": "archived"}},
        "state": {"path": str(folder / "state.db")},
    }


def _write(kind: str, catalog: Catalog, folder: Path, api: JsonApi) -> None:
    if kind == "csv":
        write_csv(catalog, folder / "export.csv")
    elif kind == "xlsx":
        write_xlsx(catalog, folder / "export.xlsx")
    elif kind == "jsonl":
        write_jsonl(catalog, folder / "export.jsonl")
    else:
        api.serve({"items": json_records(catalog)})


def _sync(data: dict[str, Any], remote: FakeRemote, **flags: Any) -> int:
    try:
        summary = run_once(
            settings_from_dict(data), RunOptions(**flags), adapters=Adapters(client=remote)
        )
    except errors.SkuferryError as exc:
        return exc.exit_code
    return summary.exit_code


def _applies(change: str, catalog: Catalog) -> bool:
    """Whether ``change`` changes this catalog's export at all (as a user meets it)."""
    zeros = catalog.keys[0].startswith("0")
    if change == "key_zeros":
        return zeros  # keys without leading zeros have none to lose
    if change == "key_case":
        return not zeros  # digits have no case
    if change == "bom":
        return catalog.encoding == "utf-8"  # a BOM says UTF-8: Excel's "CSV UTF-8"
    return True


def _breaks(change: str, catalog: Catalog, kind: str) -> bool | None:
    """Whether ``change`` must end the run non-zero (None: either is right, as long as
    the CMS keeps what it held)."""
    if change == "encoding":
        ascii_only = all(n.isascii() for n in catalog.names)
        return None if ascii_only else catalog.declared != "auto"
    if change == "reorder" and kind == "xlsx":
        return False
    return BREAKS[change]


def _check(kind: str, catalog: Catalog, change: str, column: int, api: JsonApi) -> None:
    folder = Path(tempfile.mkdtemp(prefix="skuferry-drift-"))
    try:
        data = _config(kind, folder, catalog, api)
        remote = FakeRemote(required=("sku",))
        _write(kind, catalog, folder, api)
        assert _sync(data, remote) == 0
        before = {rid: dict(p) for rid, p in remote.products.items()}
        assert sorted(str(p["sku"]) for p in before.values()) == sorted(catalog.keys)
        changed = mutate(catalog, change, column)
        _write(kind, changed, folder, api)
        breaks = _breaks(change, catalog, kind)
        for force in (False, True):
            writes = remote.requests["write"]
            code = _sync(data, remote, force=force)
            assert remote.products == before, f"{change} (force={force}) changed the CMS"
            if breaks:
                assert code != 0, f"{change} (force={force}) was read as data"
            elif breaks is False:
                assert code == 0 and remote.requests["write"] == writes, change
        mirror = Mirror(folder / "state.db")
        try:
            assert mirror.counts_by_state() == {"synced": len(catalog.keys)}, "marked gone"
        finally:
            mirror.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize(
    ("kind", "change"), [(kind, change) for kind, changes in CHANGES.items() for change in changes]
)
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(catalog=catalogs(), column=st.integers(0, 3))
def test_a_change_of_shape_never_reaches_the_cms_as_data(
    api: JsonApi, kind: str, change: str, catalog: Catalog, column: int
) -> None:
    assume(_applies(change, catalog))
    event(f"{kind}: {change}")
    _check(kind, catalog, change, column, api)
