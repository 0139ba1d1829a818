"""Remote files: a file source whose ``path`` is an ``https://``, ``http://`` or ``sftp://`` URL.

The file is downloaded whole into a private temporary folder (``0700``, the
file ``0600``) before its first record is read, then read by the same adapter
as a local file (compressed or not) and removed. A download that fails or is
cut short raises ``SourceError`` before any record exists, so the engine plans
nothing: no product is written and none is marked gone.

``read_start`` reads only the start of the file, through the same clients (``skuferry
init`` samples an export so): chunk by chunk until the caller has enough, never more.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO
from urllib.parse import unquote, urlsplit

import httpx

from skuferry import files, logs
from skuferry.config.schema import FileSourceSettings
from skuferry.errors import SourceError
from skuferry.models import BadRecord, RawRecord
from skuferry.sources.base import Source
from skuferry.sources.file_start import Start, Take
from skuferry.sources.http import safe_url

log = logs.get(__name__)

_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


class RemoteFileSource(Source):
    """Downloads ``settings.path`` then streams it through the local adapter ``open_local``."""

    def __init__(
        self,
        settings: FileSourceSettings,
        open_local: Callable[[Any], Source],
        *,
        transport: httpx.BaseTransport | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self._open_local = open_local
        self._transport = transport
        self._env = env
        self._inner: Source | None = None  # the local adapter of the last reading

    @property
    def header(self) -> tuple[str, ...] | None:
        return None if self._inner is None else self._inner.header

    def describe(self) -> str:
        return safe_url(str(self.settings.path))

    def change_token(self, previous: str | None = None) -> str | None:
        """ETag or Last-Modified by a conditional GET (``fetch_http.probe_http``); sftp: None."""
        if self.settings.remote_scheme() == "sftp":
            return None
        from skuferry.sources.fetch_http import probe_http

        return probe_http(self.settings, previous, transport=self._transport)

    def feed_digest(self) -> str | None:
        """The digest of the downloaded copy's last reading (the local adapter's)."""
        return None if self._inner is None else self._inner.feed_digest()

    def records(self) -> Iterator[RawRecord | BadRecord]:
        self._inner = None  # this reading's adapter, once the file is here
        with tempfile.TemporaryDirectory(prefix="skuferry-fetch-") as scratch:
            local = Path(scratch) / local_name(str(self.settings.path))
            self.download(local)
            inner = self._open_local(self.settings.model_copy(update={"path": local}))
            self._inner = inner
            try:
                yield from inner.records()
            except SourceError as exc:  # name the URL, not the temporary copy
                raise SourceError(str(exc).replace(str(local), self.describe())) from None

    def download(self, local: Path) -> int:
        """Fetch the remote file into ``local`` (created ``0600``); its size in bytes."""
        started = time.monotonic()
        files.create_private(local)
        with local.open("wb") as dest:
            size = self._fetch(dest)
        log.info(
            "source.fetch.downloaded",
            url=self.describe(),
            bytes=size,
            seconds=round(time.monotonic() - started, 3),
        )
        return size

    def read_start(self, take: Take, *, window: int) -> Start:
        """Hand the file's bytes, from its start, to ``take`` until it returns False or
        the file ends; the rest is never read. Over HTTP each request asks for ``window``
        bytes (a Range request; a server that ignores it streams, and the connection is
        closed as soon as ``take`` has enough)."""
        if self.settings.remote_scheme() == "sftp":
            from skuferry.sources.fetch_sftp import read_start_sftp

            return read_start_sftp(self.settings, take, env=self._env)
        from skuferry.sources.fetch_http import read_start_http

        return read_start_http(self.settings, take, window=window, transport=self._transport)

    def _fetch(self, dest: BinaryIO) -> int:
        if self.settings.remote_scheme() == "sftp":
            from skuferry.sources.fetch_sftp import download_sftp

            return download_sftp(self.settings, dest, env=self._env)
        from skuferry.sources.fetch_http import download_http

        return download_http(self.settings, dest, transport=self._transport)


def local_name(url: str) -> str:
    """The URL's file name, made safe for a local path (messages name rows by it)."""
    name = PurePosixPath(unquote(urlsplit(url).path)).name
    return _UNSAFE_NAME.sub("_", name).strip("._") or "download"
