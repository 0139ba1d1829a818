"""The daemon's routes as one WSGI application: requests in, responses out, nothing else.

A ``Router`` maps ``(method, path pattern)`` to a handler that takes a ``Request``
and returns a ``Response``. A pattern's ``<name>`` segment matches one path
segment and reaches the handler in ``Request.params`` (``/hooks/<name>/sync``).
The server around it (``http_server``) owns sockets, limits and timeouts; a handler
sees a request only once it has arrived whole, and never touches the connection.

WSGI keeps the two apart: any WSGI application (a page rendered with Jinja2,
another framework's app) can be served by the same hardened server.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from skuferry import logs

log = logs.get(__name__)

JSON = "application/json"


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: str
    headers: Mapping[str, str]  # lowercase names
    body: bytes
    params: Mapping[str, str] = field(default_factory=dict)  # the pattern's <name> segments
    peer: str = ""


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str
    headers: tuple[tuple[str, str], ...] = ()  # more than one Set-Cookie is fine

    @classmethod
    def json(cls, status: int, data: Any) -> Response:
        return cls(status, json.dumps(data).encode(), JSON)


Handler = Callable[[Request], Response]
StartResponse = Callable[..., Any]

_SEGMENT = re.compile(r"<([a-z_]+)>")


@dataclass(frozen=True)
class _Route:
    method: str
    pattern: re.Pattern[str]
    handler: Handler


class Router:
    """A WSGI application over ``add``-ed routes; no match gets ``not_found``."""

    def __init__(self, not_found: Response | None = None) -> None:
        self._routes: list[_Route] = []
        self._not_found = not_found or Response.json(404, {"error": "not found"})

    def add(self, method: str, pattern: str, handler: Handler) -> Router:
        regex = "".join(
            f"(?P<{part}>[^/]+)" if i % 2 else re.escape(part)
            for i, part in enumerate(_SEGMENT.split(pattern))
        )
        self._routes.append(_Route(method.upper(), re.compile(regex), handler))
        return self

    def answer(self, request: Request) -> Response:
        """The response for ``request`` (HEAD is GET without the body)."""
        method = "GET" if request.method == "HEAD" else request.method
        allowed = []
        for route in self._routes:
            match = route.pattern.fullmatch(request.path)
            if match is None:
                continue
            if route.method != method:
                allowed.append(route.method)
                continue
            params = match.groupdict()
            return route.handler(
                Request(
                    request.method,
                    request.path,
                    request.query,
                    request.headers,
                    request.body,
                    params,
                    request.peer,
                )
            )
        if allowed:
            answer = Response.json(405, {"error": f"use {' or '.join(sorted(set(allowed)))}"})
            return Response(
                answer.status, answer.body, answer.content_type, (("Allow", ", ".join(allowed)),)
            )
        return self._not_found

    def __call__(
        self, environ: Mapping[str, Any], start_response: StartResponse
    ) -> Iterable[bytes]:
        request = request_of(environ)
        try:
            response = self.answer(request)
        except Exception:  # a bug in a handler: one event with its traceback, and a 500
            log.exception("daemon.http.failed", method=request.method, path=request.path)
            response = Response.json(500, {"error": "internal error; see the daemon's log"})
        log.debug(
            "daemon.http.request", method=request.method, path=request.path, status=response.status
        )
        headers = [
            ("Content-Type", response.content_type),
            ("Content-Length", str(len(response.body))),
            ("Cache-Control", "no-store"),
            *response.headers,
        ]
        start_response(f"{response.status} {HTTPStatus(response.status).phrase}", headers)
        return [b"" if request.method == "HEAD" else response.body]


def request_of(environ: Mapping[str, Any]) -> Request:
    """The ``Request`` of a WSGI environ; the server has already buffered the whole body."""
    headers = {
        key[5:].replace("_", "-").lower(): value
        for key, value in environ.items()
        if key.startswith("HTTP_")
    }
    for key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(key):
            headers[key.replace("_", "-").lower()] = environ[key]
    length = headers.get("content-length", "")
    body = environ["wsgi.input"].read(int(length)) if length.isdigit() else b""
    return Request(
        method=environ.get("REQUEST_METHOD", "GET").upper(),
        path=environ.get("PATH_INFO", "") or "/",
        query=environ.get("QUERY_STRING", ""),
        headers=headers,
        body=body,
        peer=environ.get("REMOTE_ADDR", ""),
    )
