"""The plumbing every test server shares: a threaded loopback HTTP(S) server that records
each request, scripted faults, bearer tokens that expire on demand, and the ``__main__``
runner.

A system's server subclasses :class:`ApiServer` and implements ``handle(request)``,
returning a :class:`Response`. Tests use it as a context manager::

    with AkeneoServer(products) as srv:
        httpx.get(srv.url + "/api/rest/v1/products", ...)
        srv.fail_page(2)                # the next request for page 2 answers 500
        srv.requests[-1].query          # what the client sent
        srv.counts["products"]          # how many list pages were served
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import secrets
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from skuferry.sandbox.threaded import ThreadedServer


@dataclass(frozen=True)
class Request:
    """One request as the server received it. Header names are lower-cased."""

    method: str
    path: str  # without the query
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    target: str  # path and query, as sent

    def arg(self, name: str, default: str | None = None) -> str | None:
        """The last value of query parameter ``name``."""
        values = self.query.get(name)
        return values[-1] if values else default

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    def json(self) -> Any:
        return json.loads(self.body)

    def basic_auth(self) -> tuple[str, str] | None:
        """The (user, password) of an ``Authorization: Basic`` header, if well formed."""
        value = self.header("authorization") or ""
        scheme, _, encoded = value.partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            user, sep, password = base64.b64decode(encoded, validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        return (user, password) if sep else None

    def bearer(self) -> str | None:
        """The token of an ``Authorization: Bearer`` header (scheme case-insensitive)."""
        scheme, _, token = (self.header("authorization") or "").partition(" ")
        return token.strip() if scheme.lower() == "bearer" and token.strip() else None


@dataclass
class Response:
    status: int = 200
    body: Any = None  # JSON-serialisable, or bytes sent as they are
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Fault:
    """Answer ``status`` instead of the real answer, ``times`` times (None: every time).

    With ``page`` set, only a request for that page (1-based) of a product listing matches;
    otherwise any request whose path and query contain ``match``. ``body`` None means the
    system's own error body for ``status``.
    """

    status: int = 500
    page: int | None = None
    match: str = ""
    times: int | None = 1
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


class Tokens:
    """Access (and refresh) tokens a server issued, and when each stops working.

    ``lifetime`` seconds is what ``expires_in`` announces and is enforced on the clock;
    ``expire_after = K`` ends each access token after K successful API requests (the
    K+1-th gets the system's "expired" answer), to make a token run out mid-pull.
    """

    def __init__(self, *, lifetime: int = 3600, clock: Callable[[], float] = time.monotonic):
        self.lifetime = lifetime
        self.expire_after: int | None = None
        self.clock = clock
        self.issued = 0
        self._access: dict[str, tuple[float, int]] = {}  # token -> (deadline, uses)
        self._refresh: set[str] = set()
        self._lock = threading.Lock()

    def issue(self, *, refresh: bool = False, prefix: str = "") -> tuple[str, str | None]:
        access = prefix + secrets.token_urlsafe(32)
        refresh_token = prefix + secrets.token_urlsafe(32) if refresh else None
        with self._lock:
            self.issued += 1
            self._access[access] = (self.clock() + self.lifetime, 0)
            if refresh_token:
                self._refresh.add(refresh_token)
        return access, refresh_token

    def redeem_refresh(self, token: str) -> bool:
        """Use up a refresh token (they are single-use, rotated with each renewal)."""
        with self._lock:
            if token in self._refresh:
                self._refresh.discard(token)
                return True
        return False

    def check(self, token: str | None) -> str:
        """ "ok" (and count the use), "missing", "invalid" or "expired"."""
        if not token:
            return "missing"
        with self._lock:
            entry = self._access.get(token)
            if entry is None:
                return "invalid"
            deadline, uses = entry
            if self.clock() >= deadline or (
                self.expire_after is not None and uses >= self.expire_after
            ):
                return "expired"
            self._access[token] = (deadline, uses + 1)
        return "ok"

    def expire_all(self) -> None:
        """Every access token issued so far is expired from now on."""
        with self._lock:
            self._access = {t: (float("-inf"), u) for t, (_, u) in self._access.items()}


class ApiServer(ThreadedServer):
    """A loopback server on ``host`` (any of 127.0.0.0/8), port 0 by default, in a thread."""

    name = "api"

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.requests: list[Request] = []
        self.faults: list[Fault] = []
        self.counts: Counter[str] = Counter()
        self.lock = threading.RLock()
        self._tls = ssl_context is not None
        self._httpd = ThreadingHTTPServer((host, port), _handler_for(self))
        self._httpd.daemon_threads = True
        if ssl_context is not None:
            self._httpd.socket = ssl_context.wrap_socket(self._httpd.socket, server_side=True)

    # -- life cycle ---------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The origin, e.g. ``http://127.0.0.1:41234`` (no trailing slash)."""
        host, port = self._httpd.server_address[:2]
        return f"{'https' if self._tls else 'http'}://{host!s}:{port}"

    def count(self, name: str) -> None:
        """One more of ``name`` (a token grant, a list page) in ``counts``."""
        with self.lock:
            self.counts[name] += 1

    # -- faults -------------------------------------------------------------------------

    def throttle(self, times: int = 1, *, retry_after: int = 1) -> Fault:
        """The next ``times`` requests answer 429 with ``Retry-After`` and the system's body.

        For the APIs that document a 429 (Akeneo, Business Central); Shopify's GraphQL
        throttling is an HTTP 200 instead (``ShopifyServer.throttle_next``).
        """
        return self.fail(429, times=times, headers={"Retry-After": str(retry_after)})

    def fail_page(self, page: int, status: int = 500, *, times: int | None = 1) -> Fault:
        """The next ``times`` requests for listing page ``page`` (1-based) answer ``status``."""
        fault = Fault(status=status, page=page, times=times)
        with self.lock:
            self.faults.append(fault)
        return fault

    def fail(
        self,
        status: int,
        *,
        match: str = "",
        times: int | None = 1,
        headers: dict[str, str] | None = None,
    ) -> Fault:
        """The next ``times`` requests whose path+query contain ``match`` answer ``status``."""
        fault = Fault(status=status, match=match, times=times, headers=dict(headers or {}))
        with self.lock:
            self.faults.append(fault)
        return fault

    def page_fault(self, page: int) -> Response | None:
        """For list handlers: the scripted answer for this page, if one is due."""
        return self._take(lambda f: f.page == page)

    def _take(self, matches: Callable[[Fault], bool]) -> Response | None:
        with self.lock:
            for fault in self.faults:
                if (fault.times is None or fault.times > 0) and matches(fault):
                    if fault.times is not None:
                        fault.times -= 1
                    body = fault.body if fault.body is not None else self.error_body(fault.status)
                    return Response(fault.status, body, dict(fault.headers))
        return None

    # -- what a system implements -------------------------------------------------------

    def error_body(self, status: int) -> Any:
        """The system's error body for an injected ``status``."""
        return {"error": f"injected {status}"}

    def handle(self, request: Request) -> Response:
        raise NotImplementedError

    def dispatch(self, request: Request) -> Response:
        with self.lock:
            self.requests.append(request)
        fault = self._take(lambda f: f.page is None and f.match in request.target)
        if fault is not None:
            return fault
        return self.handle(request)

    def requests_to(self, path_part: str) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if path_part in r.path]


