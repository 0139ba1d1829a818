"""``[source] type = "http"``: a PIM's JSON API, walked page by page.

One page is in memory at a time. Every GET is paced (``requests_per_minute``)
and retried with exponential backoff and jitter on connect errors, timeouts,
408, 5xx and 429 (waiting exactly ``Retry-After`` when the server gives one;
a stop request ends the wait: the API connection's retry loop). A page
that still fails, or a page that is not what was promised (not JSON, no list at
``items_path``), raises ``SourceError``: a pull that stopped half way must never look complete,
or the products on the missing pages would be taken for gone.

Pagination styles: ``page`` (page number + size), ``offset`` (offset + size),
``cursor`` (a token from the body sent back as a parameter, ``search_after``
style) and ``next_link`` (a URL at ``next_path`` in the body or an RFC 8288
``Link: <...>; rel="next"`` header, relative links resolved): one paginator
strategy each, all walked by the one requester the GraphQL source uses too. Every
path into a body is JMESPath, compiled once.

A walk stops at its own end (an empty or short page, no next link, no cursor), or
where the API's announced total says; then the end proof weighs what the
pages announced (``total_path``, ``total_pages_path``, ``total_header``,
``total_pages_header``, ``@odata.count``) and fails the pull when the evidence
says it ended early.

``method = "POST"`` sends ``body`` as JSON with the page, offset and size as body
members, and an incremental pull's filter at ``since_body_path`` (Odoo's JSON-2 API).
Auth, OAuth2 included, is ``[source] auth``'s.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx

from skuferry import canonical, logs
from skuferry.config.schema import HttpSourceSettings
from skuferry.errors import SourceError
from skuferry.models import BadRecord, RawRecord
from skuferry.sources.api import Answer, ApiSource
from skuferry.sources.ends import Announced, EndProof, Totals
from skuferry.sources.paginators import (
    Ask,
    Cursor,
    NextLink,
    Offset,
    Page,
    PageNumber,
    Paginator,
    records_of,
    walk,
)
from skuferry.sources.paths import SourcePath, optional_path
from skuferry.sources.requester import Requester
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


class HttpSource(ApiSource):
    """Streams the records of a paginated JSON API."""

    def __init__(self, settings: HttpSourceSettings, wiring: Wiring = LIVE) -> None:
        self.settings = settings
        super().__init__(settings, wiring)
        self._since: dict[str, str] = {}  # the change filter of an incremental pull
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
            yield from self.window()  # not the feed: no digest
        finally:
            self._since = {}
            self._body_since = None

    def walked(self) -> Iterator[RawRecord | BadRecord]:
        proof = EndProof(self.describe(), full_page_rule=self.settings.pagination == "next_link")
        with self._api.client() as client:
            line = yield from records_of(self._pages(client, proof))
        proof.check()  # an early end fails the pull here, before anything is planned
        log.info(
            "source.http.done", url=safe_url(self.settings.url), records=line, pages=proof.pages
        )

    # -- walking the pages: one paginator per ``pagination``, one requester --------------
    # Each page is counted in ``proof`` with the announcements in force (the latest total
    # and page count), which the paginator weighs to decide whether to go on.

    def _pages(self, client: httpx.Client, proof: EndProof) -> Iterator[Page]:
        requester = Requester(
            self._api,
            name=self.describe(),
            build=lambda c, ask: self._request(c, ask.url, ask.params),
            log=log,
            event="source.http",
            max_bytes=self.settings.max_page_bytes,
            advice="smaller pages ([source] page_size) or raise [source] max_page_bytes",
            show=safe_url,
        )

        def fetch(ask: Ask, number: int) -> Page:
            return requester.fetch(
                client, ask, number, lambda answer, body: self._page(answer, body, number)
            )

        return walk(fetch, self._paginator(proof))

    def _paginator(self, proof: EndProof) -> Paginator:
        s = self.settings

        def tally(page: Page, has_next: bool) -> Announced:
            return proof.page(len(page.items), self._announced(page), has_next=has_next)

        sized = {**({s.size_param: s.page_size} if s.size_param else {}), **self._since}
        where = self.describe()
        if s.pagination == "page":
            return PageNumber(
                s.url,
                sized,
                page_param=s.page_param,
                first_page=s.first_page,
                page_size=s.page_size,
                tally=tally,
                where=where,
            )
        if s.pagination == "offset":
            return Offset(
                s.url, sized, offset_param=s.offset_param, page_size=s.page_size, tally=tally
            )
        if s.pagination == "cursor":
            token = self._cursor
            return Cursor(s.url, sized, param=s.cursor_param, token=token, tally=tally, where=where)
        # next_link, or "none" (one page): added to the URL's own query (httpx's params=
        # would replace it); the next links carry the change filter on from there
        return NextLink(
            httpx.URL(s.url).copy_merge_params(self._since),
            link=self._next_link,
            tally=tally,
            where=where,
            at_end=lambda page: self._check_last_link(page, proof),
            show=safe_url,
        )

    def _cursor(self, page: Page) -> str | None:
        """The cursor at ``cursor_path``, as text (a structured one in canonical JSON)."""
        token = self._cursor_path.find(page.body) if self._cursor_path else None
        if token in (None, ""):
            return None
        return canonical.dumps(token) if isinstance(token, list | dict) else str(token)

    def _next_link(self, page: Page) -> str | None:
        """The link at ``next_path``, else the ``Link`` header's; none when not paginated."""
        if self.settings.pagination == "none":
            return None
        href = self._next_path.find(page.body)
        return href if isinstance(href, str) and href else page.next_header

    def _check_last_link(self, page: Page, proof: EndProof) -> None:
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

    def _announced(self, page: Page) -> Announced:
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

    # -- one request: a GET, or a POST with the paging in its body ----------------------

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

    def _page(self, answer: Answer, body: Any, number: int) -> Page:
        response = answer.response
        link = response.links.get("next", {}).get("url")
        log.debug("source.http.page", page=number, url=safe_url(response.url))
        return Page(
            number=number,
            url=response.url,
            body=body,
            items=self._items(body, number, response.url),
            headers=response.headers,
            next_header=link,
        )

    # -- one item by key: [source] item_url ------------------------------------------

    @property
    def by_key(self) -> bool:
        """Whether single items can be fetched by key (``[source] item_url``)."""
        return self.settings.item_url is not None

    def fetch_items(self, keys: Iterable[str]) -> Iterator[RawRecord | BadRecord]:
        """The records of ``keys``, one GET each, paced, pinned and authenticated as pages."""
        from skuferry.sources.http_items import fetch_items

        self._content.value = None  # a few items are not the feed
        with self._api.client() as client:  # OAuth2 renewed as in a pull
            yield from fetch_items(
                client, self._api, keys, template=self.settings.item_url, where=self.describe()
            )


def open_http_source(settings: HttpSourceSettings, wiring: Wiring = LIVE) -> HttpSource:
    return HttpSource(settings, wiring)
