"""The wire side of the sandbox: one HTTP/1.1 handler and a server that can stop promptly.

Order of a request: admin paths bypass everything; then authentication (401),
then the rate limiter (429, always honest), then garbage mode, then the fault
draw, then the store. Waits (latency, slow answers) watch the server's
``stopping`` event so ``stop()`` never waits for them.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from skuferry import canonical, logs
from skuferry.errors import UsageError
from skuferry.sandbox.api import Api, Reply, error, match, parse_json, tier_for
from skuferry.sandbox.faults import Faults

log = logs.get(__name__)

MAX_BODY = 10 * 1024 * 1024
_LOOPBACK = ("127.0.0.1", "::1")
_HTML_502 = (
    b"<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>"
    b"<body><h1>502 Bad Gateway</h1><p>upstream connect error</p></body></html>\n"
)
_TRUNCATED_JSON = b'{"data": [{"id": "p_000001", "sku": "A-1", "na'


class SandboxServer(ThreadingHTTPServer):
    """Tracks every open connection so ``stop`` can wake and close them all."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], api: Api) -> None:
        self.api = api
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._active: dict[socket.socket, threading.Thread] = {}
        self._aborted: set[socket.socket] = set()
        super().__init__(address, SandboxHandler)

    def process_request(self, request: Any, client_address: Any) -> None:
        # Registered before the thread starts, so stop() can never miss a connection.
        thread = threading.Thread(
            target=self._serve_connection, args=(request, client_address), daemon=True
        )
        with self._lock:
            self._active[request] = thread
        thread.start()

    def _serve_connection(self, request: Any, client_address: Any) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._active.pop(request, None)

    def abort(self, request: socket.socket) -> None:
        """Make the coming close send a TCP RST instead of a FIN."""
        request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        with self._lock:
            self._aborted.add(request)

    def shutdown_request(self, request: Any) -> None:
        with self._lock:
            aborted = request in self._aborted
            self._aborted.discard(request)
        if aborted:
            request.close()  # no shutdown(SHUT_WR): that would send a FIN before the RST
        else:
            super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-answer is normal here; no traceback on stderr.
        log.debug("sandbox.connection.error", exc_info=True)

    def close_connections(self, *, timeout_s: float) -> None:
        """Wake every connection (idle keep-alive reads included) and wait for its thread."""
        with self._lock:
            active = list(self._active.items())
        for sock, _thread in active:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for _sock, thread in active:
            thread.join(timeout_s)


class SandboxHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like the real service behind a proxy
    server_version = "skuferry-sandbox"
    timeout = 30  # idle keep-alive connections are closed after this
    disable_nagle_algorithm = True  # headers and body go out in two sends: no 40 ms stalls
    server: SandboxServer

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("sandbox.http", message=format % args)

    # -- the API -------------------------------------------------------------------

    def _handle(self, method: str) -> None:
        url = urlsplit(self.path)
        if url.path.startswith("/_sandbox/"):
            self._admin(method, url.path, parse_qs(url.query))
            return
        api = self.server.api
        route = match(url.path)
        tier = tier_for(method, route)
        key = _bearer(self.headers.get("Authorization"))
        workspace = api.workspace_for(key)
        decision = api.admit(key=key, workspace=workspace, tier=tier)
        if decision is None or workspace is None:
            self._discard_body()
            self._reply(error(401, "UNAUTHORIZED", "missing or unknown API key"))
            return
        if not decision.allowed:
            self._discard_body()
            wait = decision.retry_after
            message = f"Rate limit hit ({tier}, per {decision.scope}). Retry in {wait} seconds."
            self._reply(error(429, "RATE_LIMITED", message, **{"Retry-After": str(wait)}))
            return
        faults = api.faults.faults
        if faults.garbage is not None:
            self._discard_body()
            self._garbage(faults.garbage)
            return
        fault = api.pick_fault(method, route)
        if fault == "reset":
            api.stats.fault(fault)
            # The body is read (never parsed) first, so the client is waiting on its answer
            # when the RST lands and sees a reset, not a failed send.
            self._discard_body()
            self._pause(self._latency())
            self.server.abort(self.connection)
            self.close_connection = True
            return
        body = self._read_body()
        if body is None:
            return
        if fault == "error_before_commit":
            api.stats.fault(fault)
            self._reply(error(500, "INTERNAL_ERROR", "internal server error"))
            return
        reply = api.dispatch(method, route, parse_qs(url.query), body, workspace)
        if reply.committed:
            api.stats.committed()
        if fault is not None and reply.committed:
            api.stats.fault(fault)
            if fault == "drop_after_commit":
                self._pause(self._latency())
                self.close_connection = True  # closed with no response at all
                return
            if fault == "error_after_commit":
                reply = error(500, "INTERNAL_ERROR", "internal server error")
            elif fault == "slow_after_commit":
                self._pause(faults.slow_s)
        self._reply(reply)

    # -- admin (loopback, no auth, not counted) -----------------------------------

    def _admin(self, method: str, path: str, query: dict[str, list[str]]) -> None:
        api = self.server.api
        body = self._read_body()
        if body is None:
            return
        if self.client_address[0] not in _LOOPBACK:
            self._reply(error(403, "FORBIDDEN", "sandbox admin is loopback-only"), count=False)
            return
        reply: Reply
        if (method, path) == ("GET", "/_sandbox/stats"):
            reply = Reply(200, {"data": api.snapshot().as_json(), "meta": {}})
        elif (method, path) == ("GET", "/_sandbox/products"):
            items = api.products.all(query.get("workspace", ["default"])[-1])
            reply = Reply(200, {"data": items, "meta": {"total": len(items)}})
        elif (method, path) == ("GET", "/_sandbox/updates"):  # what each PATCH/PUT carried
            items = api.received.list(query.get("workspace", ["default"])[-1])
            reply = Reply(200, {"data": items, "meta": {"total": len(items)}})
        elif (method, path) == ("POST", "/_sandbox/faults"):
            reply = _set_faults(api, body)
        elif (method, path) == ("POST", "/_sandbox/keys/revoke"):  # {"key": "..."}: now a 401
            reply = _revoke_key(api, body)
        elif (method, path) == ("POST", "/_sandbox/required"):  # the CMS's validation rule
            reply = _set_required(api, body)
        elif (method, path) == ("POST", "/_sandbox/reset"):
            api.reset()
            reply = Reply(200, {"data": {"reset": True}, "meta": {}})
        else:
            reply = error(404, "NOT_FOUND", "no such sandbox admin endpoint")
        self._reply(reply, count=False, delay=False)

    # -- bytes on the wire ---------------------------------------------------------

    def _latency(self) -> float:
        return self.server.api.config.latency_s + self.server.api.faults.faults.latency_s

    def _pause(self, seconds: float) -> None:
        if seconds > 0:
            self.server.stopping.wait(seconds)

    def _read_body(self) -> bytes | None:
        """The request body; None after answering a body the sandbox will not read."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            self.close_connection = True
            self._reply(error(411, "LENGTH_REQUIRED", "send a Content-Length"), delay=False)
            return None
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            self.close_connection = True
            self._reply(error(400, "BAD_REQUEST", "bad or oversized Content-Length"), delay=False)
            return None
        return self.rfile.read(length) if length else b""

    def _discard_body(self) -> None:
        # Keeps a keep-alive connection in step when the answer does not need the body.
        if self._read_body() is None:
            self.close_connection = True

    def _garbage(self, kind: str) -> None:
        if kind == "html":
            self._send(502, _HTML_502, "text/html; charset=utf-8", {}, count=True, delay=True)
        else:
            self._send(200, _TRUNCATED_JSON, "application/json", {}, count=True, delay=True)

    def _reply(self, reply: Reply, *, count: bool = True, delay: bool = True) -> None:
        body = canonical.dumps(reply.body).encode("utf-8")
        self._send(reply.status, body, "application/json", reply.headers, count=count, delay=delay)

    def _send(
        self,
        status: int,
        body: bytes,
        content_type: str,
        headers: dict[str, str],
        *,
        count: bool,
        delay: bool,
    ) -> None:
        if delay:
            self._pause(self._latency())
        if count:
            self.server.api.stats.responded(status)
        if self.server.stopping.is_set():
            self.close_connection = True
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name, value)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            self.close_connection = True  # the client left (timed out) before the answer


def _bearer(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def _set_faults(api: Api, body: bytes) -> Reply:
    try:
        data = parse_json(body or b"{}")
        if not isinstance(data, dict):
            raise UsageError("the body must be a JSON object of fault settings")
        faults = Faults.from_json(data)
    except (ValueError, UsageError) as exc:
        return error(400, "BAD_REQUEST", str(exc))
    api.faults.set(faults)
    return Reply(200, {"data": faults.as_json(), "meta": {}})


def _is_name(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def _body_field(body: bytes, name: str, valid: Callable[[Any], bool], usage: str) -> Any:
    """The JSON body's ``name``; a 400 Reply when the body is not JSON or it is not ``valid``."""
    try:
        data = parse_json(body or b"{}")
    except ValueError as exc:
        return error(400, "BAD_REQUEST", str(exc))
    value = data.get(name) if isinstance(data, dict) else None
    if not valid(value):
        return error(400, "BAD_REQUEST", usage)
    return value


def _revoke_key(api: Api, body: bytes) -> Reply:
    key = _body_field(body, "key", _is_name, 'the body must be {"key": "<the key to revoke>"}')
    if isinstance(key, Reply):
        return key
    if not api.revoke_key(key):
        return error(404, "NOT_FOUND", "no such key")
    return Reply(200, {"data": {"revoked": True}, "meta": {}})


def _set_required(api: Api, body: bytes) -> Reply:
    """``{"fields": ["sku", "name", "category"]}``: the fields a product must carry."""
    fields = _body_field(
        body,
        "fields",
        lambda v: isinstance(v, list) and all(_is_name(f) for f in v),
        'the body must be {"fields": ["sku", "name", ...]}',
    )
    if isinstance(fields, Reply):
        return fields
    api.config.required_fields = tuple(fields)
    return Reply(200, {"data": {"required": fields}, "meta": {}})
