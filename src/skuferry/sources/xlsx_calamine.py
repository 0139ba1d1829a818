"""The xlsx reader through python-calamine (Rust calamine): the same records as openpyxl's.

calamine parses the sheet's XML in Rust, into memory and without the GIL; this module
turns its rows into the records ``XlsxSource`` yields through openpyxl, value for value:

- an empty cell (calamine gives ``""``) and a whitespace-only text are left out, as
  openpyxl's empty cells are;
- a number written without a fraction (``<v>52</v>``) is an ``int``: calamine has only
  floats for xlsx, openpyxl reads that text as ``int``. A whole number of 15 digits or
  more stays a float (Excel writes those with an exponent);
- dates, times and durations arrive as ``datetime``/``date``/``time``/``timedelta`` and
  become ISO text (``cell_value``), formulas give their cached value and shared strings
  their text, as openpyxl's do;
- rows and columns before the first filled cell (which calamine leaves out) are
  counted back in, so line numbers and column letters are the sheet's own.

Two things calamine's values cannot tell: an error cell (``#N/A``) arrives as ``""``,
like an empty one, and a number arrives as a float whatever its text: openpyxl reads
a whole number written ``52.0`` or ``4.006381E12`` (Apache POI, Python's ``repr``) as
a float, not the int ``52`` gives, and 16 digits or more as an exact int. ``Scan``
looks for both in the sheet's XML in a thread while calamine parses; a sheet holding
either is read by openpyxl instead, exactly, and the log says why
(``source.xlsx.reader``).

Records are made a block of rows at a time, a column at a time (``_records``): a
column of text (the bulk of a catalog) goes into the records as calamine made it after
built-in checks for an empty cell and an error's text, a column of numbers is turned
into ``int``/``float`` by built-in passes, and only a column of mixed kinds is looked
at cell by cell in Python.

calamine holds the sheet it reads in memory (about twice the sheet's uncompressed
XML); ``[source] reader = "openpyxl"`` streams it with flat memory. The figures are in
the xlsx source's page of the docs; the readers' tests diff both readers' records and
mapped values over the real-shape fixtures.
"""

from __future__ import annotations

import gc
import math
import posixpath
import re
import threading
import zipfile
from collections.abc import Callable, Generator, Iterator, Sequence
from itertools import islice, repeat
from pathlib import Path
from typing import IO, Any
from xml.parsers.expat import ExpatError

import python_calamine

from skuferry import logs
from skuferry.errors import SourceError
from skuferry.models import BadRecord, RawRecord
from skuferry.sources.xlsx_cells import (
    ERRORS,
    AmbiguousRow,
    SheetSource,
    cell_value,
    filled,
    repeats_header,
)
from skuferry.sources.xml import hardened_parser

log = logs.get(__name__)

_WHOLE = 1e15  # Excel writes integers this large with an exponent: openpyxl floats


def cell(value: Any) -> Any:
    """A calamine cell value as openpyxl's ``values_only`` gives it (None when empty)."""
    kind = type(value)
    if kind is str:
        return value or None
    if kind is float and value.is_integer() and -_WHOLE < value < _WHOLE:
        return int(value)
    return value


# Yielded records, then (the generator's return value) whether calamine read the sheet:
# False, before any record, when openpyxl must read it instead.
Read = Generator[RawRecord | BadRecord, None, bool]


def read(source: SheetSource, plain: Path) -> Read:
    """The records of ``source``'s sheet through calamine (see the module's docstring)."""
    try:
        book = python_calamine.CalamineWorkbook.from_path(str(plain))
    except (python_calamine.CalamineError, OSError, ValueError) as exc:
        raise SourceError(
            f"{source.path} is not a readable .xlsx workbook: {exc or type(exc).__name__}"
        ) from None
    scan: Scan | None = None
    try:
        name = source._sheet(_Names(book)).title
        scan = Scan(plain, name)  # a second core, while calamine parses without the GIL
        try:
            sheet = book.get_sheet_by_name(name)
        except python_calamine.CalamineError as exc:
            raise SourceError(f"{source.path} sheet {name!r} is not readable: {exc}") from None
        why = scan.result()
        if why is not None:
            log.info("source.xlsx.reader", path=str(source.path), reader="openpyxl", why=why)
            return False
        rows, read_columns, ambiguous = _below_header(source, sheet, name)
        yield from _records(source, rows, read_columns, ambiguous)
        return True
    finally:
        if scan is not None:
            scan.stop()
        book.close()


