"""``FileSource``: what the sources reading one local file share, whatever its format.

A file source (CSV, JSON Lines, XML, XLSX) is described by its path, named in a bad
record's message by its basename, and changed when its ``stat()`` changes. Opening it
decompresses it on the fly (gzip, or a zip holding one file), and a failure to open
or to read it ends the pull with a ``SourceError`` naming the path: a file read only
in part must never look like a whole, shorter catalog. The bytes read go through
SHA-256 on the way (``sources.digest``): a reading that went to the file's end knows
its content (``feed_digest``). Each format keeps only what reading its records takes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import BinaryIO, TypeVar

from skuferry.errors import SourceError
from skuferry.sources.base import Source
from skuferry.sources.change_token import file_change_token
from skuferry.sources.compression import open_binary
from skuferry.sources.digest import FeedDigest
from skuferry.sources.encodings import TextLines

_Handle = TypeVar("_Handle", bound=AbstractContextManager[object])
_Item = TypeVar("_Item")


class FileSource(Source):
    """A source reading one local file at ``path``."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._content = FeedDigest()  # of the last reading, once it reached the file's end

    def describe(self) -> str:
        return str(self.path)

    @property
    def name(self) -> str:
        return self.path.name

    def change_token(self, previous: str | None = None) -> str | None:
        """The file's ``stat()`` (``file_change_token``); a local file needs no ``previous``."""
        return file_change_token(self.path)

    def feed_digest(self) -> str | None:
        """SHA-256 of the content the last reading read to its end (decompressed)."""
        return self._content.value

    def read_bytes(self, read: Callable[[BinaryIO], Iterator[_Item]]) -> Iterator[_Item]:
        """``read`` over the file's content as bytes, decompressed."""

        def open_(path: Path) -> BinaryIO:
            return self._content.stream(open_binary(path))

        return self._opened(open_, read)

    def read_text(
        self, read: Callable[[TextLines], Iterator[_Item]], *, encoding: str
    ) -> Iterator[_Item]:
        """``read`` over the file's lines as text, decompressed.

        Undecodable bytes are escaped (``surrogateescape``), so that only the record
        holding one is rejected; line breaks stay as the file has them. ``encoding``
        ``"auto"`` reads the encoding the bytes show, and a file read in a single-byte
        encoding whose bytes are UTF-8 is refused (``sources.encodings``); the lines say
        which encoding they are read in (``TextLines.encoding``).
        """

        def open_(path: Path) -> TextLines:
            return TextLines(self._content.stream(open_binary(path)), encoding, path=str(path))

        return self._opened(open_, read)

    def _opened(
        self, open_: Callable[[Path], _Handle], read: Callable[[_Handle], Iterator[_Item]]
    ) -> Iterator[_Item]:
        self._content.value = None  # this reading's, once it reaches the end
        try:
            handle = open_(self.path)
        except OSError as exc:
            raise SourceError(f"cannot open {self.path}: {exc.strerror or exc}") from exc
        with handle, self.reading():
            yield from read(handle)
        self._content.ended()  # read to its end: the digest holds (if every byte went through)

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Turn an ``OSError`` while the file is read (a cut-short archive, a disk
        fault) into a ``SourceError`` naming it."""
        try:
            yield
        except OSError as exc:
            raise SourceError(f"reading {self.path} failed: {exc.strerror or exc}") from exc
