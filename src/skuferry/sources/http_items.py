"""``[source] item_url``: fetch single products by key instead of the whole pull.

``sync --only``, ``retry`` and the daemon's hooks name a few keys; with an item
URL such as Akeneo's ``https://pim.example.com/api/rest/v1/products/{key}``
only those are read, one GET each. The GETs go out as the pages do: paced
(``requests_per_minute``), retried on connect errors, timeouts, 429 and 5xx
(at least ``Retry-After``), credentials only to the configured origins
(``send_pinned``: ``item_url`` must share ``url``'s origin or be in
``allowed_origins``). The body is the record (a JSON object). A 404 means the
source does not hold the key: nothing is yielded for it, and the run reports
it as not in the source. Any other failure raises ``SourceError``, as a page's
would: a targeted run that could not read a product changes nothing for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from urllib.parse import quote

import httpx

from skuferry import canonical, logs
from skuferry.config.schema import HttpSourceSettings
from skuferry.errors import SourceError
from skuferry.models import BadRecord, RawRecord
from skuferry.net.origins import Origin
from skuferry.net.retry import parse_retry_after
from skuferry.sources.pinned import send_pinned

log = logs.get(__name__)

_MAX_ITEM_BYTES = 16 * 1024 * 1024  # one product


def item_url(template: str, key: str) -> str:
    """``template`` with ``{key}`` replaced by the key, percent-encoded as one path segment."""
    return template.replace("{key}", quote(key, safe=""))


def fetch_items(
    client: httpx.Client,
    settings: HttpSourceSettings,
    keys: Iterable[str],
    *,
    allowed: frozenset[Origin],
    pace: Callable[[], None],
    backoff: Callable[[int], float],
    sleep: Callable[[float], None],
    where: str,
) -> Iterator[RawRecord | BadRecord]:
    template = settings.item_url
    if template is None:
        raise SourceError(f"{where}: [source] item_url is not set")
    for line, key in enumerate(keys, start=1):
        body = _get(
            client,
            item_url(template, key),
            settings,
            allowed=allowed,
            pace=pace,
            backoff=backoff,
            sleep=sleep,
            where=f"{where}: item {key!r}",
        )
        if body is None:
            log.info("source.http.item.missing", key=key)
            continue
        if isinstance(body, dict):
            yield RawRecord(line=line, fields=body)
        else:
            yield BadRecord(
                line=line,
                reason=f"item {key!r}: expected a JSON object, got {type(body).__name__}",
                key=key,
            )


def _get(
    client: httpx.Client,
    url: str,
    settings: HttpSourceSettings,
    *,
    allowed: frozenset[Origin],
    pace: Callable[[], None],
    backoff: Callable[[int], float],
    sleep: Callable[[float], None],
    where: str,
) -> object | None:
    """The decoded body, None on 404; SourceError once the retries are spent."""
    attempts = settings.max_retries + 1
    problem = ""
    for attempt in range(attempts):
        pace()
        wait: float | None = None
        try:
            response = send_pinned(
                client,
                client.build_request("GET", url),
                home=settings.url,
                allowed=allowed,
                where=where,
            )
            try:
                status = response.status_code
                content = response.read() if status < 400 else b""
            finally:
                response.close()
        except httpx.TransportError as exc:
            problem = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        else:
            if status == 404:
                return None
            if status < 400:
                return _decode(content, where)
            problem = f"HTTP {status}"
            if status == 429 or status >= 500:
                wait = parse_retry_after(
                    response.headers.get("Retry-After"), date_header=response.headers.get("Date")
                )
            elif status != 408:
                hint = " (the credentials were refused)" if status in (401, 403) else ""
                raise SourceError(f"{where} answered {problem}{hint}")
        if attempt + 1 < attempts:
            sleep(max(backoff(attempt), wait or 0.0))
    raise SourceError(f"{where} failed after {attempts} attempt(s): {problem}")


def _decode(content: bytes, where: str) -> object:
    if len(content) > _MAX_ITEM_BYTES:
        raise SourceError(f"{where}: the item is larger than {_MAX_ITEM_BYTES} bytes")
    try:
        body: object = canonical.loads(content)
    except ValueError:
        head = content[:60].decode("utf-8", "replace")
        raise SourceError(f"{where}: not JSON (body starts {head!r})") from None
    return body