_BLOCK = 1024  # rows turned into records at a time: their columns are checked whole
_EMPTY: Any = object()  # an empty cell's place in a column: left out of the record


def _records(
    source: SheetSource,
    rows: Iterator[list[Any]],
    read_columns: list[tuple[int, str]],
    ambiguous: dict[str, str],
) -> Iterator[RawRecord | BadRecord]:
    """The records of ``rows`` (the sheet's rows below the header), as openpyxl's.

    A block of rows at a time, column by column (``_column``): a column whose cells are
    all text, or all numbers, is checked and converted by built-in functions over the
    whole column, not one cell at a time in Python. A block without an empty cell and
    without an error's text, the common case of a catalog, then becomes its records
    with one ``dict`` display a row (``_row_dict``); any other block is built row by
    row, leaving empty cells and empty rows out and rejecting rows showing an error,
    exactly as a row-by-row reading would (the readers' tests diff the two).
    """
    names = [column for _, column in read_columns]
    as_dict = _row_dict(names)
    line = source.header_row + 1
    while True:
        gc_was = gc.isenabled()
        gc.disable()  # a block's objects hold no cycles: no collections while it is built
        try:
            block = list(islice(rows, _BLOCK))
            out = _block(
                source,
                block,
                line,
                names=names,
                as_dict=as_dict,
                read=read_columns,
                ambiguous=ambiguous,
            )
        finally:
            if gc_was:
                gc.enable()
        if not block:
            return
        line += len(block)
        yield from out


def _block(
    source: SheetSource,
    block: list[list[Any]],
    line: int,
    *,
    names: list[str],
    as_dict: Callable[[Sequence[Any]], dict[str, Any]],
    read: list[tuple[int, str]],
    ambiguous: dict[str, str],
) -> list[RawRecord | BadRecord]:
    """The records of ``block``, rows of the sheet from line ``line`` on."""
    if not block:
        return []
    whole = list(zip(*block, strict=True))  # calamine's rows are all one width
    columns: list[Sequence[Any]] = []
    holes = errors = False
    for i, _ in read:
        cells, holed, erred = _column(whole[i])
        columns.append(cells)
        holes |= holed
        errors |= erred
    lines = range(line, line + len(block))
    # the header's first name in its own column: a row may repeat the header (checked by row)
    again = bool(names) and names[0] in columns[0]
    if not holes and not errors and not again and names:
        fields = map(as_dict, zip(*columns, strict=True))
        if ambiguous:
            shared = repeat(ambiguous, len(block))
            return list(map(RawRecord, lines, map(AmbiguousRow, fields, shared)))
        return list(map(RawRecord, lines, fields))
    out: list[RawRecord | BadRecord] = []
    rows = zip(*columns, strict=True) if columns else repeat((), len(block))
    for number, row in zip(lines, rows, strict=True):
        values = {k: v for k, v in zip(names, row, strict=True) if v is not _EMPTY}
        if not values:
            continue  # an empty row
        if again and repeats_header(values):
            out.append(source._repeated_header(number))
            continue
        if errors and not ERRORS.isdisjoint(values.values()):  # a text reading "#N/A"
            out.append(source._error_row(number, values, ambiguous))
            continue
        out.append(RawRecord(number, AmbiguousRow(values, ambiguous) if ambiguous else values))
    return out


