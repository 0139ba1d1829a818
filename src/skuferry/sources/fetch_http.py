"""Download an ``https://`` (or ``http://``) remote file, streamed to disk.

Redirects are followed by hand, each hop through the origin gate, which checks it
by the origin rule before anything, the ``headers`` included, is sent there. The
body must arrive whole: a connection closed early or a body shorter than its
``Content-Length`` is a ``SourceError``, never a short catalog.

``read_start_http`` reads only the start of the file (``skuferry init``'s sample) through
the same client: ``Range`` requests of a window each, or one streamed answer closed as
soon as enough arrived.
"""

from __future__ import annotations

import re
import time
from email.utils import parsedate_to_datetime
from typing import BinaryIO

import httpx

from skuferry import tls
from skuferry.config.schema import FileSourceSettings
from skuferry.errors import SourceError
from skuferry.net.origins import parse_allowed
from skuferry.net.transport import gated_client
from skuferry.sources.change_token import RACY_S
from skuferry.sources.file_start import Start, Take
from skuferry.sources.http import safe_url
from skuferry.sources.pinned import send_pinned

MAX_REDIRECTS = 5
_CHUNK = 1 << 16


def download_http(
    settings: FileSourceSettings, dest: BinaryIO, *, transport: httpx.BaseTransport | None = None
) -> int:
    """Write the body at ``settings.path`` to ``dest``; the number of bytes written."""
    url = str(settings.path)
    shown = safe_url(url)
    client = _client(settings, settings.headers, transport)
    try:
        with client:
            response = _open(client, url)
            try:
                return _save(response, dest, shown)
            finally:
                response.close()
    except httpx.HTTPError as exc:
        reason = tls.untrusted(exc, key="source.ca_bundle") or _reason(exc)
        raise SourceError(f"downloading {shown} failed: {reason}") from None


def read_start_http(
    settings: FileSourceSettings,
    take: Take,
    *,
    window: int,
    transport: httpx.BaseTransport | None = None,
) -> Start:
    """Hand the file at ``settings.path`` to ``take`` from its first byte, chunk by chunk,
    until ``take`` returns False or the file ends (``RemoteFileSource.read_start``).

    Each request asks for the next ``window`` bytes (``Range``). A server that honours it
    (206) sends only those, and the next window is asked while ``take`` wants more; one
    that ignores it (200) streams the whole body, which is closed as soon as ``take`` has
    enough. ``Accept-Encoding: identity``: the bytes are the file's own (a ``.gz`` export
    arrives as gzip, decompressed by the caller as far as it needs).
    """
    url = str(settings.path)
    shown = safe_url(url)
    received = 0
    client = _client(settings, settings.headers, transport)
    try:
        with client:
            while True:
                asked = {"Range": f"bytes={received}-{received + window - 1}"}
                response = _open(client, url, {**asked, "Accept-Encoding": "identity"})
                try:
                    part = _take_part(response, take, received, received + window, shown)
                finally:
                    response.close()
                received += part.received
                if part.ended or not part.ranged or part.received == 0 or not part.wants:
                    return Start(received, part.size, part.ended, part.ranged, part.content_type)
    except httpx.HTTPError as exc:
        reason = tls.untrusted(exc, key="source.ca_bundle") or _reason(exc)
        raise SourceError(f"reading {shown} failed: {reason}") from None


class _Part:
    """One answer's share of ``read_start_http``."""

    __slots__ = ("content_type", "ended", "ranged", "received", "size", "wants")

    def __init__(self) -> None:
        self.received = 0
        self.size: int | None = None
        self.ended = False
        self.ranged = False
        self.wants = True
        self.content_type: str | None = None


_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)", re.IGNORECASE)


