"""``RemoteFileSource.read_start`` over HTTP: only the start of a file leaves the server
(Range windows when it honours them; an answer closed early when it does not), through
the download's own client (its origin pinning, its headers)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from skuferry.config.load import settings_from_dict
from skuferry.config.schema import FileSourceSettings
from skuferry.errors import SourceError
from skuferry.sources.dispatch import open_source
from skuferry.sources.fetch import RemoteFileSource
from skuferry.sources.file_start import Start

BODY = bytes(range(256)) * 40_000  # 10 MB
URL = "https://files.example.com/export/products.csv"


def _settings(tmp_path: Path, **extra: object) -> FileSourceSettings:
    settings = settings_from_dict(
        {
            "api": {"base_url": "http://127.0.0.1:9", "api_key": "k" * 12},
            "source": {"type": "csv", "path": URL, **extra},
            "state": {"path": str(tmp_path / "s.db")},
        }
    )
    assert isinstance(settings.source, FileSourceSettings)
    return settings.source


class _Server:
    """A file server for httpx's MockTransport: counts the bytes it hands out."""

    def __init__(self, *, ranges: bool) -> None:
        self.ranges = ranges
        self.sent = 0
        self.requests: list[httpx.Request] = []

    def _stream(self, body: bytes) -> Iterator[bytes]:
        for at in range(0, len(body), 1 << 14):
            piece = body[at : at + (1 << 14)]
            self.sent += len(piece)
            yield piece

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        asked = re.fullmatch(r"bytes=(\d+)-(\d+)", request.headers.get("Range", ""))
        if self.ranges and asked:
            first, last = int(asked.group(1)), min(int(asked.group(2)), len(BODY) - 1)
            if first >= len(BODY):
                return httpx.Response(416, headers={"Content-Range": f"bytes */{len(BODY)}"})
            headers = {"Content-Range": f"bytes {first}-{last}/{len(BODY)}"}
            part = BODY[first : last + 1]
            return httpx.Response(206, headers=headers, content=self._stream(part))
        headers = {"Content-Length": str(len(BODY)), "Content-Type": "text/csv"}
        return httpx.Response(200, headers=headers, content=self._stream(BODY))


def _read(tmp_path: Path, server: _Server, wanted: int, **extra: object) -> tuple[bytes, Start]:
    source = RemoteFileSource(
        _settings(tmp_path, **extra), open_source, transport=httpx.MockTransport(server)
    )
    got = bytearray()

    def take(chunk: bytes) -> bool:
        got.extend(chunk)
        return len(got) < wanted

    start = source.read_start(take, window=1 << 20)
    return bytes(got), start


def test_a_server_that_honours_range_sends_only_the_windows_asked(tmp_path: Path) -> None:
    server = _Server(ranges=True)
    got, start = _read(tmp_path, server, 2_500_000)
    assert got == BODY[: len(got)] and len(got) >= 2_500_000
    assert [r.headers["Range"] for r in server.requests] == [
        "bytes=0-1048575", "bytes=1048576-2097151", "bytes=2097152-3145727",
    ]  # fmt: skip
    assert all(r.headers["Accept-Encoding"] == "identity" for r in server.requests)
    assert server.sent <= 3 << 20 < len(BODY)
    assert start.ranged and start.size == len(BODY) and not start.ended


def test_a_server_that_ignores_range_is_closed_once_enough_arrived(tmp_path: Path) -> None:
    server = _Server(ranges=False)
    got, start = _read(tmp_path, server, 100_000)
    assert got == BODY[: len(got)]
    assert len(server.requests) == 1
    assert server.sent < 200_000, "the rest of the body was read"
    assert not start.ranged and not start.ended


def test_a_small_file_ends_within_the_sample(tmp_path: Path) -> None:
    server = _Server(ranges=True)
    got, start = _read(tmp_path, server, len(BODY) + 1)
    assert got == BODY and start.ended


def test_the_downloads_headers_and_errors(tmp_path: Path) -> None:
    seen: list[httpx.Request] = []

    def refuse(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(401)

    source = RemoteFileSource(
        _settings(tmp_path, headers={"Authorization": "Bearer t0ken"}),
        open_source,
        transport=httpx.MockTransport(refuse),
    )
    with pytest.raises(SourceError, match="HTTP 401") as info:
        source.read_start(lambda _chunk: True, window=1 << 20)
    assert seen[0].headers["Authorization"] == "Bearer t0ken"
    assert "t0ken" not in str(info.value)