def _row_dict(names: list[str]) -> Callable[[Sequence[Any]], dict[str, Any]]:
    """``row -> {names[0]: row[0], names[1]: row[1], ...}`` as one dict display, about
    half the time of ``dict(zip(names, row))``. The function's text holds positions
    only; the names are its default values."""
    params = ", ".join(f"_{i}=names[{i}]" for i in range(len(names)))
    body = ", ".join(f"_{i}: row[{i}]" for i in range(len(names)))
    scope: dict[str, Any] = {"names": names}
    exec(f"def as_dict(row, {params}):\n    return {{{body}}}\n", scope)  # noqa: S102
    made: Callable[[Sequence[Any]], dict[str, Any]] = scope["as_dict"]
    return made


def _column(cells: tuple[Any, ...]) -> tuple[Sequence[Any], bool, bool]:
    """A column of a block as records hold its cells (``_EMPTY`` for an empty one),
    whether it has an empty cell, and whether a cell reads as an Excel error.

    All text without an empty or whitespace cell (most of a catalog): kept as calamine
    made it. All floats (calamine's numbers): whole ones become ``int``, as ``cell``
    makes them (``_numbers``). Anything else: cell by cell (``_value``). The kind is
    the first cell's; the built-in passes raise ``TypeError`` at a cell of another.
    """
    if cells:
        try:
            if type(cells[0]) is str and not any(map(str.isspace, cells)) and "" not in cells:
                return cells, False, not ERRORS.isdisjoint(cells)
            if type(cells[0]) is float:
                return _numbers(cells), False, False
        except TypeError:  # str.isspace or float.is_integer of another kind: mixed
            pass
    values = [_value(v) for v in cells]
    return (
        values,
        _EMPTY in values,
        not ERRORS.isdisjoint(v for v in values if type(v) is str),
    )


def _numbers(cells: tuple[float, ...]) -> Sequence[Any]:
    """A column of floats with each whole one (below 1e15) an ``int``, as ``cell`` makes
    them: whole-column built-in passes for the common columns (all fractional, as
    prices; all whole, as EANs and stock), one test a cell for a mixed one."""
    whole = list(map(float.is_integer, cells))
    if not any(whole):
        return cells
    if all(whole) and min(cells) > -_WHOLE and max(cells) < _WHOLE:
        return list(map(math.trunc, cells))  # int(), about twice as fast over a column
    return [int(v) if w and -_WHOLE < v < _WHOLE else v for v, w in zip(cells, whole, strict=True)]


def _value(value: Any) -> Any:
    """One calamine cell as a record holds it, ``_EMPTY`` when openpyxl sees no value."""
    kind = type(value)
    if kind is str:
        return _EMPTY if not value or value.isspace() else value
    if kind is float:
        return int(value) if value.is_integer() and -_WHOLE < value < _WHOLE else value
    if kind is bool or kind is int:
        return value
    return cell_value(value)  # a date, time or duration


def _below_header(
    source: SheetSource, sheet: python_calamine.CalamineSheet, name: str
) -> tuple[Iterator[list[Any]], list[tuple[int, str]], dict[str, str]]:
    """The rows below the header row, the read (position in those rows, name) columns
    and the ambiguous names' messages, as ``XlsxSource._header`` makes them."""
    header_row = source.header_row
    first_row, first_col = _origin(sheet)
    rows = iter(sheet.iter_rows()) if first_row else iter(())
    raw: list[Any] | None = None
    if first_row and first_row <= header_row:
        raw = next(islice(rows, header_row - first_row, None), None)
    header = (None,) * first_col + tuple(cell(v) for v in raw or ())
    if not any(map(filled, header)):
        raise SourceError(
            f"{source.path} sheet {name!r}: row {header_row} (header_row) "
            "is empty; set header_row to the row holding the column names"
        )
    columns, ambiguous = source._header(header, name)
    # positions in calamine's rows, which begin at its first column
    return rows, [(i - first_col, column) for i, column in columns], ambiguous


