"""The gate every outgoing request passes: pinned to its origins, then paced, then sent.

``Gate`` is an ``httpx.BaseTransport`` in front of the real one, so it sees each
request that goes on the wire: a retry, a redirect hop followed by hand and an
OAuth2 re-send after a 401 alike. It does two things, in this order:

- **pinning**: a request whose origin is not the configured one (or one of the
  ``allowed_origins``) is refused before anything, credentials included, is sent
  there (``OffOriginError``; the origin rule itself is ``check_same_origin``'s);
- **pacing**: the caller's ``pace`` hook is called (the CMS client's budget, an API
  source's ``requests_per_minute``). The policy stays with its owner; the gate only
  makes sure it is asked once per request, in the sending thread (a policy may read
  that thread's context). A hook may also put the request's credentials on, so they
  are added only to a request that passed the pin, and leave what it chose in
  ``request.extensions`` for the sender (the CMS client's key, for its retry log).

The gate never retries anything: whether a request may be sent again (a write may
have been applied) is the caller's to know.

``gated_client`` builds an ``httpx.Client`` behind a gate. httpx routes a request
to an environment proxy's own transport past the one it was given, so the client
reads no proxy settings itself; the inner transport gets the environment's proxy for
the home URL instead, and every request still passes the gate.
"""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any

import httpx

from skuferry.errors import SkuferryError, SourceError
from skuferry.net.origins import Origin, check_same_origin

Pace = Callable[[httpx.Request], None]


class OffOriginError(SkuferryError):
    """A request refused by the gate: it would have left the configured origins.

    The message is the origin rule's; the caller prefixes what was being fetched.
    """


class Gate(httpx.BaseTransport):
    """Pin each request to ``home``'s origin (and ``allowed``), then ``pace`` it, then send."""

    def __init__(
        self,
        inner: httpx.BaseTransport,
        *,
        home: str | None,
        allowed: Iterable[Origin] = (),
        pace: Pace | None = None,
    ) -> None:
        self._inner = inner
        self._home = home
        self._allowed = frozenset(allowed)
        self._pace = pace

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self._home is not None:
            try:
                check_same_origin(self._home, str(request.url), self._allowed)
            except SourceError as exc:
                raise OffOriginError(str(exc)) from None
        if self._pace is not None:
            self._pace(request)
        return self._inner.handle_request(request)

    def close(self) -> None:
        self._inner.close()


def gated_client(
    *,
    home: str | None,
    allowed: Iterable[Origin] = (),
    pace: Pace | None = None,
    transport: httpx.BaseTransport | None = None,
    verify: Any = True,
    limits: httpx.Limits | None = None,
    **options: Any,
) -> httpx.Client:
    """An ``httpx.Client`` whose every request passes a ``Gate``; it follows no redirect.

    ``transport`` (tests: a mock) replaces the network; otherwise the inner transport is
    httpx's own, with ``verify``, ``limits`` and the environment's proxy for each origin.
    ``options`` are the client's (headers, auth, timeout).
    """
    inner = transport
    if inner is None:
        inner = _ProxiedByOrigin(
            verify=verify,
            limits=limits or httpx.Limits(max_connections=100, max_keepalive_connections=20),
        )
    return httpx.Client(
        transport=Gate(inner, home=home, allowed=allowed, pace=pace),
        follow_redirects=False,
        trust_env=False,  # the proxy is the inner transport's: none may route past the gate
        **options,
    )


class _ProxiedByOrigin(httpx.BaseTransport):
    """httpx's transport, one per origin, each with the environment's proxy for that origin
    (``NO_PROXY`` asked per host), as httpx would pick it itself: a redirect or a next
    link to another allowed host goes the way that host is configured to."""

    def __init__(self, *, verify: Any, limits: httpx.Limits) -> None:
        self._verify, self._limits = verify, limits
        self._by_origin: dict[tuple[str, str, int | None], httpx.HTTPTransport] = {}
        self._lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        origin = (url.scheme, url.host, url.port)
        with self._lock:
            transport = self._by_origin.get(origin)
            if transport is None:
                proxy = _environment_proxy(str(url))
                transport = httpx.HTTPTransport(
                    verify=self._verify, limits=self._limits, proxy=proxy
                )
                self._by_origin[origin] = transport
        return transport.handle_request(request)

    def close(self) -> None:
        with self._lock:
            for transport in self._by_origin.values():
                transport.close()
            self._by_origin.clear()


def _environment_proxy(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``HTTPS_PROXY``...), unless ``NO_PROXY``."""
    parsed = httpx.URL(url)
    if urllib.request.proxy_bypass(parsed.host):
        return None
    proxies = urllib.request.getproxies()
    return proxies.get(parsed.scheme) or proxies.get("all")