def _take_part(
    response: httpx.Response, take: Take, offset: int, asked_end: int, shown: str
) -> _Part:
    """Hand ``response``'s body (from byte ``offset`` of the file) to ``take``."""
    part = _Part()
    part.content_type = response.headers.get("Content-Type")
    status = response.status_code
    if status == 416:  # asked past the end (of an empty file, or one a window long)
        part.size, part.ended = offset, True
        return part
    if status not in (200, 206):
        raise SourceError(
            f"reading {shown} failed: HTTP {status} {response.reason_phrase}".rstrip()
        )
    skip = 0
    if status == 206:
        found = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", "").strip())
        if found is None or int(found.group(1)) != offset:
            raise SourceError(f"reading {shown}: the server answered another range than asked")
        part.ranged = True
        part.size = None if found.group(3) == "*" else int(found.group(3))
    else:  # the whole body, from its first byte
        declared = response.headers.get("Content-Length", "")
        part.size = int(declared) if declared.isdigit() else None
        skip = offset  # a 200 after 206s starts again at 0: what was taken is skipped
    for arrived in response.iter_bytes(_CHUNK):
        dropped = min(skip, len(arrived))
        chunk, skip = arrived[dropped:], skip - dropped
        if not chunk:
            continue
        part.received += len(chunk)
        if not take(chunk):
            part.wants = False
            break
    at = offset + part.received
    if part.size is not None:
        part.ended = at >= part.size
    elif part.wants:  # read to the end of the answer: the whole body, or a short range
        part.ended = not part.ranged or at < asked_end
    return part


def probe_http(
    settings: FileSourceSettings,
    previous: str | None,
    *,
    transport: httpx.BaseTransport | None = None,
    now: float | None = None,
) -> str | None:
    """The remote file's validator (``Source.change_token``), by a conditional GET.

    ``previous`` (``http:etag:...`` or ``http:lm:...``) goes back as ``If-None-Match``
    or ``If-Modified-Since``: a ``304`` returns it unchanged and no body is sent. A
    ``200`` gives the new ETag (or Last-Modified) and is closed before its body. No
    validator, another status or a failure: None (unknown; the download then reads the
    file and reports what is wrong). A Last-Modified less than ``RACY_S`` old is not
    trusted: it has one-second resolution.
    """
    url = str(settings.path)
    headers = dict(settings.headers)
    if previous is not None and previous.startswith(_ETAG):
        headers["If-None-Match"] = previous.removeprefix(_ETAG)
    elif previous is not None and previous.startswith(_LAST_MODIFIED):
        headers["If-Modified-Since"] = previous.removeprefix(_LAST_MODIFIED)
    client = _client(settings, headers, transport)
    try:
        with client:
            response = _open(client, url)
            response.close()  # the headers are all a probe needs
    except (httpx.HTTPError, SourceError):
        return None
    if response.status_code == 304 and previous is not None:
        return previous
    if response.status_code != 200:
        return None
    etag: str | None = response.headers.get("ETag")
    if etag:
        return _ETAG + etag
    modified: str | None = response.headers.get("Last-Modified")
    if not modified:
        return None
    try:
        age = (time.time() if now is None else now) - parsedate_to_datetime(modified).timestamp()
    except (TypeError, ValueError):
        return None
    return _LAST_MODIFIED + modified if age >= RACY_S else None


_ETAG = "http:etag:"
_LAST_MODIFIED = "http:lm:"


def _open(client: httpx.Client, url: str, headers: dict[str, str] | None = None) -> httpx.Response:
    """The streamed response at the end of the redirects; every hop checked first."""
    return send_pinned(
        client,
        client.build_request("GET", url, headers=headers),
        where=f"downloading {safe_url(url)}",
        max_redirects=MAX_REDIRECTS,
    )


def _save(response: httpx.Response, dest: BinaryIO, shown: str) -> int:
    if response.status_code != 200:
        raise SourceError(
            f"downloading {shown} failed: HTTP {response.status_code} "
            f"{response.reason_phrase}".rstrip()
        )
    written = 0
    for chunk in response.iter_bytes(_CHUNK):
        dest.write(chunk)
        written += len(chunk)
    declared = response.headers.get("Content-Length", "")
    received = response.num_bytes_downloaded  # as sent, before any Content-Encoding is undone
    if declared.isdigit() and received != int(declared):
        raise SourceError(
            f"downloading {shown} was cut short: {received} of {declared} bytes arrived"
        )
    return written


def _reason(exc: httpx.HTTPError) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text != type(exc).__name__ else text


def _client(
    settings: FileSourceSettings,
    headers: dict[str, str],
    transport: httpx.BaseTransport | None,
) -> httpx.Client:
    """A client for the remote file: its headers, timeout and CA, pinned to its origins.

    Redirects are followed by hand, each hop through the gate.
    """
    return gated_client(
        home=str(settings.path),
        allowed=parse_allowed(settings.allowed_origins),  # validated with the config
        transport=transport,
        verify=tls.verify_for(settings.ca_bundle, key="source.ca_bundle"),
        headers=headers,
        timeout=settings.timeout_s,
    )
