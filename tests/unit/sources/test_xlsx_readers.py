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

import gc
import math
import random
import sys
import zipfile
from datetime import date, datetime, time, timedelta
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from skuferry.config.schema import MappingSettings
from skuferry.errors import ConfigError, SourceError
from skuferry.models import Product, RawRecord
from skuferry.sandbox.catalog_files import write_xlsx, write_xlsx_rows
from skuferry.sources import xlsx_calamine, xlsx_openpyxl
from skuferry.sources.xlsx import XlsxSource
from skuferry.sources.xlsx_calamine import Scan, _differs, cell, sheet_parts
from skuferry.sources.xlsx_cells import ERRORS
from skuferry.sync.map.mapper import Mapper

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


def _rewrite(path: Path, member: str, old: str, new: str) -> None:
    """Replace text in one part of a workbook: a shape our writers do not make."""
    with zipfile.ZipFile(path) as archive:
        members = {i.filename: archive.read(i) for i in archive.infolist()}
    text = members[member].decode()
    assert old in text, (old, text[:400])
    members[member] = text.replace(old, new).encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)


def _openpyxl_reads(path: Path, **where: Any) -> str | None:
    """Why calamine hands the sheet to openpyxl (the logged reason), or None."""
    with capture_logs() as events:
        _records(path, "calamine", **where)
    whys = [e["why"] for e in events if e["event"] == "source.xlsx.reader"]
    return whys[0] if whys else None


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


@pytest.mark.parametrize(
    ("text", "differs"),
    [
        ("52", False),
        ("-7", False),
        ("21.35", False),
        ("3.4986000000000002", False),
        ("1E+20", False),  # a float to both
        ("999999999999999", False),
        ("52.0", True),  # openpyxl: 52.0, calamine's whole float: 52
        ("4.006381E12", True),
        ("1000000000000000", True),  # openpyxl: an int, calamine: a float
        ("Version 2.0", False),  # a formula's text result
    ],
)
def test_which_number_texts_calamine_cannot_tell(text: str, differs: bool) -> None:
    assert _differs(text) is differs


def test_whole_numbers_written_as_52_0_or_with_an_exponent_go_to_openpyxl(
    tmp_path: Path,
) -> None:
    # Apache POI writes Double.toString: 52.0, 4.006381E12; Python's repr writes 52.0.
    # openpyxl reads those as floats (a decimal field maps them to 52.0), calamine's
    # value is the same float as 52's: the sheet is read by openpyxl.
    rows: list[list[Any]] = [["sku", "qty", "ean"], ["P1", 777, 123], ["P2", 4, 9]]
    fields = {
        "sku": "sku",
        "qty": {"column": "qty", "type": "decimal"},
        "ean": {"column": "ean", "type": "decimal"},
    }
    for text, number in (("52.0", 52.0), ("52.", 52.0), ("4.006381E12", 4006381000000.0)):
        path = write_xlsx_rows(tmp_path / f"poi-{text}.xlsx", rows)
        _rewrite(path, "xl/worksheets/sheet1.xml", "<v>777</v>", f"<v>{text}</v>")
        assert (
            _openpyxl_reads(path) == f"a number is written {text!r}: openpyxl reads another value"
        )
        assert_same(path, fields)
        got = _records(path, "calamine")[0][1]["qty"]
        assert got == number and type(got) is float
    # 16 digits or more: openpyxl's exact int, calamine's float (which would lose digits)
    for text in ("1234567890123456", "-12345678901234567890", "1000000000000000"):
        path = write_xlsx_rows(tmp_path / "long.xlsx", rows)
        _rewrite(path, "xl/worksheets/sheet1.xml", "<v>777</v>", f"<v>{text}</v>")
        assert (
            _openpyxl_reads(path) == f"a number is written {text!r}: openpyxl reads another value"
        )
        assert_same(path, fields)
        assert _records(path, "calamine")[0][1]["qty"] == int(text)
    # a number with a fraction, or one too large for an int, is a float to both: calamine;
    # 15 digits are an int to both
    for text in ("52.5", "1.5E-3", "1E+20", "5.25e1", "999999999999999", "-4006381000000"):
        path = write_xlsx_rows(tmp_path / "fraction.xlsx", rows)
        _rewrite(path, "xl/worksheets/sheet1.xml", "<v>777</v>", f"<v>{text}</v>")
        assert _openpyxl_reads(path) is None, text
        assert_same(path, fields)


