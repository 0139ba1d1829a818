"""The edge ``init`` reads an export at a URL through: ``https://``, ``http://`` or
``sftp://``, with the file sources' own remote reading (``RemoteFileSource.read_start``:
the same origin pinning, headers, CA bundle, SFTP host-key check and login), and only
the start of the file.

- A plain or gzip file: its first ``CONTENT_BYTES`` of content (gunzipped as the bytes
  arrive), then nothing more is asked (a server that honours ``Range`` sends windows of
  ``WINDOW`` bytes; one that does not has its answer closed; SFTP reads by offset).
- A zip (a one-file zip, an ``.xlsx`` workbook, gzipped or not): its directory is at its
  end, so it is read whole, up to ``WHOLE_BYTES``; a larger one is refused, saying so.

What answered (an export file, a JSON API, an HTML page) is decided from the answer's
Content-Type and first bytes by ``framing.served_as``; the caller reads a file's start
as a local file and a JSON API through the http source.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from skuferry import files
from skuferry.config.schema import FileSourceSettings
from skuferry.discover import framing
from skuferry.discover.model import Finding
from skuferry.errors import SourceError
from skuferry.sources.compression import GZIP_MAGIC, ZIP_MAGIC, is_xlsx
from skuferry.sources.dispatch import open_source
from skuferry.sources.fetch import RemoteFileSource, local_name
from skuferry.sources.file_start import Start
from skuferry.sources.http import safe_url

CONTENT_BYTES = 4 << 20  # of content (decompressed): the framing's MiB and 500 records
WHOLE_BYTES = 64 << 20  # a zip is read whole up to this (its directory is at its end)
WINDOW = 1 << 20  # bytes asked per Range request
HEAD = 1 << 16  # the content's first bytes, for what answered

_ZIPS = (ZIP_MAGIC, b"PK\x05\x06")


@dataclass
class Fetched:
    """The start of a remote file, as read: what answered, how much, and the content."""

    shown: str  # the URL as messages name it (no secret)
    name: str  # the content's file name (the URL's, without .gz)
    packed: str  # what the bytes served are: gzip, zip or plain
    start: Start
    whole: bool  # ``content`` is the whole file's content
    content: bytes  # the start of the content, decompressed (a zip: its first bytes)
    zipped: Path | None = None  # a zip's whole content (decompressed from gzip if it was)
    served: framing.Served = "file"
    findings: list[Finding] = field(default_factory=list)

    def fetched_finding(self) -> Finding:
        """How much was read, and how the rest was left unread."""
        size = self.start.size
        of = f" of {_size(size)}" if size is not None else ""
        if self.whole:
            why = f"the file ended within the sample's {_size(CONTENT_BYTES)}"
            if self.zipped is not None:
                why = "a zip is read whole (its directory is at its end)"
            return Finding("fetched", f"the whole file, {_size(self.start.received)}", "sure", why)
        if self.shown.startswith("sftp:"):
            how = "read by offset over SFTP"
        elif self.start.ranged:
            how = "the server sent only the ranges asked (Range requests)"
        else:
            how = "the server ignores Range: its answer was closed once the sample had arrived"
        read = _size(self.start.received)
        return Finding("fetched", f"the first {read}{of}", "sure", f"{how}; the rest is never read")


def _size(count: int) -> str:
    if count >= 1 << 20:
        return f"{count / (1 << 20):.1f} MiB"
    if count >= 1 << 10:
        return f"{count / (1 << 10):.0f} KiB"
    return f"{count} bytes"


class _Taker:
    """Takes a remote file's bytes as they arrive: tells the packing by the first bytes,
    gunzips as it goes (never more than it keeps), and says when it has enough."""

    def __init__(self, spill: BinaryIO) -> None:
        self.spill = spill  # a zip's content, kept whole on disk
        self.first = b""
        self.packed: str | None = None
        self.content = bytearray()
        self.zipped: bool | None = None  # the content is a zip, read whole
        self.kept = 0
        self.enough = False
        self.over = False  # a zip larger than WHOLE_BYTES
        self._gunzip: Any = None

    @property
    def gunzipped_whole(self) -> bool:
        return self._gunzip is None or bool(self._gunzip.eof)

    def __call__(self, chunk: bytes) -> bool:
        if self.packed is None:
            self.first += chunk
            if len(self.first) < 4:
                return True
            chunk, self.first = self.first, self.first[:4]
            self.packed = (
                "gzip" if chunk.startswith(GZIP_MAGIC) else
                "zip" if chunk.startswith(_ZIPS) else "plain"
            )  # fmt: skip
            if self.packed == "gzip":
                self._gunzip = zlib.decompressobj(16 + zlib.MAX_WBITS)
        if self.packed == "gzip":
            self._gunzip_chunk(chunk)
        else:
            self._keep(chunk)
        self.enough = self.enough or self.over
        return not self.enough

    def _gunzip_chunk(self, data: bytes) -> None:
        while data and not self.enough:
            try:
                out = self._gunzip.decompress(data, max(self._room(), 1))
            except zlib.error as exc:
                raise SourceError(f"not readable gzip data ({exc})") from None
            data = self._gunzip.unconsumed_tail
            self._keep(out)
            if self._gunzip.eof:  # a gzip file may hold several members, one after another
                data = self._gunzip.unused_data + data
                if data:
                    self._gunzip = zlib.decompressobj(16 + zlib.MAX_WBITS)

    def _room(self) -> int:
        cap = WHOLE_BYTES if self.zipped else CONTENT_BYTES
        return cap - self.kept

    def _keep(self, data: bytes) -> None:
        if not data:
            return
        if self.zipped is None:
            self.zipped = bytes(self.content[:4] + data[:4]).startswith(_ZIPS)
        self.kept += len(data)
        if self.zipped:
            self.spill.write(data)
            if len(self.content) < HEAD:
                self.content += data[:HEAD]
            self.over = self.kept > WHOLE_BYTES
        else:
            self.content += data
            self.enough = self.kept >= CONTENT_BYTES


def fetch(settings: FileSourceSettings, *, spill: Path, env: dict[str, str]) -> Fetched:
    """The start of the remote file ``settings.path``: what answered, and its content.

    ``spill`` (a private file made here, which the caller's folder removes) keeps a zip's
    content whole.
    """
    url = str(settings.path)
    source = RemoteFileSource(settings, open_local=open_source, env=env)
    files.create_private(spill)
    with spill.open("wb") as out:
        taker = _Taker(out)
        start = source.read_start(taker, window=WINDOW)
    shown = safe_url(url)
    if taker.over:
        raise SourceError(
            f"{shown} is a zip archive (an .xlsx workbook is one), whose directory is at its "
            f"end: init reads one whole, up to {WHOLE_BYTES >> 20} MiB, and this one is larger"
            f"{f' ({_size(start.size)})' if start.size else ''}; download it, run init on "
            "the file, then set [source] path to the URL"
        )
    whole = start.ended and taker.gunzipped_whole and not taker.enough
    packed = taker.packed or "plain"
    name = local_name(url)
    if packed == "gzip":
        name = name.removesuffix(".gz").removesuffix(".GZ") or "download"
    head = bytes(taker.content[:HEAD])
    served, found = framing.served_as(local_name(url), start.content_type, head, packed=packed)
    fetched = Fetched(
        shown,
        name,
        packed,
        start,
        whole,
        head if taker.zipped else bytes(taker.content),
        zipped=spill if taker.zipped else None,
        served=served,
    )
    fetched.findings.append(found)
    if served == "file":
        fetched.findings.append(fetched.fetched_finding())
        if packed != "plain" and not (taker.zipped and is_xlsx(spill)):
            why = "its first bytes are gzip's: gunzipped as it arrived"
            if packed == "zip":
                why = "its first bytes are a zip's: read whole (its directory is at its end)"
            fetched.findings.append(Finding("compression", packed, "sure", why))
    return fetched
