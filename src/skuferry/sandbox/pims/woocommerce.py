"""WooCommerce REST API v3 (products and variations), over HTTPS, as documented.

Written from the WooCommerce REST API documentation (woocommerce.github.io/
woocommerce-rest-api-docs): "Authentication" (over HTTPS, the consumer key and secret as
HTTP Basic), "Pagination" (``per_page`` 1..100, default 10; ``page``; the ``X-WP-Total`` and
``X-WP-TotalPages`` headers and a ``Link`` header), "Errors" (``{"code", "message",
"data": {"status"}}``), "Products" (properties: ``sku``, ``global_unique_id`` for the
GTIN/EAN, ``price``/``regular_price``/``sale_price`` as strings, ``stock_quantity``,
``status``, ``date_modified_gmt``, ``variations`` ids; list parameter ``modified_after``),
and "Product variations" (``/products/<id>/variations``). WordPress's REST API handbook
gives ``rest_invalid_param`` for an out-of-range ``per_page``.

    GET /wp-json/wc/v3/products[?per_page=&page=&modified_after=&status=&sku=]
    GET /wp-json/wc/v3/products/<id>
    GET /wp-json/wc/v3/products/<id>/variations[?per_page=&page=&modified_after=]

Every 6th product is ``variable`` with two variations (sizes S and L) whose SKUs extend
the parent's. Serve it with ``ssl_context=https_context(trustme.CA())``.

By hand: ``python -m skuferry.sandbox.pims.woocommerce --port 8785`` writes the throwaway CA to
a file and prints its path (use it as the source's ``ca_bundle``).
"""

from __future__ import annotations

import argparse
import math
import re
import tempfile
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from skuferry.sandbox.pims.base import ApiServer, Request, Response, https_context, run_main, utc
from skuferry.sandbox.pims.catalog import Article, articles

CONSUMER_KEY = "ck_5e1b7c9d3f2a4e6b8c0d1f3a5b7c9e2d4f6a8b0c"  # test values
CONSUMER_SECRET = "cs_9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b"
API = "/wp-json/wc/v3"
MAX_PER_PAGE = 100
_ROUTE = re.compile(rf"^{API}/products(?:/(?P<id>\d+)(?P<variations>/variations)?)?/?$")


def _stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S")  # WooCommerce drops the offset; _gmt is UTC


def product(a: Article) -> dict[str, Any]:
    """A WooCommerce product: prices as strings, ``global_unique_id`` for the EAN."""
    pid = 100 + a.index + 1
    variable = (a.index + 1) % 6 == 0
    stamp = _stamp(a.updated)
    return {
        "id": pid,
        "name": a.name,
        "slug": f"produkt-{pid}",
        "permalink": f"https://shop.example.test/produkt/produkt-{pid}/",
        "date_created": "2026-01-15T09:30:00",
        "date_created_gmt": "2026-01-15T09:30:00",
        "date_modified": stamp,
        "date_modified_gmt": stamp,
        "type": "variable" if variable else "simple",
        "status": "publish" if a.enabled else "draft",
        "description": a.description,
        "short_description": "",
        "sku": a.sku,
        "global_unique_id": a.ean or "",
        "price": f"{a.price:.2f}",
        "regular_price": "" if variable else f"{a.price:.2f}",
        "sale_price": "",
        "on_sale": False,
        "manage_stock": not variable,
        "stock_quantity": None if variable else a.stock,
        "stock_status": "instock" if variable or a.stock else "outofstock",
        "categories": [
            {"id": 15 + len(a.category), "name": a.category.title(), "slug": a.category}
        ],
        "attributes": [{"id": 1, "name": "Größe", "variation": True, "options": ["S", "L"]}]
        if variable
        else [],
        "variations": [pid * 10 + 1, pid * 10 + 2] if variable else [],
        "meta_data": [{"id": pid * 7, "key": "_brand", "value": a.brand}],
    }


def variation(parent: dict[str, Any], vid: int, size: str, a: Article) -> dict[str, Any]:
    price = a.price + (0 if size == "S" else 5)
    return {
        "id": vid,
        "sku": f"{parent['sku']}-{size}",
        "global_unique_id": "",
        "price": f"{price:.2f}",
        "regular_price": f"{price:.2f}",
        "sale_price": "",
        "status": "publish",
        "manage_stock": True,
        "stock_quantity": a.stock + (1 if size == "S" else 0),
        "stock_status": "instock",
        "date_modified": parent["date_modified"],
        "date_modified_gmt": parent["date_modified_gmt"],
        "attributes": [{"id": 1, "name": "Größe", "option": size}],
    }


def make_catalog(n: int) -> tuple[list[dict[str, Any]], dict[int, list[dict[str, Any]]]]:
    """Products, and the variations of each variable product by parent id."""
    products, variations = [], {}
    for a in articles(n):
        p = product(a)
        products.append(p)
        if p["variations"]:
            variations[p["id"]] = [
                variation(p, vid, size, a) for vid, size in zip(p["variations"], "SL", strict=True)
            ]
    return products, variations


