"""A feed's content identity: what a source's last reading was, once it went to its end.

The change token (``Source.change_token``) is cheap and taken before reading, but it is
not always known: a file changed in the last ``RACY_S`` seconds has none, nor has an API
without validators. ``skuferry undo`` must still recognise the feed it took back
(``sync.read.undone``), so every source that reads its whole feed also says what it read
(``Source.feed_digest``), from the reading itself:

- a file (CSV, JSON Lines, XML, and a remote file once fetched): SHA-256 of the bytes
  read, decompressed (``FeedDigest.stream``: a wrapper around the binary stream), kept
  when the stream was read to its end and its reader finished (``FeedDigest.ended``);
- a workbook (XLSX, read by random access): SHA-256 of the workbook file, hashed before
  its sheet is read and kept only when the file's ``stat()`` did not move meanwhile
  (``FeedDigest.workbook``);
- an API or a database (``FeedDigest.records``): each record's fields in sorted JSON,
  hashed and added up, so a feed is the same whatever order its pages or rows come in; the
  envelope (cursors, totals, a page's time stamp) is never part of it.

A digest exists only once the reading went to its end: a stream read in part, or a
reading that failed, stopped, or was only an incremental window or keys fetched one by
one, leaves ``None`` (unknown), never the digest of a part. Each reading starts from
``None``.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from skuferry.models import BadRecord, RawRecord

CHUNK = 1 << 16
_MASK = (1 << 128) - 1


class FeedDigest:
    """The digest of a source's last reading (``value``; None until one went to its end)."""

    __slots__ = ("_at_end", "value")

    def __init__(self) -> None:
        self.value: str | None = None
        self._at_end: str | None = None  # the stream's digest, once its end was read

    def stream(self, binary: BinaryIO) -> BinaryIO:
        """``binary`` read through SHA-256; ``ended`` sets ``value`` once the reader is done,
        when the stream was read to its end."""
        self.value = self._at_end = None
        # large reads go straight through to the stream below (itself buffered): a small
        # buffer of its own, for readers that take a line at a time
        return io.BufferedReader(_Hashed(binary, self), io.DEFAULT_BUFFER_SIZE)

    def ended(self) -> None:
        """The reader of ``stream`` went to its end (it did not stop early, nor fail): the
        digest holds when every byte went through too."""
        self.value = self._at_end

    def records(self, records: Iterator[RawRecord | BadRecord]) -> Iterator[RawRecord | BadRecord]:
        """``records`` as they are; ``value`` once the last one has passed."""
        self.value = None
        total = count = 0
        for record in records:
            total += int.from_bytes(hashlib.sha256(_canonical(record)).digest()[:16], "big")
            count += 1
            yield record
        self.value = f"records:{count}:{total & _MASK:032x}"

    def workbook(self, path: Path) -> Callable[[], None]:
        """A workbook at ``path`` about to be read: its bytes hashed now; the callable
        returned, called once its sheet was read to the end, sets ``value`` when the file
        did not change meanwhile."""
        self.value = None
        before = _stat(path)
        found = file_digest(path)

        def read_whole() -> None:
            if found is not None and before is not None and _stat(path) == before:
                self.value = found

        return read_whole


def file_digest(path: Path) -> str | None:
    """``file:<sha256>`` of the bytes at ``path`` as they are; None when it cannot be read."""
    hashed = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            while chunk := handle.read(CHUNK * 4):
                hashed.update(chunk)
    except OSError:
        return None
    return "file:" + hashed.hexdigest()


def _stat(path: Path) -> tuple[int, int, int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


# sorted keys, no spaces; a value JSON lacks (a Decimal, a database's date) as its repr:
# one text per record, made by the C encoder (canonical.dumps' Python loop costs more)
_ENCODE = json.JSONEncoder(
    sort_keys=True, default=repr, ensure_ascii=False, separators=(",", ":"), check_circular=False
).encode


def _canonical(record: RawRecord | BadRecord) -> bytes:
    """A record as bytes that equal records share: its fields in sorted JSON (a value JSON
    lacks, as its repr); a bad one by its reason."""
    if isinstance(record, BadRecord):
        return b"\x00bad\x00" + record.reason.encode("utf-8", "surrogatepass")
    return _ENCODE(record.fields).encode("utf-8", "surrogatepass")


class _Hashed(io.RawIOBase):
    """A binary stream whose bytes go through SHA-256 as they are read; at its end (a
    read that returns nothing) the digest is handed to ``into``."""

    def __init__(self, inner: BinaryIO, into: FeedDigest) -> None:
        self._inner: Any = inner  # a buffered or raw binary stream: it has readinto
        self._into = into
        self._hash: Any = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        size: int = self._inner.readinto(buffer) or 0  # into the caller's buffer: no copy
        if size:
            if self._hash is not None:
                self._hash.update(memoryview(buffer)[:size])
            else:  # it grew after its end: what was hashed is not what was read
                self._into._at_end = None
        elif len(buffer) and self._hash is not None:  # the end: every byte went through
            self._into._at_end = "bytes:" + self._hash.hexdigest()
            self._hash = None
        return size

    def close(self) -> None:
        if not self.closed:
            self._inner.close()
        super().close()
