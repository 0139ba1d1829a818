"""``[source] item_url``: fetch single products by key instead of the whole pull.

``sync --only``, ``retry`` and the daemon's hooks name a few keys; with an item
URL such as Akeneo's ``https://pim.example.com/api/rest/v1/products/{key}``
only those are read, one GET each. The GETs go out as the pages do
(through the API connection): paced (``requests_per_minute``), retried on connect
errors, timeouts, 408, 429 and 5xx (exactly ``Retry-After`` when given),
credentials only to the configured origins (the client's gate: ``item_url`` must
share ``url``'s origin or be in ``allowed_origins``). The body is the record
(a JSON object). A 404 means the source does not hold the key: nothing is
yielded for it, and the run reports it as not in the source. Any other
failure raises ``SourceError``, as a page's would: a targeted run that could
not read a product changes nothing for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from urllib.parse import quote

import httpx

from skuferry import canonical, logs
from skuferry.errors import SourceError
from skuferry.models import BadRecord, RawRecord
from skuferry.net.retry import Failed
from skuferry.sources.api import Answer, ApiConnection

log = logs.get(__name__)

_MAX_ITEM_BYTES = 16 * 1024 * 1024  # one product


def item_url(template: str, key: str) -> str:
    """``template`` with ``{key}`` replaced by the key, percent-encoded as one path segment."""
    return template.replace("{key}", quote(key, safe=""))


def fetch_items(
    client: httpx.Client,
    api: ApiConnection,
    keys: Iterable[str],
    *,
    template: str | None,
    where: str,
) -> Iterator[RawRecord | BadRecord]:
    """The records of ``keys`` by ``template`` (``[source] item_url``), one GET each."""
    if template is None:
        raise SourceError(f"{where}: [source] item_url is not set")
    for line, key in enumerate(keys, start=1):
        body = _get(client, api, item_url(template, key), key=key, where=f"{where}: item {key!r}")
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
    client: httpx.Client, api: ApiConnection, url: str, *, key: str, where: str
) -> object | None:
    """The decoded body, None on 404; SourceError once the retries are spent."""

    def accept(answer: Answer) -> object | None:
        if answer.status == 404:
            return None
        if answer.status >= 400:
            raise answer.refused(where)
        return _decode(answer.content, where)

    def give_up(failed: Failed, attempts: int) -> SourceError:
        return SourceError(f"{where} failed after {attempts} attempt(s): {failed.problem}")

    def on_retry(failed: Failed, attempt: int, delay: float) -> None:
        log.warning(
            "source.http.retry",
            item=key,
            problem=failed.problem,
            attempt=attempt,
            delay_s=round(delay, 3),
        )

    return api.send(
        client,
        lambda: client.build_request("GET", url),
        where=where,
        read=lambda response: response.read() if response.status_code < 400 else b"",
        accept=accept,
        give_up=give_up,
        on_retry=on_retry,
    )


def _decode(content: bytes, where: str) -> object:
    if len(content) > _MAX_ITEM_BYTES:
        raise SourceError(f"{where}: the item is larger than {_MAX_ITEM_BYTES} bytes")
    try:
        body: object = canonical.loads(content)
    except ValueError:
        head = content[:60].decode("utf-8", "replace")
        raise SourceError(f"{where}: not JSON (body starts {head!r})") from None
    return body
