"""[source] preset: a system's defaults filled in before validation, every one overridable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from skuferry.config import presets
from skuferry.config.load import load_settings, settings_from_dict
from skuferry.config.schema import GraphqlSourceSettings, HttpSourceSettings
from skuferry.errors import ConfigError

KEYS = {"client_id": "c", "client_secret": "s"}
EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "connectors"


def _source(**source: Any) -> Any:
    data = {
        "api": {"base_url": "http://127.0.0.1:1", "api_key": "k"},
        "state": {"path": "x.db"},
        "source": source,
    }
    return settings_from_dict(data).source


def test_akeneo_from_the_base_address() -> None:
    s = _source(
        preset="akeneo",
        url="https://pim.example.com",
        client_id="1_x",
        client_secret="s",
        username="u",
        password="p",
    )
    assert isinstance(s, HttpSourceSettings)
    assert (
        s.url
        == "https://pim.example.com/api/rest/v1/products?pagination_type=search_after&limit=100"
    )
    assert s.token_url == "https://pim.example.com/api/oauth/v1/token"
    assert (s.auth, s.grant, s.token_request, s.client_auth) == (
        "oauth2",
        "password",
        "json",
        "basic",
    )
    assert s.since_param == "search" and s.since_template and "{since}" in s.since_template


def test_everything_a_preset_sets_can_be_overridden() -> None:
    s = _source(
        preset="odoo",
        url="https://odoo.example.com/json/2/product.template/search_read",
        token="k",
        page_size=500,
        body={"fields": ["default_code"]},
        headers={"X-Odoo-Database": "prod"},
        empty_values=[],
    )
    assert isinstance(s, HttpSourceSettings)
    assert s.url.endswith("/product.template/search_read")  # a URL with a path is kept
    assert s.page_size == 500
    assert s.body == {"domain": [], "fields": ["default_code"], "order": "id"}  # merged
    assert s.empty_values == []
    assert s.headers == {"X-Odoo-Database": "prod"}


def test_business_central_derives_the_token_url_from_the_tenant() -> None:
    url = "https://api.businesscentral.dynamics.com/v2.0/TENANT-1/production/api/v2.0/companies(C)/items"
    s = _source(preset="business-central", url=url, **KEYS)
    assert isinstance(s, HttpSourceSettings)
    assert s.token_url == "https://login.microsoftonline.com/TENANT-1/oauth2/v2.0/token"
    assert s.url == url + "?$count=true"  # @odata.count: the pull proves it reached the end
    given = _source(preset="business-central", url=url + "?$count=false&$top=5", **KEYS)
    assert isinstance(given, HttpSourceSettings)
    assert given.url == url + "?$count=false&$top=5"  # a parameter the URL names is kept
    assert s.scope == "https://api.businesscentral.dynamics.com/.default"
    assert s.headers == {"Prefer": "odata.maxpagesize=1000"}


def test_shopify_is_a_graphql_source() -> None:
    s = _source(preset="shopify", url="https://x.myshopify.com", token="shpat_x")
    assert isinstance(s, GraphqlSourceSettings)
    assert s.header_name == "X-Shopify-Access-Token"
    assert s.url == f"https://x.myshopify.com/admin/api/{presets.SHOPIFY_API_VERSION}/graphql.json"


def test_an_unknown_preset_is_named() -> None:
    with pytest.raises(ConfigError, match="unknown preset 'akeneo7'; known: 'akeneo'"):
        _source(preset="akeneo7", url="https://x.example.com")


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.toml")))
def test_every_worked_example_loads(example: str, tmp_path: Path) -> None:
    """The examples under examples/connectors/ stay valid configs (their secrets from env)."""
    key = tmp_path / "api_key"
    key.write_text("sk-example\n")
    key.chmod(0o600)
    env = {
        "SKUFERRY_API_KEY": "sk-example",
        "SKUFERRY_STATE_PATH": str(tmp_path / "state.db"),
        **{name: "secret-value" for name in (
            "AKENEO_CLIENT_SECRET", "AKENEO_PASSWORD", "BC_CLIENT_SECRET", "SHOPIFY_TOKEN",
            "ODOO_API_KEY", "WOO_SECRET", "MAGENTO_TOKEN",
        )},
    }  # fmt: skip
    settings = load_settings(EXAMPLES / example, env=env)
    assert settings.source.preset == example.removesuffix(".toml")  # type: ignore[union-attr]
    assert settings.mapping.fields and {"sku", "name", "price", "stock", "ean"} <= set(
        settings.mapping.fields
    )


def test_show_config_names_what_the_preset_filled_in() -> None:
    data = {
        "api": {"base_url": "http://127.0.0.1:1", "api_key": "k"},
        "state": {"path": "x.db"},
        "source": {"preset": "odoo", "url": "https://o.example.com", "token": "t", "page_size": 7},
    }
    shown = settings_from_dict(data).redacted()["source"]
    assert {"url", "method", "body", "since_body_path", "empty_values"} <= set(
        shown["preset_filled"]
    )
    assert "page_size" not in shown["preset_filled"]  # the table's own value
    assert shown["token"] == "***"


def test_woocommerce_reads_its_totals_from_the_headers() -> None:
    s = _source(preset="woocommerce", url="https://shop.example.com", username="ck", password="cs")
    assert isinstance(s, HttpSourceSettings)
    assert (s.total_header, s.total_pages_header) == ("X-WP-Total", "X-WP-TotalPages")
    assert s.url.startswith("https://shop.example.com/wp-json/wc/v3/products?")


def test_akeneo_preset_ends_a_catalog_that_fills_its_last_page() -> None:
    """Akeneo links to a next page whenever a page is full (count == limit), so a catalog of
    exactly 200 ends with an empty third page: the pull is complete, not cut short."""
    import httpx
    import respx

    from skuferry.models import RawRecord
    from skuferry.sources.http import HttpSource
    from skuferry.sources.wiring import Wiring

    base = "https://pim.example.com"
    rows = [{"identifier": f"P-{i:03d}"} for i in range(200)]

    def listing(request: httpx.Request) -> httpx.Response:
        limit = int(request.url.params["limit"])
        after = request.url.params.get("search_after", "")
        start = sum(1 for r in rows if r["identifier"] <= after) if after else 0
        items = rows[start : start + limit]
        links: dict[str, Any] = {"self": {"href": str(request.url)}}
        if len(items) == limit:  # Akeneo's rule, whether or not more follow
            nxt = request.url.copy_merge_params({"search_after": items[-1]["identifier"]})
            links["next"] = {"href": str(nxt)}
        return httpx.Response(200, json={"_links": links, "_embedded": {"items": items}})

    router = respx.MockRouter(assert_all_mocked=True)
    router.post(f"{base}/api/oauth/v1/token").mock(
        return_value=httpx.Response(200, json={"access_token": "a", "expires_in": 3600})
    )
    pages = router.get(url__startswith=f"{base}/api/rest/v1/products").mock(side_effect=listing)
    settings = _source(
        preset="akeneo", url=base, client_id="1_x", client_secret="s", username="u", password="p"
    )
    src = HttpSource(settings, Wiring(transport=httpx.MockTransport(router.handler)))
    got = [r.fields["identifier"] for r in src.records() if isinstance(r, RawRecord)]
    assert got == [r["identifier"] for r in rows]
    assert pages.call_count == 3  # 100, 100, then the empty page that ends it
