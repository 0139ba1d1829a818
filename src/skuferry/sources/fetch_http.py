"""Download an ``https://`` (or ``http://``) remote file, streamed to disk.

Redirects are followed by hand, each hop through the origin gate, which checks it
by the origin rule before anything, the ``headers`` included, is sent there. The
body must arrive whole: a connection closed early or a body shorter than its
``Content-Length`` is a ``SourceError``, never a short catalog.
"""

from __future__ import annotations

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


def _open(client: httpx.Client, url: str) -> httpx.Response:
    """The streamed response at the end of the redirects; every hop checked first."""
    return send_pinned(
        client,
        client.build_request("GET", url),
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
