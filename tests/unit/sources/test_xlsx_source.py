"""The xlsx source: the shared contract, then what real workbooks do (sheets, headers, types)."""

from __future__ import annotations

import gzip
import io
import zipfile
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from skuferry.config.load import settings_from_dict
from skuferry.config.schema import MappingSettings
from skuferry.errors import ConfigError, SourceError
from skuferry.models import BadRecord, Product, RawRecord
from skuferry.sandbox.catalog_files import write_xlsx, write_xlsx_rows
from skuferry.sources.base import Source
from skuferry.sources.dispatch import open_source
from skuferry.sources.xlsx import XlsxSource
from skuferry.sources.xlsx_cells import SharedStrings
from skuferry.sync.map.mapper import Mapper
from tests.source_contract import GOOD, SourceContract

HEADER = ["sku", "name", "price"]


def _rows(records: list[dict[str, Any]]) -> list[list[Any]]:
    return [HEADER, *([r["sku"], r["name"], r["price"]] for r in records)]


def _read(source: Source) -> list[RawRecord]:
    out = list(source.records())
    assert all(isinstance(r, RawRecord) for r in out), out
    return [r for r in out if isinstance(r, RawRecord)]


class TestXlsxContract(SourceContract):
    """The default reader (``auto``: calamine for a workbook this size)."""

    reader = "auto"

    def make_source(self, tmp_path: Path, records: list[dict[str, Any]]) -> Source:
        # Text in a shared-strings table, as Excel writes it (openpyxl writes inline text).
        path = write_xlsx_rows(tmp_path / "products.xlsx", _rows(records))
        return XlsxSource(path, reader=self.reader)

    def make_source_with_bad_record(self, tmp_path: Path) -> tuple[Source, int]:
        # A workbook has no undecodable rows: an empty row in the middle is skipped, not bad.
        rows = [*_rows(GOOD[:2]), [None, None, None], *_rows(GOOD[2:])[1:]]
        path = write_xlsx(tmp_path / "products.xlsx", {"Products": rows})
        return XlsxSource(path, reader=self.reader), 0

    def make_unreachable_source(self, tmp_path: Path) -> tuple[Source, str]:
        path = tmp_path / "nowhere" / "products.xlsx"
        return XlsxSource(path, reader=self.reader), str(path)

    def make_large_source(self, tmp_path: Path, n: int) -> Source:
        rows: Iterator[list[Any]] = (
            [f"SKU-{i:06d}", f"Product {i}", i % 100 + 0.5] for i in range(n)
        )
        # openpyxl: the reader that streams (calamine holds the sheet in Rust memory,
        # which tracemalloc does not see; "auto" bounds it by the sheet's size instead)
        return XlsxSource(
            write_xlsx_rows(tmp_path / "large.xlsx", [HEADER, *rows]), reader="openpyxl"
        )

    @pytest.mark.slow  # openpyxl under tracemalloc: about a minute on a busy 2-core box
    def test_large_source_streams_with_flat_memory(self, tmp_path: Path) -> None:
        super().test_large_source_streams_with_flat_memory(tmp_path)


class TestXlsxOpenpyxlContract(TestXlsxContract):
    reader = "openpyxl"


# -- a workbook as PIM/ERP users hand it over --------------------------------------------------


@pytest.fixture
def erp_workbook(tmp_path: Path) -> Path:
    """Data on the 4th sheet under a title, a duplicated header, formulas, numeric keys, EANs."""
    products: list[list[Any]] = [
        ["Artikelliste Frühjahr", None, None, None, None, None, None, None],
        [None],
        ["Artikelnummer", "Name", "EAN", "Preis", "Menge", "Gesamt", "Name", "Seit"],
        ["012345", "Akku-Bohrschrauber", 4006381333931, 21.35, 3, "=D4*E4", "x", "2024-03-01"],
        [12346, "Stichsäge 6,5°", "04596710520787", 52, 1, "=D5*E5", "y", None],
        [None, None, None, None, None, None, None, None],
        ["079685", "Winkelschleifer", "'0850064060010", 3.4986000000000002, 2, "=D7*E7"],
    ]
    from datetime import datetime

    products[3][7] = datetime(2024, 3, 1)
    products[4][7] = datetime(2024, 3, 1, 8, 30)
    return write_xlsx(
        tmp_path / "export.xlsx",
        {
            "Anleitung": [["Bitte nicht ändern"], ["Spalten siehe Blatt 4"]],
            "Makros": [["Sub Auto_Open()"]],
            "Werte": [["Einheit", "C62"]],
            "Artikel": products,
        },
        cached={"Artikel!F4": 64.05, "Artikel!F5": 52, "Artikel!F7": 6.9972},
    )


