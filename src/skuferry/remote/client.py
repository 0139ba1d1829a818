"""The CMS API client: the envelope, the error mapping, retries and pagination.

One ``httpx.Client`` shared by every worker thread, behind the gate (``gated_client``):
each request on the wire, retries included, is pinned to ``base_url``'s origin, then
waits for the budget's token of its tier ("read" for GET, "write" otherwise) in the
sending thread (so the urgent lane's mark counts) and goes with the key it names.
The gate never sends anything again: the retries below are this client's.

Retry policy (spec §8, "retry only on network errors, not on 4xx"):

- GET is idempotent: retried on connect errors, timeouts, resets, 5xx and 429.
- POST/PUT/PATCH are retried only when the server provably did not process
  them: the connection never opened (``Unreachable``) or a 429 RATE_LIMITED.
  After a 5xx, a timeout or a reset once the request was sent the outcome is
  unknown, so ``OutcomeUnknown`` is raised at once: the engine resolves it by
  lookup, never by re-sending (a re-POST could create a duplicate).
- 429 QUOTA_EXCEEDED and every other 4xx are final.
- A 429 waits at least ``Retry-After``; with a budget the wait is handed to
  ``budget.penalize`` so every thread of the key's tier holds back, not just this
  one. A 429 RATE_LIMITED does not count against ``max_retries``: the request is
  sent again (perhaps with another key) until ``RATE_LIMITED_GIVE_UP_S`` of
  waiting; rate limiting paces a run, it does not fail its products.
- The loop is the shared retry loop (``retrying``), as the API sources': a stop request
  (SIGTERM, the engine's stop event) ends a wait at once and raises ``Interrupted``.
- Several keys (``api_keys``): the budget names the key for each attempt; logs
  name it by its fingerprint (the key's id, ``fingerprint``), never by the key.

Error statuses are mapped by status even when the body is not the documented
envelope (a proxy's HTML 502, a framework's 405): the status is the fact that
matters. A 2xx whose body is not the envelope is ``BadResponse``.
"""

from __future__ import annotations

import functools
import itertools
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from random import Random
from typing import TYPE_CHECKING, Any, Literal, Protocol, Self
from urllib.parse import quote

import httpx
from pydantic import SecretStr

from skuferry import __version__, canonical, errors, logs, tls
from skuferry.config.keys import fingerprint
from skuferry.net.retry import Failed, backoff_delay, parse_retry_after, retrying
from skuferry.net.transport import gated_client

if TYPE_CHECKING:
    from skuferry.config.schema import Settings

log = logs.get(__name__)

Tier = Literal["read", "write"]

PRODUCTS_PATH = "/api/v1/products"
MAX_PAGE_SIZE = 100  # spec §4: limit maximum 100
# The rate window is one minute; a Retry-After far beyond it is a broken server or
# a different kind of outage. Waiting it out would hang the run, so give up instead
# (the run ends with exit 3 and the next one resumes).
MAX_RETRY_AFTER_S = 300.0
# A request refused with 429 RATE_LIMITED is sent again when the budget allows, as often
# as it takes, until the waits the server asked for add up to this: then the server is
# not pacing us but refusing us, and the product fails (retried next run).
RATE_LIMITED_GIVE_UP_S = 600.0
_HEAD_CHARS = 80
# Left on a request by the pace: its key (for the logs and the penalty) and when it left.
_KEY = "skuferry.key"
_PACED_AT = "skuferry.paced_at"
# Transport failures that prove the request never reached the server.
_NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# Transport failures worth retrying for an idempotent read.
_TRANSIENT = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


class BudgetLike(Protocol):
    """What the client needs from the CMS budget (``Budget``).

    ``acquire`` may return the fingerprint of the key to send with (several keys);
    None leaves the choice to the client. ``penalize`` is then told that key.
    """

    def acquire(self, tier: str, *, stop: threading.Event | None = None) -> str | None: ...

    def penalize(self, tier: str, seconds: float, *, key: str | None = None) -> None: ...


ProductData = dict[str, Any]  # one product as the API returns it (``data``), ``id`` included


