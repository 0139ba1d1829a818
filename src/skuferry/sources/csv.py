"""The CSV source: a delimited text file whose first row is the header.

Streams row by row (the file is never held in memory). Invalid bytes for the
configured encoding are read with ``surrogateescape`` so that only the row that
holds them is rejected; the rest of the file is still read.

No row is swallowed in silence. A quote that is never closed, or that the next
quote rows later closes, takes the lines after it into one field: each line it
took is rejected on its own ("line 32: a quote opened here runs to line 34;
lines 32-34 rejected"), and reading goes on after it. Every rejected row hands
over the cells that are sure in it (``BadRecord.fields``), so that the planner
can hold its product by key. A quote that opens and closes in the same column
rows apart reads as one row with a multi-line cell: that cannot be told from a
description with line breaks, which is valid CSV.
"""

from __future__ import annotations

import csv
import itertools
import re
from collections.abc import Iterator
from pathlib import Path

from skuferry.config.encoding import require_encoding
from skuferry.config.schema import CsvSourceSettings, FinalNewline, ShortRows
from skuferry.errors import ConfigError, SourceError
from skuferry.models import BadRecord, RawLines, RawRecord
from skuferry.sources.base import Source
from skuferry.sources.encodings import AUTO, TextLines
from skuferry.sources.file import FileSource
from skuferry.sources.torn import check_end

# surrogateescape maps an undecodable byte 0xNN to the lone surrogate U+DCNN.
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")
_BOM = "\ufeff"
LINE_BLOCK = 2000  # quote-free lines per RawLines block (CsvLines)


