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
when the server says; a stop request ends the wait. Auth, the origin rule, pace
and retries are the http source's (``sources/api.py``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

import httpx

from skuferry import canonical, logs
from skuferry.config.schema import GraphqlSourceSettings
from skuferry.errors import SourceError
from skuferry.models import BadRecord, RawRecord
from skuferry.net.retry import Failed, retry_after
from skuferry.sources.api import Answer, ApiConnection
from skuferry.sources.base import IncrementalSource
from skuferry.sources.paths import SourcePath, optional_path
from skuferry.sources.since import format_since
from skuferry.sources.wiring import LIVE, Wiring

log = logs.get(__name__)

_MAX_THROTTLES = 50  # throttles in a row on one page before the pull gives up
_THROTTLE_FALLBACK_S = 1.0  # a THROTTLED without a usable cost report


class GraphqlSource(IncrementalSource):
    """Streams the records of a cursor-paged GraphQL connection."""

    def __init__(self, settings: GraphqlSourceSettings, wiring: Wiring = LIVE) -> None:
        self.settings = settings
        # auth, TLS, origins, pace and retries (sources/api.py), shared with http
        self._api = ApiConnection(settings, wiring)
        self._api.headers.setdefault("Content-Type", "application/json")
        self._query = settings.query_text()
        self._items = SourcePath(settings.items_path, key="source.items_path")
        self._page_info = optional_path(settings.page_info_path, key="source.page_info_path")
        self._since: dict[str, str] = {}
        self.full_every = settings.full_every
        self.overlap_s = settings.since_overlap_s
        self.since_format = settings.since_format
        self._updated_path = optional_path(settings.updated_path, key="source.updated_path")
        self.throttled = 0  # THROTTLED answers met (for figures and tests)

    def describe(self) -> str:
        return f"graphql {self.settings.url}"

    @property
    def change_time_field(self) -> str | None:
        path = self._updated_path
        return None if path is None else f"updated_path {path.describe()}"

    def change_time(self, fields: Mapping[str, Any]) -> Any:
        return None if self._updated_path is None else self._updated_path.find(fields)

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
            yield from self.records()
        finally:
            self._since = {}

    def records(self) -> Iterator[RawRecord | BadRecord]:
        s = self.settings
        line = 0
        cursor: str | None = None
        seen: set[str] = set()
        with self._api.client() as client:
            for number in itertools.count(1):
                variables = {**s.variables, **self._since, s.cursor_variable: cursor}
                body = self._post(client, {"query": self._query, "variables": variables}, number)
                items = self._items.find(body)
                if items is None:
                    raise SourceError(
                        f"{self.describe()}: page {number} has nothing at {s.items_path!r}"
                    )
                if not isinstance(items, list):
                    raise SourceError(
                        f"{self.describe()}: page {number}: {s.items_path!r} is a "
                        f"{type(items).__name__}, not a list"
                    )
                for item in items:
                    line += 1
                    if isinstance(item, dict):
                        yield RawRecord(line=line, fields=item)
                    else:
                        yield BadRecord(
                            line=line,
                            reason=f"record {line} (page {number}): expected a JSON object, "
                            f"got {type(item).__name__}",
                        )
                cursor = self._next_cursor(body, number)
                if cursor is None or not items:
                    break
                if cursor in seen:
                    raise SourceError(
                        f"{self.describe()}: page {number} repeats cursor {cursor!r}; "
                        "the API would loop forever"
                    )
                seen.add(cursor)
        log.info("source.graphql.done", url=s.url, records=line, throttled=self.throttled)

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

    # -- one POST, paced, retried, throttles waited out (sources/api.py) ---------------

    def _post(self, client: httpx.Client, payload: dict[str, Any], number: int) -> Any:
        s = self.settings
        where = f"{self.describe()}: page {number}"
        throttles = 0

        def accept(answer: Answer) -> Any:
            nonlocal throttles
            if answer.status >= 400:
                raise answer.refused(where)
            body = self._decode(answer.content, where, answer.response)
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

        def give_up(failed: Failed, attempts: int) -> SourceError:
            return SourceError(f"{where} failed after {attempts} attempt(s): {failed.problem}")

        def on_retry(failed: Failed, attempt: int, delay: float) -> None:
            if not failed.counted:
                log.info("source.graphql.throttled", page=number, delay_s=round(delay, 3))
                return
            log.warning(
                "source.graphql.retry",
                page=number,
                problem=failed.problem,
                attempt=attempt,
                delay_s=round(delay, 3),
            )

        return self._api.send(
            client,
            lambda: client.build_request("POST", s.url, content=canonical.dumps(payload)),
            where=where,
            read=lambda response: self._read_bounded(response, where),
            accept=accept,
            give_up=give_up,
            on_retry=on_retry,
        )

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

    def _read_bounded(self, response: httpx.Response, where: str) -> bytes:
        limit = self.settings.max_page_bytes
        size = 0
        chunks: list[bytes] = []
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > limit:
                raise SourceError(
                    f"{where} is larger than max_page_bytes ({limit} bytes); ask for fewer "
                    "items per page (the query's first: variable) or raise max_page_bytes"
                )
            chunks.append(chunk)
        return b"".join(chunks)

    def _decode(self, content: bytes, where: str, response: httpx.Response) -> Any:
        try:
            return canonical.loads(content)
        except ValueError:
            head = content[:60].decode("utf-8", "replace")
            raise SourceError(
                f"{where} is not JSON (content-type "
                f"{response.headers.get('content-type', 'none')}, body starts {head!r})"
            ) from None


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