class RemoteApi(Protocol):
    """The CMS product API as the engine sees it: ``RemoteClient``, the in-memory fake.

    Errors are the ``errors.ApiError`` tree (``NotFound``, ``MethodNotAllowed``,
    ``Rejected``, ``RateLimited``, ``OutcomeUnknown``...), whatever the transport.
    The remote contract tests hold every implementation to the same behaviour.
    """

    requests: dict[str, int]  # requests sent per tier ("read", "write"), retries included
    requests_by_key: dict[str, int]  # requests sent per API key fingerprint, retries included
    rate_limited: int  # 429 RATE_LIMITED answers seen

    def probe(self) -> int:
        """One authenticated read: the number of product pages at limit 1."""
        ...

    def iter_pages(self, *, limit: int = 100) -> Iterator[tuple[int, int, list[ProductData]]]:
        """(page, pages, items) for pages 1..meta.pages, walked sequentially."""
        ...

    def iter_products(self, *, limit: int = 100) -> Iterator[ProductData]: ...

    def get_product(self, product_id: str) -> ProductData: ...

    def create_product(self, payload: ProductData) -> ProductData:
        """POST; the answer holds the new ``id``."""
        ...

    def update_product(
        self, product_id: str, payload: ProductData, *, method: Literal["patch", "put"]
    ) -> ProductData:
        """PATCH merges the payload into the product, PUT replaces it; ``{}`` on a 204."""
        ...


@dataclass(frozen=True, slots=True)
class _Failure:
    """One failed attempt: what to raise if it is the last, and how to retry otherwise."""

    error: errors.ApiError
    reason: str  # short word for the api.retry log event (``Failed.problem``)
    retryable: bool
    retry_after: float | None = None  # from the server, when it said
    rate_limited: bool = False  # a 429 RATE_LIMITED: the wait goes to the budget