def test_a_number_like_text_is_no_reason_to_leave_calamine(tmp_path: Path) -> None:
    rows: list[list[Any]] = [["sku", "version", "ean"], ["P1", "2.0", "4.006381E12"]]
    path = write_xlsx(tmp_path / "texts.xlsx", {"S": rows})  # inline text, as openpyxl writes
    sheet = "xl/worksheets/sheet1.xml"
    with zipfile.ZipFile(path) as archive:  # as a formula's text result stores them
        assert "<v>" not in archive.read(sheet).decode()
    assert _openpyxl_reads(path) is None
    assert_same(path, {"sku": "sku", "version": "version", "ean": "ean"})
    assert _records(path, "calamine") == [
        (2, {"sku": "P1", "version": "2.0", "ean": "4.006381E12"})
    ]


def test_a_sparse_sheet_without_error_cells_stays_on_calamine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows: list[list[Any]] = [
        ["sku", "name", "price", "note", "ean"],
        ["S1", "Eins", 1.5, None, "  "],
        ["S2", None, None, "nur Text", 4006381000002],
        ["S3", "Drei", 3, "", None],
        [None, None, None, None, None],
        ["S5", "\u3000", 0, None, None],
    ]
    path = write_xlsx(tmp_path / "sparse.xlsx", {"Artikel": rows})
    assert_same(path, {"sku": "sku", "name": "name", "price": "price", "note": "note"})
    assert _openpyxl_reads(path) is None

    def no_openpyxl(_plain: Path) -> None:
        raise AssertionError("openpyxl opened the workbook")

    monkeypatch.setattr(xlsx_openpyxl, "open_book", no_openpyxl)
    lines = _records(path, "calamine")
    assert [line for line, _ in lines] == [2, 3, 4, 6]
    assert lines[0][1] == {"sku": "S1", "name": "Eins", "price": 1.5}
    assert lines[3][1] == {"sku": "S5", "price": 0}


def test_a_shared_string_reading_like_an_error_rejects_its_row_in_both(tmp_path: Path) -> None:
    # Not an error cell (t="s"): a text "#N/A", as a lookup pasted as values leaves it.
    rows: list[list[Any]] = [["sku", "ean"], ["A", "#N/A"], ["B", "4006381000001"]]
    path = write_xlsx_rows(tmp_path / "pasted.xlsx", rows)
    assert _openpyxl_reads(path) is None
    assert_same(path, {"sku": "sku", "ean": "ean"})
    lines = _records(path, "calamine")
    assert lines[0][0] == 2 and "Excel error #N/A" in lines[0][1]
    assert lines[1] == (3, {"sku": "B", "ean": "4006381000001"})


def test_an_error_cell_on_another_sheet_leaves_the_data_sheet_to_calamine(
    erp_workbook: Path,
) -> None:
    _rewrite(
        erp_workbook,
        "xl/worksheets/sheet3.xml",
        '<c r="B1" t="inlineStr"><is><t>C62</t></is></c>',
        '<c r="B1" t="e"><v>#REF!</v></c>',
    )
    assert _openpyxl_reads(erp_workbook, sheet=4, header_row=3) is None
    assert _openpyxl_reads(erp_workbook, sheet=3) == (
        "the sheet holds an error cell (#N/A, #REF!, ...)"
    )
    assert_same(erp_workbook, {"sku": "Artikelnummer", "ean": "EAN"}, sheet=4, header_row=3)
    assert_same(erp_workbook, sheet=3)


def test_an_error_cell_in_the_header_is_read_as_openpyxl_names_it(tmp_path: Path) -> None:
    path = write_xlsx(
        tmp_path / "header.xlsx",
        {"S": [["sku", "=NA()", "name"], ["A", 1, "Eins"], ["B", 2, "Zwei"]]},
        cached={"S!B1": "#N/A"},
    )
    _rewrite(path, "xl/worksheets/sheet1.xml", ' t="str"><f>', ' t="e"><f>')
    assert _openpyxl_reads(path) == "the sheet holds an error cell (#N/A, #REF!, ...)"
    assert_same(path, {"sku": "sku", "name": "name"})


def test_sheet_parts_follow_the_workbooks_relationships(erp_workbook: Path) -> None:
    with zipfile.ZipFile(erp_workbook) as archive:
        parts = sheet_parts(archive)
    assert parts["Artikel"] == "xl/worksheets/sheet4.xml"
    assert list(parts) == ["Anleitung", "Makros", "Werte", "Artikel"]
    assert Scan(erp_workbook, "Artikel").result() is None
    assert Scan(erp_workbook, "Nirgends").result() == (
        "the workbook names no part for sheet 'Nirgends'"
    )


