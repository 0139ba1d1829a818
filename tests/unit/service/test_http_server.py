"""The daemon's HTTP side (service/http_server.py, http_app.py): its limits' config, its
routes, and what it does with clients that stall, trickle, leave early or crowd it.

Every wait here is bounded only to turn a hang into a failure; nothing asserts a speed.
"""

from __future__ import annotations

import io
import json
import logging
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import structlog

from skuferry import logs
from skuferry.service import hooks_http
from skuferry.service.http_app import Request, Response, Router
from skuferry.service.http_endpoint import Endpoint, daemon_hooks
from skuferry.service.http_server import (
    FD_RESERVE,
    HttpServer,
    Limits,
    connection_cap,
)
from tests.fakes import wait_until
from tests.unit.service.test_daemon import make_settings

pytestmark = pytest.mark.integration  # real loopback sockets

SECRET = b"hook-secret-for-the-limits"


class Board:
    """What an Endpoint asks of the daemon's board; ``gate`` holds /metrics back."""

    def __init__(self, metrics_lines: int = 50) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.scrapes = 0
        self.lines = metrics_lines

    def health(self) -> tuple[int, dict[str, Any]]:
        return 200, {"status": "ok", "problems": []}

    def metrics_text(self) -> str:
        self.scrapes += 1
        assert self.gate.wait(30)
        return "skuferry_up 1\n" * self.lines


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    """The structlog events of the test, as JSON lines (and not on stderr)."""
    stream = io.StringIO()
    saved = structlog.get_config()
    logs.configure(level="info", json=True, stream=stream)
    try:
        yield stream
    finally:
        structlog.configure(**saved)


def events(stream: io.StringIO, name: str | None = None) -> list[dict[str, Any]]:
    found = [json.loads(line) for line in stream.getvalue().splitlines()]
    return [e for e in found if name is None or e["event"] == name]


def address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def stall(url: str, n: int) -> list[socket.socket]:
    """``n`` clients: every other one sends half a request, the rest send nothing."""
    clients = []
    for i in range(n):
        client = socket.create_connection(address(url), timeout=30)
        if i % 2:
            client.sendall(b"GET /healthz HTTP/1.1\r\nHost: skuferry\r\nX-Half: ")
        clients.append(client)
    return clients


def reset(client: socket.socket) -> None:
    """Close with a TCP reset, as a client that is killed does."""
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()


def still_open(client: socket.socket) -> bool:
    client.setblocking(False)
    try:
        return client.recv(1) != b""  # data would be a surprise, but not a close
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        client.setblocking(True)


def served(board: Any, *, desk: hooks_http.Desk | None = None, **limits: Any) -> Endpoint:
    return Endpoint("127.0.0.1:0", board, daemon_hooks(desk), limits=Limits(**limits)).start()


# --- the limits' config ---------------------------------------------------------------


def test_the_limits_come_from_daemon_settings_with_safe_defaults(tmp_path: Path) -> None:
    default = Limits.of(make_settings(tmp_path).daemon, max_body_bytes=1024)
    assert (default.read_timeout_s, default.max_connections, default.threads) == (10, 512, 4)
    assert default.max_body_bytes == 1024
    chosen = make_settings(
        tmp_path,
        daemon={"http_read_timeout_s": 3, "http_max_connections": 64, "http_threads": 2},
    )
    limits = Limits.of(chosen.daemon, max_body_bytes=1024)
    assert (limits.read_timeout_s, limits.max_connections, limits.threads) == (3, 64, 2)


@pytest.mark.parametrize(
    ("key", "bad"),
    [
        ("http_read_timeout_s", 0),
        ("http_max_connections", 7),
        ("http_threads", 0),
        ("http_threads", 65),
    ],
)
def test_limits_out_of_range_are_config_errors(tmp_path: Path, key: str, bad: int) -> None:
    with pytest.raises(ValueError, match=key):
        make_settings(tmp_path, daemon={key: bad})


def test_the_cap_stays_below_the_open_file_limit() -> None:
    assert connection_cap(512, 4096) == 512
    assert connection_cap(512, 1024) == 512
    assert connection_cap(512, 256) == 256 - FD_RESERVE
    assert connection_cap(512, 64) == 8  # never none at all