def test_the_fourth_sheet_by_position_with_a_header_below_a_title(erp_workbook: Path) -> None:
    rows = _read(XlsxSource(erp_workbook, sheet=4, header_row=3))

    assert [r.line for r in rows] == [4, 5, 7], "spreadsheet row numbers; the empty row skipped"
    first = rows[0].fields
    assert first["Artikelnummer"] == "012345", "a text key keeps its leading zero"
    assert first["EAN"] == 4006381333931 and isinstance(first["EAN"], int)
    assert first["Preis"] == 21.35
    assert first["Seit"] == "2024-03-01", "a date becomes ISO text"
    assert rows[1].fields["Seit"] == "2024-03-01T08:30:00"
    assert rows[1].fields["Artikelnummer"] == 12346, "a numeric key arrives as a number"
    assert rows[1].fields["EAN"] == "04596710520787"
    assert rows[2].fields["EAN"] == "'0850064060010", "reported as it is, never 'fixed'"


def test_a_sheet_by_name_and_formula_cells_give_their_cached_value(erp_workbook: Path) -> None:
    rows = _read(XlsxSource(erp_workbook, sheet="Artikel", header_row=3))
    assert [r.fields["Gesamt"] for r in rows] == [64.05, 52, 6.9972]


def test_an_unknown_sheet_is_a_config_error_listing_the_sheets(erp_workbook: Path) -> None:
    with pytest.raises(ConfigError) as info:
        list(XlsxSource(erp_workbook, sheet="Products").records())
    message = str(info.value)
    assert "source.sheet" in message and "'Products'" in message
    assert "'Anleitung', 'Makros', 'Werte', 'Artikel'" in message
    with pytest.raises(ConfigError, match="has 4 sheet"):
        list(XlsxSource(erp_workbook, sheet=5).records())


def test_an_empty_header_row_names_header_row(erp_workbook: Path) -> None:
    with pytest.raises(SourceError, match=r"row 2 \(header_row\) is empty"):
        list(XlsxSource(erp_workbook, sheet=4, header_row=2).records())


def test_a_duplicated_header_leaves_the_unique_columns_usable(erp_workbook: Path) -> None:
    row = _read(XlsxSource(erp_workbook, sheet=4, header_row=3))[0]
    assert row.fields["Preis"] == 21.35
    assert row.fields.get("Gesamt") == 64.05
    assert "Name" not in dict(row.fields), "an ambiguous column is never guessed"
    with pytest.raises(ConfigError) as info:
        row.fields.get("Name")
    assert "columns B and G of row 3 share the name" in str(info.value)
    with pytest.raises(ConfigError):
        row.fields["Name"]  # the lookup itself is the test


def _map(workbook: Path, fields: dict[str, Any]) -> list[Product | BadRecord]:
    mapper = Mapper(MappingSettings(key="sku", fields=fields), source_name=workbook.name)
    return [mapper.map(r) for r in _read(XlsxSource(workbook, sheet=4, header_row=3))]


def test_mapping_an_ambiguous_column_is_a_config_error(erp_workbook: Path) -> None:
    with pytest.raises(ConfigError, match="'Name' is ambiguous"):
        _map(erp_workbook, {"sku": "Artikelnummer", "name": "Name"})


