"""The Magento test server against Adobe Commerce's REST docs, with plain httpx."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from skuferry.sandbox.pims import magento
from skuferry.sandbox.pims.catalog import BASE_TIME, STEP
from skuferry.sandbox.pims.magento import MagentoServer, make_products

pytestmark = pytest.mark.integration

HEADERS = {"Authorization": f"Bearer {magento.TOKEN}"}


@pytest.fixture
def srv() -> Iterator[MagentoServer]:
    with MagentoServer(make_products(25)) as server:
        yield server


def page(srv: MagentoServer, size: int, number: int, **extra: str) -> Any:
    params = {"searchCriteria[pageSize]": str(size), "searchCriteria[currentPage]": str(number)}
    answer = httpx.get(srv.url + "/rest/V1/products", headers=HEADERS, params={**params, **extra})
    return answer.json() if answer.status_code == 200 else answer


def since_filter(when: str) -> dict[str, str]:
    prefix = "searchCriteria[filter_groups][0][filters][0]"
    return {
        f"{prefix}[field]": "updated_at",
        f"{prefix}[value]": when,
        f"{prefix}[condition_type]": "gt",
    }


def test_pages_by_total_count_and_past_the_end_repeats(srv: MagentoServer) -> None:
    first = page(srv, 10, 1)
    assert first["total_count"] == 25 and len(first["items"]) == 10
    assert first["search_criteria"] == {"filter_groups": [], "page_size": 10, "current_page": 1}
    third = page(srv, 10, 3)
    fourth = page(srv, 10, 4)
    assert [p["sku"] for p in fourth["items"]] == [p["sku"] for p in third["items"]]
    assert fourth["search_criteria"]["current_page"] == 4
    item = first["items"][1]
    assert item["sku"] == "000002" and item["price"] == 12.5 and item["status"] == 1
    assert item["extension_attributes"]["stock_item"]["qty"] == 7
    codes = {c["attribute_code"]: c["value"] for c in item["custom_attributes"]}
    assert codes["ean"] == "4000000000020"


def test_updated_at_filter(srv: MagentoServer) -> None:
    since = (BASE_TIME + STEP * 20).strftime("%Y-%m-%d %H:%M:%S")
    answer = page(srv, 2, 1, **since_filter(since))
    assert answer["total_count"] == 4
    assert [p["sku"] for p in answer["items"]] == ["000022", "000023"]
    assert answer["search_criteria"]["filter_groups"] == [
        {"filters": [{"field": "updated_at", "value": since, "condition_type": "gt"}]}
    ]


def test_or_within_a_group_and_sort(srv: MagentoServer) -> None:
    g = "searchCriteria[filter_groups][0][filters]"
    answer = page(
        srv,
        10,
        1,
        **{
            f"{g}[0][field]": "sku",
            f"{g}[0][value]": "000001",
            f"{g}[1][field]": "sku",
            f"{g}[1][value]": "AB-%",
            f"{g}[1][condition_type]": "like",
            "searchCriteria[sortOrders][0][field]": "sku",
            "searchCriteria[sortOrders][0][direction]": "DESC",
        },
    )
    assert [p["sku"] for p in answer["items"]] == [
        "AB-00025",
        "AB-00020",
        "AB-00015",
        "AB-00010",
        "AB-00005",
        "000001",
    ]


def test_errors(srv: MagentoServer) -> None:
    refused = httpx.get(srv.url + "/rest/V1/products", params={"searchCriteria[pageSize]": "1"})
    assert refused.status_code == 401
    assert refused.json()["parameters"] == {"resources": "Magento_Catalog::products"}
    bare = httpx.get(srv.url + "/rest/V1/products", headers=HEADERS)
    assert bare.status_code == 400 and bare.json()["parameters"]["fieldName"] == "searchCriteria"
    one = httpx.get(srv.url + "/rest/default/V1/products/AB-00005", headers=HEADERS)
    assert one.json()["sku"] == "AB-00005"


def test_input_limit_and_page_fault() -> None:
    with MagentoServer(make_products(5), max_page_size=300, stock_in_list=False) as srv:
        assert page(srv, 301, 1).json()["parameters"] == {"max": 300}
        assert "stock_item" not in page(srv, 5, 1)["items"][0]["extension_attributes"]
        srv.fail_page(1)
        assert page(srv, 5, 1).status_code == 500
        assert page(srv, 5, 1)["total_count"] == 5
