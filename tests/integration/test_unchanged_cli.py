"""An unchanged source through the CLI, as a user runs it (issue 23 items 1 and 2).

- a second ``skuferry sync`` on an untouched CSV reports ``"pull": "unchanged"``, sends
  nothing, and its process never imports the sandbox, rich, openpyxl, SQLAlchemy,
  httpx, sqlite-utils or APScheduler (the import set of a no-op, printed by the child
  itself); by the quick lane, not pydantic, pydantic-settings (nor the asyncio and ssl
  it imports), click or the engine either;
- a remote file is asked for with a conditional GET: the server counts the 304s it
  answers and the full bodies it sends, so "nothing downloaded" is the server's word;
- a file touched without a change is read again, and nothing is written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from skuferry.sandbox import Sandbox
from skuferry.sources.change_token import RACY_S
from tests.integration.conftest import KEY, catalog_rows, clean_env

pytestmark = pytest.mark.integration

# Modules a no-op run must not load (each costs tens of ms at start): sandbox is the local
# CMS, rich renders for terminals, openpyxl/calamine read xlsx, sqlalchemy sql, httpx when a
# request is sent, sqlite_utils serves status queries; apscheduler (a cron schedule, the
# daemon), colorama (Windows). The config loader, pydantic-settings, imports asyncio and
# ssl: a full start pays for them, the quick lane must not (NOT_IN_THE_LANE).
NOT_ON_A_NOOP = (
    "apscheduler",
    "colorama",
    "skuferry.sandbox",
    "rich",
    "openpyxl",
    "python_calamine",
    "sqlalchemy",
    "httpx",
    "sqlite_utils",
)
NOT_IN_THE_LANE = (
    *("pydantic", "click", "skuferry.config.schema", "skuferry.sync.engine"),
    *("asyncio", "ssl", "dotenv", *NOT_ON_A_NOOP),
)

_IMPORTS = """
import runpy, sys
sys.argv = ["skuferry", *sys.argv[1:]]
try:
    runpy.run_module("skuferry", run_name="__main__")
except SystemExit as exc:
    code = exc.code
with open("modules.txt", "w") as out:
    out.write("\\n".join(sorted(sys.modules)))
sys.exit(code)
"""


def _settle(path: Path) -> None:
    """Wait until ``path`` is older than the racy window (a fresh file is always read)."""
    st = path.stat()
    age = time.time() - max(st.st_mtime, st.st_ctime)
    if age < RACY_S:
        time.sleep(RACY_S - age + 0.1)


def _summary(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert result.returncode == 0, result.stderr
    summary: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return summary


def _sync_listing_modules(
    tmp_path: Path, config: Path, **env: str
) -> tuple[dict[str, Any], set[str]]:
    result = subprocess.run(
        [sys.executable, "-c", _IMPORTS, "sync", "--json", "--config", str(config)],
        cwd=tmp_path,
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    modules = set((tmp_path / "modules.txt").read_text(encoding="utf-8").split())
    return _summary(result), modules


def test_a_second_sync_of_an_untouched_file_reads_and_sends_nothing(
    sandbox: Sandbox,
    tmp_path: Path,
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    run_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    catalog = write_catalog(catalog_rows(30))
    config = write_config(sandbox.url)
    _settle(catalog)  # a file changed within the racy window gets no fingerprint
    first = _summary(run_cli("sync", "--json", "--config", str(config)))
    assert (first["created"], first["pull"]) == (30, "full")
    requests = dict(sandbox.stats().requests)

    # the full start (the engine's skip decision): none of the heavy modules
    second, modules = _sync_listing_modules(tmp_path, config, SKUFERRY_QUICK="off")
    assert second["pull"] == "unchanged"
    assert (second["unchanged"], second["created"], second["updated"]) == (30, 0, 0)
    assert dict(sandbox.stats().requests) == requests, "a skipped run sends nothing"
    assert "skuferry.sync.engine" in modules, "the listing is the run's own"
    loaded = sorted(m for m in modules if m.split(".")[0] in NOT_ON_A_NOOP or m in NOT_ON_A_NOOP)
    assert not [m for m in loaded if m.startswith(NOT_ON_A_NOOP)], loaded

    # the quick lane (service/quick.py): not even the config models, click or the engine
    quick, modules = _sync_listing_modules(tmp_path, config)
    assert quick["run_id"] == second["run_id"] + 1, "each run has its own id, in order"
    assert {k: v for k, v in quick.items() if k not in ("duration_s", "run_id")} == {
        k: v for k, v in second.items() if k not in ("duration_s", "run_id")
    }
    assert "skuferry.service.quick" in modules, "the listing is the run's own"
    assert not sorted(m for m in modules if m.startswith(NOT_IN_THE_LANE)), "loaded by the lane"

    # touched, same content: read again (a full pull), nothing written
    st = catalog.stat()
    os.utime(catalog, ns=(st.st_atime_ns, st.st_mtime_ns - 10_000_000_000))
    _settle(catalog)
    third = _summary(run_cli("sync", "--json", "--config", str(config)))
    assert (third["pull"], third["unchanged"], third["updated"]) == ("full", 30, 0)
    assert dict(sandbox.stats().requests).get("write") == requests.get("write")

    # --full reads even so
    forced = _summary(run_cli("sync", "--json", "--full", "--config", str(config)))
    assert forced["pull"] == "full"


# -- a remote file with an ETag ------------------------------------------------------------


@dataclass
class EtagServer:
    body: bytes
    etag: str = '"v1"'
    answered: list[int] = field(default_factory=list)  # the status of every GET
    port: int = 0

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/export/catalog.csv"


def _handler(server: EtagServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.headers.get("If-None-Match") == server.etag:
                server.answered.append(304)
                self.send_response(304)
                self.send_header("ETag", server.etag)
                self.end_headers()
                return
            server.answered.append(200)
            self.send_response(200)
            self.send_header("ETag", server.etag)
            self.send_header("Content-Type", "text/csv")
            self.send_header("Content-Length", str(len(server.body)))
            self.end_headers()
            self.wfile.write(server.body)

        def log_message(self, *_args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def etag_server(tmp_path: Path) -> Iterator[EtagServer]:
    rows = catalog_rows(12)
    lines = ["SKU,Name,Price,Stock"] + [
        f"{r['SKU']},{r['Name']},{r['Price']},{r['Stock']}" for r in rows
    ]
    spec = EtagServer(("\n".join(lines) + "\n").encode())
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(spec))
    spec.port = httpd.server_address[1]
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield spec
    httpd.shutdown()
    httpd.server_close()


def test_a_remote_file_unchanged_is_answered_304_and_not_downloaded(
    sandbox: Sandbox,
    etag_server: EtagServer,
    write_config: Callable[..., Path],
    run_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    config = write_config(sandbox.url, catalog=etag_server.url())
    first = _summary(run_cli("sync", "--json", "--config", str(config)))
    assert first["created"] == 12
    assert etag_server.answered == [200, 200], "the probe, then the download"

    second = _summary(run_cli("sync", "--json", "--config", str(config)))
    assert second["pull"] == "unchanged"
    assert etag_server.answered[2:] == [304], "one conditional GET, no body"

    etag_server.etag = '"v2"'  # a new export, same rows
    third = _summary(run_cli("sync", "--json", "--config", str(config)))
    assert (third["pull"], third["unchanged"], third["updated"]) == ("full", 12, 0)
    assert etag_server.answered[3:] == [200, 200]
    assert KEY not in json.dumps(third)