def test_mapped_through_the_config_numbers_and_keys_are_exact(erp_workbook: Path) -> None:
    products = _map(
        erp_workbook,
        {
            "sku": "Artikelnummer",
            "ean": "EAN",
            "price": {"column": "Preis", "type": "decimal"},
            "total": {"column": "Gesamt", "type": "decimal"},
        },
    )
    assert all(isinstance(p, Product) for p in products), products
    payloads = [p.payload for p in products if isinstance(p, Product)]
    assert [p["sku"] for p in payloads] == ["012345", "12346", "079685"]
    assert payloads[0]["price"] == Decimal("21.35")
    assert payloads[2]["price"] == Decimal("3.4986"), "float noise gone: shortest round-trip"
    assert payloads[0]["total"] == Decimal("64.05")
    assert payloads[0]["ean"] == "4006381333931"


def test_opened_from_the_config_with_sheet_and_header_row(erp_workbook: Path) -> None:
    settings = settings_from_dict(
        {
            "api": {"base_url": "http://127.0.0.1:9", "api_key": "k" * 12},
            "source": {"type": "xlsx", "path": str(erp_workbook), "sheet": 4, "header_row": 3},
            "state": {"path": str(erp_workbook.parent / "s.db")},
        }
    )
    assert len(_read(open_source(settings.source))) == 3


@pytest.mark.parametrize("wrap", ["gzip", "zip"])
def test_a_compressed_workbook_is_read_transparently(
    erp_workbook: Path, tmp_path: Path, wrap: str
) -> None:
    packed = tmp_path / f"export.xlsx.{wrap}"
    if wrap == "gzip":
        packed.write_bytes(gzip.compress(erp_workbook.read_bytes()))
    else:
        with zipfile.ZipFile(packed, "w") as archive:
            archive.write(erp_workbook, "export.xlsx")
    rows = _read(XlsxSource(packed, sheet=4, header_row=3))
    assert [r.fields["Preis"] for r in rows] == [21.35, 52, 3.4986000000000002]


def test_a_file_that_is_not_a_workbook_is_a_source_error(tmp_path: Path) -> None:
    path = tmp_path / "products.xlsx"
    path.write_text("sku,name\nA,B\n", encoding="utf-8")
    with pytest.raises(SourceError, match=r"not a readable \.xlsx workbook"):
        list(XlsxSource(path).records())


def test_the_shared_strings_table_reads_runs_and_skips_phonetic_guides() -> None:
    ns = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
    xml = (
        f'<sst xmlns="{ns}" count="5" uniqueCount="5">'
        "<si><t>Akku-Bohrschrauber</t></si>"
        '<si><r><rPr><b/></rPr><t>Stich</t></r><r><t xml:space="preserve">säge 6,5° </t></r></si>'
        '<si><t>東京</t><rPh sb="0" eb="2"><t>トウキョウ</t></rPh></si>'
        "<si><t/></si>"
        "<si><t>a_x005F_b</t></si>"
        "</sst>"
    ).encode()
    table = SharedStrings.parse(io.BytesIO(xml))
    assert list(table) == ["Akku-Bohrschrauber", "Stichsäge 6,5° ", "東京", "", "a_b"]
    assert len(table) == 5 and table[2] == "東京"


def test_a_cell_showing_an_excel_error_rejects_its_row_and_hands_over_the_rest(
    tmp_path: Path,
) -> None:
    # A failed lookup: Excel stores the cell as an error (t="e") whose value is the code.
    rows: list[list[Any]] = [
        HEADER,
        ["A-1", "Lamp", 1],
        ["#N/A", "Desk", 2],
        ["C-3", "#REF!", 3],
        ["D-4", "Bed", 4],
    ]
    out = list(XlsxSource(write_xlsx(tmp_path / "catalog.xlsx", {"Products": rows})).records())
    bad = [(r.line, r.reason, r.fields) for r in out if isinstance(r, BadRecord)]
    assert bad == [
        (3, "catalog.xlsx line 3, column 'sku': the cell shows the Excel error #N/A "
            "(a formula that failed)", {"name": "Desk", "price": 2}),
        (4, "catalog.xlsx line 4, column 'name': the cell shows the Excel error #REF! "
            "(a formula that failed)", {"sku": "C-3", "price": 3}),
    ]  # fmt: skip
    assert [r.line for r in out if isinstance(r, RawRecord)] == [2, 5]
