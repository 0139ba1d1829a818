"""The PrestaShop-like test server: its date filter on the shop's zoneless wall clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest

from skuferry.sandbox.pims.prestashop import STAMP, WS_KEY, PrestaShopServer, make_products

pytestmark = pytest.mark.integration

NOW = datetime(2026, 11, 26, 9, 13, 17, tzinfo=UTC)  # 04:13:17 at the shop (UTC-5)


def _get(shop: PrestaShopServer, **params: str) -> httpx.Response:
    query = {"output_format": "JSON", "display": "full", "ws_key": WS_KEY, **params}
    return httpx.get(f"{shop.url}/api/products", params=query)


def test_the_shop_stamps_changes_on_its_wall_clock_and_filters_on_it() -> None:
    shop = PrestaShopServer([], clock=lambda: NOW)
    shop.products = make_products(3, updated=shop.local_now() - timedelta(hours=1))
    with shop:
        assert shop.local_now() == datetime(2026, 11, 26, 4, 13, 17)
        assert [p["date_upd"] for p in shop.products][-1] == "2026-11-26 03:13:17"
        changed = shop.change("P-001", price="687.700000")
        assert changed["date_upd"] == "2026-11-26 04:13:17"
        after = _get(shop, date="1", **{"filter[date_upd]": ">[2026-11-26 03:13:17]"})
        assert [p["reference"] for p in after.json()["products"]] == ["P-001"]
        between = _get(
            shop, date="1", **{"filter[date_upd]": "[2026-11-26 03:13:17,2026-11-26 04:00:00]"}
        )
        assert [p["reference"] for p in between.json()["products"]] == ["P-003"]
        none = _get(shop, date="1", **{"filter[date_upd]": ">[2026-11-26 05:00:00]"})
        assert none.json() == [], "PrestaShop answers an empty list as []"
        assert _get(shop, **{"filter[date_upd]": ">[2026-11-26 03:00:00]"}).status_code == 400
        assert _get(shop, date="1", **{"filter[date_upd]": ">[04:00]"}).status_code == 400
        assert httpx.get(f"{shop.url}/api/products").status_code == 401
        assert datetime.strptime(changed["date_upd"], STAMP) == shop.local_now()
