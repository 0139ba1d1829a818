"""A join is read again only when its source changed: an HTTP file by its ETag and
Last-Modified (proved with the server's own request counter), a SQL table by its row
count and newest ``updated_column``."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from skuferry.config.schema import JoinSettings
from skuferry.sync.joins import open_joins

pytestmark = pytest.mark.integration


@dataclass
class PimFile:
    body: bytes = b'{"sku": "A", "name": "Drill"}\n'
    etag: str = '"v1"'
    requests: list[str] = field(default_factory=list)  # "HEAD" / "GET", in order
    port: int = 0


@pytest.fixture
def pim_file() -> Iterator[PimFile]:
    spec = PimFile()

    class Handler(BaseHTTPRequestHandler):
        def _head(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(spec.body)))
            self.send_header("ETag", spec.etag)
            self.send_header("Last-Modified", "Mon, 23 Nov 2026 05:00:00 GMT")
            self.end_headers()

        def do_HEAD(self) -> None:
            spec.requests.append("HEAD")
            self._head()

        def do_GET(self) -> None:
            spec.requests.append("GET")
            self._head()
            self.wfile.write(spec.body)

        def log_message(self, *_args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    spec.port = httpd.server_address[1]
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield spec
    httpd.shutdown()
    httpd.server_close()


def _names(scratch: Path, spec: JoinSettings) -> tuple[bool, dict[str, str]]:
    (join,) = open_joins([spec], scratch)
    try:
        return join.read, join.index.get_many(["A", "B"])
    finally:
        join.close()


def test_a_join_file_at_a_url_is_downloaded_again_only_when_its_etag_changes(
    pim_file: PimFile, tmp_path: Path
) -> None:
    spec = JoinSettings.model_validate(
        {
            "name": "pim",
            "type": "jsonl",
            "path": f"http://127.0.0.1:{pim_file.port}/pim.jsonl",
            "key": "sku",
            "on": "SKU",
        }
    )
    assert _names(tmp_path, spec)[0] is True
    assert _names(tmp_path, spec)[0] is False
    assert _names(tmp_path, spec)[0] is False
    assert pim_file.requests.count("GET") == 1, pim_file.requests

    pim_file.body = b'{"sku": "A", "name": "Drill 18V"}\n'
    pim_file.etag = '"v2"'
    read, found = _names(tmp_path, spec)
    assert read is True and pim_file.requests.count("GET") == 2
    assert found == {"A": '{"name":"Drill 18V","sku":"A"}'}


def test_a_join_sql_table_is_read_again_only_when_count_or_newest_update_moves(
    tmp_path: Path,
) -> None:
    db = tmp_path / "pim.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE texts (sku TEXT, name TEXT, updated_at TEXT)")
        conn.execute("INSERT INTO texts VALUES ('A', 'Drill', '2026-11-01 10:00:00')")
    spec = JoinSettings.model_validate(
        {
            "name": "pim",
            "type": "sql",
            "url": f"sqlite:///{db}",
            "table": "texts",
            "updated_column": "updated_at",
            "key": "sku",
            "on": "SKU",
        }
    )
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    assert _names(scratch, spec)[0] is True
    assert _names(scratch, spec)[0] is False, "nothing changed: not read"
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE texts SET name = 'Drill 18V', updated_at = '2026-11-02 08:00:00'")
    read, found = _names(scratch, spec)
    assert (
        read is True
        and found["A"] == '{"name":"Drill 18V","sku":"A","updated_at":"2026-11-02 08:00:00"}'
    )
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO texts VALUES ('B', 'Saw', '2026-11-02 08:00:00')")
    read, found = _names(scratch, spec)
    assert read is True and set(found) == {"A", "B"}, "a new row: the count moved"
