"""The openpyxl side of the xlsx source: its read-only workbook, with compact shared strings.

Imported only when openpyxl reads a workbook (``reader = "openpyxl"``, a sheet too
large for ``auto``, or one calamine cannot read exactly), so that a run read by
calamine does not pay for importing openpyxl.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from openpyxl.reader.excel import SHARED_STRINGS, ExcelReader
from openpyxl.utils.exceptions import InvalidFileException as InvalidFile

from skuferry.sources.xlsx_cells import SharedStrings

__all__ = ["CompactReader", "InvalidFile", "open_book"]


class CompactReader(ExcelReader):  # type: ignore[misc]
    """openpyxl's workbook reader with the shared strings in a ``SharedStrings`` table.

    ``ExcelReader`` and ``read_strings`` are not openpyxl's public API: the version is
    pinned (``openpyxl>=3.1,<3.2``) and the pin's tests check them.
    """

    def read_strings(self) -> None:
        part = self.package.find(SHARED_STRINGS)
        if part is not None:
            with self.archive.open(part.PartName[1:]) as source:
                self.shared_strings = SharedStrings.parse(source)


def open_book(plain: Path) -> Any:
    """The workbook through openpyxl, streamed (read-only), formulas as their cached values."""
    compact = CompactReader(str(plain), read_only=True, data_only=True, keep_links=False)
    compact.read()
    return compact.wb