def test_a_cap_the_open_file_limit_cannot_hold_is_lowered_and_said(
    log_lines: io.StringIO,
) -> None:
    server = HttpServer("127.0.0.1:0", Router(), Limits(max_connections=512), open_files=300)
    try:
        assert server.max_connections == 300 - FD_RESERVE
    finally:
        server.stop()
    (warned,) = events(log_lines, "daemon.listen.capped")
    assert warned["capped_to"] == 300 - FD_RESERVE and "LimitNOFILE" in warned["hint"]


# --- the routes -------------------------------------------------------------------------


def ask(router: Router, method: str, path: str, body: bytes = b"", **headers: str) -> Response:
    lower = {k.replace("_", "-").lower(): v for k, v in headers.items()}
    return router.answer(Request(method, path, "", lower, body))


def test_routes_match_segments_and_say_which_method_a_path_takes() -> None:
    router = Router().add("GET", "/healthz", lambda _r: Response.json(200, {}))
    router.add("POST", "/hooks/<name>/sync", lambda r: Response.json(202, dict(r.params)))
    assert ask(router, "GET", "/healthz").status == 200
    assert ask(router, "HEAD", "/healthz").status == 200
    shop = ask(router, "POST", "/hooks/shop-eu/sync")
    assert (shop.status, json.loads(shop.body)) == (202, {"name": "shop-eu"})
    assert ask(router, "POST", "/hooks/a/b/sync").status == 404  # one segment only
    wrong = ask(router, "GET", "/hooks/shop-eu/sync")
    assert wrong.status == 405 and ("Allow", "POST") in wrong.headers
    assert ask(router, "GET", "/nothing").status == 404


def test_a_handler_that_fails_is_a_500_and_one_event_with_its_traceback(
    log_lines: io.StringIO,
) -> None:
    def broken(_request: Request) -> Response:
        raise RuntimeError("a bug")

    router = Router().add("GET", "/x", broken)
    server = HttpServer("127.0.0.1:0", router).start()
    try:
        response = httpx.get(f"{server.url}/x", timeout=30)
    finally:
        server.stop()
    assert response.status_code == 500 and "a bug" not in response.text
    (failed,) = events(log_lines, "daemon.http.failed")
    assert failed["path"] == "/x" and "RuntimeError: a bug" in failed["exception"]


def test_hook_bodies_over_the_limit_or_without_a_length_get_413() -> None:
    desk = hooks_http.Desk(SECRET, on_keys=len, on_run=lambda: None)
    endpoint = served(Board(), desk=desk, max_body_bytes=hooks_http.MAX_BODY_BYTES)
    url = f"{endpoint.url}/hooks/sync"
    try:
        body = json.dumps({"keys": ["A"]}).encode()
        signed = {"X-Skuferry-Signature": hooks_http.sign(SECRET, body)}
        assert httpx.post(url, content=body, headers=signed, timeout=30).status_code == 202
        huge = b"x" * (hooks_http.MAX_BODY_BYTES + 1)
        assert httpx.post(url, content=huge, timeout=30).status_code == 413
        with socket.create_connection(address(endpoint.url), timeout=30) as client:
            client.sendall(b"POST /hooks/sync HTTP/1.1\r\nHost: x\r\n\r\n")
            assert client.recv(100).startswith(b"HTTP/1.1 413 ")
        assert httpx.get(url, timeout=30).status_code == 405
        assert httpx.post(f"{endpoint.url}/metrics", timeout=30).status_code == 405
        answer = httpx.get(f"{endpoint.url}/healthz", timeout=30)
        assert answer.headers["server"] == "skuferry"
        assert answer.headers["cache-control"] == "no-store"
    finally:
        endpoint.stop()


def test_without_a_hook_secret_the_hook_routes_are_404() -> None:
    endpoint = served(Board())
    try:
        answer = httpx.post(f"{endpoint.url}/hooks/sync", content=b"{}", timeout=30)
        assert answer.status_code == 404
    finally:
        endpoint.stop()


# --- clients that stall, trickle, crowd or leave ----------------------------------------


def test_healthz_is_answered_while_hundreds_of_clients_stall() -> None:
    endpoint = served(Board(), read_timeout_s=120, max_connections=512)
    clients = stall(endpoint.url, 300)
    try:
        wait_until(lambda: endpoint.server.open_connections() == 300, "all 300 accepted")
        assert httpx.get(f"{endpoint.url}/healthz", timeout=60).status_code == 200
        assert httpx.get(f"{endpoint.url}/metrics", timeout=60).status_code == 200
        assert all(still_open(c) for c in clients), "answered beside them, not after them"
    finally:
        for client in clients:
            client.close()
        endpoint.stop()


