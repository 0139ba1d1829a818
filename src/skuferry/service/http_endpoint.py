"""``[daemon] listen``: ``/metrics`` and ``/healthz`` over HTTP for the daemon.

``/metrics`` is the Prometheus exposition of the textfile (``metrics.render``:
the same prometheus_client registry and ``generate_latest``, so the names and the
constant ``[metrics] labels`` are the same): the counters of the runs so far (seeded from the
textfile when one is configured), the last run's gauges, and product counts and
freshness read from the state file at each scrape. ``/healthz`` answers 200
while the last run did not fail and the schedule is alive, 503 otherwise, with
a JSON body saying why (a refused API key is named as such: the auth check makes even a
run with nothing to send notice it). ``/livez`` answers 200 while the schedule is alive,
whatever the runs did: a liveness probe's restart mends no CMS outage.
Neither says anything about secrets or products (no error messages, no keys):
exit codes, error classes and counts only.

The routes are a small WSGI application (``http_app``) served by ``http_server``,
which gives every client a read timeout, caps open connections and answers from a
bounded pool of threads: no client, slow or silent, can starve the others, and a
slow scraper never holds up a run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from ipaddress import ip_address
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from skuferry import logs
from skuferry.config.schema import Settings
from skuferry.errors import AuthError
from skuferry.service import freshness, hooks, hooks_http, metrics
from skuferry.service.degraded import Degraded
from skuferry.service.http_app import Handler, Request, Response, Router
from skuferry.service.http_server import HttpServer, Limits
from skuferry.service.metrics import RunOutcome

if TYPE_CHECKING:
    from prometheus_client.core import Metric


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
        waiting_s: Callable[[], float | None] | None = None,
        degraded: Callable[[], Degraded | None] = lambda: None,
    ) -> None:
        self._settings = settings
        self._schedule_problem = schedule_problem
        self._wall_clock = wall_clock
        self._waiting_s = waiting_s  # a fleet's: how long the run due has waited for a slot
        self._degraded = degraded  # the reload that failed, while it is the last one
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
        return metrics.exposition(self.families())

    def families(self) -> list[Metric]:
        """This workspace's metric families, each sample with its ``[metrics] labels``."""
        settings = self._settings()
        products = hooks.product_counts(settings.state.path)
        fresh = freshness.read(settings)
        with self._lock:
            found = metrics.families(
                self._base,
                self._last,
                products,
                freshness=fresh,
                budget=hooks.budget_per_minute(settings),
                labels=settings.metrics.labels,
                dead_letters=hooks.dead_letter_counts(settings.state.path),
            )
        return found + metrics.daemon_families(
            reload_failed=self._degraded() is not None,
            waiting_s=self._waiting_s() if self._waiting_s is not None else None,
            pooled=self._waiting_s is not None,
            labels=settings.metrics.labels,
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
        degraded = self._degraded()
        status = "failing" if problems else "degraded" if degraded else "ok"
        body: dict[str, Any] = {"status": status, "problems": problems}
        if degraded is not None:  # it runs, on the config it had: a 200 all the same
            body["degraded"] = [degraded.as_json()]
        waited = self._waiting_s() if self._waiting_s is not None else None
        if waited is not None:  # late, never skipped: it starts when a slot frees
            body["late"] = {"waiting_for_slot_s": round(waited, 1)}
        if last is not None:
            body["last_run"] = {
                "result": last.result,
                "exit_code": last.exit_code,
                "finished_at": last.finished_at,
                "age_s": round(self._wall_clock() - last.finished_at, 1),
            }
        return (503 if problems else 200), body

    def liveness(self) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON body) of ``/livez``: the process and its schedule live.

        What the runs did does not count: a CMS outage or a revoked key fails runs, and
        restarting the process (a liveness probe's remedy) would mend neither.
        """
        schedule = self._schedule_problem()
        if schedule:
            return 503, {"status": "dead", "problems": [schedule]}
        return 200, {"status": "alive", "problems": []}


class Side(Protocol):
    """What an HTTP side reports: one daemon's board, or a fleet's."""

    def metrics_text(self) -> str: ...

    def health(self) -> tuple[int, dict[str, Any]]: ...

    def liveness(self) -> tuple[int, dict[str, Any]]: ...


Hook = tuple[str, Handler]  # a POST route: its pattern, its handler


class Endpoint:
    """``/metrics``, ``/healthz``, ``/livez``, the hooks and the page of a ``Side`` on
    ``host:port`` (port 0 picks a free one), served within ``limits`` (``http_server``):
    the one HTTP side of a daemon and of a fleet."""

    def __init__(
        self,
        listen: str,
        side: Side,
        hooks: Sequence[Hook] = (),
        *,
        limits: Limits | None = None,
        open_files: int | None = None,
        console: Callable[[Router], object] | None = None,
    ) -> None:
        warn_if_public(listen)
        self._server = HttpServer(
            listen, routes(side, hooks, console), limits or Limits(), open_files=open_files
        )

    @property
    def url(self) -> str:
        return self._server.url

    @property
    def server(self) -> HttpServer:
        return self._server

    def start(self) -> Endpoint:
        self._server.start()
        log.info(
            "daemon.listen.started",
            url=self.url,
            max_connections=self._server.max_connections,
            read_timeout_s=self._server.limits.read_timeout_s,
            threads=self._server.limits.threads,
        )
        return self

    def stop(self) -> None:
        self._server.stop()


def warn_if_public(listen: str) -> bool:
    """Say so when ``listen`` is reachable from other hosts; True if it is."""
    host = listen.rpartition(":")[0].strip("[]")
    if _is_loopback(host):
        return False
    log.warning(
        "daemon.listen.public",
        listen=listen,
        hint="metrics, health and the page are readable by anyone who can reach it",
    )
    return True


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ip_address(host).is_loopback
    except ValueError:
        return False


def routes(
    side: Side,
    hooks: Sequence[Hook] | None = None,
    console: Callable[[Router], object] | None = None,
) -> Router:
    """The WSGI application: health and metrics, the hooks (POST), and the operator's
    page when ``console`` mounts it (``console.app.page``)."""
    router = Router(Response.json(404, {"error": "not found; try /metrics or /healthz"}))
    router.add(
        "GET", "/metrics", lambda _r: Response(200, side.metrics_text().encode(), CONTENT_TYPE)
    )
    router.add("GET", "/healthz", lambda _r: Response.json(*side.health()))
    router.add("GET", "/livez", lambda _r: Response.json(*side.liveness()))
    for pattern, handler in hooks or ():
        router.add("POST", pattern, handler)
    if console is not None:
        console(router)
    return router


def daemon_hooks(desk: hooks_http.Desk | None) -> list[Hook]:
    """One daemon's hook routes (``/hooks/sync``, ``/hooks/run``), when it has a secret."""
    if desk is None:
        return []

    def answer(request: Request) -> Response:
        return hook_answer(desk, request.path, request)

    return [(path, answer) for path in hooks_http.PATHS]


def hook_answer(desk: hooks_http.Desk, path: str, request: Request) -> Response:
    """A hook's answer: its size checked, then ``desk`` (the body is never logged).

    The server answers 413 to a declared length over the limit from the headers alone;
    this refuses what gets past it without a usable ``Content-Length``.
    """
    length = request.headers.get("content-length", "")
    if not length.isdigit() or int(length) > hooks_http.MAX_BODY_BYTES:
        return Response.json(413, {"error": "send a Content-Length up to 1 MiB"})
    return Response.json(*desk.handle(path, request.headers, request.body))
