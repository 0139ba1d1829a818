"""One answer to "has this remote file changed since the token I stored?" (issue 23 §1,
issue 19 §3): the primary source and a ``[[join]]`` ask it the same way, by a
conditional GET that sends the stored token back (``sources/signature.py``,
``fetch_http.probe_http``).

A real loopback server serves one JSONL export in one of four manners: with an ``ETag``,
with a ``Last-Modified`` only, with neither (every run reads it), or with an ``ETag`` but
ignoring the conditional headers (it answers ``200`` to every GET: the same ETag still
means unchanged). It logs every GET: whether it carried a conditional header, and the
status it answered.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.utils import formatdate, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from skuferry.config.load import settings_from_dict
from skuferry.config.schema import JoinSettings, Settings
from skuferry.sources import change_token as change_tokens
from skuferry.sync.engine import Adapters, run_once
from skuferry.sync.read.joins import open_joins
from tests.fakes import FakeRemote

pytestmark = pytest.mark.integration

MANNERS = ("etag", "last-modified", "neither", "ignores-conditions")
EPOCH = 1_600_000_000  # Last-Modified of version 1 (2020): long past the racy window


@dataclass
class Export:
    manner: str
    version: int = 1
    log: list[tuple[bool, int]] = field(default_factory=list)  # (conditional?, status)
    port: int = 0

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/pim.jsonl"

    def body(self) -> bytes:
        rows = [{"sku": "A", "name": f"Drill v{self.version}"}, {"sku": "B", "name": "Saw"}]
        return "".join(json.dumps(row) + "\n" for row in rows).encode()

    def etag(self) -> str:
        return f'"v{self.version}"'

    def modified(self) -> str:
        return formatdate(EPOCH + 3600 * self.version, usegmt=True)

    def unchanged(self, headers: Any) -> bool:
        if self.manner == "etag":
            return bool(headers.get("If-None-Match") == self.etag())
        since = headers.get("If-Modified-Since")
        if self.manner == "last-modified" and since:
            return parsedate_to_datetime(since) >= parsedate_to_datetime(self.modified())
        return False  # neither validator, or a server that ignores them

    def since(self, start: int) -> list[tuple[bool, int]]:
        return self.log[start:]


@pytest.fixture(params=MANNERS)
def export(request: pytest.FixtureRequest) -> Iterator[Export]:
    spec = Export(request.param)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            conditional = any(h in self.headers for h in ("If-None-Match", "If-Modified-Since"))
            status = 304 if spec.unchanged(self.headers) else 200
            spec.log.append((conditional, status))
            self.send_response(status)
            if spec.manner in ("etag", "ignores-conditions"):
                self.send_header("ETag", spec.etag())
            if spec.manner == "last-modified":
                self.send_header("Last-Modified", spec.modified())
            body = spec.body() if status == 200 else b""
            if status == 200:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    spec.port = httpd.server_address[1]
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield spec
    httpd.shutdown()
    httpd.server_close()


def _settings(tmp_path: Path, source: dict[str, Any]) -> Settings:
    return settings_from_dict(
        {
            "api": {"base_url": "http://127.0.0.1:9", "api_key": "k-test"},
            "source": source,
            "mapping": {"key": "sku"},
            "state": {"path": "state.db"},
        },
        base_dir=tmp_path,
    )


def test_the_primary_source_is_not_downloaded_while_its_token_holds(
    export: Export, tmp_path: Path
) -> None:
    settings = _settings(tmp_path, {"type": "jsonl", "path": export.url()})
    remote = FakeRemote()
    first = run_once(settings, adapters=Adapters(client=remote))
    assert (first.pull, first.created) == ("full", 2)
    assert export.log == [(False, 200), (False, 200)], "the probe, then the download"

    mark = len(export.log)
    second = run_once(settings, adapters=Adapters(client=remote))
    if export.manner == "neither":
        assert (second.pull, second.unchanged) == ("full", 2), "no token: read every run"
        assert export.since(mark) == [(False, 200), (False, 200)]
    else:
        assert (second.pull, second.unchanged) == ("unchanged", 2)
        answer = 200 if export.manner == "ignores-conditions" else 304
        assert export.since(mark) == [(True, answer)], "one conditional GET, no download"

    export.version = 2  # a new export: the name of A changed
    mark = len(export.log)
    third = run_once(settings, adapters=Adapters(client=remote))
    assert (third.pull, third.updated, third.unchanged) == ("full", 1, 1)
    assert remote.by_key("A")[0]["name"] == "Drill v2"
    assert [status for _, status in export.since(mark)] == [200, 200]


def _opened(spec: JoinSettings, scratch: Path) -> tuple[bool, str | None]:
    (join,) = open_joins([spec], scratch)
    try:
        return join.read, join.index.get_many(["A"]).get("A")
    finally:
        join.close()


def test_a_join_is_rebuilt_only_when_its_token_moved(export: Export, tmp_path: Path) -> None:
    spec = JoinSettings.model_validate(
        {"name": "pim", "type": "jsonl", "path": export.url(), "key": "sku", "on": "sku"}
    )
    assert _opened(spec, tmp_path) == (True, '{"name":"Drill v1","sku":"A"}')
    assert export.log == [(False, 200), (False, 200)], "the probe, then the download"

    mark = len(export.log)
    read, _ = _opened(spec, tmp_path)
    if export.manner == "neither":
        assert read is True, "no token: rebuilt every run"
        assert export.since(mark) == [(False, 200), (False, 200)]
    else:
        assert read is False
        answer = 200 if export.manner == "ignores-conditions" else 304
        assert export.since(mark) == [(True, answer)], "one conditional GET, no download"

    export.version = 2
    assert _opened(spec, tmp_path) == (True, '{"name":"Drill v2","sku":"A"}')


def test_a_run_over_an_unchanged_remote_join_reads_nothing(
    export: Export, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "products.jsonl").write_text('{"sku": "A"}\n{"sku": "B"}\n', encoding="utf-8")
    monkeypatch.setattr(change_tokens, "RACY_S", 0.0)  # the local file is seconds old
    join = {"name": "pim", "type": "jsonl", "path": export.url(), "key": "sku", "on": "sku"}
    settings = settings_from_dict(
        {
            "api": {"base_url": "http://127.0.0.1:9", "api_key": "k-test"},
            "source": {"type": "jsonl", "path": "products.jsonl"},
            "join": [join],
            "mapping": {"fields": {"sku": {"path": "sku"}, "name": {"path": "pim.name"}}},
            "state": {"path": "state.db"},
        },
        base_dir=tmp_path,
    )
    remote = FakeRemote()
    first = run_once(settings, adapters=Adapters(client=remote))
    assert (first.created, first.joins) == (2, {"pim": "read"}), first.problems
    assert remote.by_key("A")[0]["name"] == "Drill v1"

    mark = len(export.log)
    second = run_once(settings, adapters=Adapters(client=remote))
    if export.manner == "neither":
        assert (second.pull, second.joins) == ("full", {"pim": "read"})
    else:
        assert second.pull == "unchanged", "the join's token held: nothing read"
        assert all(conditional for conditional, _ in export.since(mark))
        assert len(export.since(mark)) == 1, "one conditional GET, no download"

    export.version = 2
    third = run_once(settings, adapters=Adapters(client=remote))
    assert (third.pull, third.joins, third.updated) == ("full", {"pim": "read"}, 1)
    assert remote.by_key("A")[0]["name"] == "Drill v2"
