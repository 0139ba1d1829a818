"""``[source] type = "xlsx"``: one sheet of an Excel workbook, one product per row.

Two readers give the same records (``reader``, see ``_calamine``): calamine
(Rust, the sheet held in memory) by default while the sheet is small enough, and
openpyxl, which in read-only mode streams the sheet's XML row by row, so memory
stays flat in the row count. Both give formula cells their cached value (what Excel
last computed and showed).

``sheet`` is a name or a 1-based position, ``header_row`` the row holding the
column names; rows above it (a title, notes) are ignored, and so are rows that are
entirely empty. A record's line is its spreadsheet row number.

Values arrive typed: text as text (leading zeros kept), numbers as ``int`` or
``float`` (the mapping turns them into exact decimals), booleans as ``bool``,
dates as ISO text (``2024-03-01``, or ``2024-03-01T08:30:00`` with a time).
A row with a cell showing an Excel error (``#N/A``, ``#REF!``, ...) is rejected,
its other cells handed over so that its product can be held by key.

Header cells: an empty one leaves its column unread; a name that appears more
than once is *ambiguous*. The unique columns still work, but asking a record
for an ambiguous one (a mapping ``column``, a ``path``) is a ``ConfigError``
naming the columns that share the name: guessing which one was meant would send
the wrong value without a word.
"""

from __future__ import annotations

import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from skuferry import logs
from skuferry.config.schema import XlsxSourceSettings
from skuferry.errors import ConfigError, SourceError
from skuferry.models import BadRecord, RawRecord
from skuferry.sources.base import Source
from skuferry.sources.compression import as_plain_file
from skuferry.sources.file import FileSource
from skuferry.sources.xlsx_cells import ERRORS as _ERRORS
from skuferry.sources.xlsx_cells import AmbiguousRow, cell_value, column_letter, repeats_header
from skuferry.sources.xlsx_cells import filled as _filled

log = logs.get(__name__)


