"""Shopify GraphQL Admin API: enough of it to list product variants, as documented on
shopify.dev.

Written from: "GraphQL Admin API reference" (``POST /admin/api/<version>/graphql.json``,
``X-Shopify-Access-Token``), the ``productVariants`` query page (arguments ``first``,
``after``, ``query``; ``ProductVariantConnection`` with ``nodes``, ``edges { cursor node }``
and ``pageInfo``), the ``ProductVariant`` object page (``sku``, ``price`` as a Money
string, ``barcode``, ``inventoryQuantity``, ``product``), "Shopify API search syntax"
(``updated_at:>'…'``), "Shopify API limits" (arrays of at most 250; a query costs at most
1000) and "GraphQL Admin API rate limits" (calculated query cost: objects 1, scalars 0,
connections 2 + ``first`` * node; a leaky bucket of 2000 points restored at 100/s on the
standard plan; every answer carries ``extensions.cost``; when the bucket lacks room, HTTP 200
with ``errors[0].extensions.code == "THROTTLED"`` and ``actualQueryCost: null``).

The query is read by a small parser of GraphQL's selection syntax, so
answers hold exactly the fields asked for, and unknown fields or bad syntax get GraphQL
``errors``.

By hand: ``python -m skuferry.sandbox.pims.shopify --port 8783``.
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from skuferry.sandbox.pims.base import ApiServer, Request, Response, b64, run_main, unb64, utc
from skuferry.sandbox.pims.catalog import Article, articles
from skuferry.sandbox.pims.graphql import Field, GraphQLError, Parser, error_json

VERSION = "2025-10"
TOKEN = "shpat_0d3m0t0k3nSkuferry7f"  # test value, shaped like an Admin API token
MAX_FIRST = 250
MAX_COST = 1000
INVALID_TOKEN = "[API] Invalid API key or access token (unrecognized login or wrong password)"
_PATH = re.compile(r"^/admin/api/(?P<version>\d{4}-\d\d|unstable)/graphql\.json$")


def variant(a: Article) -> dict[str, Any]:
    """A ProductVariant with its product; Money as a decimal string, ids as GIDs."""
    number = 40_000_000 + a.index + 1
    stamp = a.updated.strftime("%Y-%m-%dT%H:%M:%SZ")
    status = "ACTIVE" if a.enabled else ("ARCHIVED" if a.index % 2 else "DRAFT")
    return {
        "id": f"gid://shopify/ProductVariant/{number}",
        "legacyResourceId": str(number),
        "sku": a.sku,
        "title": "Default Title",
        "displayName": f"{a.name} - Default Title",
        "price": f"{a.price:.2f}",
        "compareAtPrice": None,
        "barcode": a.ean,
        "inventoryQuantity": a.stock,
        "availableForSale": a.enabled and a.stock > 0,
        "taxable": True,
        "position": 1,
        "createdAt": "2026-01-15T09:30:00Z",
        "updatedAt": stamp,
        "product": {
            "id": f"gid://shopify/Product/{8_000_000 + a.index + 1}",
            "title": a.name,
            "handle": f"product-{a.index + 1}",
            "vendor": a.brand,
            "productType": a.category,
            "status": status,
            "tags": [a.category],
            "descriptionHtml": a.description,
            "updatedAt": stamp,
        },
    }


def make_variants(n: int) -> list[dict[str, Any]]:
    return [variant(a) for a in articles(n)]


# -- the server -------------------------------------------------------------------------------


class Bucket:
    """Shopify's leaky bucket of query cost points."""

    def __init__(self, size: float, rate: float, clock: Callable[[], float]) -> None:
        self.size, self.rate, self.clock = size, rate, clock
        self.available, self.at = size, clock()

    def refill(self) -> None:
        now = self.clock()
        self.available = min(self.size, self.available + (now - self.at) * self.rate)
        self.at = now

    def status(self, available: float | None = None) -> dict[str, float]:
        shown = self.available if available is None else available
        return {
            "maximumAvailable": self.size,
            "currentlyAvailable": round(shown, 1),
            "restoreRate": self.rate,
        }


