"""method = "POST" with a JSON body: page/offset/size as body members, since in the body."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import respx

from skuferry.config.schema import HttpSourceSettings
from skuferry.errors import SourceError
from skuferry.models import RawRecord
from skuferry.sources.http import HttpSource
from skuferry.sources.since import put_since, since_value
from skuferry.sources.wiring import Wiring

URL = "https://odoo.example.com/json/2/product.product/search_read"
ROWS = [{"id": i, "default_code": f"P-{i}"} for i in range(1, 6)]


def odoo(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    start, size = body["offset"], body["limit"]
    return httpx.Response(200, json=ROWS[start : start + size])


def make(router: respx.MockRouter, **options: Any) -> HttpSource:
    settings = HttpSourceSettings.model_validate(
        {
            "type": "http",
            "url": URL,
            "method": "POST",
            "body": {"domain": [["sale_ok", "=", True]], "fields": ["default_code"]},
            "pagination": "offset",
            "page_size": 2,
            **options,
        }
    )
    return HttpSource(settings, Wiring(transport=httpx.MockTransport(router.handler)))


def test_offset_and_size_go_in_the_body_as_numbers() -> None:
    router = respx.MockRouter(assert_all_mocked=True)
    route = router.post(URL).mock(side_effect=odoo)
    records = [r for r in make(router).records() if isinstance(r, RawRecord)]
    assert [r.fields["default_code"] for r in records] == [f"P-{i}" for i in range(1, 6)]
    bodies = [json.loads(c.request.content) for c in route.calls]
    assert [(b["offset"], b["limit"]) for b in bodies] == [(0, 2), (2, 2), (4, 2)]
    assert all(b["domain"] == [["sale_ok", "=", True]] for b in bodies)
    assert not route.calls[0].request.url.query  # nothing in the query


def test_since_goes_into_the_domain() -> None:
    router = respx.MockRouter(assert_all_mocked=True)
    route = router.post(URL).mock(side_effect=odoo)
    src = make(
        router,
        since_body_path="domain",
        since_format="%Y-%m-%d %H:%M:%S",
        since_template='["write_date", ">", "{since}"]',
    )
    assert src.incremental
    list(src.records_since(datetime(2026, 11, 22, 9, 30, tzinfo=UTC)))
    body = json.loads(route.calls[0].request.content)
    assert body["domain"] == [["sale_ok", "=", True], ["write_date", ">", "2026-11-22 09:30:00"]]
    list(src.records())  # a full pull after it carries no filter
    assert json.loads(route.calls[-1].request.content)["domain"] == [["sale_ok", "=", True]]


def test_since_value_and_put_since() -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert since_value("iso8601", None, when) == "2026-01-02T03:04:05+00:00"
    assert since_value("epoch", '{"gt": {since}}', when) == {"gt": 1767323045}
    body: dict[str, Any] = {"filter": {"a": 1}}
    put_since(body, "filter.changed", "x")
    put_since(body, "q.since", "y")
    assert body == {"filter": {"a": 1, "changed": "x"}, "q": {"since": "y"}}


def test_body_needs_post_and_since_body_path_needs_a_body_request() -> None:
    with pytest.raises(ValueError, match='method = "POST"'):
        HttpSourceSettings.model_validate({"type": "http", "url": URL, "body": {"a": 1}})
    with pytest.raises(ValueError, match="since_body_path"):
        HttpSourceSettings.model_validate({"type": "http", "url": URL, "since_body_path": "domain"})


def test_page_walk_stops_by_a_total_of_items_magento_style() -> None:
    """Magento answers a page past the end with the last page again: total_count stops it."""
    url = "https://shop.example.com/rest/V1/products"
    rows = [{"sku": f"M-{i}"} for i in range(1, 5)]

    def magento(request: httpx.Request) -> httpx.Response:
        size = int(request.url.params["searchCriteria[pageSize]"])
        page = int(request.url.params["searchCriteria[currentPage]"])
        page = min(page, -(-len(rows) // size))  # past the end: the last page again
        items = rows[(page - 1) * size : page * size]
        return httpx.Response(200, json={"items": items, "total_count": len(rows)})

    router = respx.MockRouter(assert_all_mocked=True)
    route = router.get(url__startswith=url).mock(side_effect=magento)
    settings = HttpSourceSettings.model_validate(
        {
            "type": "http",
            "url": url,
            "items_path": "items",
            "pagination": "page",
            "page_param": "searchCriteria[currentPage]",
            "size_param": "searchCriteria[pageSize]",
            "page_size": 2,
            "total_path": "total_count",
        }
    )
    src = HttpSource(settings, Wiring(transport=httpx.MockTransport(router.handler)))
    records = [r.fields["sku"] for r in src.records() if isinstance(r, RawRecord)]
    assert records == ["M-1", "M-2", "M-3", "M-4"]  # not M-3, M-4 twice
    assert route.call_count == 2


@pytest.mark.parametrize(
    ("body", "shown"),
    [
        ({"name": "AccessDenied", "message": "Invalid apikey"}, ": Invalid apikey"),
        ({"error": {"code": "Unauthorized", "message": "The token expired"}}, ": The token"),
        ({"errors": "[API] Invalid API key"}, ": [API] Invalid API key"),
        ("not json", ""),
    ],
)
def test_a_refusal_names_the_api_s_own_message(body: Any, shown: str) -> None:
    router = respx.MockRouter(assert_all_mocked=True)
    answer = httpx.Response(401, json=body) if isinstance(body, dict) else httpx.Response(401)
    router.post(URL).mock(return_value=answer)
    with pytest.raises(SourceError) as caught:
        list(make(router).records())
    assert f"answered HTTP 401{shown}" in str(caught.value)
    assert "(the credentials were refused)" in str(caught.value)
