"""The Business Central test server (and its token endpoint) against Microsoft's docs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from skuferry.sandbox.pims import business_central as bc
from skuferry.sandbox.pims.business_central import BusinessCentralServer, make_items
from skuferry.sandbox.pims.catalog import BASE_TIME, STEP

pytestmark = pytest.mark.integration


@pytest.fixture
def srv() -> Iterator[BusinessCentralServer]:
    with BusinessCentralServer(make_items(25)) as server:
        yield server


def grant(srv: BusinessCentralServer, **form: str) -> httpx.Response:
    body = {
        "grant_type": "client_credentials",
        "client_id": bc.CLIENT_ID,
        "client_secret": bc.SECRET,
        "scope": bc.SCOPE,
        **form,
    }
    return httpx.post(srv.token_url, data=body)


def bearer(srv: BusinessCentralServer) -> dict[str, str]:
    return {"Authorization": f"Bearer {grant(srv).json()['access_token']}"}


def walk(url: str, headers: dict[str, str], **params: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    page = httpx.get(url, headers=headers, params=params)
    while True:
        assert page.status_code == 200, page.text
        items += page.json()["value"]
        link = page.json().get("@odata.nextLink")
        if not link:
            return items
        page = httpx.get(link, headers=headers)


def test_token_endpoint_is_another_origin_and_answers_as_documented(
    srv: BusinessCentralServer,
) -> None:
    assert srv.token_url.split("/")[2] != srv.url.split("/")[2]
    body = grant(srv).json()
    assert body["token_type"] == "Bearer" and body["expires_in"] == 3599
    assert "refresh_token" not in body
    assert srv.identity.counts["token"] == 1 and srv.requests == []


def test_wrong_secret_is_invalid_client(srv: BusinessCentralServer) -> None:
    wrong = grant(srv, client_secret="nope")
    assert wrong.status_code == 401
    assert wrong.json()["error"] == "invalid_client"
    assert wrong.json()["error_codes"] == [7000215]
    assert grant(srv, scope="https://graph.microsoft.com/.default").status_code == 400
    assert grant(srv, grant_type="password").json()["error"] == "unsupported_grant_type"


def test_items_page_by_prefer_maxpagesize(srv: BusinessCentralServer) -> None:
    headers = {**bearer(srv), "Prefer": "odata.maxpagesize=10"}
    first = httpx.get(srv.items_url, headers=headers)
    assert first.headers["Preference-Applied"] == "odata.maxpagesize=10"
    assert first.json()["@odata.context"].endswith(f"companies({bc.COMPANY})/items")
    items = walk(srv.items_url, headers)
    assert [i["number"] for i in items] == sorted(i["number"] for i in srv.items)
    assert srv.counts["items"] == 4  # the probe and three pages
    one = items[1]
    assert one["number"] == "000002" and one["unitPrice"] == 12.5
    assert isinstance(one["inventory"], int) and one["gtin"] == "4000000000020"


def test_filter_on_last_modified_is_kept_in_the_next_link(srv: BusinessCentralServer) -> None:
    since = (BASE_TIME + STEP * 20).strftime("%Y-%m-%dT%H:%M:%SZ")
    headers = {**bearer(srv), "Prefer": "odata.maxpagesize=2"}
    items = walk(
        srv.items_url, headers, **{"$filter": f"lastModifiedDateTime gt {since}", "$count": "true"}
    )
    assert [i["number"] for i in items] == ["000022", "000023", "000024", "AB-00025"]
    assert all(
        r.arg("$filter") == f"lastModifiedDateTime gt {since}" for r in srv.requests_to("/items")
    )
    counted = httpx.get(
        srv.items_url, headers=headers, params={"$count": "true", "$filter": "blocked eq true"}
    ).json()
    assert counted["@odata.count"] == 2  # items 11 and 22
    bad = httpx.get(srv.items_url, headers=headers, params={"$filter": "foo gt 1"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "BadRequest"


def test_expired_and_missing_tokens_get_microsofts_401(srv: BusinessCentralServer) -> None:
    headers = bearer(srv)
    srv.tokens.expire_after = 1
    assert httpx.get(srv.items_url, headers=headers).status_code == 200
    expired = httpx.get(srv.items_url, headers=headers)
    assert expired.status_code == 401
    assert expired.json()["error"]["code"] == "Authentication_InvalidCredentials"
    assert "WWW-Authenticate" in expired.headers
    assert httpx.get(srv.items_url).status_code == 401
    assert httpx.get(srv.items_url, headers=bearer(srv)).status_code == 200, "a new grant works"


def test_throttle_and_page_faults(srv: BusinessCentralServer) -> None:
    headers = {**bearer(srv), "Prefer": "odata.maxpagesize=10"}
    srv.throttle(retry_after=3)
    throttled = httpx.get(srv.items_url, headers=headers)
    assert throttled.status_code == 429 and throttled.headers["Retry-After"] == "3"
    assert throttled.json()["error"]["code"] == "Application_TooManyRequests"
    srv.fail_page(2)
    link = httpx.get(srv.items_url, headers=headers).json()["@odata.nextLink"]
    assert httpx.get(link, headers=headers).status_code == 500
    assert httpx.get(link, headers=headers).status_code == 200


def test_companies_and_one_item(srv: BusinessCentralServer) -> None:
    headers = bearer(srv)
    companies = httpx.get(f"{srv.api_root}/companies", headers=headers).json()["value"]
    assert companies[0]["id"] == bc.COMPANY
    wanted = srv.items[3]
    one = httpx.get(f"{srv.items_url}({wanted['id']})", headers=headers).json()
    assert one["number"] == wanted["number"]
