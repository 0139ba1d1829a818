"""A text file's encoding, on evidence: what its bytes say, against what the config says.

An export that moves from a Windows job to a Linux one flips from cp1252 to UTF-8
overnight. Read as cp1252, UTF-8's ``ü`` (``0xC3 0xBC``) becomes ``Ã¼`` in every name,
and nothing fails: the mojibake would reach the CMS. The other way round already fails
row by row (a cp1252 byte is no valid UTF-8). So:

- ``detect(sample)``: the encoding a file's first bytes show, and why: a byte-order
  mark; else valid UTF-8 (ASCII is too); else the single-byte ``fallback`` (cp1252).
  A line that is not valid UTF-8 in a file whose other lines are is a bad line, not a
  cp1252 file: any valid multi-byte line decides for UTF-8. Pure, for every caller that
  has bytes in hand (``[source] encoding = "auto"``, ``skuferry init``);
- ``utf8_evidence(line)``: a line's bytes are valid UTF-8 with a multi-byte character:
  a file declared single-byte that holds such lines and no other non-ASCII one is UTF-8;
- ``decoded(binary, declared, path)``: the lines of a binary stream as text, in the
  declared encoding or, for ``"auto"``, the detected one; a file read single-byte whose
  non-ASCII lines are all valid UTF-8 is refused at the first of them
  (``EncodingRefused``, exit 2: nothing was written), naming the line and the encoding.
"""

from __future__ import annotations

import codecs
import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from skuferry.errors import ShapeChanged

AUTO = "auto"
FALLBACK = "cp1252"  # the single-byte encoding of Windows exports, when bytes are no UTF-8
PEEK = 1 << 16  # bytes read at a time while looking
MAX_PEEK = 1 << 22  # at most this much is looked at before deciding
_BOMS = (
    (codecs.BOM_UTF8, "utf-8-sig", "a UTF-8 byte-order mark"),
    (codecs.BOM_UTF32_LE, "utf-32", "a UTF-32 byte-order mark"),
    (codecs.BOM_UTF32_BE, "utf-32", "a UTF-32 byte-order mark"),
    (codecs.BOM_UTF16_LE, "utf-16", "a UTF-16 byte-order mark"),
    (codecs.BOM_UTF16_BE, "utf-16", "a UTF-16 byte-order mark"),
)


class EncodingRefused(ShapeChanged):
    """A file read in a single-byte encoding whose bytes are UTF-8."""


@dataclass(frozen=True, slots=True)
class Detected:
    """The encoding a file's bytes show, and the evidence."""

    encoding: str
    evidence: str
    utf8_line: int | None = None  # the first line holding a multi-byte UTF-8 character
    invalid: int = 0  # non-ASCII lines that are no valid UTF-8


def single_byte(name: str) -> bool:
    """Every byte is one character (cp1252, latin-1, iso-8859-15...), unlike UTF-8/16."""
    try:
        return (
            len(b"\xc3\xbc".decode(name, "surrogateescape")) == 2
            and len(bytes(range(256)).decode(name, "surrogateescape")) == 256
        )
    except (LookupError, UnicodeError):
        return False


def utf8_evidence(line: bytes) -> bool:
    """``line`` holds a byte above ASCII and is valid UTF-8: a multi-byte character."""
    if line.isascii():
        return False
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _utf8_so_far(line: bytes) -> bool | None:
    """A line cut short: True, valid UTF-8 with a multi-byte character; False, not UTF-8;
    None, valid so far but no character beyond ASCII complete."""
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(line, final=False)
    except UnicodeDecodeError:
        return False
    return None if text.isascii() else True


def detect(sample: bytes, *, fallback: str = FALLBACK, whole: bool = False) -> Detected:
    """The encoding ``sample`` (a file's first bytes; ``whole``: the whole file) shows."""
    for bom, name, why in _BOMS:
        if sample.startswith(bom):
            return Detected(name, why)
    if sample.isascii():
        return Detected("utf-8", "ASCII only")
    if not whole and b"\n" in sample:  # a cut sample: its last line may end mid-character
        sample = sample[: sample.rindex(b"\n") + 1]
    valid = invalid = 0
    first_valid: int | None = None
    first_invalid: tuple[int, int] | None = None
    lines = sample.splitlines()
    for number, line in enumerate(lines, start=1):
        if line.isascii():
            continue
        if not whole and number == len(lines) and not sample.endswith((b"\n", b"\r")):
            # a sample of one line, cut short: its end may be half a character
            partial = _utf8_so_far(line)
            if partial is None:  # nothing whole beyond ASCII yet: no evidence either way
                continue
            evidence = partial
        else:
            evidence = utf8_evidence(line)
        if evidence:
            valid += 1
            first_valid = first_valid or number
        else:
            invalid += 1
            if first_invalid is None:
                byte = next(b for b in line if b > 0x7F)
                first_invalid = (number, byte)
    if valid:
        bad = f", {invalid} line(s) not (read as bad rows)" if invalid else ""
        why = f"valid UTF-8 with multi-byte characters{bad}"
        return Detected("utf-8", why, first_valid, invalid)
    if first_invalid is None:  # only a character cut in half by the sample's end
        return Detected("utf-8", "ASCII only, but for a character the sample's end cut")
    number, byte = first_invalid
    return Detected(fallback, f"not UTF-8 (byte 0x{byte:02x} on line {number})", None, invalid)


