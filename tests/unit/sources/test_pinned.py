"""sources/pinned.py: redirects followed by hand, method and body as RFC 9110 §15.4 says.

307/308 repeat the request as it was (a POST keeps its body); 303, and 301/302 for
a POST, become a GET without a body, as httpx does. Each hop is checked against the
configured origin first (by the client's gate), so credentials never go to another
origin. respx stands in for the servers: nothing leaves the process.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import respx

from skuferry.config.schema import GraphqlSourceSettings
from skuferry.errors import SourceError
from skuferry.models import RawRecord
from skuferry.net.origins import parse_allowed
from skuferry.net.transport import gated_client
from skuferry.sources.graphql import GraphqlSource
from skuferry.sources.pinned import send_pinned
from skuferry.sources.wiring import Wiring

HOME = "https://pim.example.com"
OLD = f"{HOME}/api/search"
NEW = f"{HOME}/v2/search"
BODY = {"filter": {"updated": ">2026-01-01"}, "page": 2}
TOKEN = "Bearer tok-9Xq"


@pytest.fixture
def router() -> respx.MockRouter:
    return respx.MockRouter(assert_all_called=False, assert_all_mocked=True)


def send(
    router: respx.MockRouter, method: str, *, allowed: tuple[str, ...] = (), **kw: Any
) -> httpx.Response:
    with gated_client(
        home=OLD,
        allowed=parse_allowed(allowed),
        transport=httpx.MockTransport(router.handler),
        headers={"Authorization": TOKEN},
    ) as client:
        response = send_pinned(client, client.build_request(method, OLD, **kw), where="test")
        response.read()
        response.close()
        return response


def moved(status: int, to: str = NEW) -> httpx.Response:
    return httpx.Response(status, headers={"Location": to})


@pytest.mark.parametrize("status", [307, 308])
def test_307_and_308_keep_a_posts_method_and_body(router: respx.MockRouter, status: int) -> None:
    router.post(OLD).mock(return_value=moved(status))
    new = router.post(NEW).mock(return_value=httpx.Response(200, json={"ok": True}))
    assert send(router, "POST", json=BODY).status_code == 200
    hop = new.calls.last.request
    assert hop.method == "POST"
    assert json.loads(hop.content) == BODY
    assert hop.headers["Content-Type"] == "application/json"
    assert hop.headers["Content-Length"] == str(len(hop.content))
    assert hop.headers["Authorization"] == TOKEN  # same origin: the credentials go along


@pytest.mark.parametrize(("status", "method"), [(303, "POST"), (302, "POST"), (301, "POST")])
def test_303_and_a_posts_301_302_become_a_get_without_the_body(
    router: respx.MockRouter, status: int, method: str
) -> None:
    router.route(method=method, url=OLD).mock(return_value=moved(status))
    new = router.get(NEW).mock(return_value=httpx.Response(200))
    send(router, method, json=BODY)
    hop = new.calls.last.request
    assert hop.method == "GET" and hop.content == b""
    assert "Content-Type" not in hop.headers and "Content-Length" not in hop.headers


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_get_stays_a_get(router: respx.MockRouter, status: int) -> None:
    router.get(OLD).mock(return_value=moved(status))
    new = router.get(NEW).mock(return_value=httpx.Response(200))
    send(router, "GET")
    assert new.calls.last.request.method == "GET"


def test_a_put_keeps_its_method_and_body_through_a_302_as_httpx_does(
    router: respx.MockRouter,
) -> None:
    router.put(OLD).mock(return_value=moved(302))
    new = router.put(NEW).mock(return_value=httpx.Response(200))
    send(router, "PUT", content=b"payload")
    assert new.calls.last.request.content == b"payload"


def test_a_307_to_another_origin_sends_nothing_there(router: respx.MockRouter) -> None:
    router.post(OLD).mock(return_value=moved(307, "https://evil.example.net/collect"))
    evil = router.route(host="evil.example.net").mock(return_value=httpx.Response(200))
    with pytest.raises(SourceError, match="refusing to send credentials to https://evil"):
        send(router, "POST", json=BODY)
    assert evil.call_count == 0


def test_a_308_to_an_allowed_origin_keeps_the_body(router: respx.MockRouter) -> None:
    other = "https://cdn.example.com/v2/search"
    router.post(OLD).mock(return_value=moved(308, other))
    new = router.post(other).mock(return_value=httpx.Response(200))
    send(router, "POST", json=BODY, allowed=("https://cdn.example.com",))
    assert json.loads(new.calls.last.request.content) == BODY


def test_a_graphql_query_survives_a_permanent_redirect(router: respx.MockRouter) -> None:
    url = "https://shop.example.com/admin/api/2025-07/graphql.json"
    moved_to = "https://shop.example.com/admin/api/2025-10/graphql.json"
    query = "query($cursor: String) { items(after: $cursor) { sku } }"
    router.post(url).mock(return_value=moved(308, moved_to))
    seen: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, json={"data": {"items": [{"sku": "V-1"}]}})

    router.post(moved_to).mock(side_effect=answer)
    settings = GraphqlSourceSettings.model_validate(
        {"type": "graphql", "url": url, "query": query, "items_path": "data.items"}
    )
    source = GraphqlSource(settings, Wiring(transport=httpx.MockTransport(router.handler)))
    records = [r for r in source.records() if isinstance(r, RawRecord)]
    assert [r.fields["sku"] for r in records] == ["V-1"]
    assert seen == [{"query": query, "variables": {"cursor": None}}]
