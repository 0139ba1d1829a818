"""The daemon's HTTP server: a WSGI application behind limits no client can outlast.

waitress serves it. One I/O thread watches every connection with ``poll`` and
buffers each request until it has arrived whole; only then does one of a fixed
pool of worker threads run the application. So a client that connects and sends
nothing, or half a request, costs one descriptor and no thread, and ``/healthz``
is answered beside hundreds of them. On top of that:

- **a read timeout** (``read_timeout_s``): a connection idle that long is closed,
  and so is one whose request has not arrived whole that long after its first
  byte (a client trickling a byte at a time does not keep its slot);
- **a cap on open connections** (``max_connections``): past it no connection is
  accepted until one closes; those waiting queue in the kernel in arrival order,
  so a health probe is answered once the timeout has cleared a slot. The cap is
  kept below the process's open-file limit, so ``accept`` never fails for want of
  a descriptor;
- **a bounded worker pool** (``threads``), and limits on header and body sizes.

A client that leaves before its answer could be sent (a broken pipe, a reset) is
one ``daemon.http.client_gone`` event; waitress's own log lines become structlog
events too, never raw text or tracebacks on stderr.
"""

from __future__ import annotations

import logging
import resource
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from waitress import wasyncore
from waitress.channel import HTTPChannel
from waitress.server import BaseWSGIServer, create_server

from skuferry import logs
from skuferry.config.schema import DaemonSettings
from skuferry.errors import ConfigError

log = logs.get(__name__)

WsgiApp = Callable[[Mapping[str, Any], Callable[..., Any]], Iterable[bytes]]

FD_RESERVE = 128  # descriptors kept for everything else: the state file, HTTPS, the watcher
MIN_CONNECTIONS = 8
LOOP_TICK_S = 0.25  # how often the I/O thread looks at the clock when nothing happens
STOP_WAIT_S = 2.0  # on stop, how long a request still being worked on may take
DRAIN_S = 2.0  # on stop, how long the answers being made may take to finish and be sent


@dataclass(frozen=True)
class Limits:
    """How much the HTTP side gives any client; ``[daemon] http_*`` sets the first three."""

    read_timeout_s: int = 10
    max_connections: int = 512
    threads: int = 4
    max_body_bytes: int = 1024 * 1024
    max_header_bytes: int = 64 * 1024

    @classmethod
    def of(cls, daemon: DaemonSettings, *, max_body_bytes: int) -> Limits:
        return cls(
            read_timeout_s=daemon.http_read_timeout_s,
            max_connections=daemon.http_max_connections,
            threads=daemon.http_threads,
            max_body_bytes=max_body_bytes,
        )


def connection_cap(wanted: int, open_files: int) -> int:
    """The most connections to hold open under an open-file limit of ``open_files``."""
    return max(MIN_CONNECTIONS, min(wanted, open_files - FD_RESERVE))


def open_file_limit() -> int:
    """The process's soft limit on open descriptors (``LimitNOFILE=`` under systemd)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


class HttpServer:
    """Serves ``app`` on ``listen`` (``host:port``; port 0 picks one) within ``limits``."""

    def __init__(
        self,
        listen: str,
        app: WsgiApp,
        limits: Limits = Limits(),
        *,
        open_files: int | None = None,
    ) -> None:
        _route_waitress_logs()
        files = open_file_limit() if open_files is None else open_files
        cap = connection_cap(limits.max_connections, files)
        if cap < limits.max_connections:
            log.warning(
                "daemon.listen.capped",
                max_connections=limits.max_connections,
                capped_to=cap,
                open_file_limit=files,
                hint="raise LimitNOFILE (ulimit -n) or lower [daemon] http_max_connections",
            )
        self.limits = limits
        self.max_connections = cap
        sock = _bind(listen)
        self._map: dict[int, Any] = {}
        try:
            self._server: BaseWSGIServer = _waitress(app, self._map, sock, limits, cap)
        except BaseException:
            sock.close()
            raise
        self._server.channel_class = _Channel
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="skuferry-http", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.effective_host, self._server.effective_port
        return f"http://[{host}]:{port}" if ":" in str(host) else f"http://{host}:{port}"

    def open_connections(self) -> int:
        """Client connections held open now (a reading for tests and benches)."""
        return len(self._server.active_channels)

    def start(self) -> HttpServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting, let the requests being served finish (a few seconds at most)."""
        if not self._thread.is_alive():  # never started: only the socket to close
            self._close()
            return
        self._stopping.set()
        self._server.pull_trigger()  # wakes the I/O thread out of poll
        self._thread.join(DRAIN_S + 2 * STOP_WAIT_S)

    def _serve(self) -> None:
        deadline = float(self.limits.read_timeout_s)
        next_sweep = 0.0
        try:
            while not self._stopping.is_set():
                wasyncore.loop(timeout=LOOP_TICK_S, use_poll=True, map=self._map, count=1)
                now = time.monotonic()
                if now >= next_sweep:  # in this thread, like waitress's own idle sweep
                    next_sweep = now + 1.0
                    _close_overdue(self._server, now, deadline)
            # Stopping: take no new connection, finish and send what is being answered.
            self._server.accepting = False
            until = time.monotonic() + DRAIN_S
            while self._busy() and time.monotonic() < until:
                wasyncore.loop(timeout=0.05, use_poll=True, map=self._map, count=1)
        finally:
            self._close()

    def _busy(self) -> bool:
        return any(
            channel.requests or channel.total_outbufs_len
            for channel in list(self._server.active_channels.values())
        )

    def _close(self) -> None:
        self._server.task_dispatcher.shutdown(cancel_pending=True, timeout=STOP_WAIT_S)
        for channel in list(self._server.active_channels.values()):
            if isinstance(channel, _Channel):
                channel.shut()  # its buffers too, which may be temporary files
        wasyncore.close_all(self._map)