def test_past_the_cap_clients_wait_and_the_read_timeout_frees_their_slots(
    log_lines: io.StringIO,
) -> None:
    endpoint = served(Board(), read_timeout_s=1, max_connections=20)
    most = [0]
    watching = threading.Event()

    def watch() -> None:
        while not watching.is_set():
            most[0] = max(most[0], endpoint.server.open_connections())
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    clients = stall(endpoint.url, 60)  # three times the cap: the kernel queues the rest
    try:
        assert httpx.get(f"{endpoint.url}/healthz", timeout=60).status_code == 200
    finally:
        watching.set()
        watcher.join()
        for client in clients:
            client.close()
        endpoint.stop()
    assert 0 < most[0] <= 20
    assert events(log_lines, "daemon.http.connection_limit")


def test_a_request_trickled_a_byte_at_a_time_is_cut_off_at_the_read_timeout() -> None:
    endpoint = served(Board(), read_timeout_s=1)
    request = b"GET /healthz HTTP/1.1\r\nHost: skuferry\r\nX-Slow: " + b"a" * 1000
    try:
        with socket.create_connection(address(endpoint.url), timeout=30) as client:
            deadline = time.monotonic() + 30
            for byte in request:  # never idle for as long as the read timeout
                try:
                    client.sendall(bytes([byte]))
                except OSError:
                    break
                if not still_open(client) or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert not still_open(client), "the server should have closed it"
    finally:
        endpoint.stop()


def test_a_client_that_leaves_before_its_answer_is_one_event_and_nothing_on_stderr(
    log_lines: io.StringIO, capfd: pytest.CaptureFixture[str]
) -> None:
    board = Board()
    endpoint = served(board)
    try:
        board.gate.clear()  # the answer waits until the client has gone
        client = socket.create_connection(address(endpoint.url), timeout=30)
        client.sendall(b"GET /metrics HTTP/1.1\r\nHost: skuferry\r\n\r\n")
        wait_until(lambda: board.scrapes == 1, "the request to reach the board")
        reset(client)
        time.sleep(0.2)  # ordering, not speed: the reset lands before the answer is sent
        board.gate.set()
        wait_until(lambda: bool(events(log_lines, "daemon.http.client_gone")), "the event")
        assert httpx.get(f"{endpoint.url}/healthz", timeout=30).status_code == 200
    finally:
        board.gate.set()
        endpoint.stop()
    (gone,) = events(log_lines, "daemon.http.client_gone")
    assert gone["path"] == "/metrics" and gone["unsent_bytes"] > 0
    assert gone["level"] == "info"
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")


def test_waitress_s_own_log_lines_become_events_without_tracebacks(
    log_lines: io.StringIO, capfd: pytest.CaptureFixture[str]
) -> None:
    HttpServer("127.0.0.1:0", Router()).stop()  # routes waitress's logger
    try:
        raise BrokenPipeError(32, "Broken pipe")
    except BrokenPipeError:
        logging.getLogger("waitress").exception("Socket error")
    logging.getLogger("waitress.queue").warning("Task queue depth is %d", 3)
    (error,) = events(log_lines, "daemon.http.socket_error")
    assert error["error"] == "BrokenPipeError: [Errno 32] Broken pipe"
    assert "Traceback" not in log_lines.getvalue()
    assert events(log_lines, "daemon.http.busy")[0]["message"] == "Task queue depth is 3"
    assert capfd.readouterr().err == ""


def test_stop_lets_an_answer_in_flight_finish_and_closes_the_port() -> None:
    board = Board(metrics_lines=600_000)  # 8.4 MB: more than a socket takes at once
    endpoint = served(board)
    host, port = address(endpoint.url)
    board.gate.clear()
    answers: list[int] = []

    def scrape() -> None:
        answer = httpx.get(f"{endpoint.url}/metrics", timeout=30)
        answers.append(len(answer.content))

    asking = threading.Thread(target=scrape)
    asking.start()
    wait_until(lambda: board.scrapes == 1, "the scrape to start")
    threading.Timer(0.3, board.gate.set).start()
    endpoint.stop()
    asking.join(30)
    assert answers == [len(Board.metrics_text(board))]
    with pytest.raises(OSError):
        socket.create_connection((host, port), timeout=5).close()