class RemoteClient:
    """Typed access to ``/api/v1/products``; safe to share between threads."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: SecretStr | None = None,
        api_keys: Sequence[SecretStr] = (),
        timeout_s: float = 30.0,
        budget: BudgetLike | None = None,
        max_retries: int = 3,
        max_connections: int = 8,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: Random | None = None,
        stop: threading.Event | None = None,
        verify: ssl.SSLContext | bool = True,  # tls.verify_for([api] ca_bundle)
    ) -> None:
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self._base = base_url.rstrip("/")
        keys = list(api_keys) or ([api_key] if api_key is not None else [])
        if not keys:
            raise ValueError("RemoteClient needs api_key or api_keys")
        # Keys by fingerprint: the budget names the key to use, logs name it the same way.
        self._keys = {fingerprint(k): k for k in keys}
        self._turn = itertools.cycle(list(self._keys))  # without a budget: take turns
        self._budget = budget
        self._max_retries = max_retries
        self._sleep = sleep
        self._rng = rng if rng is not None else Random()
        self._stop = stop
        self._lock = threading.Lock()
        self.requests: dict[str, int] = {"read": 0, "write": 0}
        self.requests_by_key: dict[str, int] = {}  # by key fingerprint, retries included
        self.rate_limited = 0
        # Pinned to base_url's origin, the key with it; no redirect is followed (one would
        # turn a POST into a GET and carry the key). The gate paces each request with the
        # budget (``_pace``), which puts on the key it names.
        self._http = gated_client(
            home=self._base,
            pace=self._pace,
            transport=transport,
            verify=verify,
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
            timeout=httpx.Timeout(timeout_s),
            headers={"Accept": "application/json", "User-Agent": f"skuferry/{__version__}"},
        )

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        stop: threading.Event | None,
        budget: BudgetLike | None = None,
        max_retries: int | None = None,
    ) -> Self:
        """The client a run uses: ``[api]`` settings, the key, one connection per writer + 2.

        ``budget`` is the caller's to open and close (``check`` runs without one);
        ``max_retries`` overrides ``[api] max_retries`` (``check`` tries once more, not 3x).
        """
        api = settings.api
        return cls(
            base_url=api.base_url,
            api_keys=settings.api_keys,
            timeout_s=api.timeout_s,
            budget=budget,
            max_retries=api.max_retries if max_retries is None else max_retries,
            max_connections=api.max_in_flight + 2,
            stop=stop,
            verify=tls.verify_for(api.ca_bundle, key="api.ca_bundle"),
        )

    def __repr__(self) -> str:
        return f"RemoteClient(base_url={self._base!r})"

    # -- lifecycle ---------------------------------------------------------

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RemoteClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- public operations -------------------------------------------------

    def probe(self) -> int:
        """One authenticated read (for ``check``): the number of product pages."""
        _items, pages = self._list_page(page=1, limit=1)
        return pages

    def iter_pages(self, *, limit: int = 100) -> Iterator[tuple[int, int, list[dict[str, Any]]]]:
        """Walk the product list sequentially: (page, pages, items) for pages 1..meta.pages.

        ``meta.pages`` is re-read from every page and the walk goes on to the latest
        count, so a catalog that grows or shrinks during the walk is followed (a page
        past the new count is still yielded, so the caller sees the count change).
        Every page is yielded as it came, empty or short ones included: whether the
        pages add up to the whole list is the caller's judgement (the walk's proof),
        not this loop's. Pages reported beyond twice the first count plus ten: the
        server is treated as broken (``BadResponse``) rather than walked forever.
        """
        if not 1 <= limit <= MAX_PAGE_SIZE:
            raise ValueError(f"limit must be 1..{MAX_PAGE_SIZE}, got {limit}")
        page = 1
        ceiling: int | None = None
        while True:
            items, pages = self._list_page(page=page, limit=limit)
            if ceiling is None:
                ceiling = 2 * pages + 10
            if pages > ceiling:
                raise errors.BadResponse(
                    f"the product list kept growing past {ceiling} pages",
                    status=200,
                    content_type="application/json",
                    head="",
                )
            if page == 1 and pages == 0:  # an empty catalog (a page of items was refused)
                return
            yield page, pages, items
            if page >= pages:
                return
            page += 1

    def iter_products(self, *, limit: int = 100) -> Iterator[dict[str, Any]]:
        for _page, _pages, items in self.iter_pages(limit=limit):
            yield from items

    def get_product(self, product_id: str) -> dict[str, Any]:
        response = self._call("GET", self._product_path(product_id))
        return self._object(response, _envelope(response, self._scrub))

    def create_product(self, payload: dict[str, Any]) -> dict[str, Any]:
        """POST a product; the returned ``data`` always holds the new ``id``."""
        response = self._call("POST", PRODUCTS_PATH, body=payload)
        data = self._object(response, _envelope(response, self._scrub))
        if data.get("id") in (None, ""):
            raise _bad("created product has no data.id", response, self._scrub)
        return data

    def update_product(
        self, product_id: str, payload: dict[str, Any], *, method: Literal["patch", "put"]
    ) -> dict[str, Any]:
        """PATCH or PUT one product; a 204 (no body) answers with an empty dict."""
        if method not in ("patch", "put"):
            raise ValueError(f"method must be 'patch' or 'put', got {method!r}")
        verb = "PATCH" if method == "patch" else "PUT"
        response = self._call(verb, self._product_path(product_id), body=payload)
        if response.status_code == 204:
            return {}
        return self._object(response, _envelope(response, self._scrub))

    # -- envelope helpers --------------------------------------------------

    def _list_page(self, *, page: int, limit: int) -> tuple[list[dict[str, Any]], int]:
        response = self._call("GET", PRODUCTS_PATH, params={"limit": limit, "page": page})
        body = _envelope(response, self._scrub)
        data, meta = body["data"], body.get("meta")
        if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
            raise _bad("list data is not an array of objects", response, self._scrub)
        pages = meta.get("pages") if isinstance(meta, dict) else None
        if not isinstance(pages, int) or isinstance(pages, bool) or pages < 0:
            raise _bad("list meta.pages is not an integer >= 0", response, self._scrub)
        if pages == 0 and data:
            raise _bad("list reports 0 pages but holds items", response, self._scrub)
        return data, pages

    def _object(self, response: httpx.Response, body: dict[str, Any]) -> dict[str, Any]:
        data = body["data"]
        if not isinstance(data, dict):
            raise _bad("data is not an object", response, self._scrub)
        return data

    def _product_path(self, product_id: str) -> str:
        if not product_id:
            raise ValueError("product_id must not be empty")
        return f"{PRODUCTS_PATH}/{quote(str(product_id), safe='')}"

    def _scrub(self, text: str) -> str:
        # Server text goes into exception messages; a server that echoes the
        # credential back must not get it into our logs.
        for key in self._keys.values():
            secret = key.get_secret_value()
            if secret:
                text = text.replace(secret, "***")
        return text

    # -- the attempt loop --------------------------------------------------

    def _call(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, int] | None = None,
        body: dict[str, Any] | None = None,
    ) -> httpx.Response:
        """Send with retries (each through the gate); a 2xx/3xx response or the ApiError."""
        tier = _tier(method)
        content = None if body is None else canonical.dumps(body).encode("utf-8")
        headers = {} if content is None else {"Content-Type": "application/json"}
        what = f"{method} {path}"
        key = ""  # the key of the latest attempt, for the retry log and the penalty
        limited_s = 0.0  # the waits 429 RATE_LIMITED answers asked for

        def attempt() -> httpx.Response | Failed:
            nonlocal key
            request = self._http.build_request(
                method, self._base + path, params=params, content=content, headers=headers
            )
            outcome = self._attempt(request, path, tier)
            key = request.extensions.get(_KEY, "")
            if isinstance(outcome, httpx.Response):
                return outcome
            # Being told to slow down is not a failure of the request: wait (another key
            # may take it) and send again, unless the refusals last too long. Other
            # transient failures: at most max_retries (the reference client's 3).
            paced = outcome.rate_limited and self._max_retries > 0
            if not outcome.retryable or (paced and limited_s >= RATE_LIMITED_GIVE_UP_S):
                raise outcome.error
            defer = None
            if outcome.rate_limited and self._budget is not None:
                defer = functools.partial(self._penalize, tier, key)
            return Failed(
                outcome.reason,
                wait=outcome.retry_after,
                counted=not paced,
                error=outcome.error,
                defer=defer,
            )

        def on_retry(failed: Failed, retry: int, wait: float) -> None:
            nonlocal limited_s
            if not failed.counted:
                limited_s += wait
            log.info(
                "api.retry",
                reason=failed.problem,
                attempt=retry,
                wait_s=round(wait, 3),
                request=what,
                key=key,
            )

        return retrying(
            attempt,
            retries=self._max_retries,
            backoff=lambda retry: backoff_delay(retry, rng=self._rng),
            give_up=lambda failed, _attempts: failed.error or errors.ApiError(failed.problem),
            on_retry=on_retry,
            stop=self._stop,
            sleep=self._sleep,
            what=what,
        )

    def _pace(self, request: httpx.Request) -> None:
        """The gate's pace, once per request on the wire, in the sending thread (whose
        urgency the budget reads): wait for a token, then put on the key it names."""
        if self._stop is not None and self._stop.is_set():
            raise errors.Interrupted("stop requested; no new API request started")
        tier = _tier(request.method)
        key = self._budget.acquire(tier, stop=self._stop) if self._budget is not None else None
        with self._lock:
            self.requests[tier] += 1
            if key not in self._keys:
                key = next(self._turn)
            self.requests_by_key[key] = self.requests_by_key.get(key, 0) + 1
        request.headers["Authorization"] = f"Bearer {self._keys[key].get_secret_value()}"
        request.extensions[_KEY] = key
        request.extensions[_PACED_AT] = time.monotonic()

    def _attempt(self, request: httpx.Request, path: str, tier: Tier) -> httpx.Response | _Failure:
        method = request.method
        try:
            response = self._http.send(request)
        except httpx.TransportError as exc:
            log.debug(
                "api.request",
                method=method,
                path=path,
                status=None,
                error=type(exc).__name__,
                ms=_ms(request.extensions[_PACED_AT]),
            )
            return _transport_failure(method, path, tier, exc, base=self._base)
        log.debug(
            "api.request",
            method=method,
            path=path,
            status=response.status_code,
            ms=_ms(request.extensions[_PACED_AT]),
        )
        if response.status_code < 400:
            return response
        return self._status_failure(method, path, tier, response, key=request.extensions[_KEY])

    def _status_failure(
        self, method: str, path: str, tier: Tier, response: httpx.Response, *, key: str = ""
    ) -> _Failure:
        status = response.status_code
        code, message = _error_fields(response, self._scrub)
        if status == 429 and code != "QUOTA_EXCEEDED":
            retry_after = parse_retry_after(
                response.headers.get("Retry-After"), date_header=response.headers.get("Date")
            )
            with self._lock:
                self.rate_limited += 1
            log.warning(
                "api.rate_limited",
                tier=tier,
                retry_after=retry_after,
                method=method,
                path=path,
                key=key,  # the fingerprint, never the key
            )
            too_long = retry_after is not None and retry_after > MAX_RETRY_AFTER_S
            return _Failure(
                errors.RateLimited(status, code, message, retry_after=retry_after),
                "rate_limited",
                retryable=not too_long,
                retry_after=retry_after,
                rate_limited=True,
            )
        if status >= 500:
            if tier == "write":
                return _Failure(
                    errors.OutcomeUnknown(
                        f"{method} {path} answered HTTP {status} {code}: {message}; "
                        "the write may have been applied"
                    ),
                    "server_error",
                    retryable=False,
                )
            retry_after = parse_retry_after(
                response.headers.get("Retry-After"), date_header=response.headers.get("Date")
            )
            if retry_after is not None and retry_after > MAX_RETRY_AFTER_S:
                retry_after = None
            return _Failure(
                errors.ServerError(status, code, message),
                "server_error",
                retryable=True,
                retry_after=retry_after,
            )
        return _Failure(_client_error(status, code, message), "client_error", retryable=False)

    def _penalize(self, tier: Tier, key: str, seconds: float) -> None:
        """A 429's wait handed to the budget: it holds back every thread of this key's tier
        (other keys go on); our next acquire waits it out or takes another key."""
        if self._budget is None:  # pragma: no cover - deferred only with a budget
            return
        if len(self._keys) > 1:
            self._budget.penalize(tier, seconds, key=key)
        else:
            self._budget.penalize(tier, seconds)


def _tier(method: str) -> Tier:
    """The budget tier a request spends: GET reads, every other method writes."""
    return "read" if method == "GET" else "write"


def _ms(started: float) -> int:
    return round((time.monotonic() - started) * 1000)


def _transport_failure(
    method: str, path: str, tier: Tier, exc: httpx.TransportError, *, base: str = ""
) -> _Failure:
    kind = type(exc).__name__
    if isinstance(exc, _NEVER_SENT):
        return _Failure(
            errors.Unreachable(f"{method} {base}{path}: cannot reach the API ({kind}: {exc})"),
            "unreachable",
            retryable=True,
        )
    if tier == "write":
        return _Failure(
            errors.OutcomeUnknown(
                f"{method} {path}: {kind} after the request was sent; "
                "the write may have been applied"
            ),
            "transport",
            retryable=False,
        )
    return _Failure(
        errors.TransportError(f"{method} {path}: no response from the API ({kind})"),
        "transport",
        retryable=isinstance(exc, _TRANSIENT),
    )


def _client_error(status: int, code: str, message: str) -> errors.HttpError:
    if status == 429:  # only QUOTA_EXCEEDED reaches here
        return errors.QuotaExceeded(status, code, message)
    if status in (401, 403):
        return errors.AuthError(status, code, message)
    if status == 404:
        return errors.NotFound(status, code, message)
    if status == 405:
        return errors.MethodNotAllowed(status, code, message)
    return errors.Rejected(status, code, message)


def _head(response: httpx.Response, scrub: Callable[[str], str]) -> str:
    return scrub(response.content[: _HEAD_CHARS * 4].decode("utf-8", "replace")[:_HEAD_CHARS])


def _bad(message: str, response: httpx.Response, scrub: Callable[[str], str]) -> errors.BadResponse:
    return errors.BadResponse(
        message,
        status=response.status_code,
        content_type=response.headers.get("Content-Type", ""),
        head=_head(response, scrub),
    )


def _envelope(response: httpx.Response, scrub: Callable[[str], str]) -> dict[str, Any]:
    """The success envelope as a dict holding ``data``, or BadResponse."""
    if not 200 <= response.status_code < 300:
        raise _bad("unexpected status (redirects are not followed)", response, scrub)
    try:
        body = canonical.loads(response.content)
    except (ValueError, RecursionError):
        raise _bad("response is not JSON", response, scrub) from None
    if not isinstance(body, dict) or "data" not in body:
        raise _bad("response is not the {data, meta} envelope", response, scrub)
    return body


def _error_fields(response: httpx.Response, scrub: Callable[[str], str]) -> tuple[str, str]:
    """(code, message) from an error envelope; falls back to the start of the body."""
    try:
        body = canonical.loads(response.content)
    except (ValueError, RecursionError):
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        code, message = error.get("code"), error.get("message")
        return (
            code if isinstance(code, str) else "",
            scrub(message) if isinstance(message, str) else "",
        )
    return "", repr(_head(response, scrub))