class CsvSource(FileSource):
    """Rows of a CSV file as ``RawRecord`` keyed by the (stripped) header names."""

    def __init__(
        self,
        path: Path | str,
        *,
        encoding: str = AUTO,
        delimiter: str = ",",
        final_newline: FinalNewline = "required",
        short_rows: ShortRows = "error",
    ) -> None:
        require_encoding(encoding, auto=True)
        if len(delimiter) != 1 or delimiter in '"\r\n':
            raise ConfigError(
                [
                    f"at 'source.delimiter': {delimiter!r} must be one character, "
                    "not a quote or a line break"
                ]
            )
        super().__init__(path)
        self.encoding = encoding
        self.delimiter = delimiter
        self.final_newline: FinalNewline = final_newline
        self.short_rows: ShortRows = short_rows
        self._header_read: tuple[str, ...] | None = None
        # the encoding the last reading decoded in (``"auto"``: the one its bytes showed)
        self.encoding_read = "utf-8" if encoding.lower() == AUTO else encoding

    @property
    def header(self) -> tuple[str, ...] | None:
        """The header of the last reading (``records()`` or ``lines()``), once read."""
        return self._header_read

    def records(self) -> Iterator[RawRecord | BadRecord]:
        # read as text with newline="": the csv module sees quoted line breaks (and
        # counts lines) itself
        return self.read_text(self._rows, encoding=self.encoding)

    def lines(self, *, block: int = LINE_BLOCK) -> CsvLines:
        """The records as ``records()`` yields them, but each line that holds one whole
        record without a quote left as text, in ``RawLines`` blocks (see ``CsvLines``)."""
        return CsvLines(self, block=block)

    def _rows(self, handle: TextLines) -> Iterator[RawRecord | BadRecord]:
        self.encoding_read = handle.encoding
        # strict: a stray quote is reported as an error for its row instead of silently
        # swallowing the lines after it into one field. ``lag`` trails the reader by one
        # record (a C-level tee): it hands over the physical lines of a record that went
        # wrong, so that each of them can be reported and its product held.
        feed, lag = itertools.tee(handle)
        reader = csv.reader(feed, delimiter=self.delimiter, strict=True)
        header: list[str] | None = None
        width = 0
        first_name = ""  # the header's first name: a row starting so may repeat the header
        consumed = 0  # physical lines the reader has taken so far
        last: str | None = None  # the last physical line read: a torn end has no line break
        first: str | None = None  # the header's last line
        while True:
            start = consumed + 1  # the physical line this row starts on
            error: csv.Error | None = None
            try:
                if header is not None:
                    # The common row, one line of ASCII text as wide as the header, in a
                    # tight loop; anything else leaves it for the general case below.
                    for row in reader:
                        end = reader.line_num
                        text = next(lag) if end == start else None
                        if (
                            text is not None
                            and len(row) == width > 1
                            and text.isascii()
                            and row[0].strip() != first_name  # else: the header again?
                        ):
                            last = text
                            # zip without keywords: passing strict= costs 0.25 us a row,
                            # and the lengths are equal here
                            yield RawRecord(start, dict(zip(header, row)))  # noqa: B905
                            consumed, start = end, end + 1
                            continue
                        lines = [text] if text is not None else self._lag(lag, end - consumed)
                        last = lines[-1] if lines else last
                        yield from self._other(header, row, lines, start=start, end=end)
                        consumed, start = end, end + 1
                    check_end(self.name, consumed, last, self.final_newline, first=first)
                    return
                row = next(reader)
            except StopIteration:
                check_end(self.name, consumed, last, self.final_newline, first=first)
                return
            except csv.Error as exc:
                error = exc
            end = reader.line_num
            count, consumed = end - consumed, end
            # the common case is one line, one row: its text is kept by reference only
            lines = [next(lag)] if count == 1 else list(itertools.islice(lag, count))
            last = lines[-1] if lines else last
            if header is None:
                if error is not None:
                    raise SourceError(f"{self.path} line {start}: bad header: {error}") from error
                if not row or (len(row) == 1 and not row[0].strip()):
                    continue  # a blank line
                header = self._header(row, start)
                width = len(header)
                first_name = header[0]
                first = lines[-1]  # its line break is the file's
                continue
            if error is not None:
                yield from self._broken(header, lines, start=start, error=error, row=row)
                continue
            yield from self._other(header, row, lines, start=start, end=end)

    @staticmethod
    def _lag(lag: Iterator[str], count: int) -> list[str]:
        return list(itertools.islice(lag, count))

    def _other(
        self, header: list[str], row: list[str], lines: list[str], *, start: int, end: int
    ) -> Iterator[RawRecord | BadRecord]:
        """A row read without error that is not the common case (see ``_rows``)."""
        name = self.name
        width = len(header)
        if end > start and len(row) != width:
            yield from self._broken(header, lines, start=start, error=None, row=row)
            return
        if not row or (len(row) == 1 and not row[0].strip()):
            return  # a blank line
        if _repeats(header, row):
            yield BadRecord(
                start,
                f"{name} line {start}: the line repeats the header (two exports joined "
                "into one file?); it is no product",
                no_product=True,
            )
            return
        if len(row) > width:
            # Misplaced fields: which ones moved is unknown, so the key read by
            # position is held but the row's own product is not known for sure.
            yield BadRecord(
                start,
                f"{name} line {start}: {len(row)} fields, the header has {width}",
                fields=dict(zip(header, row, strict=False)),
                guessed=True,
            )
            return
        joined = "".join(row)
        # Two C calls per row; escaped bytes are never ASCII, so most rows stop at the first.
        if not joined.isascii() and _ESCAPED_BYTE.search(joined):
            column, byte = _escaped_byte(header, row)
            where = f"{name} line {start}, column {column!r}"
            yield BadRecord(
                start,
                f"{where}: invalid {self.encoding_read} (byte 0x{byte:02x})",
                fields=dict(zip(header, row, strict=False)),  # in place: the key is sure
            )
            return
        if len(row) < width:
            if self.short_rows == "pad":  # the exporter drops trailing empty fields
                yield RawRecord(start, dict(itertools.zip_longest(header, row, fillvalue="")))
                return
            # Which fields are missing is unknown (the trailing ones, or one in the middle
            # and the rest shifted): the key read by position holds its product, but the
            # row's own product is not known for sure, as with too many fields.
            yield BadRecord(
                start,
                f"{name} line {start}: {len(row)} field(s), the header has {width} (if the "
                'exporter drops trailing empty fields, set short_rows = "pad" in the table '
                "that reads this file)",
                fields=dict(zip(header, row, strict=False)),
                guessed=True,
            )
            return
        yield RawRecord(start, dict(zip(header, row, strict=True)))

    def _broken(
        self,
        header: list[str],
        lines: list[str],
        *,
        start: int,
        error: csv.Error | None,
        row: list[str],
    ) -> Iterator[BadRecord]:
        """A row the reader could not read, one ``BadRecord`` per physical line it took.

        A quote that is never closed (or closed in another column, rows later) takes
        the lines after it into one field: each of those lines is reported, and the
        cells it holds before anything went wrong are handed over for its key.
        """
        name = self.name
        end = start + len(lines) - 1
        eof = error is not None and str(error) == "unexpected end of data"
        if start == end and not eof:
            # A stray quote within one line: the cells before it are sure.
            yield self._bad(header, start, f"{name} line {start}: {error}", lines[0])
            return
        # A quote still open at the end of the file: the record may have been cut there
        # (a copy cut off inside a description), and what followed it is unknown, so its
        # lines cannot prove any product absent (``guessed``).
        if start == end:
            yield self._bad(
                header,
                start,
                f"{name} line {start}: a quote opened here is never closed; line {start} rejected",
                lines[0],
                unsure=eof,
            )
            return
        if eof:
            runs = f"runs to the end of the file (line {end})"
        elif error is not None:
            runs = f"runs to line {end} ({error})"
        else:
            runs = (
                f"runs to line {end}, read as one row of {len(row)} fields "
                f"(the header has {len(header)})"
            )
        span = f"lines {start}\u2013{end} rejected"
        opened = f"{name} line {start}: a quote opened here {runs}; {span}"
        yield self._bad(header, start, opened, lines[0], unsure=eof)
        for number, text in enumerate(lines[1:], start=start + 1):
            if text.strip():  # a blank line inside the quote holds no product
                inside = f"{name} line {number}: inside the quote opened on line {start}; {span}"
                yield self._bad(header, number, inside, text, unsure=eof)

    def _bad(
        self, header: list[str], line: int, reason: str, text: str, *, unsure: bool = False
    ) -> BadRecord:
        """A rejected physical line with the cells that are sure in it, for its key.

        Were the line a row of its own, its first cells are exactly those read before
        anything went wrong (``leading_cells``). More cells than the header has: which
        moved is unknown, so the key read from them is only a guess.
        """
        cells, _complete = leading_cells(text, self.delimiter)
        fields = dict(zip(header, cells, strict=False))
        return BadRecord(line, reason, fields=fields, guessed=unsure or len(cells) > len(header))

    def _header(self, row: list[str], line: int) -> list[str]:
        self._header_read = None
        names = [cell.strip() for cell in row]
        if names[0].startswith(_BOM):
            names[0] = names[0][len(_BOM) :].strip()
        where = f"{self.path} line {line}: header column"
        seen: set[str] = set()
        for position, column in enumerate(names, start=1):
            if _ESCAPED_BYTE.search(column):
                raise SourceError(f"{where} {position} is not valid {self.encoding_read}")
            if not column:
                raise SourceError(f"{where} {position} has no name")
            if column in seen:
                raise SourceError(f"{where} {column!r} appears twice")
            seen.add(column)
        self._header_read = tuple(names)
        return names