class WooCommerceServer(ApiServer):
    name = "woocommerce"

    def __init__(
        self,
        products: Sequence[dict[str, Any]] = (),
        variations: dict[int, list[dict[str, Any]]] | None = None,
        *,
        consumer_key: str = CONSUMER_KEY,
        consumer_secret: str = CONSUMER_SECRET,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.products = list(products)
        self.variations = dict(variations or {})
        self.credentials = (consumer_key, consumer_secret)

    def touch(self, sku: str, when: datetime, name: str = "geändert") -> None:
        with self.lock:
            for p in self.products:
                if p["sku"] == sku:
                    p["name"] = name
                    p["date_modified"] = p["date_modified_gmt"] = _stamp(when)
                    return
        raise KeyError(sku)

    def error_body(self, status: int) -> Any:
        return _error("internal_server_error", f"Injected error {status}.", status)

    def handle(self, request: Request) -> Response:
        m = _ROUTE.match(request.path)
        if m is None or request.method != "GET":
            return Response(
                404,
                _error(
                    "rest_no_route", "No route was found matching the URL and request method.", 404
                ),
            )
        auth = request.basic_auth()
        if auth is None:
            return Response(
                401,
                _error("woocommerce_rest_cannot_view", "Sorry, you cannot list resources.", 401),
            )
        if auth[0] != self.credentials[0]:
            return Response(
                401,
                _error("woocommerce_rest_authentication_error", "Consumer key is invalid.", 401),
            )
        if auth[1] != self.credentials[1]:
            return Response(
                401,
                _error("woocommerce_rest_authentication_error", "Consumer secret is invalid.", 401),
            )
        with self.lock:
            products = list(self.products)
        if m["id"] is None:
            return self._list(request, products, "products")
        found = [p for p in products if p["id"] == int(m["id"])]
        if not found:
            return Response(404, _error("woocommerce_rest_product_invalid_id", "Invalid ID.", 404))
        if m["variations"]:
            return self._list(request, self.variations.get(found[0]["id"], []), "variations")
        return Response(200, found[0])

    def _list(self, request: Request, rows: list[dict[str, Any]], kind: str) -> Response:
        try:
            per_page = int(request.arg("per_page", "10") or 10)
            page = int(request.arg("page", "1") or 1)
        except ValueError:
            return _invalid("per_page", "per_page is not of type integer.")
        if not 1 <= per_page <= MAX_PER_PAGE:
            return _invalid(
                "per_page", f"per_page must be between 1 (inclusive) and {MAX_PER_PAGE} (inclusive)"
            )
        if page < 1:
            return _invalid("page", "page must be greater than or equal to 1")
        if (after := request.arg("modified_after")) is not None:
            try:
                bound = utc(after)
            except ValueError:
                return _invalid("modified_after", "Invalid date.")
            rows = [r for r in rows if utc(r["date_modified_gmt"]) > bound]
        if (status := request.arg("status")) not in (None, "any"):
            rows = [r for r in rows if r["status"] == status]
        if (sku := request.arg("sku")) is not None:
            rows = [r for r in rows if r["sku"] in sku.split(",")]
        rows.sort(key=lambda r: -int(r["id"]))  # WooCommerce's default order: newest first
        if (fault := self.page_fault(page)) is not None:
            return fault
        self.count(kind)
        pages = math.ceil(len(rows) / per_page)
        headers = {"X-WP-Total": str(len(rows)), "X-WP-TotalPages": str(pages)}
        links = []
        base = f"{self.url}{request.path}?per_page={per_page}"
        if page > 1:
            links.append(f'<{base}&page={page - 1}>; rel="prev"')
        if page < pages:
            links.append(f'<{base}&page={page + 1}>; rel="next"')
        if links:
            headers["Link"] = ", ".join(links)
        return Response(200, rows[(page - 1) * per_page : page * per_page], headers)


def _error(code: str, message: str, status: int) -> dict[str, Any]:
    return {"code": code, "message": message, "data": {"status": status}}


def _invalid(param: str, detail: str) -> Response:
    return Response(
        400,
        {
            "code": "rest_invalid_param",
            "message": f"Invalid parameter(s): {param}",
            "data": {"status": 400, "params": {param: detail}},
        },
    )


def main(argv: Sequence[str] | None = None) -> None:
    import trustme  # a test dependency, as for the TLS tests

    def build(args: argparse.Namespace) -> tuple[ApiServer, dict[str, Any]]:
        ca = trustme.CA()
        ca_file = Path(tempfile.mkdtemp(prefix="skuferry-woo-")) / "ca.pem"
        ca.cert_pem.write_to_path(str(ca_file))
        products, variations = make_catalog(args.products)
        server = WooCommerceServer(
            products,
            variations,
            host=args.host,
            port=args.port,
            ssl_context=https_context(ca, args.host),
        )
        return server, {
            "products_url": f"{server.url}{API}/products",
            "ca_bundle": str(ca_file),
            "consumer_key": CONSUMER_KEY,
            "consumer_secret": CONSUMER_SECRET,
        }

    run_main(
        argv,
        description="WooCommerce REST API v3 test server (HTTPS)",
        default_port=8785,
        build=build,
    )


if __name__ == "__main__":
    main()
