"""The JSON Lines source: one JSON object per line.

The file is read as bytes line by line and each line decoded on its own, so a
line with invalid bytes, invalid JSON or a non-object is rejected alone and
the rest of the file is still read. A rejected line hands over the members it
holds before the fault (``leading_members``), so that its product can be held
by key. Numbers with a fraction or exponent become
``Decimal`` so no digit is lost on the way to the API.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO, NoReturn

from skuferry.config.encoding import require_encoding
from skuferry.config.schema import FinalNewline, JsonlSourceSettings
from skuferry.errors import ConfigError
from skuferry.models import BadRecord, RawRecord
from skuferry.sources.base import Source
from skuferry.sources.file import FileSource
from skuferry.sources.torn import check_end

_BOM = "\ufeff"
# One line is one product; a line this long is refused rather than read into memory whole.
MAX_LINE_BYTES = 32 * 1024 * 1024


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


# canonical.loads semantics (Decimal for fractions), but NaN/Infinity are refused here:
# they are not JSON, and canonical.dumps could not write them back.
_decoder = json.JSONDecoder(parse_float=Decimal, parse_constant=_no_constant)
_decode = _decoder.decode
_SPACE = " \t\r\n"

_KIND = {list: "an array", str: "a string", bool: "a boolean", int: "a number", Decimal: "a number"}


class JsonlSource(FileSource):
    """Each non-blank line of the file is one ``RawRecord`` (its object's members)."""

    def __init__(
        self,
        path: Path | str,
        *,
        encoding: str = "utf-8",
        max_line_bytes: int = MAX_LINE_BYTES,
        final_newline: FinalNewline = "required",
    ) -> None:
        require_encoding(encoding)
        # Lines are split on the byte b"\n", which only works for ASCII-compatible encodings.
        if "{\n}".encode(encoding, errors="replace") != b"{\n}":
            raise ConfigError(
                [
                    f"at 'source.encoding': JSON Lines needs an ASCII-compatible encoding, "
                    f"not {encoding!r}"
                ]
            )
        super().__init__(path)
        self.encoding = encoding
        self.max_line_bytes = max_line_bytes
        self.final_newline: FinalNewline = final_newline

    def records(self) -> Iterator[RawRecord | BadRecord]:
        return self.read_bytes(self._lines)

    def _lines(self, handle: BinaryIO) -> Iterator[RawRecord | BadRecord]:
        name = self.name
        encoding = self.encoding
        limit = self.max_line_bytes
        number = 0
        last: bytes | None = None  # the last line read: a torn end has no line break
        for number, raw in enumerate(iter(partial(handle.readline, limit + 1), b""), start=1):
            last = raw
            if len(raw) > limit and not raw.endswith(b"\n"):
                last = _skip_rest_of_line(handle) or raw
                yield BadRecord(
                    number, f"{name} line {number}: longer than {limit:,} bytes, refused unread"
                )
                continue
            if not raw.strip():
                continue
            try:
                text = raw.decode(encoding).rstrip()  # errors then point into the line
            except UnicodeDecodeError as exc:
                byte = raw[exc.start]
                yield BadRecord(
                    number,
                    f"{name} line {number}: invalid {encoding} (byte 0x{byte:02x} "
                    f"at position {exc.start + 1})",
                    fields=_members(raw.decode(encoding, "surrogateescape")),
                )
                continue
            if number == 1 and text.startswith(_BOM):
                text = text[len(_BOM) :]
            try:
                value = _decode(text)
            except json.JSONDecodeError as exc:
                # exc's own text counts lines inside this one line: name the character only.
                reason = f"{exc.msg} at character {exc.pos + 1}"
                yield BadRecord(
                    number,
                    f"{name} line {number}: not valid JSON ({reason})",
                    fields=leading_members(text),
                )
                continue
            except (ValueError, RecursionError) as exc:  # NaN/Infinity, huge ints, deep nesting
                yield BadRecord(
                    number,
                    f"{name} line {number}: not valid JSON ({exc})",
                    fields=leading_members(text),
                )
                continue
            if type(value) is not dict:
                kind = _KIND.get(type(value), "null")
                yield BadRecord(number, f"{name} line {number}: {kind}, not a JSON object")
                continue
            yield RawRecord(number, value)
        check_end(name, number, last, self.final_newline)


def _members(text: str) -> dict[str, Any]:
    """The object on a line read with its undecodable bytes escaped, else its sure members."""
    text = text.strip().removeprefix(_BOM)
    try:
        value = _decode(text)
    except (ValueError, RecursionError):
        return leading_members(text)
    return value if type(value) is dict else {}


def leading_members(text: str) -> dict[str, Any]:
    """The members of the JSON object on a broken line, read in order up to the first fault.

    A product's line hands them over so that its key can still be read, and the
    product held (``BadRecord.fields``): ``{"sku": "A-1", "name": "Lamp`` gives
    ``{"sku": "A-1"}``. JSON is self-delimiting, so each member read is where it is.
    """
    members: dict[str, Any] = {}
    end = len(text)
    i = _skip(text, 0)
    if not text.startswith("{", i):
        return members
    i += 1
    while True:
        i = _skip(text, i)
        if i >= end or text[i] != '"':
            return members
        try:
            name, i = json.decoder.scanstring(text, i + 1)  # type: ignore[attr-defined]
            i = _skip(text, i)
            if not text.startswith(":", i):
                return members
            value, i = _decoder.raw_decode(text, _skip(text, i + 1))
        except (ValueError, RecursionError):
            return members
        i = _skip(text, i)
        if i >= end or text[i] not in ",}":
            return members  # "1.0.0": the value read is only the start of what is there
        members[name] = value
        if text[i] == "}":
            return members
        i += 1


def _skip(text: str, i: int) -> int:
    end = len(text)
    while i < end and text[i] in _SPACE:
        i += 1
    return i


def _skip_rest_of_line(handle: BinaryIO) -> bytes:
    """Read past the rest of an overlong line; its last piece (b"" at the file's end)."""
    last = b""
    while True:
        chunk = handle.readline(1 << 20)
        if not chunk or chunk.endswith(b"\n"):
            return chunk or last
        last = chunk


def open_jsonl(settings: JsonlSourceSettings) -> Source:
    return JsonlSource(
        settings.path, encoding=settings.encoding, final_newline=settings.final_newline
    )