def _handler_for(server: ApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            pass  # tests read server.requests

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            parts = urlsplit(self.path)
            request = Request(
                method=self.command,
                path=parts.path,
                query=parse_qs(parts.query, keep_blank_values=True),
                headers={k.lower(): v for k, v in self.headers.items()},
                body=body,
                target=self.path,
            )
            try:
                response = server.dispatch(request)
            except Exception as exc:  # noqa: BLE001 - a server bug must answer, not hang the client
                response = Response(500, {"error": f"test server bug: {exc!r}"})
            raw = response.body
            if not isinstance(raw, bytes):
                raw = json.dumps(raw, default=_json_default, ensure_ascii=False).encode()
            self.send_response(response.status)
            headers = {"Content-Type": "application/json; charset=utf-8", **response.headers}
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve  # noqa: N815

    return Handler


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)  # repr(float) keeps "12.5" as 12.5: a JSON number, as typed
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot serialise {type(value).__name__}")


def utc(text: str) -> datetime:
    """ISO 8601 or ``YYYY-MM-DD HH:MM:SS`` (``Z``, offset, or naive meaning UTC)."""
    when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def unb64(token: str) -> str:
    return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()


def https_context(ca: Any, host: str = "127.0.0.1") -> ssl.SSLContext:
    """A server-side TLS context with a certificate for ``host`` issued by trustme ``ca``."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert(host).configure_cert(context)
    return context


def run_main(
    argv: Sequence[str] | None,
    *,
    description: str,
    default_port: int,
    build: Callable[[argparse.Namespace], tuple[ApiServer, dict[str, Any]]],
    extra: Callable[[argparse.ArgumentParser], None] | None = None,
    ready: Callable[[str], None] = print,
) -> None:
    """``python -m skuferry.sandbox.pims.<system> --port N --products M``: serve until Ctrl-C.

    Prints one JSON line saying where the server is and which credentials it accepts
    (test values, made up for the demo).
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--port", type=int, default=default_port)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--products", type=int, default=250, help="generate N products")
    if extra is not None:
        extra(parser)
    args = parser.parse_args(argv)
    server, info = build(args)
    ready(json.dumps({"url": server.url, "products": args.products, **info}))
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


@contextlib.contextmanager
def running(*servers: ApiServer) -> Iterator[None]:
    """Start several servers together (e.g. an API and its token endpoint)."""
    with contextlib.ExitStack() as stack:
        for server in servers:
            stack.enter_context(server)
        yield
