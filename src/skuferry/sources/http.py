"""``[source] type = "http"``: a PIM's JSON API, walked page by page.

One page is in memory at a time. Every GET is paced (``requests_per_minute``)
and retried with exponential backoff and jitter on connect errors, timeouts,
408, 5xx and 429 (waiting exactly ``Retry-After`` when the server gives one;
a stop request ends the wait: ``sources/api.py``, ``net/retry.py``). A page
that still fails, or a page that is not what was promised (not JSON, no list at
``items_path``), raises ``SourceError``: a pull that stopped half way must never look complete,
or the products on the missing pages would be taken for gone.

Pagination styles: ``page`` (page number + size), ``offset`` (offset + size),
``cursor`` (a token from the body sent back as a parameter, ``search_after``
style) and ``next_link`` (a URL at ``next_path`` in the body or an RFC 8288
``Link: <...>; rel="next"`` header, relative links resolved). Every path into a
body is JMESPath, compiled once (``sources/paths.py``).

A walk stops at its own end (an empty or short page, no next link, no cursor), or
where the API's announced total says; then ``sources/ends.py`` weighs what the
pages announced (``total_path``, ``total_pages_path``, ``total_header``,
``total_pages_header``, ``@odata.count``) and fails the pull when the evidence
says it ended early.

``method = "POST"`` sends ``body`` as JSON with the page, offset and size as body
members, and an incremental pull's filter at ``since_body_path`` (Odoo's JSON-2 API).
Auth, OAuth2 included, is ``sources/auth.py``'s.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx

from skuferry import canonical, logs
from skuferry.config.schema import HttpSourceSettings
from skuferry.errors import SourceError
from skuferry.models import BadRecord, RawRecord
from skuferry.net.retry import Failed
from skuferry.sources.api import Answer, ApiConnection
from skuferry.sources.base import IncrementalSource
from skuferry.sources.ends import Announced, EndProof, Totals
from skuferry.sources.paths import SourcePath, optional_path
from skuferry.sources.since import put_since, since_params, since_value
from skuferry.sources.wiring import LIVE, Wiring

log = logs.get(__name__)

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


_ODATA_NEXT = "@odata.nextLink"


@dataclass(frozen=True, slots=True)
class _Page:
    number: int
    url: httpx.URL
    body: Any
    items: list[Any]  # what items_path found: a list, or the page failed
    headers: httpx.Headers
    next_header: str | None  # the rel="next" target of a Link header, if any


class HttpSource(IncrementalSource):
    """Streams the records of a paginated JSON API."""

    def __init__(self, settings: HttpSourceSettings, wiring: Wiring = LIVE) -> None:
        self.settings = settings
        # auth, TLS, origins, pace and retries (sources/api.py), shared with graphql
        self._api = ApiConnection(settings, wiring)
        self._since: dict[str, str] = {}  # the change filter of an incremental pull
        self.full_every = settings.full_every
        self.overlap_s = settings.since_overlap_s
        self.since_format = settings.since_format
        self._updated_path = optional_path(settings.updated_path, key="source.updated_path")
        s = settings
        self._items_path = SourcePath(s.items_path, key="source.items_path")
        self._next_path = SourcePath(s.next_path, key="source.next_path")
        self._cursor_path = optional_path(s.cursor_path, key="source.cursor_path")
        self._totals = Totals(
            records_path=optional_path(s.total_path, key="source.total_path"),
            records_header=s.total_header,
            pages_path=optional_path(s.total_pages_path, key="source.total_pages_path"),
            pages_header=s.total_pages_header,
        )
        self._body_since: tuple[str, Any] | None = None  # (since_body_path, value) when set

    def describe(self) -> str:
        return f"http {safe_url(self.settings.url)}"

    @property
    def name(self) -> str:
        return safe_url(self.settings.url)

    @property
    def change_time_field(self) -> str | None:
        path = self._updated_path
        return None if path is None else f"updated_path {path.describe()}"

    def change_time(self, fields: Mapping[str, Any]) -> Any:
        return None if self._updated_path is None else self._updated_path.find(fields)

    @property
    def incremental(self) -> bool:
        return self.settings.since_param is not None or self.settings.since_body_path is not None

    def records_since(self, since: datetime) -> Iterator[RawRecord | BadRecord]:
        s = self.settings
        if s.since_body_path:
            self._body_since = (
                s.since_body_path,
                since_value(s.since_format, s.since_template, since),
            )
        else:
            self._since = since_params(s.since_param, s.since_format, s.since_template, since)
        try:
            yield from self.records()
        finally:
            self._since = {}
            self._body_since = None

    def records(self) -> Iterator[RawRecord | BadRecord]:
        line = 0
        proof = EndProof(self.describe(), full_page_rule=self.settings.pagination == "next_link")
        with self._api.client() as client:
            for page in self._pages(client, proof):
                for item in page.items:
                    line += 1
                    if isinstance(item, dict):
                        yield RawRecord(line=line, fields=item)
                    else:
                        yield BadRecord(
                            line=line,
                            reason=f"record {line} (page {page.number}): expected a JSON "
                            f"object, got {type(item).__name__}",
                        )
        proof.check()  # an early end fails the pull here, before anything is planned
        log.info(
            "source.http.done", url=safe_url(self.settings.url), records=line, pages=proof.pages
        )

    # -- walking the pages -------------------------------------------------------------
    # Each walk yields a page, then counts it in ``proof`` and reads the announcements
    # in force (the latest total and page count) to decide whether to go on.

    def _pages(self, client: httpx.Client, proof: EndProof) -> Iterator[_Page]:
        walk = {
            "page": self._by_page_number,
            "offset": self._by_offset,
            "cursor": self._by_cursor,
        }.get(self.settings.pagination, self._by_next_link)
        return walk(client, proof)

    def _sized(self) -> dict[str, Any]:
        s = self.settings
        return {**({s.size_param: s.page_size} if s.size_param else {}), **self._since}

    def _by_page_number(self, client: httpx.Client, proof: EndProof) -> Iterator[_Page]:
        s = self.settings
        previous: list[Any] = []
        for number in itertools.count(1):
            params = {**self._sized(), s.page_param: s.first_page + number - 1}
            page = self._get(client, s.url, params, number)
            if page.items and page.items == previous:
                # Magento serves its last page again past the end; an API that ignores
                # page_param serves page 1 again: the two look alike, so neither ends
                # the walk in silence (a total stops it before the repeat)
                raise SourceError(
                    f"{self.describe()}: page {number} repeats page {number - 1}: the API "
                    f"ignores page_param {s.page_param!r}, or serves its last page again "
                    "past the end (Magento does); set total_path or total_header to the "
                    'total it announces (Magento: total_path = "total_count") so the walk '
                    "stops at the end"
                )
            previous = page.items
            yield page
            count = len(page.items)
            said = proof.page(count, self._announced(page))
            if count == 0:
                return
            if said.pages is not None:
                if number >= said.pages:
                    return
            elif said.records is not None:
                if proof.records >= said.records:
                    return
            elif count < s.page_size:
                return

    def _by_offset(self, client: httpx.Client, proof: EndProof) -> Iterator[_Page]:
        s = self.settings
        offset = 0
        for number in itertools.count(1):
            page = self._get(client, s.url, {**self._sized(), s.offset_param: offset}, number)
            yield page
            count = len(page.items)
            said = proof.page(count, self._announced(page))
            offset += count
            if count == 0:
                return
            if said.records is not None:
                if offset >= said.records:
                    return
            elif said.pages is not None:
                if number >= said.pages:
                    return
            elif count < s.page_size:
                return

    def _by_cursor(self, client: httpx.Client, proof: EndProof) -> Iterator[_Page]:
        s = self.settings
        params = self._sized()
        seen: set[str] = set()
        for number in itertools.count(1):
            page = self._get(client, s.url, params, number)
            yield page
            token = self._cursor_path.find(page.body) if self._cursor_path else None
            more = token not in (None, "") and bool(page.items)
            proof.page(len(page.items), self._announced(page), has_next=more)
            if not more:
                return
            cursor = canonical.dumps(token) if isinstance(token, list | dict) else str(token)
            if cursor in seen:
                raise SourceError(
                    f"{self.describe()}: page {number} repeats cursor "
                    f"{cursor!r}; the API would loop forever"
                )
            seen.add(cursor)
            params = {**self._sized(), s.cursor_param: cursor}

    def _by_next_link(self, client: httpx.Client, proof: EndProof) -> Iterator[_Page]:
        s = self.settings
        # added to the URL's own query (httpx's params= would replace it); the next
        # links carry the change filter on from there
        url = httpx.URL(s.url).copy_merge_params(self._since)
        visited: set[httpx.URL] = set()
        for number in itertools.count(1):
            page = self._get(client, url, None, number)
            yield page
            target = None  # pagination = "none": one page
            if s.pagination != "none":
                href = self._next_path.find(page.body)
                target = href if isinstance(href, str) and href else page.next_header
            proof.page(len(page.items), self._announced(page), has_next=bool(target))
            if not target:
                self._check_last_link(page, proof)
                return
            visited.add(page.url)
            url = page.url.join(target)
            if url in visited:
                raise SourceError(
                    f"{self.describe()}: page {number} links back to "
                    f"{safe_url(url)}; the API would loop forever"
                )

    def _check_last_link(self, page: _Page, proof: EndProof) -> None:
        """The page that ends a next-link walk: an OData link left behind is an early end."""
        stray = page.body.get(_ODATA_NEXT) if isinstance(page.body, dict) else None
        if isinstance(stray, str) and stray:
            fix = f"next_path = '\"{_ODATA_NEXT}\"'"
            if self.settings.pagination == "none":
                fix = f'pagination = "next_link" and {fix}'
            raise SourceError(
                f'{self.describe()}: page {page.number} has an "{_ODATA_NEXT}" that the '
                f"pull does not follow, so it would stop early; set {fix}"
            )
        said = proof.announced
        if (
            proof.pages == 1
            and self.settings.pagination != "none"
            and said.records is None
            and said.pages is None
            and len(page.items) >= self.settings.page_size
        ):  # the first page is full, yet nothing links on: a next_path that finds nothing?
            log.warning(
                "source.http.one_full_page",
                records=len(page.items),
                next_path=self._next_path.text,
                hint="if the API has more pages, check next_path",
            )

    def _announced(self, page: _Page) -> Announced:
        return self._totals.read(
            page.body, page.headers, where=f"{self.describe()}: page {page.number}"
        )

    def _items(self, body: Any, number: int, url: httpx.URL) -> list[Any]:
        items = self._items_path.find(body)
        where = f"{self.describe()}: page {number} ({safe_url(url)})"
        if items is None:
            raise SourceError(f"{where} has no {self._items_path.describe()} in its body")
        if not isinstance(items, list):
            what = self._items_path.describe()
            raise SourceError(f"{where}: {what} is a {type(items).__name__}, not a list")
        return items

    # -- one GET, paced and retried (sources/api.py) -----------------------------------

    def _get(
        self,
        client: httpx.Client,
        url: httpx.URL | str,
        params: dict[str, Any] | None,
        number: int,
    ) -> _Page:
        where = f"{self.describe()}: page {number}"

        def accept(answer: Answer) -> _Page:
            if answer.status >= 400:
                raise answer.refused(f"{where} ({safe_url(answer.response.url)})")
            return self._decode(answer.response, answer.content, number)

        def give_up(failed: Failed, attempts: int) -> SourceError:
            shown = safe_url(self._request(client, url, params).url)
            return SourceError(
                f"{where} ({shown}) failed after {attempts} attempt(s): {failed.problem}"
            )

        def on_retry(failed: Failed, attempt: int, delay: float) -> None:
            log.warning(
                "source.http.retry",
                page=number,
                problem=failed.problem,
                attempt=attempt,
                delay_s=round(delay, 3),
            )

        return self._api.send(
            client,
            lambda: self._request(client, url, params),
            where=where,
            read=lambda response: self._read_bounded(response, number),
            accept=accept,
            give_up=give_up,
            on_retry=on_retry,
        )

    def _request(
        self, client: httpx.Client, url: httpx.URL | str, params: dict[str, Any] | None
    ) -> httpx.Request:
        """A GET with ``params`` in the query, or a POST with them as body members.

        A POST sends ``body`` with the page, offset and size members set (numbers), the
        since filter at ``since_body_path``, and any other parameter (a cursor) in the query.
        """
        s = self.settings
        if s.method == "GET":
            return client.build_request("GET", url, params=params)
        body = copy.deepcopy(s.body or {})
        query: dict[str, Any] = {}
        for name, value in (params or {}).items():
            if name in (s.page_param, s.offset_param, s.size_param) and isinstance(value, int):
                body[name] = value
            else:
                query[name] = value
        if self._body_since is not None:
            put_since(body, *self._body_since)
        return client.build_request(
            "POST", httpx.URL(url).copy_merge_params(query) if query else url, json=body
        )

    def _read_bounded(self, response: httpx.Response, number: int) -> bytes:
        """The body, refused once past ``max_page_bytes``: a huge page never fills memory."""
        limit = self.settings.max_page_bytes
        declared = response.headers.get("Content-Length", "")
        size = int(declared) if declared.isdigit() else 0
        chunks: list[bytes] = []
        if size <= limit:
            size = 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > limit:
                    break
                chunks.append(chunk)
        if size > limit:
            raise SourceError(
                f"{self.describe()}: page {number} ({safe_url(response.url)}) is larger than "
                f"max_page_bytes ({limit} bytes); ask for smaller pages ([source] page_size) "
                "or raise [source] max_page_bytes"
            )
        return b"".join(chunks)

    def _decode(self, response: httpx.Response, content: bytes, number: int) -> _Page:
        try:
            body = canonical.loads(content)
        except ValueError:
            head = content[:60].decode("utf-8", "replace")
            raise SourceError(
                f"{self.describe()}: page {number} ({safe_url(response.url)}) is not JSON "
                f"(content-type {response.headers.get('content-type', 'none')}, "
                f"body starts {head!r})"
            ) from None
        link = response.links.get("next", {}).get("url")
        log.debug("source.http.page", page=number, url=safe_url(response.url))
        return _Page(
            number=number,
            url=response.url,
            body=body,
            items=self._items(body, number, response.url),
            headers=response.headers,
            next_header=link,
        )

    # -- one item by key: [source] item_url (sources/http_items.py) -------------------

    @property
    def by_key(self) -> bool:
        """Whether single items can be fetched by key (``[source] item_url``)."""
        return self.settings.item_url is not None

    def fetch_items(self, keys: Iterable[str]) -> Iterator[RawRecord | BadRecord]:
        """The records of ``keys``, one GET each, paced, pinned and authenticated as pages."""
        from skuferry.sources.http_items import fetch_items

        with self._api.client() as client:  # OAuth2 renewed as in a pull
            yield from fetch_items(
                client, self._api, keys, template=self.settings.item_url, where=self.describe()
            )


def open_http_source(settings: HttpSourceSettings, wiring: Wiring = LIVE) -> HttpSource:
    return HttpSource(settings, wiring)