class ShopifyServer(ApiServer):
    name = "shopify"

    def __init__(
        self,
        variants: Sequence[dict[str, Any]] = (),
        *,
        token: str = TOKEN,
        bucket_size: float = 2000.0,
        restore_rate: float = 100.0,
        clock: Callable[[], float] = time.monotonic,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.variants = list(variants)
        self.token = token
        self.bucket = Bucket(bucket_size, restore_rate, clock)
        self.forced_throttles: list[float] = []  # waits, in seconds, of the next answers

    def throttle_next(self, times: int = 1, *, wait: float = 0.05) -> None:
        """The next ``times`` queries are THROTTLED, whatever the bucket holds.

        The cost report says the query fits in ``wait`` seconds: ``currentlyAvailable`` is
        ``requestedQueryCost - wait * restoreRate`` (at least 0, so the wait is capped at
        ``requestedQueryCost / restoreRate``).
        """
        with self.lock:
            self.forced_throttles += [wait] * times

    def touch(self, sku: str, when: datetime, title: str = "geändert") -> None:
        with self.lock:
            for v in self.variants:
                if v["sku"] == sku:
                    v["product"]["title"] = title
                    v["updatedAt"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
                    return
        raise KeyError(sku)

    def error_body(self, status: int) -> Any:
        return {"errors": "Internal Server Error" if status >= 500 else f"Error {status}"}

    def handle(self, request: Request) -> Response:
        m = _PATH.match(request.path)
        if m is None or request.method != "POST":
            return Response(404, {"errors": "Not Found"})
        if request.header("x-shopify-access-token") != self.token:
            return Response(401, {"errors": INVALID_TOKEN})
        try:
            body = request.json()
            query, variables = body["query"], body.get("variables") or {}
        except (ValueError, KeyError, TypeError):
            return Response(400, {"errors": {"query": "Required parameter missing or invalid"}})
        try:
            fields = Parser(str(query), dict(variables)).document()
            cost = sum(_cost(f) for f in fields)
        except GraphQLError as exc:
            return Response(200, {"errors": [error_json(exc, str(query))]})
        if cost > MAX_COST:
            message = (
                f"Query cost is {cost}, which exceeds the single query max cost limit ({MAX_COST})."
            )
            return Response(
                200,
                {
                    "errors": [
                        {
                            "message": message,
                            "extensions": {
                                "code": "MAX_COST_EXCEEDED",
                                "cost": cost,
                                "maxCost": MAX_COST,
                            },
                        }
                    ]
                },
            )
        with self.lock:
            self.bucket.refill()
            forced = self.forced_throttles.pop(0) if self.forced_throttles else None
            if forced is not None or cost > self.bucket.available:
                shown = None if forced is None else max(0.0, cost - forced * self.bucket.rate)
                self.count("throttled")
                return Response(
                    200,
                    {
                        "errors": [
                            {
                                "message": "Throttled",
                                "extensions": {
                                    "code": "THROTTLED",
                                    "documentation": "https://shopify.dev/api/usage/rate-limits",
                                },
                            }
                        ],
                        "extensions": {
                            "cost": {
                                "requestedQueryCost": cost,
                                "actualQueryCost": None,
                                "throttleStatus": self.bucket.status(shown),
                            }
                        },
                    },
                )
            self.bucket.available -= cost
        try:
            data, actual = self._execute(fields)
        except (GraphQLError, _PageFaultError) as exc:
            with self.lock:
                self.bucket.available = min(self.bucket.size, self.bucket.available + cost)
            if isinstance(exc, _PageFaultError):
                return exc.response
            return Response(200, {"errors": [error_json(exc, str(query))]})
        with self.lock:
            self.bucket.available = min(self.bucket.size, self.bucket.available + cost - actual)
            status = self.bucket.status()
        return Response(
            200,
            {
                "data": data,
                "extensions": {
                    "cost": {
                        "requestedQueryCost": cost,
                        "actualQueryCost": actual,
                        "throttleStatus": status,
                    }
                },
            },
        )

    def _execute(self, fields: list[Field]) -> tuple[dict[str, Any], int]:
        data: dict[str, Any] = {}
        actual = 0
        for f in fields:
            if f.name == "shop":
                data[f.alias] = _render(
                    {"name": "Nordhafen Testladen", "currencyCode": "EUR"},
                    f.selections or [],
                    "Shop",
                )
                actual += 1
            elif f.name == "productVariants":
                data[f.alias], cost = self._variants(f)
                actual += cost
            else:
                raise GraphQLError(
                    f"Field '{f.name}' doesn't exist on type 'QueryRoot'", code="undefinedField"
                )
        return data, actual

    def _variants(self, f: Field) -> tuple[dict[str, Any], int]:
        first = f.args.get("first")
        if not isinstance(first, int):
            raise GraphQLError(
                "you must provide one of first or last", code="argumentLiteralsIncompatible"
            )
        if not 0 <= first <= MAX_FIRST:
            raise GraphQLError(
                f"The first argument must be between 0 and {MAX_FIRST}.",
                code="argumentLiteralsIncompatible",
            )
        with self.lock:
            rows = sorted(self.variants, key=lambda v: int(v["legacyResourceId"]))
        rows = [v for v in rows if _search(v, f.args.get("query") or "")]
        after = f.args.get("after")
        start = 0
        if after:
            try:
                last = int(unb64(str(after)).removeprefix("variant:"))
            except ValueError:
                raise GraphQLError("Invalid cursor for current pagination sort.") from None
            start = sum(1 for v in rows if int(v["legacyResourceId"]) <= last)
        if (fault := self.page_fault(start // max(first, 1) + 1)) is not None:
            raise _PageFaultError(fault)
        self.count("pages")
        chunk = rows[start : start + first]

        def cursor(v: dict[str, Any]) -> str:
            return b64(f"variant:{v['legacyResourceId']}")

        page_info = {
            "hasNextPage": start + first < len(rows),
            "hasPreviousPage": start > 0,
            "startCursor": cursor(chunk[0]) if chunk else None,
            "endCursor": cursor(chunk[-1]) if chunk else None,
        }
        result: dict[str, Any] = {}
        for sel in f.selections or []:
            if sel.name == "nodes":
                result[sel.alias] = [
                    _render(v, sel.selections or [], "ProductVariant") for v in chunk
                ]
            elif sel.name == "edges":
                result[sel.alias] = [
                    _render({"cursor": cursor(v), "node": v}, sel.selections or [], "Edge")
                    for v in chunk
                ]
            elif sel.name == "pageInfo":
                result[sel.alias] = _render(page_info, sel.selections or [], "PageInfo")
            else:
                raise GraphQLError(
                    f"Field '{sel.name}' doesn't exist on type 'ProductVariantConnection'",
                    code="undefinedField",
                )
        return result, 2 + len(chunk) * _per_node(f.selections or [])


class _PageFaultError(Exception):
    def __init__(self, response: Response) -> None:
        super().__init__(response.status)
        self.response = response


def _render(obj: dict[str, Any], selections: list[Field], type_name: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for sel in selections:
        if sel.name == "__typename":
            out[sel.alias] = type_name
            continue
        if sel.name not in obj:
            raise GraphQLError(
                f"Field '{sel.name}' doesn't exist on type '{type_name}'", code="undefinedField"
            )
        value = obj[sel.name]
        if isinstance(value, dict):
            if sel.selections is None:
                raise GraphQLError(
                    f"Field must have selections (field '{sel.name}' returns "
                    f"an object but has no selections.)",
                    code="selectionMismatch",
                )
            nested = {"node": "ProductVariant", "product": "Product"}.get(sel.name, "Object")
            value = _render(value, sel.selections, nested)
        out[sel.alias] = value
    return out


def _node_cost(selections: list[Field]) -> int:
    """An object costs 1, plus 1 for each object field under it; scalars are free."""
    return 1 + sum(_node_cost(s.selections) for s in selections if s.selections is not None)


def _per_node(connection: list[Field]) -> int:
    """What one node of a connection costs, whether asked as ``nodes`` or ``edges { node }``."""
    for sel in connection:
        if sel.name == "nodes":
            return _node_cost(sel.selections or [])
        if sel.name == "edges":
            node = [s for s in sel.selections or [] if s.name == "node"]
            return _node_cost(node[0].selections or []) if node else 0
    return 1


def _cost(f: Field) -> int:
    if f.name == "productVariants":
        first = f.args.get("first")
        return 2 + (first if isinstance(first, int) else 0) * _per_node(f.selections or [])
    return 1


_TERM = re.compile(
    r"(?P<field>\w+):(?P<op>>=|<=|>|<)?(?:'(?P<q>[^']*)'|\"(?P<dq>[^\"]*)\"|(?P<bare>\S+))"
)


def _search(v: dict[str, Any], query: str) -> bool:
    """Shopify's search syntax, for ``updated_at`` (compared as times) and ``sku``."""
    for m in _TERM.finditer(str(query)):
        value = m["q"] if m["q"] is not None else (m["dq"] if m["dq"] is not None else m["bare"])
        if m["field"] == "updated_at":
            mine, bound = utc(v["updatedAt"]), utc(value)
            op = m["op"] or "="
            ok = {
                ">": mine > bound,
                ">=": mine >= bound,
                "<": mine < bound,
                "<=": mine <= bound,
                "=": mine == bound,
            }[op]
            if not ok:
                return False
        elif m["field"] == "sku" and v["sku"] != value:
            return False
    return True


def main(argv: Sequence[str] | None = None) -> None:
    def build(args: argparse.Namespace) -> tuple[ApiServer, dict[str, Any]]:
        server = ShopifyServer(make_variants(args.products), host=args.host, port=args.port)
        return server, {
            "graphql_url": f"{server.url}/admin/api/{VERSION}/graphql.json",
            "header": "X-Shopify-Access-Token",
            "token": TOKEN,
        }

    run_main(
        argv, description="Shopify GraphQL Admin API test server", default_port=8783, build=build
    )


if __name__ == "__main__":
    main()
