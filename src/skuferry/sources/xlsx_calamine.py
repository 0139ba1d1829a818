"""The xlsx reader through python-calamine (Rust calamine), shaped as openpyxl's read-only book.

``XlsxSource`` asks a *book* for ``sheetnames``, a sheet by name (``title``,
``reset_dimensions()``, ``iter_rows(min_row=, values_only=True)``) and ``close()``;
this module gives it those over calamine, which parses the sheet's XML in Rust, about
five times faster than openpyxl's Python-level parser. The values are made what
openpyxl hands over, so the records (and every mapped value) are the same:

- an empty cell is ``None`` (calamine gives ``""``);
- a number stored without a fraction is an ``int`` (calamine has only floats for
  xlsx; Excel writes ``52`` for 52, and openpyxl reads that as ``int``). A whole float
  of 15 digits or more stays a float: Excel writes those with an exponent;
- dates, times and durations arrive as ``datetime``/``date``/``time``/``timedelta``,
  formulas as their cached value, shared strings as their text, as openpyxl's do;
- rows and columns before the first filled cell (which calamine skips) are put back,
  so row numbers and column positions are the sheet's own;
- an error cell (``#N/A``) would arrive empty: a workbook holding one is read by
  openpyxl instead (``open_book``), so its row is rejected as ever.

Calamine holds the one sheet it reads in memory (about 100 bytes a cell) instead of
streaming it; ``[source] reader = "openpyxl"`` streams with flat memory for sheets
larger than the machine. tests/unit/test_xlsx_readers.py diffs both readers' records
over the real-shape fixtures.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import python_calamine

from skuferry import logs

log = logs.get(__name__)

_WHOLE = 1e15  # Excel writes integers this large with an exponent: openpyxl floats


def cell(value: Any) -> Any:
    """A calamine cell value as openpyxl's ``values_only`` gives it."""
    kind = type(value)
    if kind is str:
        return value or None
    if kind is float and value.is_integer() and -_WHOLE < value < _WHOLE:
        return int(value)
    return value


def cells(row: list[Any]) -> tuple[Any, ...]:
    """``cell`` over a row (inlined: this runs once per cell of the sheet)."""
    out: list[Any] = []
    append = out.append
    for value in row:
        kind = type(value)
        if kind is str:
            append(value or None)
        elif kind is float and value.is_integer() and -_WHOLE < value < _WHOLE:
            append(int(value))
        else:
            append(value)
    return tuple(out)


class CalamineSheet:
    """One worksheet, its rows as tuples of openpyxl-shaped values, numbered from 1."""

    def __init__(self, sheet: python_calamine.CalamineSheet) -> None:
        self._sheet = sheet
        self.title = sheet.name

    def reset_dimensions(self) -> None:
        """Nothing to do: calamine reads the cells, never the ``<dimension>`` element."""

    def iter_rows(self, *, min_row: int = 1, values_only: bool = True) -> Iterator[tuple[Any, ...]]:
        del values_only  # always values
        end = self._sheet.end
        if end is None:  # an empty sheet
            return
        # Where the rows and columns calamine yields begin (it may leave out the empty
        # ones before the first filled cell): told by how many it yields against the
        # sheet's last cell, so row numbers and column positions stay the sheet's own.
        height = sum(1 for _ in self._sheet.iter_rows())  # cheap: no values converted
        first_row = end[0] + 2 - height  # 1-based number of the first row yielded
        for _empty in range(min_row, first_row):  # rows above the first filled cell
            yield ()
        pad: tuple[None, ...] | None = None
        for number, row in enumerate(self._sheet.iter_rows(), start=first_row):
            if pad is None:  # every row of the range is as wide: the empty columns before it
                pad = (None,) * (end[1] + 1 - len(row))
            if number >= min_row:
                yield pad + cells(row) if pad else cells(row)


class CalamineBook:
    """A workbook opened by calamine; sheets are read when asked for."""

    def __init__(self, path: Path) -> None:
        try:
            self._book = python_calamine.CalamineWorkbook.from_path(str(path))
        except (python_calamine.CalamineError, OSError) as exc:
            raise ValueError(str(exc) or type(exc).__name__) from None
        self.sheetnames: list[str] = list(self._book.sheet_names)
        self._charts = {
            m.name
            for m in self._book.sheets_metadata
            if m.typ is not python_calamine.SheetTypeEnum.WorkSheet
        }

    def __getitem__(self, name: str) -> CalamineSheet | object:
        if name in self._charts:
            return object()  # no iter_rows: XlsxSource says it is a chart
        try:
            return CalamineSheet(self._book.get_sheet_by_name(name))
        except python_calamine.CalamineError as exc:
            raise ValueError(f"sheet {name!r}: {exc}") from None

    def close(self) -> None:
        self._book.close()


def open_book(path: Path) -> CalamineBook | None:
    """The workbook through calamine; None when a sheet holds an error cell (``t="e"``).

    python-calamine hands an error cell (``#N/A``, ``#REF!``) over as an empty cell,
    which would drop the value silently instead of rejecting the row as XlsxSource
    does; such a workbook is read by openpyxl instead, exactly (and more slowly).
    """
    if _has_error_cells(path):
        log.info("source.xlsx.reader", reader="openpyxl", why="a sheet holds an error cell")
        return None
    return CalamineBook(path)


_ERROR_CELL = (b' t="e"', b" t='e'")


def _has_error_cells(path: Path) -> bool:
    """Whether any worksheet's XML has a cell of type error (streamed, a few MB at a time)."""
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError):
        return False  # calamine's own open says what is wrong
    with archive:
        for name in archive.namelist():
            if not (name.startswith("xl/worksheets/") and name.endswith(".xml")):
                continue
            with archive.open(name) as part:
                tail = b""
                while chunk := part.read(1 << 22):
                    window = tail + chunk
                    if any(mark in window for mark in _ERROR_CELL):
                        return True
                    tail = chunk[-8:]
    return False