def _origin(sheet: python_calamine.CalamineSheet) -> tuple[int, int]:
    """The sheet row number of the first row ``iter_rows`` yields, and the column index
    (0-based) of each row's first value; (0, 0) for an empty sheet.

    The rows begin at the range's first column, but python-calamine 0.9 yields them
    from the sheet's first row while ``start`` names the range's: when the data does
    not begin in row 1, the rows it yields are counted (no values converted) against
    the last row, so that line numbers stay the sheet's own whichever it does.
    """
    start, end = sheet.start, sheet.end
    if start is None or end is None:
        return 0, 0
    if start[0] == 0:
        return 1, start[1]
    return end[0] + 2 - sum(1 for _ in sheet.iter_rows()), start[1]


class _Names:
    """What ``XlsxSource._sheet`` asks of a book: its sheet names, and a sheet by name."""

    def __init__(self, book: python_calamine.CalamineWorkbook) -> None:
        self.sheetnames: list[str] = list(book.sheet_names)
        self._charts = {
            m.name
            for m in book.sheets_metadata
            if m.typ is not python_calamine.SheetTypeEnum.WorkSheet
        }

    def __getitem__(self, name: str) -> Any:
        return _Chart() if name in self._charts else _Title(name)


class _Title:
    """A worksheet, as far as ``XlsxSource._sheet`` looks: it has rows, and a title."""

    iter_rows = True

    def __init__(self, title: str) -> None:
        self.title = title


class _Chart:
    """A chart sheet: no ``iter_rows``, so ``XlsxSource._sheet`` says it is a chart."""


# A cell of type error, written with either quote (a text holding it is a false alarm:
# openpyxl reads that sheet, slower, as exactly).
_ERROR_CELL = (b't="e"', b"t='e'")
# Where a number's text may give openpyxl another value than calamine's (each pattern
# starts with a literal, so the regular expression engine skips ahead quickly): a
# fraction of zeros ("52.0", "52.", "52.00") or an exponent ("4.006381E12", "1e+20"),
# which openpyxl reads as float, and 16 digits or more, which openpyxl reads as an
# exact int and calamine as a float. Each is confirmed by ``_differs``.
_SUSPECTS = (
    re.compile(rb"\.0*</v>"),
    re.compile(rb"E[-+]?[0-9]+</v>"),
    re.compile(rb"e[-+]?[0-9]+</v>"),
    re.compile(rb"</v>(?<=[0-9]{16}</v>)"),
)
_CHUNK = 1 << 22
_OVERLAP = 64  # bytes carried over from one chunk to the next: more than a number's text
_RELS = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"


class Scan:
    """Why openpyxl must read a sheet, from its XML (in a thread), or None.

    calamine gives an error cell (type ``e``) as ``""``, like an empty cell, and a
    number as a float whatever its text, where openpyxl reads ``<v>52</v>`` as ``int``
    but ``<v>52.0</v>`` and ``<v>5.2E1</v>`` as ``float`` (and the mapping keeps that
    difference: ``type = "decimal"`` gives ``52`` and ``52.0``), and
    ``<v>12345678901234567</v>`` as that exact int. A sheet holding any of these is
    read by openpyxl, exactly.

    One pass of zlib over the sheet's XML and ``bytes`` searches (regular expressions
    that start with a literal); a candidate is confirmed by parsing its text. About
    0.35 s of CPU for a 200,000-row sheet, on a second core while calamine parses.
    Anything unexpected (a part that cannot be found or read) is a reason too.
    """

    def __init__(self, path: Path, sheet: str) -> None:
        self._why: str | None = None
        self._halt = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(path, sheet), name="skuferry-xlsx-scan", daemon=True
        )
        self._thread.start()

    def result(self) -> str | None:
        self._thread.join()
        return self._why

    def stop(self) -> None:
        self._halt.set()
        self._thread.join()

    def _run(self, path: Path, sheet: str) -> None:
        try:
            with zipfile.ZipFile(path) as archive:
                part = sheet_parts(archive).get(sheet)
                if part is None:
                    self._why = f"the workbook names no part for sheet {sheet!r}"
                    return
                with archive.open(part) as stream:
                    self._why = self._look(stream)
        except Exception as exc:  # noqa: BLE001 - unsure: openpyxl reads it, exactly
            self._why = f"the sheet's XML could not be checked ({type(exc).__name__}: {exc})"

    def _look(self, stream: IO[bytes]) -> str | None:
        tail = b""
        while chunk := stream.read(_CHUNK):
            if self._halt.is_set():
                return None
            window = tail + chunk
            if any(mark in window for mark in _ERROR_CELL):
                return "the sheet holds an error cell (#N/A, #REF!, ...)"
            for pattern in _SUSPECTS:
                for match in pattern.finditer(window):
                    end = window.index(b"</v>", match.start())
                    start = window.rfind(b"<v>", max(0, end - _OVERLAP), end)
                    text = window[start + 3 : end].decode("ascii", "replace")
                    if start != -1 and _differs(text):
                        return f"a number is written {text!r}: openpyxl reads another value"
            tail = window[-_OVERLAP:]
        return None