class XlsxSource(FileSource):
    """Rows of one worksheet as ``RawRecord`` keyed by the header row's names."""

    def __init__(
        self,
        path: Path | str,
        *,
        sheet: str | int = 1,
        header_row: int = 1,
        reader: str = "auto",
    ) -> None:
        super().__init__(path)
        # "auto", "calamine" or "openpyxl": see _calamine
        self.reader = reader
        self.sheet = sheet
        self.header_row = header_row
        self._header_read: tuple[str, ...] | None = None

    @property
    def header(self) -> tuple[str, ...] | None:
        """The header row's names of the last reading, once read."""
        return self._header_read

    def records(self) -> Iterator[RawRecord | BadRecord]:
        # a workbook is a zip read by random access: a compressed one is first
        # decompressed to a scratch file, and failing to open it is a failed read
        self._content.value = None  # this reading's, once its sheet was read to the end
        with (
            tempfile.TemporaryDirectory(prefix="skuferry-xlsx-") as scratch,
            self.reading(),
            as_plain_file(self.path, Path(scratch) / "workbook.xlsx") as plain,
        ):
            read_whole = self._content.workbook(plain)  # read by random access: hashed first
            yield from self._read(plain)
            read_whole()

    def _read(self, plain: Path) -> Iterator[RawRecord | BadRecord]:
        calamine = self._calamine(plain)
        if calamine is not None:
            read = yield from calamine.read(self, plain)
            if read:
                return  # else openpyxl reads it: calamine could not be exact (logged why)
        yield from self._read_openpyxl(plain)

    def _calamine(self, plain: Path) -> Any:
        """The calamine reader module when it is to read this workbook, else None."""
        if self.reader == "openpyxl":
            return None
        try:
            from skuferry.sources import xlsx_calamine
        except ImportError:  # python-calamine not installed: openpyxl, exactly
            say = log.warning if self.reader == "calamine" else log.info
            say(
                "source.xlsx.reader",
                path=str(self.path),
                reader="openpyxl",
                why="no python-calamine",
            )
            return None
        if self.reader == "auto":
            size = xlsx_calamine.sheet_bytes(plain, self.sheet)
            if size is None or size > xlsx_calamine.AUTO_MAX_BYTES:
                log.info(
                    "source.xlsx.reader",
                    path=str(self.path),
                    reader="openpyxl",
                    why="the sheet is too large to hold in memory"
                    if size is not None
                    else "the sheet's size is unknown",
                    sheet_bytes=size,
                )
                return None
        return xlsx_calamine

    def _read_openpyxl(self, plain: Path) -> Iterator[RawRecord | BadRecord]:
        from skuferry.sources import xlsx_openpyxl  # imported here: calamine's runs skip it

        try:
            book = xlsx_openpyxl.open_book(plain)
        except (xlsx_openpyxl.InvalidFile, zipfile.BadZipFile, KeyError, ValueError) as exc:
            raise SourceError(f"{self.path} is not a readable .xlsx workbook: {exc}") from None
        try:
            sheet = self._sheet(book)
            sheet.reset_dimensions()  # exporters often write a wrong <dimension>: read all rows
            rows = sheet.iter_rows(min_row=self.header_row, values_only=True)
            header = next(rows, None)
            if header is None or not any(_filled(v) for v in header):
                raise SourceError(
                    f"{self.path} sheet {sheet.title!r}: row {self.header_row} (header_row) "
                    "is empty; set header_row to the row holding the column names"
                )
            columns, ambiguous = self._header(header, sheet.title)
            for number, row in enumerate(rows, start=self.header_row + 1):
                values = {
                    name: cell_value(row[i])
                    for i, name in columns
                    if i < len(row) and _filled(row[i])
                }
                if not values:
                    continue  # an empty row
                if repeats_header(values):
                    yield self._repeated_header(number)
                    continue
                if not _ERRORS.isdisjoint(values.values()):
                    yield self._error_row(number, values, ambiguous)
                    continue
                yield RawRecord(number, AmbiguousRow(values, ambiguous) if ambiguous else values)
        finally:
            book.close()

    def _error_row(
        self, number: int, values: dict[str, Any], ambiguous: dict[str, str]
    ) -> BadRecord:
        """A row with a cell showing an Excel error: rejected, its other cells handed over.

        A failed lookup in the key column would otherwise create a product "#N/A" and
        let the real one look gone; in another column it would be sent as text.
        """
        errors = {k: v for k, v in values.items() if type(v) is str and v in _ERRORS}
        column, code = next(iter(errors.items()))
        sure = {k: v for k, v in values.items() if k not in errors}
        return BadRecord(
            number,
            f"{self.name} line {number}, column {column!r}: the cell shows the Excel error "
            f"{code} (a formula that failed)",
            fields=AmbiguousRow(sure, ambiguous) if ambiguous else sure,
        )

    def _repeated_header(self, number: int) -> BadRecord:
        """A row holding the header's names again: reported with its line, no product."""
        return BadRecord(
            number,
            f"{self.name} line {number}: the row repeats the header (two exports in one "
            "sheet?); it is no product",
            no_product=True,
        )

    def _sheet(self, book: Any) -> Any:
        names: list[str] = book.sheetnames
        if isinstance(self.sheet, int):
            if self.sheet > len(names):
                raise ConfigError(
                    [
                        f"at 'source.sheet': {self.path} has {len(names)} sheet(s), "
                        f"not {self.sheet}: {', '.join(map(repr, names))}"
                    ]
                )
            name = names[self.sheet - 1]
        elif self.sheet in names:
            name = self.sheet
        else:
            raise ConfigError(
                [
                    f"at 'source.sheet': {self.path} has no sheet {self.sheet!r}; its sheets are "
                    f"{', '.join(map(repr, names))}"
                ]
            )
        sheet = book[name]
        if not hasattr(sheet, "iter_rows"):
            raise ConfigError([f"at 'source.sheet': sheet {name!r} of {self.path} is a chart"])
        return sheet

    def _header(
        self, cells: tuple[Any, ...], title: str
    ) -> tuple[list[tuple[int, str]], dict[str, str]]:
        """The readable (position, name) columns and, per ambiguous name, its message."""
        positions: dict[str, list[int]] = {}
        for i, cell in enumerate(cells):
            if _filled(cell):
                positions.setdefault(str(cell_value(cell)).strip(), []).append(i)
        columns = [(where[0], name) for name, where in positions.items() if len(where) == 1]
        ambiguous = {}
        for name, where in positions.items():
            if len(where) > 1:
                letters = " and ".join(column_letter(i) for i in where)
                ambiguous[name] = (
                    f"at 'mapping': column {name!r} is ambiguous in {self.name} sheet "
                    f"{title!r}: columns {letters} of row {self.header_row} share the name; "
                    "rename one of them in the sheet"
                )
                log.warning(
                    "source.xlsx.header.ambiguous",
                    path=str(self.path),
                    sheet=title,
                    column=name,
                    columns=letters,
                )
        columns.sort()
        self._header_read = tuple(positions)
        return columns, ambiguous


def open_xlsx(settings: XlsxSourceSettings) -> Source:
    return XlsxSource(
        settings.path, sheet=settings.sheet, header_row=settings.header_row, reader=settings.reader
    )
