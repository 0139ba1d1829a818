"""The Shopify test server against the GraphQL Admin API docs, with plain httpx."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from skuferry.sandbox.pims import shopify
from skuferry.sandbox.pims.catalog import BASE_TIME, STEP
from skuferry.sandbox.pims.shopify import ShopifyServer, make_variants

pytestmark = pytest.mark.integration

NODES = """
query Variants($first: Int!, $cursor: String, $search: String) {
  productVariants(first: $first, after: $cursor, query: $search) {
    nodes { sku price barcode inventoryQuantity updatedAt product { title vendor status } }
    pageInfo { hasNextPage endCursor }
  }
}
"""
EDGES = """{ productVariants(first: 10) { edges { cursor node { id sku } } pageInfo {
  hasNextPage endCursor } } }"""


@pytest.fixture
def srv() -> Iterator[ShopifyServer]:
    with ShopifyServer(make_variants(25)) as server:
        yield server


def ask(srv: ShopifyServer, document: str, token: str = shopify.TOKEN, **variables: Any) -> Any:
    answer = httpx.post(
        f"{srv.url}/admin/api/{shopify.VERSION}/graphql.json",
        headers={"X-Shopify-Access-Token": token},
        json={"query": document, "variables": variables},
    )
    return answer.json() if answer.status_code == 200 else answer


def walk(srv: ShopifyServer, **variables: Any) -> list[dict[str, Any]]:
    variables = {"search" if k == "query" else k: v for k, v in variables.items()}
    nodes: list[dict[str, Any]] = []
    cursor = None
    while True:
        body = ask(srv, NODES, cursor=cursor, **variables)  # $query is sent as "search"
        assert "errors" not in body, body
        connection = body["data"]["productVariants"]
        nodes += connection["nodes"]
        if not connection["pageInfo"]["hasNextPage"]:
            return nodes
        cursor = connection["pageInfo"]["endCursor"]


def test_cursor_pagination_returns_exactly_the_asked_fields(srv: ShopifyServer) -> None:
    nodes = walk(srv, first=10)
    assert [n["sku"] for n in nodes] == [v["sku"] for v in srv.variants]
    assert srv.counts["pages"] == 3
    assert nodes[1] == {
        "sku": "000002",
        "price": "12.50",
        "barcode": "4000000000020",
        "inventoryQuantity": 7,
        "updatedAt": "2026-11-01T08:01:00Z",
        "product": {"title": "Trinkflasche Größe M", "vendor": "Atelier Léon", "status": "ACTIVE"},
    }


def test_edges_and_every_answer_carries_the_cost(srv: ShopifyServer) -> None:
    body = ask(srv, EDGES)
    edges = body["data"]["productVariants"]["edges"]
    assert edges[0]["node"]["id"].startswith("gid://shopify/ProductVariant/")
    assert edges[-1]["cursor"] == body["data"]["productVariants"]["pageInfo"]["endCursor"]
    cost = body["extensions"]["cost"]
    assert cost["requestedQueryCost"] == 2 + 10 and cost["actualQueryCost"] == 12
    assert cost["throttleStatus"]["maximumAvailable"] == 2000.0
    assert cost["throttleStatus"]["restoreRate"] == 100.0


def test_updated_at_query_filters(srv: ShopifyServer) -> None:
    since = (BASE_TIME + STEP * 20).strftime("%Y-%m-%dT%H:%M:%SZ")
    nodes = walk(srv, first=2, query=f"updated_at:>'{since}'")
    assert [n["sku"] for n in nodes] == ["000022", "000023", "000024", "AB-00025"]


def test_first_is_capped_at_250(srv: ShopifyServer) -> None:
    body = ask(srv, NODES, first=251)
    assert "data" not in body and "250" in body["errors"][0]["message"]


def test_bad_token_and_bad_query(srv: ShopifyServer) -> None:
    refused = ask(srv, NODES, token="shpat_wrong", first=1)
    assert refused.status_code == 401 and refused.json() == {"errors": shopify.INVALID_TOKEN}
    broken = ask(srv, "{ productVariants(first: 1) { nodes { sku }")
    assert broken["errors"][0]["message"].startswith("syntax error")
    unknown = ask(srv, "{ productVariants(first: 1) { nodes { colour } } }")
    assert unknown["errors"][0]["extensions"]["code"] == "undefinedField"


def test_forced_throttle_reports_how_long_to_wait(srv: ShopifyServer) -> None:
    srv.throttle_next(wait=0.1)
    body = ask(srv, NODES, first=10)
    assert body["errors"][0]["extensions"]["code"] == "THROTTLED" and "data" not in body
    cost = body["extensions"]["cost"]
    assert cost["actualQueryCost"] is None
    status = cost["throttleStatus"]
    wait = (cost["requestedQueryCost"] - status["currentlyAvailable"]) / status["restoreRate"]
    assert wait == pytest.approx(0.1)
    assert "data" in ask(srv, NODES, first=10), "the next query goes through"


def test_leaky_bucket_throttles_when_the_cost_exceeds_the_room() -> None:
    now = [0.0]
    with ShopifyServer(
        make_variants(5), bucket_size=60, restore_rate=10, clock=lambda: now[0]
    ) as srv:
        first = ask(srv, NODES, first=20)  # requests 2 + 20*2 = 42, costs 2 + 5*2 = 12
        assert first["extensions"]["cost"]["throttleStatus"]["currentlyAvailable"] == 48
        second = ask(srv, NODES, first=25)  # requests 52 > 48
        assert second["errors"][0]["extensions"]["code"] == "THROTTLED"
        now[0] = 1.0
        assert "data" in ask(srv, NODES, first=25)


def test_page_fault(srv: ShopifyServer) -> None:
    srv.fail_page(2)
    cursor = ask(srv, NODES, first=10)["data"]["productVariants"]["pageInfo"]["endCursor"]
    failed = ask(srv, NODES, first=10, cursor=cursor)
    assert isinstance(failed, httpx.Response) and failed.status_code == 500
    assert "data" in ask(srv, NODES, first=10, cursor=cursor)
