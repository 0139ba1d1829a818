"""type = "graphql": cursor paging, errors, THROTTLED waited out by the cost report, Retry-After."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import respx

from skuferry.config.schema import GraphqlSourceSettings
from skuferry.errors import SourceError
from skuferry.models import RawRecord
from skuferry.sources.graphql import GraphqlSource
from skuferry.sources.wiring import Wiring

URL = "https://shop.example.com/admin/api/2025-10/graphql.json"
QUERY = "query($cursor: String, $query: String) { products(first: 2, after: $cursor, query: $query) { edges { node { sku } } pageInfo { hasNextPage endCursor } } }"  # noqa: E501
ROWS = [{"sku": f"V-{i}"} for i in range(1, 6)]


def page(request: httpx.Request) -> httpx.Response:
    variables = json.loads(request.content)["variables"]
    start = int(variables["cursor"] or 0)
    rows = ROWS[start : start + 2]
    end = start + len(rows)
    return httpx.Response(
        200,
        json={
            "data": {
                "products": {
                    "edges": [{"node": r, "cursor": str(i)} for i, r in enumerate(rows)],
                    "pageInfo": {"hasNextPage": end < len(ROWS), "endCursor": str(end)},
                }
            },
            "extensions": {"cost": {"requestedQueryCost": 12}},
        },
    )


def throttled(requested: float, available: float, rate: float) -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "errors": [{"message": "Throttled", "extensions": {"code": "THROTTLED"}}],
            "extensions": {
                "cost": {
                    "requestedQueryCost": requested,
                    "actualQueryCost": None,
                    "throttleStatus": {
                        "maximumAvailable": 2000.0,
                        "currentlyAvailable": available,
                        "restoreRate": rate,
                    },
                }
            },
        },
    )


def make(router: respx.MockRouter, sleeps: list[float], **options: Any) -> GraphqlSource:
    settings = GraphqlSourceSettings.model_validate(
        {
            "type": "graphql",
            "url": URL,
            "query": QUERY,
            "items_path": "data.products.edges[].node",
            "page_info_path": "data.products.pageInfo",
            "auth": "header",
            "header_name": "X-Shopify-Access-Token",
            "token": "shpat_test",
            "max_retries": 2,
            **options,
        }
    )
    return GraphqlSource(
        settings,
        Wiring(
            transport=httpx.MockTransport(router.handler),
            sleep=sleeps.append,
            clock=lambda: 0.0,
            rng=random.Random(1),
        ),
    )


def skus(src: GraphqlSource) -> list[str]:
    return [str(r.fields["sku"]) for r in src.records() if isinstance(r, RawRecord)]


def test_edges_nodes_are_walked_by_the_cursor_variable() -> None:
    router = respx.MockRouter(assert_all_mocked=True)
    route = router.post(URL).mock(side_effect=page)
    assert skus(make(router, [])) == [f"V-{i}" for i in range(1, 6)]
    sent = [json.loads(c.request.content)["variables"]["cursor"] for c in route.calls]
    assert sent == [None, "2", "4"]
    assert all(c.request.headers["X-Shopify-Access-Token"] == "shpat_test" for c in route.calls)


def test_a_throttle_waits_as_the_cost_report_says_and_is_not_a_failure() -> None:
    router = respx.MockRouter(assert_all_mocked=True)
    answers = iter([throttled(502, 2, 50), throttled(502, 2, 50), throttled(502, 2, 50)])
    router.post(URL).mock(side_effect=lambda r: next(answers, None) or page(r))
    sleeps: list[float] = []
    src = make(router, sleeps)  # max_retries = 2: three throttles in a row still pass
    assert len(skus(src)) == 5
    assert sleeps == [10.0, 10.0, 10.0]  # (502 - 2) / 50
    assert src.throttled == 3


def test_retry_after_is_obeyed_on_a_429() -> None:
    router = respx.MockRouter(assert_all_mocked=True)
    answers = iter([httpx.Response(429, headers={"Retry-After": "7"})])
    router.post(URL).mock(side_effect=lambda r: next(answers, None) or page(r))
    sleeps: list[float] = []
    assert len(skus(make(router, sleeps))) == 5
    assert len(sleeps) == 1 and sleeps[0] >= 7


def test_errors_fail_the_pull_naming_the_first_message() -> None:
    router = respx.MockRouter(assert_all_mocked=True)
    router.post(URL).mock(
        return_value=httpx.Response(
            200,
            json={
                "errors": [
                    {"message": "Field 'skus' doesn't exist on type 'ProductVariant'"},
                    {"message": "second"},
                ]
            },
        )
    )
    with pytest.raises(SourceError, match=r"Field 'skus' doesn't exist .*\(and 1 more\)"):
        skus(make(router, []))


def test_since_fills_its_variable_from_the_template() -> None:
    router = respx.MockRouter(assert_all_mocked=True)
    route = router.post(URL).mock(side_effect=page)
    src = make(
        router,
        [],
        since_variable="query",
        since_template="updated_at:>'{since}'",
        since_format="%Y-%m-%dT%H:%M:%SZ",
        variables={"query": "status:active"},
    )
    list(src.records_since(datetime(2026, 11, 20, 6, 0, tzinfo=UTC)))
    variables = json.loads(route.calls[0].request.content)["variables"]
    assert variables["query"] == "updated_at:>'2026-11-20T06:00:00Z'"
    list(src.records())
    assert json.loads(route.calls[-1].request.content)["variables"]["query"] == "status:active"


def test_has_next_page_without_an_end_cursor_fails() -> None:
    router = respx.MockRouter(assert_all_mocked=True)
    router.post(URL).mock(
        return_value=httpx.Response(
            200,
            json={
                "data": {
                    "products": {
                        "edges": [{"node": {"sku": "A"}}],
                        "pageInfo": {"hasNextPage": True, "endCursor": None},
                    }
                }
            },
        )
    )
    with pytest.raises(SourceError, match="no endCursor"):
        skus(make(router, []))


def test_query_or_query_file_is_required() -> None:
    with pytest.raises(ValueError, match="needs query"):
        GraphqlSourceSettings.model_validate(
            {"type": "graphql", "url": URL, "items_path": "data.x"}
        )


def test_a_refused_token_names_the_answer() -> None:
    router = respx.MockRouter(assert_all_mocked=True)
    router.post(URL).mock(
        return_value=httpx.Response(401, json={"errors": "[API] Invalid API key or access token"})
    )
    with pytest.raises(SourceError, match=r"HTTP 401: \[API\] Invalid API key .*refused"):
        skus(make(router, []))


def test_oauth2_works_for_graphql_too() -> None:
    token_url = "https://login.example.net/token"
    router = respx.MockRouter(assert_all_mocked=True)
    router.post(token_url).mock(
        return_value=httpx.Response(200, json={"access_token": "gql-tok", "expires_in": 600})
    )
    route = router.post(URL).mock(side_effect=page)
    src = make(
        router,
        [],
        auth="oauth2",
        token_url=token_url,
        client_id="c",
        client_secret="graphql-client-secret",
        header_name=None,
        token=None,
    )
    assert len(skus(src)) == 5
    assert all(c.request.headers["Authorization"] == "Bearer gql-tok" for c in route.calls)
    assert all(b"graphql-client-secret" not in c.request.content for c in route.calls)
