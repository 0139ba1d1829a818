"""Compressed source files, recognised by their first bytes rather than their name.

``open_binary(path)`` streams a file's content: a gzip file is decompressed on
the fly, a ``.zip`` holding exactly one file is read from that member, anything
else is read as it is. Nothing is decompressed to memory or disk ahead of time.

A truncated or corrupt archive fails as ``OSError`` while reading, which the
sources already turn into "reading <path> failed": a cut-short ``.gz`` must not
look like a complete catalog.
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Literal, Protocol, TextIO

from skuferry.errors import SourceError

GZIP_MAGIC = b"\x1f\x8b"
ZIP_MAGIC = b"PK\x03\x04"
_EMPTY_ZIP_MAGIC = b"PK\x05\x06"
_CHUNK = 1 << 16

Kind = Literal["gzip", "zip", "plain"]


def sniff(path: Path) -> Kind:
    """What the file is, by its magic bytes (``OSError`` if it cannot be read)."""
    with path.open("rb") as handle:
        head = handle.read(4)
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith((ZIP_MAGIC, _EMPTY_ZIP_MAGIC)):
        return "zip"
    return "plain"


def is_xlsx(path: Path) -> bool:
    """A zip that is an Office Open XML workbook (an .xlsx is itself a zip archive)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return _is_workbook(archive)
    except (OSError, zipfile.BadZipFile):
        return False


def open_binary(path: Path) -> BinaryIO:
    """The content of ``path`` as a binary stream, gunzipped or unzipped when it is compressed.

    Closing the stream closes everything under it. Raise ``OSError`` when the
    file cannot be opened, ``SourceError`` for a zip that does not hold exactly one file.
    """
    kind = sniff(path)
    if kind == "plain":
        return path.open("rb")
    if kind == "gzip":
        return io.BufferedReader(_Guarded(gzip.open(path, "rb"), path), _CHUNK)
    archive, member = _only_member(path)
    return io.BufferedReader(_Guarded(member, path, archive), _CHUNK)


def open_text(
    path: Path, *, encoding: str, errors: str = "strict", newline: str | None = None
) -> TextIO:
    """``open_binary`` decoded as text (the arguments of ``open``)."""
    return io.TextIOWrapper(open_binary(path), encoding=encoding, errors=errors, newline=newline)


@contextmanager
def as_plain_file(path: Path, scratch: Path) -> Iterator[Path]:
    """``path`` itself when it is not compressed, else its content copied to ``scratch``.

    For readers that need a seekable file (an .xlsx is a zip read from its end):
    a gzipped or zipped workbook is decompressed once to a private file.
    """
    if sniff(path) == "plain" or is_xlsx(path):
        yield path
        return
    try:
        with open_binary(path) as src, _private_file(scratch) as dst:
            shutil.copyfileobj(src, dst, _CHUNK)
        yield scratch
    finally:
        scratch.unlink(missing_ok=True)


@contextmanager
def _private_file(path: Path) -> Iterator[BinaryIO]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with open(fd, "wb") as handle:  # noqa: PTH123 - a descriptor, not a path
        yield handle


def _only_member(path: Path) -> tuple[zipfile.ZipFile, _Readable]:
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise SourceError(f"{path} is not a readable zip archive: {exc}") from None
    files = [info for info in archive.infolist() if not info.is_dir()]
    if len(files) != 1:
        archive.close()
        names = ", ".join(info.filename for info in files[:5])
        more = ", ..." if len(files) > 5 else ""
        hint = ' (it is an Excel workbook: use type = "xlsx")' if _is_workbook(archive) else ""
        raise SourceError(
            f"{path} is a zip archive holding {len(files)} files ({names}{more}); "
            f"a zipped source must hold exactly one{hint}"
        )
    try:
        return archive, archive.open(files[0])
    except (RuntimeError, NotImplementedError, zipfile.BadZipFile) as exc:  # encrypted, ...
        archive.close()
        raise SourceError(f"{path}: cannot read {files[0].filename}: {exc}") from None


def _is_workbook(archive: zipfile.ZipFile) -> bool:
    return {"[Content_Types].xml", "xl/workbook.xml"} <= set(archive.namelist())


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...
    def close(self) -> None: ...


class _Guarded(io.RawIOBase):
    """Turns a decompressor's EOFError/zlib.error/BadZipFile into OSError naming the file."""

    def __init__(
        self, inner: _Readable, path: Path, archive: zipfile.ZipFile | None = None
    ) -> None:
        self._inner = inner
        self._path = path
        self._archive = archive

    def close(self) -> None:
        if not self.closed:
            self._inner.close()
            if self._archive is not None:
                self._archive.close()
        super().close()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        try:
            data = self._inner.read(len(buffer))
        except (EOFError, zlib.error, zipfile.BadZipFile, gzip.BadGzipFile) as exc:
            raise OSError(
                f"{self._path}: compressed data is truncated or corrupt ({exc})"
            ) from None
        buffer[: len(data)] = data
        return len(data)
