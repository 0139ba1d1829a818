"""The openpyxl internals the xlsx source builds on, pinned and checked.

``sources/xlsx_openpyxl.py`` subclasses openpyxl's ``ExcelReader`` and overrides its
``read_strings`` so that the shared-strings table is a compact ``SharedStrings``.
Neither is public API, so pyproject.toml pins ``openpyxl>=3.1,<3.2``; these tests
fail if a release within that range (or a widened pin) stops calling the override,
or reads a workbook differently through it.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import openpyxl
from openpyxl.cell.cell import ERROR_CODES

from skuferry.sandbox.catalog_files import write_xlsx_rows
from skuferry.sources.xlsx_cells import ERRORS, SharedStrings, column_letter
from skuferry.sources.xlsx_openpyxl import CompactReader

ROWS: list[list[str | int | float]] = [
    ["SKU", "Name", "Price", "Note"],
    ["0042", "Grüße aus Köln", 12.5, "ümlaut"],
    ["0043", "naïve café", 3, ""],
    ["0044", "Grüße aus Köln", 7.25, "_x005F_under"],  # a repeated text and openpyxl's escape
]


def test_the_override_runs_and_reads_as_openpyxl_does(tmp_path: Path) -> None:
    path = write_xlsx_rows(tmp_path / "items.xlsx", ROWS)  # as Excel writes: shared strings
    with zipfile.ZipFile(path) as archive:
        assert "xl/sharedStrings.xml" in archive.namelist()

    reader = CompactReader(str(path), read_only=True, data_only=True, keep_links=False)
    reader.read()
    sheet = reader.wb.worksheets[0]
    sheet.reset_dimensions()  # the <dimension> says A1, as many exporters' do
    ours = [list(row) for row in sheet.iter_rows(values_only=True)]
    assert isinstance(reader.shared_strings, SharedStrings)  # openpyxl called read_strings
    reader.wb.close()

    book = openpyxl.load_workbook(path, read_only=True, data_only=True)
    book.worksheets[0].reset_dimensions()
    theirs = [list(row) for row in book.worksheets[0].iter_rows(values_only=True)]
    book.close()
    assert ours == theirs
    assert ours[1][:2] == ["0042", "Grüße aus Köln"]  # leading zeros and non-ASCII kept


def test_the_error_codes_are_openpyxls() -> None:
    assert frozenset(ERROR_CODES) == ERRORS


def test_column_letters_are_openpyxls() -> None:
    from openpyxl.utils import get_column_letter

    for index in (0, 1, 25, 26, 27, 51, 52, 701, 702, 703, 16383):
        assert column_letter(index) == get_column_letter(index + 1)
