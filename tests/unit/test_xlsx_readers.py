"""calamine and openpyxl read the same workbooks to the same records and mapped values.

Every real-shape fixture is read by both readers (``[source] reader``): the records
(line numbers and fields) must be equal, and so must every mapped product's payload
and digest. The fixtures: the ERP workbook (data on the 4th sheet below a title, a
duplicated header, formula cells with cached values, leading-zero keys, EANs as
numbers and text, dates and date-times), numbers Excel writes (whole, fractional,
binary noise, large), booleans, times and durations, error cells, rich-text and
phonetic shared strings, the ``_x005F_`` escape, data starting at column C below
empty rows, and the benchmark's shape.
"""

from __future__ import annotations

import zipfile
from datetime import date, datetime, time, timedelta
from pathlib import Path
from typing import Any

import pytest

from skuferry.config.schema import MappingSettings
from skuferry.errors import ConfigError, SourceError
from skuferry.models import Product, RawRecord
from skuferry.sandbox.catalog_files import write_xlsx, write_xlsx_rows
from skuferry.sources.xlsx import XlsxSource
from skuferry.sources.xlsx_calamine import cell
from skuferry.sync.mapping import Mapper

READERS = ("openpyxl", "calamine")


def _records(path: Path, reader: str, **where: Any) -> list[tuple[int, Any]]:
    """(line, fields) of each record; (line, reason) of a rejected one."""
    out: list[tuple[int, Any]] = []
    for record in XlsxSource(path, reader=reader, **where).records():
        if isinstance(record, RawRecord):
            out.append((record.line, dict(record.fields)))
        else:
            out.append((record.line, record.reason))
    return out


def _mapped(path: Path, reader: str, fields: dict[str, Any], **where: Any) -> list[Any]:
    mapper = Mapper(MappingSettings(key="sku", fields=fields), source_name=path.name)
    out: list[Any] = []
    for record in XlsxSource(path, reader=reader, **where).records():
        if not isinstance(record, RawRecord):
            out.append(record.reason)
            continue
        product = mapper.map(record)
        out.append(
            (product.payload, product.digest) if isinstance(product, Product) else product.reason
        )
    return out


def assert_same(path: Path, fields: dict[str, Any] | None = None, **where: Any) -> None:
    openpyxl, calamine = (_records(path, reader, **where) for reader in READERS)
    assert calamine == openpyxl
    assert all(
        type(v) is type(openpyxl_v)
        for (_, a), (_, b) in zip(calamine, openpyxl, strict=True)
        if isinstance(a, dict) and isinstance(b, dict)
        for v, openpyxl_v in zip(a.values(), b.values(), strict=True)
    )
    if fields is not None:
        assert _mapped(path, "calamine", fields, **where) == _mapped(
            path, "openpyxl", fields, **where
        )


@pytest.fixture
def erp_workbook(tmp_path: Path) -> Path:
    products: list[list[Any]] = [
        ["Artikelliste Frühjahr", None, None, None, None, None, None, None],
        [None],
        ["Artikelnummer", "Name", "EAN", "Preis", "Menge", "Gesamt", "Name", "Seit"],
        ["012345", "Akku-Bohrschrauber", 4006381333931, 21.35, 3, "=D4*E4", "x", None],
        [12346, "Stichsäge 6,5°", "04596710520787", 52, 1, "=D5*E5", "y", None],
        [None, None, None, None, None, None, None, None],
        ["079685", "Winkelschleifer", "'0850064060010", 3.4986000000000002, 2, "=D7*E7"],
    ]
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


def test_the_erp_workbook_reads_and_maps_the_same(erp_workbook: Path) -> None:
    fields = {
        "sku": "Artikelnummer",
        "ean": "EAN",
        "price": {"column": "Preis", "type": "decimal"},
        "total": {"column": "Gesamt", "type": "decimal"},
        "stock": {"column": "Menge", "type": "integer"},
        "since": "Seit",
    }
    assert_same(erp_workbook, fields, sheet=4, header_row=3)
    assert_same(erp_workbook, fields, sheet="Artikel", header_row=3)
    assert _records(erp_workbook, "calamine", sheet=4, header_row=3)[0][1]["Gesamt"] == 64.05


def test_a_duplicated_header_is_ambiguous_in_both(erp_workbook: Path) -> None:
    for reader in READERS:
        with pytest.raises(ConfigError, match="'Name' is ambiguous"):
            _mapped(
                erp_workbook,
                reader,
                {"sku": "Artikelnummer", "name": "Name"},
                sheet=4,
                header_row=3,
            )


def test_numbers_booleans_dates_times_and_durations(tmp_path: Path) -> None:
    rows: list[list[Any]] = [
        [
            "sku",
            "whole",
            "fraction",
            "noise",
            "big",
            "negative",
            "flag",
            "day",
            "at",
            "clock",
            "took",
        ],
        [
            "A1",
            52,
            21.35,
            0.1 + 0.2,
            12345678901234,
            -7,
            True,
            date(2024, 2, 29),
            datetime(2024, 3, 1, 8, 30, 15),
            time(8, 30),
            timedelta(hours=1, minutes=30),
        ],
        [
            "A2",
            0,
            1e-7,
            3.4986000000000002,
            123456789012345678,
            -0.5,
            False,
            datetime(1999, 12, 31),
            datetime(2024, 3, 1),
            time(0, 0, 1),
            timedelta(days=2),
        ],
    ]
    path = write_xlsx(tmp_path / "types.xlsx", {"Types": rows})
    fields = {
        "sku": "sku",
        "whole": {"column": "whole", "type": "decimal"},
        "fraction": {"column": "fraction", "type": "decimal"},
        "noise": {"column": "noise", "type": "decimal"},
        "big": "big",
        "negative": {"column": "negative", "type": "decimal"},
        "flag": "flag",
        "day": "day",
        "at": "at",
        "clock": "clock",
        "took": "took",
    }
    assert_same(path, fields)


