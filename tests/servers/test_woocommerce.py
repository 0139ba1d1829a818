"""The WooCommerce test server against the WooCommerce REST API docs, over HTTPS."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from skuferry.sandbox.pims import woocommerce as woo
from skuferry.sandbox.pims.base import https_context
from skuferry.sandbox.pims.catalog import BASE_TIME, STEP
from skuferry.sandbox.pims.woocommerce import WooCommerceServer, make_catalog

trustme = pytest.importorskip("trustme")

pytestmark = pytest.mark.integration

AUTH = (woo.CONSUMER_KEY, woo.CONSUMER_SECRET)


@pytest.fixture(scope="module")
def ca() -> Any:
    return trustme.CA()


@pytest.fixture
def srv(ca: Any) -> Iterator[WooCommerceServer]:
    products, variations = make_catalog(25)
    with WooCommerceServer(products, variations, ssl_context=https_context(ca)) as server:
        yield server


@pytest.fixture
def client(ca: Any) -> Iterator[httpx.Client]:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    with httpx.Client(verify=context, auth=AUTH) as c:
        yield c


def test_https_only_with_the_private_ca(srv: WooCommerceServer) -> None:
    assert srv.url.startswith("https://127.0.0.1:")
    with pytest.raises(httpx.ConnectError):
        httpx.get(srv.url + woo.API + "/products", auth=AUTH)


def test_pages_with_wp_headers(srv: WooCommerceServer, client: httpx.Client) -> None:
    first = client.get(srv.url + woo.API + "/products", params={"per_page": 10})
    assert first.headers["X-WP-Total"] == "25" and first.headers["X-WP-TotalPages"] == "3"
    assert 'rel="next"' in first.headers["Link"]
    seen: list[dict[str, Any]] = []
    for page in range(1, 4):
        answer = client.get(srv.url + woo.API + "/products", params={"per_page": 10, "page": page})
        assert isinstance(answer.json(), list)
        seen += answer.json()
    assert sorted(p["sku"] for p in seen) == sorted(p["sku"] for p in srv.products)
    two = next(p for p in seen if p["sku"] == "000002")
    assert two["price"] == "12.50" and two["regular_price"] == "12.50"
    assert two["global_unique_id"] == "4000000000020" and two["stock_quantity"] == 7
    past = client.get(srv.url + woo.API + "/products", params={"per_page": 10, "page": 4})
    assert past.json() == []


def test_modified_after_filters(srv: WooCommerceServer, client: httpx.Client) -> None:
    since = (BASE_TIME + STEP * 20).strftime("%Y-%m-%dT%H:%M:%S")
    answer = client.get(srv.url + woo.API + "/products", params={"modified_after": since})
    assert sorted(p["sku"] for p in answer.json()) == ["000022", "000023", "000024", "AB-00025"]
    assert answer.headers["X-WP-Total"] == "4"


def test_variations_are_a_sub_resource(srv: WooCommerceServer, client: httpx.Client) -> None:
    parent = next(p for p in srv.products if p["type"] == "variable")
    answer = client.get(f"{srv.url}{woo.API}/products/{parent['id']}/variations")
    skus = sorted(v["sku"] for v in answer.json())
    assert skus == [f"{parent['sku']}-L", f"{parent['sku']}-S"]
    assert answer.headers["X-WP-TotalPages"] == "1"


def test_auth_errors(srv: WooCommerceServer, ca: Any) -> None:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    url = srv.url + woo.API + "/products"
    anonymous = httpx.get(url, verify=context)
    assert anonymous.status_code == 401
    assert anonymous.json() == {
        "code": "woocommerce_rest_cannot_view",
        "message": "Sorry, you cannot list resources.",
        "data": {"status": 401},
    }
    wrong = httpx.get(url, verify=context, auth=(woo.CONSUMER_KEY, "cs_wrong"))
    assert wrong.status_code == 401 and wrong.json()["message"] == "Consumer secret is invalid."


def test_per_page_limit_and_page_fault(srv: WooCommerceServer, client: httpx.Client) -> None:
    too_many = client.get(srv.url + woo.API + "/products", params={"per_page": 101})
    assert too_many.status_code == 400 and too_many.json()["code"] == "rest_invalid_param"
    srv.fail_page(2, 503)
    params = {"per_page": 10, "page": 2}
    assert client.get(srv.url + woo.API + "/products", params=params).status_code == 503
    assert client.get(srv.url + woo.API + "/products", params=params).status_code == 200
