"""``[source] type = "graphql"``: one GraphQL query, paged by a cursor (Shopify's Admin API).

Each page is a POST of ``{"query": ..., "variables": {...}}`` to ``url``. The
items are at ``items_path`` (JMESPath: ``data.productVariants.nodes`` or
``data.products.edges[].node``); the next page's cursor comes from
``page_info_path`` (``{hasNextPage, endCursor}``) and goes back in the variable
``cursor_variable`` (null on the first page). An incremental pull fills
``since_variable`` from ``since_template`` (Shopify: ``updated_at:>'{since}'``).

Failures: a response with ``errors`` fails the pull naming the first message,
except a throttle (``errors[].extensions.code = "THROTTLED"``, HTTP 200): that
waits ``(requestedQueryCost - currentlyAvailable) / restoreRate`` seconds from
the cost report and asks again, without counting it as a failed attempt (at most
``_MAX_THROTTLES`` times in a row). Connect errors, timeouts, 408, 5xx and 429
are retried ``max_retries`` times with backoff, or exactly ``Retry-After`` apart
when the server says; a stop request ends the wait. Auth, the origin rule, pace,
retries and the reading of a page are the http source's: the same connection and
requester, paged by the cursor strategy.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx

from skuferry import canonical, logs
from skuferry.config.schema import GraphqlSourceSettings
from skuferry.errors import SourceError
from skuferry.models import BadRecord, RawRecord
from skuferry.net.retry import Failed, retry_after
from skuferry.sources.api import Answer, ApiSource
from skuferry.sources.paginators import Ask, Cursor, Page, records_of, walk
from skuferry.sources.paths import SourcePath, optional_path
from skuferry.sources.requester import Requester
from skuferry.sources.since import format_since
from skuferry.sources.wiring import LIVE, Wiring

log = logs.get(__name__)

_MAX_THROTTLES = 50  # throttles in a row on one page before the pull gives up
_THROTTLE_FALLBACK_S = 1.0  # a THROTTLED without a usable cost report


class GraphqlSource(ApiSource):
    """Streams the records of a cursor-paged GraphQL connection."""

    def __init__(self, settings: GraphqlSourceSettings, wiring: Wiring = LIVE) -> None:
        self.settings = settings
        super().__init__(settings, wiring)  # the connection, shared with http
        self._api.headers.setdefault("Content-Type", "application/json")
        self._query = settings.query_text()
        self._items = SourcePath(settings.items_path, key="source.items_path")
        self._page_info = optional_path(settings.page_info_path, key="source.page_info_path")
        self._since: dict[str, str] = {}
        self.throttled = 0  # THROTTLED answers met (for figures and tests)

    def describe(self) -> str:
        return f"graphql {self.settings.url}"

    @property
    def incremental(self) -> bool:
        return self.settings.since_variable is not None

    def records_since(self, since: datetime) -> Iterator[RawRecord | BadRecord]:
        s = self.settings
        if s.since_variable:
            value = format_since(since, s.since_format)
            template = s.since_template
            self._since = {
                s.since_variable: template.replace("{since}", value) if template else value
            }
        try:
            yield from self.window()  # not the feed: no digest
        finally:
            self._since = {}

    def walked(self) -> Iterator[RawRecord | BadRecord]:
        s = self.settings
        requester = Requester(
            self._api,
            name=self.describe(),
            build=lambda client, ask: client.build_request(
                "POST",
                ask.url,
                content=canonical.dumps({"query": self._query, "variables": ask.params}),
            ),
            log=log,
            event="source.graphql",
            max_bytes=s.max_page_bytes,
            advice="fewer items per page (the query's first: variable) or raise max_page_bytes",
        )
        paginator = Cursor(
            s.url,
            {**s.variables, **self._since, s.cursor_variable: None},  # null on the first page
            param=s.cursor_variable,
            token=lambda page: self._next_cursor(page.body, page.number),
            where=self.describe(),
        )
        with self._api.client() as client:
            pages = walk(lambda ask, number: self._page(requester, client, ask, number), paginator)
            line = yield from records_of(pages)
        log.info("source.graphql.done", url=s.url, records=line, throttled=self.throttled)

    def _page(self, requester: Requester, client: httpx.Client, ask: Ask, number: int) -> Page:
        body = self._post(requester, client, ask, number)
        items = self._items.find(body)
        if items is None:
            raise SourceError(
                f"{self.describe()}: page {number} has nothing at {self.settings.items_path!r}"
            )
        if not isinstance(items, list):
            raise SourceError(
                f"{self.describe()}: page {number}: {self.settings.items_path!r} is a "
                f"{type(items).__name__}, not a list"
            )
        return Page(number, httpx.URL(self.settings.url), body, items, httpx.Headers())

    def _next_cursor(self, body: Any, number: int) -> str | None:
        if self._page_info is None:
            return None
        info = self._page_info.find(body)
        if not isinstance(info, dict):
            raise SourceError(
                f"{self.describe()}: page {number} has no page info at "
                f"{self.settings.page_info_path!r} (expected {{hasNextPage, endCursor}})"
            )
        if not info.get("hasNextPage"):
            return None
        end = info.get("endCursor")
        if not isinstance(end, str) or not end:
            raise SourceError(
                f"{self.describe()}: page {number} says hasNextPage but gives no endCursor"
            )
        return end

    # -- one POST: the requester's, throttles waited out -----------------------------

    def _post(self, requester: Requester, client: httpx.Client, ask: Ask, number: int) -> Any:
        where = requester.where(number)
        throttles = 0

        def accept(answer: Answer, body: Any) -> Any:
            nonlocal throttles
            throttle = self._throttle_wait(body)
            if throttle is None:
                return body
            throttles += 1
            self.throttled += 1
            if throttles > _MAX_THROTTLES:
                raise SourceError(f"{where}: still THROTTLED after {_MAX_THROTTLES} waits")
            # not a failed attempt: the cost report said when to come back
            said_after = retry_after(answer.response.headers)
            return Failed("THROTTLED", wait=max(throttle, said_after or 0.0), counted=False)

        return requester.fetch(client, ask, number, accept)

    def _throttle_wait(self, body: Any) -> float | None:
        """Seconds to wait when ``body`` is a throttle; None when it is data; raises on errors."""
        errors = body.get("errors") if isinstance(body, dict) else None
        if not errors:
            return None
        first = errors[0] if isinstance(errors, list) and errors else errors
        codes = [
            e.get("extensions", {}).get("code")
            for e in (errors if isinstance(errors, list) else [])
            if isinstance(e, dict) and isinstance(e.get("extensions"), dict)
        ]
        if "THROTTLED" in codes:
            return _cost_wait(body.get("extensions"))
        message = first.get("message") if isinstance(first, dict) else None
        text = message if isinstance(message, str) else canonical.dumps(first)
        more = (
            f" (and {len(errors) - 1} more)" if isinstance(errors, list) and len(errors) > 1 else ""
        )
        raise SourceError(f"{self.describe()}: the API answered an error: {text}{more}")


def _cost_wait(extensions: Any) -> float:
    """``(requestedQueryCost - currentlyAvailable) / restoreRate`` from Shopify's cost report."""
    cost = extensions.get("cost") if isinstance(extensions, dict) else None
    if not isinstance(cost, dict):
        return _THROTTLE_FALLBACK_S
    status = cost.get("throttleStatus")
    try:
        requested = float(cost["requestedQueryCost"])
        available = float(status["currentlyAvailable"])  # type: ignore[index]
        rate = float(status["restoreRate"])  # type: ignore[index]
    except (KeyError, TypeError, ValueError):
        return _THROTTLE_FALLBACK_S
    if rate <= 0:
        return _THROTTLE_FALLBACK_S
    return max(0.0, (requested - available) / rate)


def open_graphql_source(settings: GraphqlSourceSettings, wiring: Wiring = LIVE) -> GraphqlSource:
    return GraphqlSource(settings, wiring)