def test_shared_strings_with_runs_phonetics_and_escapes(tmp_path: Path) -> None:
    ns = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
    path = write_xlsx_rows(
        tmp_path / "strings.xlsx", [["sku", "name"], ["s1", "n1"], ["s2", "n2"], ["s3", "n3"]]
    )
    # Replace the table: indices 0..7 are sku, name, s1, n1, s2, n2, s3, n3 as written.
    table = (
        f'<sst xmlns="{ns}" count="8" uniqueCount="8">'
        "<si><t>sku</t></si><si><t>name</t></si>"
        "<si><t>012</t></si>"
        '<si><r><rPr><b/></rPr><t>Stich</t></r><r><t xml:space="preserve">säge 6,5° </t></r></si>'
        "<si><t>s2</t></si>"
        '<si><t>東京</t><rPh sb="0" eb="2"><t>トウキョウ</t></rPh></si>'
        "<si><t>s3</t></si>"
        "<si><t>a_x005F_b &amp; &lt;c&gt;</t></si>"
        "</sst>"
    )
    with zipfile.ZipFile(path) as archive:
        members = {i.filename: archive.read(i) for i in archive.infolist()}
    members["xl/sharedStrings.xml"] = table.encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    assert_same(path, {"sku": "sku", "name": "name"})
    names = [fields["name"] for _, fields in _records(path, "calamine")]
    assert names == ["Stichsäge 6,5° ", "東京", "a_b & <c>"]


def test_data_below_empty_rows_and_right_of_empty_columns(tmp_path: Path) -> None:
    rows: list[list[Any]] = [
        [None],
        [None],
        [None, None, "sku", "name", "price"],
        [None, None, "K-1", "Eins", 1.5],
        [None, None, None, None, None],
        [None, None, "K-2", "Zwei", 2],
    ]
    path = write_xlsx(tmp_path / "offset.xlsx", {"Blatt": rows})
    assert_same(
        path,
        {"sku": "sku", "name": "name", "price": {"column": "price", "type": "decimal"}},
        header_row=3,
    )
    assert [line for line, _ in _records(path, "calamine", header_row=3)] == [4, 6]
    for reader in READERS:  # a header_row above the data: empty in both, named
        with pytest.raises(SourceError, match="row 1 \\(header_row\\) is empty"):
            _records(path, reader, header_row=1)


def test_error_cells_are_rejected_rows_in_both(tmp_path: Path) -> None:
    path = write_xlsx(
        tmp_path / "errors.xlsx",
        {"S": [["sku", "calc"], ["E1", "=1/0"], ["E2", "=NA()"], ["E3", 3]]},
        cached={"S!B2": "#DIV/0!", "S!B3": "#N/A"},
    )
    # as Excel stores a failed formula: a cell of type "e", not a text
    with zipfile.ZipFile(path) as archive:
        members = {i.filename: archive.read(i) for i in archive.infolist()}
    sheet = members["xl/worksheets/sheet1.xml"].decode()
    members["xl/worksheets/sheet1.xml"] = sheet.replace(' t="str"><f>', ' t="e"><f>').encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    assert_same(path)
    lines = _records(path, "calamine")
    assert [line for line, _ in lines] == [2, 3, 4]
    assert "#DIV/0!" in lines[0][1], "rejected, never read as empty"
    assert "#N/A" in lines[1][1]


def test_the_benchmark_shape_reads_the_same(tmp_path: Path) -> None:
    rows: list[list[Any]] = [["Artikelnummer", "Bezeichnung", "EAN", "Preis", "Menge"]]
    rows += [
        [f"{i:06d}", f"Modell {i}", 4006381000000 + i, round(19.99 + i % 500 * 0.35, 2), i % 97]
        for i in range(2_000)
    ]
    path = write_xlsx_rows(tmp_path / "bench.xlsx", rows)
    fields = {
        "sku": "Artikelnummer",
        "name": "Bezeichnung",
        "ean": "EAN",
        "price": {"column": "Preis", "type": "decimal"},
        "stock": {"column": "Menge", "type": "integer"},
    }
    assert_same(path, fields)


def test_a_file_that_is_not_a_workbook_is_a_source_error_in_both(tmp_path: Path) -> None:
    path = tmp_path / "not.xlsx"
    path.write_bytes(b"PK\x03\x04 not really a zip")
    for reader in READERS:
        with pytest.raises(SourceError, match="not a readable"):
            _records(path, reader)


def test_calamine_cells_take_openpyxls_types() -> None:
    assert cell("") is None
    assert cell(52.0) == 52 and type(cell(52.0)) is int
    assert type(cell(21.35)) is float
    assert type(cell(1e20)) is float, "Excel writes 1E+20: openpyxl reads a float"
    assert cell(True) is True
