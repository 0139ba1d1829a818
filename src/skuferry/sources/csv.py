"""The CSV source: a delimited text file whose first row is the header.

Streams row by row (the file is never held in memory). Invalid bytes for the
configured encoding are read with ``surrogateescape`` so that only the row that
holds them is rejected; the rest of the file is still read.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from skuferry.config.encoding import require_encoding
from skuferry.config.load import CsvSourceSettings
from skuferry.errors import ConfigError, SourceError
from skuferry.models import BadRecord, RawRecord
from skuferry.sources.base import Source
from skuferry.sources.compression import open_text

# surrogateescape maps an undecodable byte 0xNN to the lone surrogate U+DCNN.
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")
_BOM = "\ufeff"


class CsvSource(Source):
    """Rows of a CSV file as ``RawRecord`` keyed by the (stripped) header names."""

    def __init__(self, path: Path | str, *, encoding: str = "utf-8", delimiter: str = ",") -> None:
        require_encoding(encoding)
        if len(delimiter) != 1 or delimiter in '"\r\n':
            raise ConfigError(
                [
                    f"at 'source.delimiter': {delimiter!r} must be one character, "
                    "not a quote or a line break"
                ]
            )
        self.path = Path(path)
        self.encoding = encoding
        self.delimiter = delimiter
        self._name = self.path.name

    def describe(self) -> str:
        return str(self.path)

    def records(self) -> Iterator[RawRecord | BadRecord]:
        try:
            # newline="" lets the csv module see quoted line breaks (and count lines) itself.
            handle = open_text(  # .gz / single-file .zip decompressed on the fly
                self.path, encoding=self.encoding, errors="surrogateescape", newline=""
            )
        except OSError as exc:
            raise SourceError(f"cannot open {self.path}: {exc.strerror or exc}") from exc
        with handle:
            try:
                yield from self._rows(handle)
            except OSError as exc:
                raise SourceError(f"reading {self.path} failed: {exc.strerror or exc}") from exc

    def _rows(self, handle: TextIO) -> Iterator[RawRecord | BadRecord]:
        # strict: a stray quote is reported as an error for its row instead of silently
        # swallowing the lines after it into one field.
        reader = csv.reader(handle, delimiter=self.delimiter, strict=True)
        header: list[str] | None = None
        width = 0
        name = self._name
        encoding = self.encoding
        previous_end = 0
        while True:
            start = previous_end + 1  # the physical line this row starts on
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                previous_end = reader.line_num
                if str(exc) == "unexpected end of data":
                    # The rows after an unclosed quote were read as one field: what was read
                    # cannot be told apart from what was lost, so the read is not complete.
                    raise SourceError(
                        f"{self.path} line {start}: a quoted field is never closed "
                        "(the rest of the file would be read as one field)"
                    ) from exc
                if header is None:
                    raise SourceError(f"{self.path} line {start}: bad header: {exc}") from exc
                yield BadRecord(start, f"{name} line {start}: {exc}")
                continue
            previous_end = reader.line_num
            if not row or (len(row) == 1 and not row[0].strip()):
                continue  # a blank line
            if header is None:
                header = self._header(row, start)
                width = len(header)
                continue
            if len(row) > width:
                yield BadRecord(
                    start, f"{name} line {start}: {len(row)} fields, the header has {width}"
                )
                continue
            joined = "".join(row)
            # Two C calls per row; escaped bytes are never ASCII, so most rows stop at the first.
            if not joined.isascii() and _ESCAPED_BYTE.search(joined):
                column, byte = _escaped_byte(header, row)
                where = f"{name} line {start}, column {column!r}"
                yield BadRecord(start, f"{where}: invalid {encoding} (byte 0x{byte:02x})")
                continue
            # Fewer fields than the header: zip stops early and the missing columns are absent.
            yield RawRecord(start, dict(zip(header, row, strict=False)))

    def _header(self, row: list[str], line: int) -> list[str]:
        names = [cell.strip() for cell in row]
        if names[0].startswith(_BOM):
            names[0] = names[0][len(_BOM) :].strip()
        where = f"{self.path} line {line}: header column"
        seen: set[str] = set()
        for position, column in enumerate(names, start=1):
            if _ESCAPED_BYTE.search(column):
                raise SourceError(f"{where} {position} is not valid {self.encoding}")
            if not column:
                raise SourceError(f"{where} {position} has no name")
            if column in seen:
                raise SourceError(f"{where} {column!r} appears twice")
            seen.add(column)
        return names


def _escaped_byte(header: list[str], row: list[str]) -> tuple[str, int]:
    """The first column holding an undecodable byte, and that byte (the row holds one)."""
    for column, value in zip(header, row, strict=False):
        match = _ESCAPED_BYTE.search(value)
        if match is not None:
            return column, ord(match.group()) - 0xDC00
    raise ValueError("the row holds no escaped byte")  # callers check first


def open_csv(settings: CsvSourceSettings) -> Source:
    return CsvSource(settings.path, encoding=settings.encoding, delimiter=settings.delimiter)
