"""``[daemon] listen``: ``/metrics`` and ``/healthz`` over HTTP for the daemon.

``/metrics`` is the Prometheus exposition of the textfile (``metrics.render``:
the same prometheus_client registry and ``generate_latest``, so the names and the
constant ``[metrics] labels`` are the same): the counters of the runs so far (seeded from the
textfile when one is configured), the last run's gauges, and product counts and
freshness read from the state file at each scrape. ``/healthz`` answers 200
while the last run did not fail and the schedule is alive, 503 otherwise, with
a JSON body saying why (a refused API key is named as such: the auth check of
``sync/auth_check.py`` makes even a run with nothing to send notice it).
Neither says anything about secrets or products (no error messages, no keys):
exit codes, error classes and counts only.

A stdlib ``ThreadingHTTPServer`` in a daemon thread: two read-only routes do not
need a framework, and a slow scraper never holds up a run.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import ip_address
from pathlib import Path
from typing import Any

from skuferry import logs
from skuferry.config.schema import Settings
from skuferry.errors import AuthError, ConfigError
from skuferry.service import freshness, hooks, hooks_http, metrics
from skuferry.service.metrics import RunOutcome

log = logs.get(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # what generate_latest writes


class Board:
    """What the endpoint reports; the daemon feeds it after every run. Thread-safe."""

    def __init__(
        self,
        settings: Callable[[], Settings],
        schedule_problem: Callable[[], str | None],
        *,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self._schedule_problem = schedule_problem
        self._wall_clock = wall_clock
        self._lock = threading.Lock()
        self._base: Mapping[tuple[str, str | None], float] = {}  # counters before ``_last``
        self._last: RunOutcome | None = None

    def seed(self, textfile: Path | None) -> None:
        """Start the counters where the textfile left them, so both tell the same story."""
        if textfile is None:
            return
        try:
            self._base = metrics.parse_samples(textfile.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):  # ValueError: not the text format
            self._base = {}

    def record(self, outcome: RunOutcome) -> None:
        with self._lock:
            if self._last is not None:
                self._base = metrics.advance(self._base, self._last)
            self._last = outcome

    def metrics_text(self) -> str:
        settings = self._settings()
        products = hooks.product_counts(settings.state.path)
        fresh = freshness.read(settings)
        with self._lock:
            return metrics.render(
                self._base,
                self._last,
                products,
                fresh,
                hooks.budget_per_minute(settings),
                labels=settings.metrics.labels,
                dead_letters=hooks.dead_letter_counts(settings.state.path),
            )

    def health(self) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON body)."""
        problems: list[str] = []
        with self._lock:
            last = self._last
        if last is not None and last.result == "failed":
            problems.append(
                f"the last run failed (exit {last.exit_code}"
                f"{', ' + last.error_type if last.error_type else ''})"
            )
            if isinstance(last.exception, AuthError):
                # the reason, not the server's message: the status says it all
                problems.append(
                    f"the API refused the API key (HTTP {last.exception.status}): it may have "
                    "been revoked or lack the products scope; check [api] api_key"
                )
        schedule = self._schedule_problem()
        if schedule:
            problems.append(schedule)
        body: dict[str, Any] = {"status": "failing" if problems else "ok", "problems": problems}
        if last is not None:
            body["last_run"] = {
                "result": last.result,
                "exit_code": last.exit_code,
                "finished_at": last.finished_at,
                "age_s": round(self._wall_clock() - last.finished_at, 1),
            }
        return (503 if problems else 200), body


class Endpoint:
    """The HTTP server for a ``Board`` on ``host:port``; ``port`` 0 picks a free one."""

    def __init__(self, listen: str, board: Board, hooks: hooks_http.Desk | None = None) -> None:
        host, _, port = listen.rpartition(":")
        host = host.strip("[]")
        try:
            self._httpd = ThreadingHTTPServer((host, int(port)), _handler_for(board, hooks))
        except OSError as exc:
            raise ConfigError(
                [f"at 'daemon.listen': cannot listen on {listen}: {exc.strerror or exc}"]
            ) from None
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="skuferry-http",
            daemon=True,
        )
        if not _is_loopback(host):
            log.warning(
                "daemon.listen.public",
                listen=listen,
                hint="metrics and health are readable by anyone who can reach it",
            )

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Endpoint:
        self._thread.start()
        log.info("daemon.listen.started", url=self.url)
        return self

    def stop(self) -> None:
        if self._thread.is_alive():  # shutdown() waits for serve_forever: only when started
            self._httpd.shutdown()
            self._thread.join(2.0)
        self._httpd.server_close()


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ip_address(host).is_loopback
    except ValueError:
        return False


def _handler_for(board: Board, desk: hooks_http.Desk | None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "skuferry"
        sys_version = ""

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("daemon.http.request", line=format % args)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, board.metrics_text().encode(), CONTENT_TYPE)
            elif path == "/healthz":
                status, body = board.health()
                self._send(status, json.dumps(body).encode(), "application/json")
            else:
                self._send(
                    404, b'{"error": "not found; try /metrics or /healthz"}', "application/json"
                )

        def do_POST(self) -> None:  # the hooks (service/hooks_http.py); never logs the body
            path = self.path.split("?", 1)[0]
            if desk is None or path not in hooks_http.PATHS:
                self._send(404, b'{"error": "not found"}', "application/json")
                return
            length = self.headers.get("Content-Length", "")
            if not length.isdigit() or int(length) > hooks_http.MAX_BODY_BYTES:
                self.close_connection = True
                self._send(
                    413, b'{"error": "send a Content-Length up to 1 MiB"}', "application/json"
                )
                return
            body = self.rfile.read(int(length))
            headers = {name.lower(): value for name, value in self.headers.items()}
            status, answer = desk.handle(path, headers, body)
            self._send(status, json.dumps(answer).encode(), "application/json")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

    return Handler