class CsvLines:
    """``CsvSource.records()`` with the plain lines left unparsed, for the planner's line route.

    A physical line read at the start of a record that holds no quote character is
    that whole record: the reader cannot be inside a quoted field there, and without a
    quote nothing can open one. Such lines (after the header) are handed over as text
    in ``RawLines`` blocks of up to ``block`` consecutive lines; ``parse(line, text)``
    turns one into exactly what ``records()`` yields for it (a ``RawRecord``, a
    ``BadRecord`` or nothing for a blank line). Every other line (the header, any line
    holding a quote, and the lines a quoted field takes) is read by the same csv
    reader as ``records()`` reads it and yielded as records. Expanding each block by
    ``parse`` gives ``list(source.records())`` exactly (the CSV lines tests check it).

    ``identity``, once the header is read: what else decides how a line reads (the
    delimiter, the encoding and the header line as it is in the file, BOM and line
    break included). Equal identity and equal line text: equal records.
    """

    def __init__(self, source: CsvSource, *, block: int = LINE_BLOCK) -> None:
        self.source = source
        self.block = max(1, block)
        self.header: list[str] | None = None
        self.identity: str | None = None
        self._first: str | None = None

    def __iter__(self) -> Iterator[RawRecord | BadRecord | RawLines]:
        return self.source.read_text(self._read, encoding=self.source.encoding)

    def parse(self, line: int, text: str) -> list[RawRecord | BadRecord]:
        """What ``records()`` yields for the quote-free ``text`` read as line ``line``.

        A reader starts each record afresh, so a new one over this line alone reads it
        as the file's reader does."""
        header = self.header
        if header is None:  # pragma: no cover - lines are handed over after the header
            raise RuntimeError("a line before the header")
        reader = csv.reader((text,), delimiter=self.source.delimiter, strict=True)
        try:
            row = next(reader)
        except StopIteration:  # pragma: no cover - a line always reads as a row
            return []
        except csv.Error as exc:
            return list(self.source._broken(header, [text], start=line, error=exc, row=[]))
        return list(self.source._other(header, row, [text], start=line, end=line))

    def _take_header(
        self, row: list[str], error: csv.Error | None, line: int, taken: list[str]
    ) -> list[str] | None:
        """The header read from ``row`` (None for a blank line), with the reader's identity."""
        source = self.source
        if error is not None:
            raise SourceError(f"{source.path} line {line}: bad header: {error}") from error
        if not row or (len(row) == 1 and not row[0].strip()):
            return None  # a blank line
        self.header = source._header(row, line)
        self.identity = self._identity("".join(taken))
        self._first = taken[-1]  # its line break is the file's
        return self.header

    def _identity(self, header_line: str) -> str:
        source = self.source
        # short_rows decides how a line reads; "error" (the default) adds nothing, so that
        # the line digests learnt before the key existed still hold
        reading = [] if source.short_rows == "error" else [f"short_rows={source.short_rows}"]
        # the encoding read in: "auto" that read UTF-8 reads as "utf-8" did
        return "|".join(["csv", source.encoding_read, source.delimiter, *reading, header_line])

    def _read(self, handle: TextLines) -> Iterator[RawRecord | BadRecord | RawLines]:
        source = self.source
        source.encoding_read = handle.encoding
        lines = iter(handle)
        feed = _Feed(lines)  # the csv reader's lines: the one pushed, then more as it asks
        reader = csv.reader(feed, delimiter=source.delimiter, strict=True)
        header: list[str] | None = None
        block: list[str] = []
        size = self.block
        number = 0  # physical lines read so far
        start = 0  # the line number of block[0]
        last: str | None = None  # the last physical line read: a torn end has no line break
        for text in lines:
            number += 1
            last = text
            if header is not None and '"' not in text:
                if not block:
                    start = number
                block.append(text)
                if len(block) >= size:
                    yield RawLines(start, block)
                    block = []
                continue
            if block:
                yield RawLines(start, block)
                block = []
            first = number
            feed.pending = text
            error: csv.Error | None = None
            row: list[str] = []
            try:
                row = next(reader)
            except StopIteration:  # pragma: no cover - the pushed line is always read
                break
            except csv.Error as exc:
                error = exc
            taken = feed.taken
            feed.taken = []
            number += len(taken) - 1
            last = taken[-1] if taken else last
            if header is None:
                header = self._take_header(row, error, first, taken)
                continue
            if error is not None:
                yield from source._broken(header, taken, start=first, error=error, row=row)
                continue
            yield from source._other(header, row, taken, start=first, end=number)
        if block:
            yield RawLines(start, block)
        check_end(source.name, number, last, source.final_newline, first=self._first)


