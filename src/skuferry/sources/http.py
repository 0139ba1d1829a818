"""``[source] type = "http"``: a PIM's JSON API, walked page by page.

One page is in memory at a time. Every GET is paced (``requests_per_minute``)
and retried with exponential backoff and jitter on connect errors, timeouts,
5xx and 429 (waiting at least ``Retry-After``). A page that still fails, or a
page that is not what was promised (not JSON, no list at ``items_path``),
raises ``SourceError``: a pull that stopped half way must never look complete,
or the products on the missing pages would be taken for gone.

Pagination styles: ``page`` (page number + size, optionally a total page count
in the body), ``offset`` (offset + size, optionally a total), ``cursor``
(a token from the body sent back as a parameter, ``search_after`` style) and
``next_link`` (a URL at ``next_path`` in the body or an RFC 8288
``Link: <...>; rel="next"`` header, relative links resolved).
"""

from __future__ import annotations

import email.utils
import itertools
import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx

from skuferry import canonical, logs
from skuferry.config.sources import HttpSourceSettings, read_secret
from skuferry.errors import ConfigError, SourceError
from skuferry.models import BadRecord, RawRecord
from skuferry.sources.base import Source, register

log = logs.get(__name__)

_BACKOFF_BASE_S = 0.5
_BACKOFF_CAP_S = 30.0
_SECRET_PARAM_HINTS = ("token", "key", "secret", "password", "sig", "auth")