def test_without_python_calamine_openpyxl_reads_it(
    erp_workbook: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = _records(erp_workbook, "openpyxl", sheet=4, header_row=3)
    monkeypatch.setitem(sys.modules, "python_calamine", None)  # import fails
    monkeypatch.delitem(sys.modules, "skuferry.sources.xlsx_calamine")
    monkeypatch.delattr("skuferry.sources.xlsx_calamine", raising=False)
    with capture_logs() as events:
        got = _records(erp_workbook, "calamine", sheet=4, header_row=3)
    assert got == expected
    said = [(e["log_level"], e["why"]) for e in events if e["event"] == "source.xlsx.reader"]
    assert said == [("warning", "no python-calamine")]


def test_auto_reads_with_calamine_up_to_a_size_then_streams_with_openpyxl(
    erp_workbook: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from skuferry.sources import xlsx_calamine

    with zipfile.ZipFile(erp_workbook) as archive:
        size = archive.getinfo("xl/worksheets/sheet4.xml").file_size
    assert xlsx_calamine.sheet_bytes(erp_workbook, 4) == size  # openpyxl writes inline text
    assert xlsx_calamine.sheet_bytes(erp_workbook, "Artikel") == size
    assert xlsx_calamine.sheet_bytes(erp_workbook, 9) is None
    where: dict[str, Any] = {"sheet": 4, "header_row": 3}
    expected = _records(erp_workbook, "openpyxl", **where)

    def reads(reader: str) -> str:
        with capture_logs() as events:
            assert _records(erp_workbook, reader, **where) == expected
        whys = [e["why"] for e in events if e["event"] == "source.xlsx.reader"]
        return whys[0] if whys else "calamine"

    assert reads("auto") == "calamine"
    monkeypatch.setattr(xlsx_calamine, "AUTO_MAX_BYTES", size - 1)
    assert reads("auto") == "the sheet is too large to hold in memory"
    assert reads("calamine") == "calamine", "asked for by name: calamine whatever the size"
    monkeypatch.setattr(xlsx_calamine, "AUTO_MAX_BYTES", size)
    assert reads("auto") == "calamine"


def test_the_default_reader_is_auto(erp_workbook: Path) -> None:
    from skuferry.config.schema import XlsxSourceSettings
    from skuferry.sources.xlsx import open_xlsx

    settings = XlsxSourceSettings(type="xlsx", path=erp_workbook)
    assert settings.reader == "auto"
    assert isinstance(source := open_xlsx(settings), XlsxSource) and source.reader == "auto"
    assert XlsxSource(erp_workbook).reader == "auto"


def _block_rows() -> list[list[Any]]:
    """Rows whose blocks of 3 (see below) take each of calamine's paths to records: clean
    text and numbers, an empty or whitespace cell, a column of mixed kinds, an error's
    text, an empty row, whole and fractional numbers in one column; a repeated name."""
    header: list[Any] = ["sku", "name", "qty", "price", "flag", "day", "note", "note"]
    clean: list[list[Any]] = [
        [f"S{i}", f"Name {i}", i * 3, 9.99 + i, True, date(2024, 1, 1 + i), "x", "y"]
        for i in range(6)
    ]  # lines 2-7
    holed: list[list[Any]] = [
        ["S10", None, 1, 2.5, None, None, None, "y"],
        ["S11", "  ", 2, 3.5, False, date(2024, 2, 1), "y", None],
        ["S12", "Zwölf", 3, 4.5, True, datetime(2024, 2, 1, 8, 30), "z", "y"],
    ]  # lines 8-10
    mixed: list[list[Any]] = [
        ["S20", "Zwanzig", "drei", 7.0, 1, time(8, 30), "x", "y"],
        ["S21", "#N/A", 4006381000000, 7.25, True, date(2024, 3, 1), "y", "y"],
        [None, None, None, None, None, None, None, None],
    ]  # lines 11-13, 13 empty
    numbers: list[list[Any]] = [
        ["S30", "Dreißig", 999999999999999, -0.0, True, date(2024, 4, 1), "x", "y"],
        ["S31", "Einunddreißig", -4006381000000, 1e20, False, date(2024, 4, 2), "y", "y"],
        ["S32", "Zweiunddreißig", 0, -7.5, True, date(2024, 4, 3), "z", "y"],
    ]  # lines 14-16
    return [header, *clean, *holed, *mixed, *numbers, ["S40", "Vierzig", 1, 1.5, True]]


def _plain(value: Any) -> Any:
    """A cell as ``write_xlsx_rows`` can write it: text or a number as Excel writes it."""
    if value is None or isinstance(value, bool | date | time):
        return ""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return int(value)
    return value


@pytest.mark.parametrize("writer", ["inline", "shared"])
def test_every_block_shape_reads_as_openpyxl_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str
) -> None:
    monkeypatch.setattr(xlsx_calamine, "_BLOCK", 3)  # blocks of 3 rows: one shape each
    rows = _block_rows()
    if writer == "inline":  # openpyxl writes the text "#N/A" as an error cell: another text
        rows = [["Einundzwanzig" if v == "#N/A" else v for v in row] for row in rows]
        path = write_xlsx(tmp_path / "blocks.xlsx", {"Artikel": rows})
    else:  # text in the shared strings, as Excel writes it (no dates, booleans; 7, not 7.0)
        path = write_xlsx_rows(tmp_path / "blocks.xlsx", [list(map(_plain, r)) for r in rows])
    assert _openpyxl_reads(path) is None
    assert_same(path, {"sku": "sku", "qty": "qty", "price": {"column": "price", "type": "decimal"}})
    records = _records(path, "calamine")
    assert [line for line, _ in records] == [*range(2, 13), *range(14, 18)], "13 is empty"
    by_line = dict(records)
    if writer == "shared":
        assert "Excel error #N/A" in by_line[12]
    assert "name" not in by_line[8] and "name" not in by_line[9], "empty, whitespace"
    assert by_line[2]["qty"] == 0 and type(by_line[2]["qty"]) is int
    assert by_line[15]["price"] == 1e20 and type(by_line[15]["price"]) is float
    first = next(iter(XlsxSource(path, reader="calamine").records()))
    assert isinstance(first, RawRecord)
    with pytest.raises(ConfigError, match="'note' is ambiguous"):
        first.fields["note"]


def _reference(cells: tuple[Any, ...]) -> tuple[list[Any], bool, bool]:
    """``_column``'s answer, one cell at a time."""
    values = [xlsx_calamine._value(v) for v in cells]
    empty = [v is xlsx_calamine._EMPTY for v in values]
    return values, any(empty), any(type(v) is str and v in ERRORS for v in values)


def _nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def test_a_column_converts_as_its_cells_do() -> None:
    pool: list[Any] = [
        "", " ", "\u3000", "Text", "0042", "#N/A", "#REF!", 52.0, 52.5, -0.0, 1e15,
        999999999999999.0, -999999999999999.0, 4006381000000.0, 1e20, float("nan"),
        float("inf"), True, False, 7, date(2024, 2, 29), datetime(2024, 3, 1, 8, 30),
        time(8, 30), timedelta(hours=1),
    ]  # fmt: skip
    chosen = random.Random(23)
    columns: list[tuple[Any, ...]] = [tuple(pool)]
    for kinds in ([str], [float], [str, float], pool):
        kept = [v for v in pool if type(v) in kinds] if kinds is not pool else pool
        for _ in range(150):
            columns.append(tuple(chosen.choice(kept) for _ in range(chosen.randint(1, 8))))
    columns += [(52.0, 7.0, -3.0), (52.5, 0.25), ("a", "b"), ("a", ""), ()]
    for cells in columns:
        got = xlsx_calamine._column(cells)
        want = _reference(cells)
        assert got[1:] == want[1:], cells
        assert len(got[0]) == len(want[0]) and all(
            (a is b or a == b or (_nan(a) and _nan(b))) and type(a) is type(b)
            for a, b in zip(got[0], want[0], strict=True)
        ), cells


def test_reading_leaves_the_garbage_collector_as_it_was(tmp_path: Path) -> None:
    rows: list[list[Any]] = [["sku", "qty"], *[[f"S{i}", i] for i in range(5)]]
    path = write_xlsx_rows(tmp_path / "gc.xlsx", rows)
    assert gc.isenabled()
    records = XlsxSource(path, reader="calamine").records()
    next(records)
    assert gc.isenabled(), "the code reading the records runs with the collector on"
    assert len(list(records)) == 4 and gc.isenabled()
    gc.disable()
    try:
        assert len(list(XlsxSource(path, reader="calamine").records())) == 5
        assert not gc.isenabled(), "a collector switched off stays off"
    finally:
        gc.enable()