class _Feed:
    """The csv reader's input in ``CsvLines``: ``pending`` first, then the file's next lines;
    ``taken`` holds every line handed out since it was last emptied."""

    __slots__ = ("lines", "pending", "taken")

    def __init__(self, lines: Iterator[str]) -> None:
        self.lines = lines
        self.pending: str | None = None
        self.taken: list[str] = []

    def __iter__(self) -> _Feed:
        return self

    def __next__(self) -> str:
        text = self.pending
        if text is None:
            text = next(self.lines)
        else:
            self.pending = None
        self.taken.append(text)
        return text


def _repeats(header: list[str], row: list[str]) -> bool:
    """``row`` is the header again: the same names in the same places (a BOM and blanks
    around a name aside)."""
    return (
        len(row) == len(header) > 1
        and row[0].strip().lstrip(_BOM).strip() == header[0]
        and [cell.strip() for cell in row[1:]] == header[1:]
    )


def _escaped_byte(header: list[str], row: list[str]) -> tuple[str, int]:
    """The first column holding an undecodable byte, and that byte (the row holds one)."""
    for column, value in zip(header, row, strict=False):
        match = _ESCAPED_BYTE.search(value)
        if match is not None:
            return column, ord(match.group()) - 0xDC00
    raise ValueError("the row holds no escaped byte")  # callers check first


def open_csv(settings: CsvSourceSettings) -> Source:
    return CsvSource(
        settings.path,
        encoding=settings.encoding,
        delimiter=settings.delimiter,
        final_newline=settings.final_newline,
        short_rows=settings.short_rows,
    )


def leading_cells(text: str, delimiter: str) -> tuple[list[str], bool]:
    """The cells of one physical line read up to the first fault, and whether none occurred.

    Quoted as the csv module quotes (``""`` inside quotes is a quote). A fault is a
    closing quote followed by anything but the delimiter or the line's end, or the
    line ending inside quotes; the cell it happens in is not among those returned.
    """
    text = text.rstrip("\r\n")
    cells: list[str] = []
    i, size = 0, len(text)
    while True:
        if i < size and text[i] == '"':
            value: list[str] = []
            i += 1
            while True:
                close = text.find('"', i)
                if close < 0:
                    return cells, False  # the line ends inside quotes
                value.append(text[i:close])
                if text.startswith('""', close):
                    value.append('"')
                    i = close + 2
                    continue
                i = close + 1
                break
            if i < size and text[i] != delimiter:
                return cells, False  # a quote closed in the middle of a cell
            cells.append("".join(value))
        else:
            stop = text.find(delimiter, i)
            cells.append(text[i:] if stop < 0 else text[i:stop])
            i = size if stop < 0 else stop
        if i >= size:
            return cells, True
        i += 1  # past the delimiter