def _differs(text: str) -> bool:
    """Whether openpyxl's value for a number cell's text is not what ``read`` makes of
    calamine's (a float parsed from the same text). Not a number: a text's own
    characters (a formula's text result), no difference."""
    try:
        number = float(text)
    except ValueError:
        return False
    try:  # as openpyxl casts a number's text
        theirs = float(text) if "." in text or "E" in text or "e" in text else int(text)
    except ValueError:
        return True  # "nan", "inf": openpyxl says what is wrong
    ours = cell(number)
    return type(ours) is not type(theirs) or ours != theirs


# What ``reader = "auto"`` lets calamine hold: the sheet's XML and the shared strings,
# uncompressed. calamine's peak is about 1.65 bytes a byte of it above the interpreter's
# ~56 MB (200k rows x 6: 70 MB -> 167 MB peak; 1M rows: 355 MB -> 649 MB peak).
AUTO_MAX_BYTES = 80_000_000


def sheet_bytes(plain: Path, sheet: str | int) -> int | None:
    """The uncompressed size of ``sheet``'s XML plus the shared strings, from the zip's
    directory (nothing is inflated); None when the sheet or its part is not found."""
    try:
        with zipfile.ZipFile(plain) as archive:
            parts = sheet_parts(archive)
            names = list(parts)
            if isinstance(sheet, int):
                name = names[sheet - 1] if 0 < sheet <= len(names) else None
            else:
                name = sheet if sheet in parts else None
            if name is None:
                return None
            sizes = {info.filename: info.file_size for info in archive.infolist()}
    except (zipfile.BadZipFile, OSError, KeyError, ValueError, ExpatError):
        return None
    if parts[name] not in sizes:
        return None
    return sizes[parts[name]] + sizes.get("xl/sharedStrings.xml", 0)


def sheet_parts(archive: zipfile.ZipFile) -> dict[str, str]:
    """Sheet name -> its part in the archive (``xl/worksheets/sheet4.xml``), read from
    ``xl/workbook.xml`` and its relationships."""
    ids: dict[str, str] = {}  # sheet name -> relationship id
    targets: dict[str, str] = {}  # relationship id -> part

    def sheet(name: str, attrs: list[str]) -> None:
        if name.rpartition("}")[2] == "sheet":
            pairs = dict(zip(attrs[::2], attrs[1::2], strict=True))
            if "name" in pairs and f"{_RELS}}}id" in pairs:
                ids[pairs["name"]] = pairs[f"{_RELS}}}id"]

    def relationship(name: str, attrs: list[str]) -> None:
        if name.rpartition("}")[2] == "Relationship":
            pairs = dict(zip(attrs[::2], attrs[1::2], strict=True))
            target = pairs.get("Target", "")
            part = target[1:] if target.startswith("/") else posixpath.join("xl", target)
            targets[pairs.get("Id", "")] = posixpath.normpath(part)

    for member, handler in (
        ("xl/workbook.xml", sheet),
        ("xl/_rels/workbook.xml.rels", relationship),
    ):
        parser = hardened_parser()
        parser.StartElementHandler = handler
        with archive.open(member) as stream:
            parser.ParseFile(stream)
    return {name: targets[rid] for name, rid in ids.items() if rid in targets}
