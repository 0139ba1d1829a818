"""``[source] preset``: the defaults a known system always uses, filled in before validation.

A preset fills only the keys the ``[source]`` table leaves out; every key it sets can
be given in the table instead (``body`` and ``headers`` are merged member by member,
the table's members winning). ``url`` may be the system's base address (no path):
the preset then adds the path of its product listing, and derives ``token_url``
from the same origin where the system puts it there. ``skuferry check
--show-config`` prints the result.

Pure data and one function, no I/O: the config loader calls ``apply`` on the raw
``[source]`` table before the models see it.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

SHOPIFY_API_VERSION = "2025-10"

# Shopify: the variants (one per SKU) with their product; 250 a page (the API's maximum).
SHOPIFY_QUERY = """\
query Variants($cursor: String, $query: String) {
  productVariants(first: 250, after: $cursor, query: $query, sortKey: ID) {
    nodes {
      id
      sku
      title
      price
      compareAtPrice
      barcode
      inventoryQuantity
      updatedAt
      product { id title handle vendor productType status }
    }
    pageInfo { hasNextPage endCursor }
  }
}
"""

_QUERY = "url query"  # parameters added to url unless it names them already
_AKENEO_SEARCH = '{"updated":[{"operator":">","value":"{since}"}]}'
_BC_TENANT = re.compile(r"^/v2\.0/(?P<tenant>[^/]+)/")
_MAGENTO_FILTER = "searchCriteria[filter_groups][0][filters][0]"


def _base(url: str) -> tuple[str, bool]:
    """(the URL, whether it is a bare base address: no path beyond "/")."""
    parts = urlsplit(url)
    return url, parts.path in ("", "/") and not parts.query


def _with_path(url: str, path: str) -> str:
    parts = urlsplit(url)
    path, _, query = path.partition("?")
    return urlunsplit((parts.scheme, parts.netloc, path, query, ""))


def _with_query(url: str, params: Mapping[str, str]) -> str:
    """``url`` with ``params`` added to its query, those it already names left as they are."""
    parts = urlsplit(url)
    have = parse_qsl(parts.query, keep_blank_values=True)
    names = {name for name, _ in have}
    extra = [(k, v) for k, v in params.items() if k not in names]
    if not extra:
        return url
    query = "&".join(q for q in (parts.query, urlencode(extra, safe="$")) if q)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


def _origin_path(url: str, path: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _akeneo(url: str) -> dict[str, Any]:
    return {
        "type": "http",
        "url": "/api/rest/v1/products?pagination_type=search_after&limit=100",
        "token_url": _origin_path(url, "/api/oauth/v1/token"),
        "auth": "oauth2",
        "grant": "password",
        "client_auth": "basic",
        "token_request": "json",
        "items_path": "_embedded.items",
        "pagination": "next_link",
        "next_path": "_links.next.href",
        "since_param": "search",
        "since_format": "%Y-%m-%d %H:%M:%S",
        "since_template": _AKENEO_SEARCH,
        "updated_path": "updated",  # ISO 8601 with its offset
    }


def _business_central(url: str) -> dict[str, Any]:
    preset: dict[str, Any] = {
        "type": "http",
        "auth": "oauth2",
        "grant": "client_credentials",
        "client_auth": "body",
        "token_request": "form",
        "scope": "https://api.businesscentral.dynamics.com/.default",
        "items_path": "value",
        "pagination": "next_link",
        "next_path": '"@odata.nextLink"',
        "headers": {"Prefer": "odata.maxpagesize=1000"},
        # each page then says how many items there are: the pull proves it reached the end
        _QUERY: {"$count": "true"},
        "since_param": "$filter",
        "since_format": "%Y-%m-%dT%H:%M:%SZ",
        "since_template": "lastModifiedDateTime gt {since}",
        "updated_path": "lastModifiedDateTime",
    }
    tenant = _BC_TENANT.match(urlsplit(url).path)
    if tenant:  # .../v2.0/<tenant>/<environment>/api/v2.0/companies(<id>)/items
        preset["token_url"] = (
            f"https://login.microsoftonline.com/{tenant['tenant']}/oauth2/v2.0/token"
        )
    return preset


def _odoo(_url: str) -> dict[str, Any]:
    return {
        "type": "http",
        "url": "/json/2/product.product/search_read",
        "auth": "bearer",
        "method": "POST",
        "body": {
            "domain": [],
            "fields": [
                "default_code",
                "name",
                "list_price",
                "qty_available",
                "barcode",
                "active",
                "write_date",
            ],
            "order": "id",
        },
        "items_path": "",
        "pagination": "offset",
        "offset_param": "offset",
        "size_param": "limit",
        "page_size": 100,
        "since_body_path": "domain",
        "since_format": "%Y-%m-%d %H:%M:%S",
        "since_template": '["write_date", ">", "{since}"]',
        "updated_path": "write_date",
        "empty_values": [False],
    }


def _woocommerce(_url: str) -> dict[str, Any]:
    return {
        "type": "http",
        "url": "/wp-json/wc/v3/products?orderby=id&order=asc&dates_are_gmt=true",
        "auth": "basic",  # username = consumer key, password = consumer secret
        "items_path": "",
        "pagination": "page",
        "page_param": "page",
        "size_param": "per_page",
        "page_size": 100,
        "total_header": "X-WP-Total",  # the walk stops, and proves it reached the end
        "total_pages_header": "X-WP-TotalPages",
        "since_param": "modified_after",
        "since_format": "%Y-%m-%dT%H:%M:%S",
        "updated_path": "date_modified_gmt",  # dates_are_gmt=true: the filter is in GMT too
    }


def _magento(_url: str) -> dict[str, Any]:
    return {
        "type": "http",
        "url": "/rest/V1/products",
        "auth": "bearer",  # an integration's access token
        "items_path": "items",
        "pagination": "page",
        "page_param": "searchCriteria[currentPage]",
        "size_param": "searchCriteria[pageSize]",
        "page_size": 100,
        "total_path": "total_count",  # past the last page Magento answers the last page again
        "since_param": f"{_MAGENTO_FILTER}[value]",
        "since_format": "%Y-%m-%d %H:%M:%S",
        "since_template": (
            f"?{_MAGENTO_FILTER}[field]=updated_at&{_MAGENTO_FILTER}[value]={{since}}"
            f"&{_MAGENTO_FILTER}[condition_type]=gt"
        ),
        "updated_path": "updated_at",
    }


def _shopify(_url: str) -> dict[str, Any]:
    return {
        "type": "graphql",
        "url": f"/admin/api/{SHOPIFY_API_VERSION}/graphql.json",
        "auth": "header",
        "header_name": "X-Shopify-Access-Token",
        "query": SHOPIFY_QUERY,
        "items_path": "data.productVariants.nodes",
        "page_info_path": "data.productVariants.pageInfo",
        "cursor_variable": "cursor",
        "since_variable": "query",
        "since_format": "%Y-%m-%dT%H:%M:%SZ",
        "since_template": "updated_at:>'{since}'",
        "updated_path": "updatedAt",
    }


PRESETS: Mapping[str, Callable[[str], dict[str, Any]]] = {
    "akeneo": _akeneo,
    "shopify": _shopify,
    "business-central": _business_central,
    "odoo": _odoo,
    "woocommerce": _woocommerce,
    "magento": _magento,
}
_MERGED = ("body", "headers")


def apply(source: Any) -> tuple[Any, list[str]]:
    """``source`` with its preset's defaults filled in, and the problems (an unknown name)."""
    if not isinstance(source, dict) or "preset" not in source:
        return source, []
    name = source["preset"]
    make = PRESETS.get(name) if isinstance(name, str) else None
    if make is None:
        known = ", ".join(repr(n) for n in PRESETS)
        return source, [f"at 'source.preset': unknown preset {name!r}; known: {known}"]
    url = source.get("url")
    if not isinstance(url, str) or "://" not in url:
        return source, ["at 'source.url': a preset needs url, the system's address"]
    defaults = make(url)
    out = dict(source)
    given_url, bare = _base(url)
    path = defaults.pop("url", None)
    if path is not None and bare:
        out["url"] = _with_path(given_url, path)
    query = defaults.pop(_QUERY, None)
    if query:
        out["url"] = _with_query(out["url"], query)
    for key, value in defaults.items():
        if key in _MERGED and isinstance(out.get(key), dict):
            out[key] = {**copy.deepcopy(value), **out[key]}
        elif key not in out:
            out[key] = copy.deepcopy(value)
    if out.get("body") is not None and "method" in source and source["method"] != "POST":
        out.pop("body")  # the table chose GET: the preset's body has no use
    return out, []


def filled(source: Mapping[str, Any]) -> list[str]:
    """The keys of a validated ``[source]`` (as plain data) that hold its preset's value.

    For ``skuferry check --show-config``: what the preset filled in (or what the table
    gives with the same value). ``url`` counts when it ends with the preset's path.
    """
    make = PRESETS.get(str(source.get("preset")))
    url = source.get("url")
    if make is None or not isinstance(url, str):
        return []
    defaults = make(url)
    defaults.pop(_QUERY, None)
    path = defaults.pop("url", None)
    keys = ["url"] if isinstance(path, str) and url.endswith(path) else []
    for key, value in defaults.items():
        have = source.get(key)
        if key in _MERGED and isinstance(have, dict) and isinstance(value, dict):
            same = all(have.get(k) == v for k, v in value.items())
        else:
            same = have == value
        if same:
            keys.append(key)
    return keys