def _waitress(
    app: WsgiApp, socket_map: dict[int, Any], sock: socket.socket, limits: Limits, cap: int
) -> BaseWSGIServer:
    server: BaseWSGIServer = create_server(
        app,
        map=socket_map,
        sockets=[sock],
        threads=limits.threads,
        # waitress counts its listening socket and its wake-up pipe among the connections
        connection_limit=cap + 2,
        channel_timeout=limits.read_timeout_s,
        cleanup_interval=1,
        max_request_body_size=limits.max_body_bytes,
        max_request_header_size=limits.max_header_bytes,
        asyncore_use_poll=True,  # select() fails on descriptors past 1024
        ident="skuferry",
        expose_tracebacks=False,
    )
    return server


def _bind(listen: str) -> socket.socket:
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    try:
        family = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)[0][0]
        return socket.create_server((host, int(port)), family=family, backlog=1024)
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ConfigError([f"at 'daemon.listen': cannot listen on {listen}: {why}"]) from None


def _close_overdue(server: BaseWSGIServer, now: float, deadline: float) -> None:
    """Close connections whose request has not arrived whole ``deadline`` s after it began."""
    slow = [
        channel
        for channel in list(server.active_channels.values())
        if isinstance(channel, _Channel) and channel.overdue(now, deadline)
    ]
    for channel in slow:
        channel.will_close = True  # closed by the loop's next pass, as an idle one is
    if slow:
        log.info("daemon.http.slow_closed", connections=len(slow), read_timeout_s=deadline)


class _Channel(HTTPChannel):  # type: ignore[misc]  # waitress has no type hints
    """waitress's connection, which also times a request's arrival and says when its
    client left before the answer was sent."""

    _request_began: float | None = None
    _path: str | None = None  # of the last request handed to a worker
    _gone_told = False

    def received(self, data: bytes) -> bool:
        if self.request is None and data:
            self._request_began = time.monotonic()
        result: bool = super().received(data)
        if self.request is None:  # every request in ``data`` arrived whole
            self._request_began = None
        return result

    def overdue(self, now: float, deadline: float) -> bool:
        began = self._request_began
        return (
            began is not None
            and self.request is not None
            and not self.will_close
            and now - began > deadline
        )

    def service(self) -> None:  # a worker thread, one request at a time
        if self.requests:
            self._path = self.requests[0].path
        super().service()

    def shut(self) -> None:
        """Close on the server's stop: the client did not leave, so no event."""
        self._gone_told = True
        self.handle_close()

    def handle_close(self) -> None:
        unsent = self.total_outbufs_len
        if (unsent or self.requests) and not self._gone_told:
            self._gone_told = True
            log.info(
                "daemon.http.client_gone",
                peer=_peer(self.addr),
                path=self.requests[0].path if self.requests else self._path,
                unsent_bytes=unsent,
            )
        super().handle_close()


def _peer(addr: Any) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"{addr[0]}:{addr[1]}"
    return str(addr)


# waitress logs through the standard library; without this its lines would reach stderr
# as bare text (tracebacks included). Each becomes one event, with the error's class and
# message in place of a traceback.
_WAITRESS_EVENTS = (
    ("total open connections reached", "daemon.http.connection_limit", "warning"),
    ("total open connections dropped", "daemon.http.connection_limit_cleared", "info"),
    ("Client disconnected while serving", "daemon.http.client_gone_serving", "debug"),
    ("server accept() threw", "daemon.http.accept_failed", "warning"),
    ("Socket error", "daemon.http.socket_error", "info"),
    ("Task queue depth", "daemon.http.busy", "info"),
)


class _WaitressLog(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        event, level = "daemon.http.server", record.levelname.lower()
        for prefix, name, how in _WAITRESS_EVENTS:
            if message.startswith(prefix):
                event, level = name, how
                break
        fields: dict[str, Any] = {"message": message}
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            fields["error"] = f"{type(error).__name__}: {error}"
        emit = getattr(log, level if level in ("debug", "info", "warning") else "error")
        emit(event, **fields)


def _route_waitress_logs() -> None:
    waitress_log = logging.getLogger("waitress")
    if not any(isinstance(h, _WaitressLog) for h in waitress_log.handlers):
        waitress_log.addHandler(_WaitressLog())
    waitress_log.setLevel(logging.DEBUG)  # structlog's level decides what is shown
    waitress_log.propagate = False
