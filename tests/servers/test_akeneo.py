"""The Akeneo test server against Akeneo's documentation, with plain httpx."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from skuferry.sandbox.pims import akeneo
from skuferry.sandbox.pims.akeneo import AkeneoServer, make_products
from skuferry.sandbox.pims.catalog import BASE_TIME, STEP

pytestmark = pytest.mark.integration


@pytest.fixture
def srv() -> Iterator[AkeneoServer]:
    with AkeneoServer(make_products(25)) as server:
        yield server


def token(srv: AkeneoServer, **body: Any) -> httpx.Response:
    return httpx.post(
        srv.url + akeneo.TOKEN_PATH,
        auth=(akeneo.CLIENT_ID, akeneo.SECRET),
        json=body
        or {"grant_type": "password", "username": akeneo.USERNAME, "password": akeneo.PASSWORD},
    )


def bearer(srv: AkeneoServer) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(srv).json()['access_token']}"}


def walk(srv: AkeneoServer, url: str, headers: dict[str, str]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    next_url: str | None = url
    while next_url:
        page = httpx.get(next_url, headers=headers)
        assert page.status_code == 200, page.text
        items += page.json()["_embedded"]["items"]
        next_url = page.json()["_links"].get("next", {}).get("href")
    return items


def test_password_grant_answers_the_documented_token(srv: AkeneoServer) -> None:
    answer = token(srv)
    assert answer.status_code == 200
    body = answer.json()
    assert body["expires_in"] == 3600 and body["token_type"] == "bearer" and body["scope"] is None
    assert body["access_token"] and body["refresh_token"]
    assert srv.requests[0].basic_auth() == (akeneo.CLIENT_ID, akeneo.SECRET)


def test_wrong_credentials_get_akeneos_error(srv: AkeneoServer) -> None:
    wrong_user = token(srv, grant_type="password", username=akeneo.USERNAME, password="nope")
    assert wrong_user.status_code == 422
    assert wrong_user.json()["message"] == "No user found for the given username and password"
    wrong_client = httpx.post(srv.url + akeneo.TOKEN_PATH, auth=("x", "y"), json={})
    assert wrong_client.status_code == 422 and "client_id" in wrong_client.json()["message"]


def test_search_after_walks_every_product_once(srv: AkeneoServer) -> None:
    url = f"{srv.url}{akeneo.PRODUCTS}?pagination_type=search_after&limit=10"
    items = walk(srv, url, bearer(srv))
    assert [p["identifier"] for p in items] == sorted(p["identifier"] for p in srv.products)
    assert srv.counts["products"] == 3
    first = items[0]
    assert first["identifier"] == "000001" and first["values"]["price"][0]["data"][0] == {
        "amount": "899.00",
        "currency": "EUR",
    }
    assert first["updated"] == BASE_TIME.isoformat()


def test_a_full_last_page_still_links_on_to_an_empty_one(srv: AkeneoServer) -> None:
    # Akeneo's search_after paginator links on whenever a page is full: 25 products at
    # limit=5 end with an empty sixth page that has no next link.
    url = f"{srv.url}{akeneo.PRODUCTS}?pagination_type=search_after&limit=5"
    items = walk(srv, url, bearer(srv))
    assert len(items) == 25 and srv.counts["products"] == 6


def test_last_page_has_no_next_and_limit_is_capped(srv: AkeneoServer) -> None:
    headers = bearer(srv)
    page = httpx.get(
        f"{srv.url}{akeneo.PRODUCTS}?pagination_type=search_after&limit=100", headers=headers
    ).json()
    assert "next" not in page["_links"] and len(page["_embedded"]["items"]) == 25
    too_many = httpx.get(f"{srv.url}{akeneo.PRODUCTS}?limit=101", headers=headers)
    assert too_many.status_code == 422
    assert too_many.json() == {"code": 422, "message": "You cannot request more than 100 items."}


def test_updated_filter_keeps_later_products(srv: AkeneoServer) -> None:
    since = (BASE_TIME + STEP * 20).strftime("%Y-%m-%d %H:%M:%S")
    search = json.dumps({"updated": [{"operator": ">", "value": since}]})
    items = walk(
        srv,
        httpx.URL(
            srv.url + akeneo.PRODUCTS,
            params={"pagination_type": "search_after", "limit": "2", "search": search},
        ).__str__(),
        bearer(srv),
    )
    assert [p["identifier"] for p in items] == ["000022", "000023", "000024", "AB-00025"]
    assert all(r.arg("search") == search for r in srv.requests_to("/products"))


def test_page_pagination_and_one_product(srv: AkeneoServer) -> None:
    headers = bearer(srv)
    page = httpx.get(
        f"{srv.url}{akeneo.PRODUCTS}?page=3&limit=10&with_count=true", headers=headers
    ).json()
    assert page["items_count"] == 25 and len(page["_embedded"]["items"]) == 5
    assert "next" not in page["_links"] and "previous" in page["_links"]
    one = httpx.get(f"{srv.url}{akeneo.PRODUCTS}/AB-00005", headers=headers)
    assert one.json()["identifier"] == "AB-00005"
    assert httpx.get(f"{srv.url}{akeneo.PRODUCTS}/nope", headers=headers).status_code == 404


def test_token_expires_after_k_requests_and_refresh_renews_it(srv: AkeneoServer) -> None:
    first = token(srv).json()
    srv.tokens.expire_after = 1
    headers = {"Authorization": f"Bearer {first['access_token']}"}
    assert httpx.get(srv.url + akeneo.PRODUCTS, headers=headers).status_code == 200
    expired = httpx.get(srv.url + akeneo.PRODUCTS, headers=headers)
    assert expired.status_code == 401
    assert expired.json() == {"code": 401, "message": "The access token provided has expired."}
    renewed = token(srv, grant_type="refresh_token", refresh_token=first["refresh_token"])
    assert renewed.status_code == 200
    again = token(srv, grant_type="refresh_token", refresh_token=first["refresh_token"])
    assert again.status_code == 422, "a refresh token is used up by one renewal"
    headers = {"Authorization": f"Bearer {renewed.json()['access_token']}"}
    assert httpx.get(srv.url + akeneo.PRODUCTS, headers=headers).status_code == 200


def test_missing_and_unknown_tokens(srv: AkeneoServer) -> None:
    assert httpx.get(srv.url + akeneo.PRODUCTS).json()["message"] == "Authentication is required"
    unknown = httpx.get(srv.url + akeneo.PRODUCTS, headers={"Authorization": "Bearer forged"})
    assert unknown.status_code == 401 and "invalid" in unknown.json()["message"]


def test_faults_fail_one_page_then_recover(srv: AkeneoServer) -> None:
    headers = bearer(srv)
    srv.fail_page(2)
    url = f"{srv.url}{akeneo.PRODUCTS}?pagination_type=search_after&limit=10"
    page1 = httpx.get(url, headers=headers).json()
    nxt = page1["_links"]["next"]["href"]
    assert httpx.get(nxt, headers=headers).status_code == 500
    assert httpx.get(nxt, headers=headers).status_code == 200
    srv.throttle(retry_after=1)
    throttled = httpx.get(f"{srv.url}{akeneo.PRODUCTS}?limit=7", headers=headers)
    assert throttled.status_code == 429 and throttled.headers["Retry-After"] == "1"
    assert throttled.json() == {"code": 429, "message": "Too many requests"}


def test_events_are_signed_as_documented(srv: AkeneoServer) -> None:
    body, headers = akeneo.signed_delivery(
        [akeneo.event(srv.products[0])], "s3cret", timestamp=1602565368
    )
    expected = hmac.new(b"s3cret", b"1602565368." + body, hashlib.sha256).hexdigest()
    assert headers["X-Akeneo-Request-Signature"] == expected
    payload = json.loads(body)["events"][0]
    assert payload["action"] == "product.updated"
    assert payload["data"]["resource"]["identifier"] == "000001"


def test_catalog_has_the_awkward_cases() -> None:
    products = make_products(30)
    identifiers = [p["identifier"] for p in products]
    assert identifiers[0] == "000001" and "AB-00005" in identifiers
    eans = [p["values"]["ean"][0]["data"] for p in products if "ean" in p["values"]]
    assert any(e.startswith("0") for e in eans) and len(eans) < 30
    assert any(not p["enabled"] for p in products)
    assert any(not p["values"]["name"][0]["data"].isascii() for p in products)


def test_updated_filter_takes_only_akeneos_date_format(srv: AkeneoServer) -> None:
    search = json.dumps({"updated": [{"operator": ">", "value": "2026-11-01T08:20:00Z"}]})
    answer = httpx.get(srv.url + akeneo.PRODUCTS, params={"search": search}, headers=bearer(srv))
    assert answer.status_code == 422 and "yyyy-mm-dd H:i:s" in answer.json()["message"]