def safe_url(url: str | httpx.URL) -> str:
    """The URL with credentials in userinfo and secret-looking query values masked."""
    parts = urlsplit(str(url))
    netloc = parts.netloc.rpartition("@")[2]
    query = urlencode(
        [
            (k, "***" if any(h in k.lower() for h in _SECRET_PARAM_HINTS) else v)
            for k, v in parse_qsl(parts.query, keep_blank_values=True)
        ],
        safe="*",
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def dig(body: Any, path: str) -> tuple[bool, Any]:
    """Follow a dotted path into nested objects: ``(found, value)``; "" is the body."""
    node = body
    for part in path.split(".") if path else ():
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def retry_after_s(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta seconds or an HTTP date)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


@dataclass(frozen=True, slots=True)
class _Page:
    number: int
    url: httpx.URL
    body: Any
    next_header: str | None  # the rel="next" target of a Link header, if any


class HttpSource(Source):
    """Streams the records of a paginated JSON API."""

    def __init__(
        self,
        settings: HttpSourceSettings,
        *,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self._transport = transport
        self._sleep = sleep
        self._clock = clock
        self._rng = rng or random.Random()
        self._last_request_at: float | None = None
        self._headers = dict(settings.headers)
        self._auth: httpx.Auth | None = None
        s = settings
        if s.auth == "bearer":
            token = read_secret(inline=s.token, file=s.token_file, env_name=s.token_env,
                                key="token", env=env)
            if token is None:  # the settings model requires one; guards a model built by hand
                raise ConfigError(['at \'source.token\': auth = "bearer" needs a token'])
            self._headers["Authorization"] = f"Bearer {token.get_secret_value()}"
        elif s.auth == "basic":
            password = read_secret(inline=s.password, file=s.password_file,
                                   env_name=s.password_env, key="password", env=env)
            if password is None or s.username is None:
                raise ConfigError(['at \'source.password\': auth = "basic" needs a username '
                                   "and a password"])
            self._auth = httpx.BasicAuth(s.username, password.get_secret_value())

    def describe(self) -> str:
        return f"http {safe_url(self.settings.url)}"

    def records(self) -> Iterator[RawRecord | BadRecord]:
        line = 0
        with httpx.Client(
            headers=self._headers,
            auth=self._auth,
            timeout=self.settings.timeout_s,
            follow_redirects=True,
            transport=self._transport,
        ) as client:
            for page in self._pages(client):
                items = self._items(page)
                for item in items:
                    line += 1
                    if isinstance(item, dict):
                        yield RawRecord(line=line, fields=item)
                    else:
                        yield BadRecord(
                            line=line,
                            reason=f"record {line} (page {page.number}): expected a JSON "
                            f"object, got {type(item).__name__}",
                        )
        log.info("source.http.done", url=safe_url(self.settings.url), records=line)

    # -- walking the pages -------------------------------------------------------------

    def _pages(self, client: httpx.Client) -> Iterator[_Page]:
        walk = {
            "page": self._by_page_number,
            "offset": self._by_offset,
            "cursor": self._by_cursor,
        }.get(self.settings.pagination, self._by_next_link)
        return walk(client)

    def _sized(self) -> dict[str, Any]:
        s = self.settings
        return {s.size_param: s.page_size} if s.size_param else {}

    def _by_page_number(self, client: httpx.Client) -> Iterator[_Page]:
        s = self.settings
        for number in itertools.count(1):
            params = {**self._sized(), s.page_param: s.first_page + number - 1}
            page = self._get(client, s.url, params, number)
            yield page
            total = self._number_at(page, s.total_pages_path)
            count = len(self._items(page))
            if count == 0 or (number >= total if total is not None else count < s.page_size):
                return

    def _by_offset(self, client: httpx.Client) -> Iterator[_Page]:
        s = self.settings
        offset = 0
        for number in itertools.count(1):
            page = self._get(client, s.url, {**self._sized(), s.offset_param: offset}, number)
            yield page
            total = self._number_at(page, s.total_path)
            count = len(self._items(page))
            offset += count
            if count == 0 or (offset >= total if total is not None else count < s.page_size):
                return

    def _by_cursor(self, client: httpx.Client) -> Iterator[_Page]:
        s = self.settings
        params = self._sized()
        seen: set[str] = set()
        for number in itertools.count(1):
            page = self._get(client, s.url, params, number)
            yield page
            found, token = dig(page.body, s.cursor_path or "")
            if not found or token in (None, "") or not self._items(page):
                return
            cursor = canonical.dumps(token) if isinstance(token, list | dict) else str(token)
            if cursor in seen:
                raise SourceError(f"{self.describe()}: page {number} repeats cursor "
                                  f"{cursor!r}; the API would loop forever")
            seen.add(cursor)
            params = {**self._sized(), s.cursor_param: cursor}

    def _by_next_link(self, client: httpx.Client) -> Iterator[_Page]:
        s = self.settings
        url: httpx.URL | str = s.url
        visited: set[httpx.URL] = set()
        for number in itertools.count(1):
            page = self._get(client, url, None, number)
            yield page
            if s.pagination == "none":
                return
            visited.add(page.url)
            found, href = dig(page.body, s.next_path)
            target = href if found and isinstance(href, str) and href else page.next_header
            if not target:
                return
            url = page.url.join(target)
            if url in visited:
                raise SourceError(f"{self.describe()}: page {number} links back to "
                                  f"{safe_url(url)}; the API would loop forever")

    def _items(self, page: _Page) -> list[Any]:
        found, items = dig(page.body, self.settings.items_path)
        where = f"{self.describe()}: page {page.number} ({safe_url(page.url)})"
        if not found:
            raise SourceError(f"{where} has no {self.settings.items_path!r} in its body")
        if not isinstance(items, list):
            what = repr(self.settings.items_path) if self.settings.items_path else "the body"
            raise SourceError(f"{where}: {what} is a {type(items).__name__}, not a list")
        return items

    def _number_at(self, page: _Page, path: str | None) -> int | None:
        if not path:
            return None
        found, value = dig(page.body, path)
        if not found or value is None:
            return None
        try:
            return int(value)
        except (TypeError, ValueError):
            raise SourceError(f"{self.describe()}: page {page.number}: {path!r} is "
                              f"{value!r}, not a number") from None

    # -- one GET, paced and retried ----------------------------------------------------

    def _pace(self) -> None:
        rpm = self.settings.requests_per_minute
        now = self._clock()
        if rpm and self._last_request_at is not None:
            wait = self._last_request_at + 60.0 / rpm - now
            if wait > 0:
                self._sleep(wait)
                now += wait
        self._last_request_at = now

    def _backoff(self, attempt: int) -> float:
        ceiling = min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2.0**attempt)
        return ceiling / 2 + self._rng.uniform(0, ceiling / 2)

    def _get(
        self, client: httpx.Client, url: httpx.URL | str, params: dict[str, Any] | None,
        number: int,
    ) -> _Page:
        attempts = self.settings.max_retries + 1
        problem = ""
        for attempt in range(attempts):
            self._pace()
            delay = self._backoff(attempt)
            try:
                response = client.get(url, params=params)
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            else:
                status = response.status_code
                if status < 400:
                    return self._decode(response, number)
                problem = f"HTTP {status}"
                if status == 429:
                    wait = retry_after_s(response.headers.get("Retry-After"))
                    if wait is not None:
                        delay = max(delay, wait)
                elif status < 500 and status != 408:
                    hint = " (the credentials were refused)" if status in (401, 403) else ""
                    raise SourceError(f"{self.describe()}: page {number} "
                                      f"({safe_url(response.url)}) answered {problem}{hint}")
            if attempt + 1 < attempts:
                log.warning("source.http.retry", page=number, problem=problem,
                            attempt=attempt + 1, delay_s=round(delay, 3))
                self._sleep(delay)
        shown = safe_url(client.build_request("GET", url, params=params).url)
        raise SourceError(f"{self.describe()}: page {number} ({shown}) failed after "
                          f"{attempts} attempt(s): {problem}")

    def _decode(self, response: httpx.Response, number: int) -> _Page:
        try:
            body = canonical.loads(response.content)
        except ValueError:
            head = response.content[:60].decode("utf-8", "replace")
            raise SourceError(
                f"{self.describe()}: page {number} ({safe_url(response.url)}) is not JSON "
                f"(content-type {response.headers.get('content-type', 'none')}, "
                f"body starts {head!r})"
            ) from None
        link = response.links.get("next", {}).get("url")
        log.debug("source.http.page", page=number, url=safe_url(response.url))
        return _Page(number=number, url=response.url, body=body, next_header=link)


@register("http")
def open_http_source(settings: HttpSourceSettings) -> HttpSource:
    return HttpSource(settings)