def decoded(binary: BinaryIO, declared: str, *, path: str) -> tuple[Iterator[str], str]:
    """The text lines of ``binary`` (line breaks kept, ``newline=""`` as ``open``), and the
    encoding they are read in. Undecodable bytes are escaped (``surrogateescape``)."""
    auto = declared.lower() == AUTO
    checked = auto or single_byte(declared)
    if not checked:
        text = io.TextIOWrapper(binary, encoding=declared, errors="surrogateescape", newline="")
        return iter(text), declared
    prefix = _peek(binary)
    found = detect(prefix, whole=len(prefix) < MAX_PEEK)
    encoding = found.encoding if auto else declared
    if auto and encoding == "utf-8-sig":
        encoding = "utf-8"  # the BOM read as a character: the CSV reader drops it from the header
    rest = io.BufferedReader(_Prefixed(prefix, binary))
    text = io.TextIOWrapper(rest, encoding=encoding, errors="surrogateescape", newline="")
    if not single_byte(encoding):
        return iter(text), encoding
    # read single-byte: the first bytes decide, or the first non-ASCII line after them
    if found.encoding == "utf-8-sig":
        raise _refused(path, 1, encoding, declared=not auto)
    if found.utf8_line is not None and not found.invalid:
        raise _refused(path, found.utf8_line, encoding, declared=not auto)
    look = found.utf8_line is None and not found.invalid  # they were ASCII only
    return _watched(text, encoding, path, declared=not auto, look=look), encoding


def _refused(path: str, line: int, encoding: str, *, declared: bool) -> EncodingRefused:
    how = (
        f"is declared {encoding!r} ([source] encoding)"
        if declared
        else f"was read as {encoding!r} (its first non-ASCII bytes are no UTF-8)"
    )
    return EncodingRefused(
        f"{path} line {line}: the file {how}, but its bytes are UTF-8 with multi-byte "
        f"characters: read as {encoding}, 'ü' would reach the CMS as 'Ã¼'. Nothing was "
        'written. Set [source] encoding = "utf-8" (or "auto", which reads the evidence), '
        "or fix the export."
    )


def _watched(
    text: Iterator[str] | io.TextIOWrapper, encoding: str, path: str, *, declared: bool, look: bool
) -> Iterator[str]:
    """The lines of ``text``; while ``look``, the first non-ASCII one decides: valid UTF-8
    is refused, anything else ends the looking (the file is single-byte)."""
    for number, line in enumerate(text, start=1):
        if look and not line.isascii():
            raw = line.encode(encoding, "surrogateescape")
            if utf8_evidence(raw):
                raise _refused(path, number, encoding, declared=declared)
            look = False
        yield line


def _peek(binary: BinaryIO) -> bytes:
    """The stream's first bytes: up to where a non-ASCII byte shows, and a block more."""
    chunks: list[bytes] = []
    size = 0
    seen_at: int | None = None
    while size < MAX_PEEK:
        chunk = binary.read(PEEK)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if seen_at is None and not chunk.isascii():
            seen_at = size
        elif seen_at is not None and size - seen_at >= PEEK:
            break
    return b"".join(chunks)


class _Prefixed(io.RawIOBase):
    """``prefix``, then the rest of ``stream``: a stream read from its start again."""

    def __init__(self, prefix: bytes, stream: BinaryIO) -> None:
        self._prefix = memoryview(prefix)
        self._stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        if self._prefix:
            n = min(len(buffer), len(self._prefix))
            buffer[:n] = self._prefix[:n]
            self._prefix = self._prefix[n:]
            return n
        data = self._stream.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._stream.close()
        super().close()


class TextLines:
    """A binary stream's lines as text (``decoded``), closed with the stream. Nothing is
    read before the lines (or ``encoding``) are first asked for."""

    def __init__(self, binary: BinaryIO, declared: str, *, path: str) -> None:
        self._binary = binary
        self._declared = declared
        self._path = path
        self._lines: Iterator[str] | None = None
        self._encoding = declared

    @property
    def encoding(self) -> str:
        """The encoding the lines are read in (for ``"auto"``, the one the bytes show)."""
        self._open()
        return self._encoding

    def _open(self) -> Iterator[str]:
        if self._lines is None:
            self._lines, self._encoding = decoded(self._binary, self._declared, path=self._path)
        return self._lines

    def __iter__(self) -> Iterator[str]:
        return self._open()

    def __enter__(self) -> TextLines:
        return self

    def __exit__(self, *exc: object) -> None:
        self._binary.close()
