"""Magento 2 / Adobe Commerce REST: the product search, as documented by Adobe.

Written from Adobe Commerce Web API docs: "Search using REST endpoints" (``searchCriteria``
in the query string: ``[filter_groups][i][filters][j][field|value|condition_type]``, filters
in one group ORed, groups ANDed, condition types ``eq``, ``neq``, ``gt``, ``gteq``, ``lt``,
``lteq``, ``like``, ``in``, ``nin``, ``null``, ``notnull``; ``pageSize``, ``currentPage``,
``sortOrders``), "Token-based authentication" (an integration's access token as
``Authorization: Bearer``), the ``catalogProductRepositoryV1`` reference (``GET
/V1/products`` answers ``{"items", "search_criteria", "total_count"}``; a product has
``sku``, ``name``, ``price`` as a number, ``status`` 1/2, ``type_id``, ``updated_at`` as
``YYYY-MM-DD HH:MM:SS``, ``custom_attributes`` as ``[{"attribute_code", "value"}]`` and
``extension_attributes``), "API security: input limiting" (off by default; when on,
"Maximum SearchCriteria pageSize is 300"), and the REST error format (``{"message",
"parameters"}``). A ``currentPage`` past the end answers the last page again, as Magento's
collections do, so clients must stop by ``total_count``.

    GET /rest/V1/products?searchCriteria[pageSize]=N&searchCriteria[currentPage]=P
    GET /rest/V1/products/{sku}
    (also under /rest/default/V1/ and /rest/all/V1/, the store-code forms)

``extension_attributes.stock_item`` is in every listed product (``stock_in_list=False``
leaves it to the single-product answer, as stores without a stock plugin do).

By hand: ``python -m skuferry.sandbox.pims.magento --port 8786``.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any
from urllib.parse import unquote

from skuferry.sandbox.pims.base import ApiServer, Request, Response, run_main
from skuferry.sandbox.pims.catalog import Article, articles

TOKEN = "mg2-integration-tok3n-8h2kq9x4v7"  # test value
_ROUTE = re.compile(r"^/rest/(?:(?:default|all)/)?V1/products(?:/(?P<sku>[^/]+))?$")
_KEY = re.compile(r"\[([^\]]*)\]")
_CONDITIONS: dict[str, Callable[[Any, str], bool]] = {
    "eq": lambda a, b: str(a) == b,
    "neq": lambda a, b: str(a) != b,
    "gt": lambda a, b: _cmp(a, b) > 0,
    "gteq": lambda a, b: _cmp(a, b) >= 0,
    "moreq": lambda a, b: _cmp(a, b) >= 0,
    "lt": lambda a, b: _cmp(a, b) < 0,
    "lteq": lambda a, b: _cmp(a, b) <= 0,
    "like": lambda a, b: re.fullmatch(re.escape(b).replace("%", ".*"), str(a), re.I) is not None,
    "in": lambda a, b: str(a) in b.split(","),
    "nin": lambda a, b: str(a) not in b.split(","),
    "null": lambda a, b: a is None,
    "notnull": lambda a, b: a is not None,
}


def _cmp(mine: Any, value: str) -> int:
    """Numbers compare as numbers; text (``YYYY-MM-DD HH:MM:SS`` dates too) as text."""
    try:
        x, y = float(mine), float(value)
    except (TypeError, ValueError):
        return (str(mine) > value) - (str(mine) < value)
    return (x > y) - (x < y)


def product(a: Article) -> dict[str, Any]:
    """A catalog product as the REST API gives it: ``price`` a number, attributes as a list."""
    pid = a.index + 1
    custom = [
        {"attribute_code": "description", "value": a.description},
        {"attribute_code": "url_key", "value": f"produkt-{pid}"},
        {"attribute_code": "manufacturer", "value": a.brand},
        {"attribute_code": "category_ids", "value": [str(3 + len(a.category))]},
        {"attribute_code": "tax_class_id", "value": "2"},
    ]
    if a.ean is not None:
        custom.append({"attribute_code": "ean", "value": a.ean})
    return {
        "id": pid,
        "sku": a.sku,
        "name": a.name,
        "attribute_set_id": 4,
        "price": a.price,  # Decimal, a JSON number
        "status": 1 if a.enabled else 2,
        "visibility": 4,
        "type_id": "simple",
        "created_at": "2026-01-15 09:30:00",
        "updated_at": a.updated.strftime("%Y-%m-%d %H:%M:%S"),
        "weight": (a.index % 9 + 1) * 0.125,
        "extension_attributes": {
            "website_ids": [1],
            "category_links": [{"position": 0, "category_id": str(3 + len(a.category))}],
            "stock_item": {
                "item_id": pid,
                "product_id": pid,
                "stock_id": 1,
                "qty": a.stock,
                "is_in_stock": a.stock > 0,
            },
        },
        "product_links": [],
        "options": [],
        "media_gallery_entries": [],
        "tier_prices": [],
        "custom_attributes": custom,
    }


def make_products(n: int) -> list[dict[str, Any]]:
    return [product(a) for a in articles(n)]


def search_criteria(query: dict[str, list[str]]) -> dict[str, Any]:
    """``searchCriteria[a][0][b]=v`` query parameters as one nested dict."""
    tree: dict[str, Any] = {}
    for key, values in query.items():
        if not key.startswith("searchCriteria"):
            continue
        node = tree
        parts = _KEY.findall(key)
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        if parts:
            node[parts[-1]] = values[-1]
    return tree


class MagentoServer(ApiServer):
    name = "magento"

    def __init__(
        self,
        products: Sequence[dict[str, Any]] = (),
        *,
        token: str = TOKEN,
        max_page_size: int | None = None,
        stock_in_list: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.products = list(products)
        self.token = token
        self.max_page_size = max_page_size
        self.stock_in_list = stock_in_list

    def touch(self, sku: str, when: datetime, name: str = "geändert") -> None:
        with self.lock:
            for p in self.products:
                if p["sku"] == sku:
                    p["name"], p["updated_at"] = name, when.strftime("%Y-%m-%d %H:%M:%S")
                    return
        raise KeyError(sku)

    def error_body(self, status: int) -> Any:
        return {
            "message": "Internal Error. Details are available in Magento log file. "
            "Report ID: webapi-0000000000001"
        }

    def handle(self, request: Request) -> Response:
        m = _ROUTE.match(request.path)
        if m is None or request.method != "GET":
            return Response(404, {"message": "Request does not match any route."})
        if request.bearer() != self.token:
            return Response(
                401,
                {
                    "message": "The consumer isn't authorized to access %resources.",
                    "parameters": {"resources": "Magento_Catalog::products"},
                },
            )
        with self.lock:
            products = [dict(p) for p in self.products]
        if m["sku"]:
            sku = unquote(m["sku"])
            found = [p for p in products if p["sku"] == sku]
            if not found:
                return Response(
                    404,
                    {
                        "message": "The product that was requested doesn't exist. "
                        "Verify the product and try again."
                    },
                )
            return Response(200, found[0])
        return self._search(request, products)

    def _search(self, request: Request, products: list[dict[str, Any]]) -> Response:
        criteria = search_criteria(request.query)
        if not any(k.startswith("searchCriteria") for k in request.query):
            return Response(
                400,
                {
                    "message": '"%fieldName" is required. Enter and try again.',
                    "parameters": {"fieldName": "searchCriteria"},
                },
            )
        size = int(criteria["pageSize"]) if criteria.get("pageSize") else None
        if self.max_page_size is not None and (size is None or size > self.max_page_size):
            return Response(
                400,
                {
                    "message": "Maximum SearchCriteria pageSize is %max",
                    "parameters": {"max": self.max_page_size},
                },
            )
        groups = [
            [dict(f) for _, f in sorted(g.get("filters", {}).items(), key=lambda kv: int(kv[0]))]
            for _, g in sorted(criteria.get("filter_groups", {}).items(), key=lambda kv: int(kv[0]))
        ]
        for group in groups:
            products = [p for p in products if any(_matches(p, f) for f in group)]
        for _, order in sorted(criteria.get("sortOrders", {}).items(), reverse=True):
            field = order.get("field", "entity_id")
            field = "id" if field == "entity_id" else field
            descending = str(order.get("direction", "ASC")).upper() == "DESC"
            products.sort(key=_sort_key(field), reverse=descending)
        total = len(products)
        page = max(1, int(criteria.get("currentPage") or 1))
        if size:
            last = max(1, math.ceil(total / size))
            page = min(page, last)  # past the end: the last page again
            if (fault := self.page_fault(page)) is not None:
                return fault
            products = products[(page - 1) * size : page * size]
        self.count("products")
        if not self.stock_in_list:
            for p in products:
                p["extension_attributes"] = {
                    k: v for k, v in p["extension_attributes"].items() if k != "stock_item"
                }
        echo: dict[str, Any] = {"filter_groups": [{"filters": g} for g in groups]}
        if size:
            echo["page_size"] = size
        if "currentPage" in criteria:
            echo["current_page"] = int(criteria["currentPage"])
        return Response(200, {"items": products, "search_criteria": echo, "total_count": total})


def _sort_key(field: str) -> Callable[[dict[str, Any]], Any]:
    def key(product: dict[str, Any]) -> Any:
        value = product.get(field)
        return (0, value, "") if isinstance(value, (int, float, Decimal)) else (1, 0, str(value))

    return key


def _matches(product: dict[str, Any], flt: dict[str, Any]) -> bool:
    field, value = str(flt.get("field", "")), str(flt.get("value", ""))
    condition = str(flt.get("condition_type") or "eq")
    if field in product:
        mine = product[field]
    else:
        attrs = {c["attribute_code"]: c["value"] for c in product["custom_attributes"]}
        mine = attrs.get(field)
    if condition not in _CONDITIONS:
        return False
    if mine is None and condition not in ("null", "neq", "nin"):
        return False
    return _CONDITIONS[condition](mine, value)


def main(argv: Sequence[str] | None = None) -> None:
    def build(args: argparse.Namespace) -> tuple[ApiServer, dict[str, Any]]:
        server = MagentoServer(make_products(args.products), host=args.host, port=args.port)
        return server, {"products_url": f"{server.url}/rest/V1/products", "token": TOKEN}

    run_main(argv, description="Magento 2 REST API test server", default_port=8786, build=build)


if __name__ == "__main__":
    main()
