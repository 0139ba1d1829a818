"""Akeneo PIM REST API (connector flavour), as documented at api.akeneo.com.

Written from: "Authentication" (/documentation/authentication.html: token request,
refresh), "Pagination" (/documentation/pagination.html: ``limit`` at most 100, else 422;
the search-after method; ``_links``), "Filters" (/documentation/filter.html: ``search``
JSON, ``updated`` operators), "Response codes" (/documentation/responses.html: the
``{"code", "message"}`` error body, 401/404/422/429), the product format of the API
reference (``values`` with locale/scope/data, prices as ``[{"amount": "899.00",
"currency": "EUR"}]``), and the Events API "Security" page (signature = HMAC-SHA256 of
``timestamp + "." + body`` in ``X-Akeneo-Request-Signature``).

Endpoints:

    POST /api/oauth/v1/token            Basic client_id:secret; JSON body, grant_type
                                        "password" (username, password) or "refresh_token"
    GET  /api/rest/v1/products          pagination_type=search_after|page, limit, search,
                                        search_after (opaque), page, with_count
    GET  /api/rest/v1/products/{identifier}

Token errors answer 422 with the message of Akeneo's OAuth layer (the REST API docs list
422 for it; there is no 401 on the token route). API errors: 401 "Authentication is
required" (no token), "The access token provided is invalid." (unknown), "The access
token provided has expired." (expired, or ``srv.tokens.expire_after`` reached).

By hand: ``python -m skuferry.sandbox.pims.akeneo --port 8781`` (prints the demo credentials).
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

from skuferry.sandbox.pims.base import (
    ApiServer,
    Request,
    Response,
    Tokens,
    b64,
    run_main,
    unb64,
    utc,
)
from skuferry.sandbox.pims.catalog import Article, articles

PRODUCTS = "/api/rest/v1/products"
TOKEN_PATH = "/api/oauth/v1/token"
MAX_LIMIT = 100
CLIENT_ID = "1_skuferry-demo-client"
SECRET = "akeneo-secret-Zp4rW8q"  # test values
USERNAME = "skuferry_1234"
PASSWORD = "akeneo-password-Lm3vT6"


def product(a: Article) -> dict[str, Any]:
    """An Akeneo product: identifier, family, categories, ``values`` per attribute."""

    def value(data: Any, locale: str | None = None, scope: str | None = None) -> dict[str, Any]:
        return {"locale": locale, "scope": scope, "data": data}

    amount = f"{a.price:.2f}"
    values: dict[str, list[dict[str, Any]]] = {
        "sku": [value(a.sku)],
        "name": [value(a.name, "de_DE"), value(a.name, "en_US")],
        "description": [value(a.description, "de_DE", "ecommerce")],
        "price": [
            value([{"amount": amount, "currency": "EUR"}, {"amount": amount, "currency": "USD"}])
        ],
        "stock": [value(a.stock)],
        "brand": [value(a.brand.lower().replace(" ", "_"))],
        "weight": [value({"amount": f"{(a.index % 9 + 1) * 125}.0000", "unit": "GRAM"})],
    }
    if a.ean is not None:
        values["ean"] = [value(a.ean)]
    stamp = a.updated.isoformat()
    return {
        "identifier": a.sku,
        "uuid": str(uuid.UUID(int=a.index + 1)),
        "enabled": a.enabled,
        "family": "accessories",
        "categories": [a.category, "master"],
        "groups": [],
        "parent": None,
        "values": values,
        "created": stamp,
        "updated": stamp,
        "associations": {},
        "quantified_associations": {},
    }


def make_products(n: int) -> list[dict[str, Any]]:
    return [product(a) for a in articles(n)]


class AkeneoServer(ApiServer):
    name = "akeneo"

    def __init__(
        self,
        products: Sequence[dict[str, Any]] = (),
        *,
        client_id: str = CLIENT_ID,
        secret: str = SECRET,
        username: str = USERNAME,
        password: str = PASSWORD,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.products = list(products)
        self.client = (client_id, secret)
        self.user = (username, password)
        self.tokens = Tokens()

    def touch(self, identifier: str, when: datetime, name: str = "geändert") -> None:
        """Edit a product as a PIM user would: a new German name and a new ``updated``."""
        with self.lock:
            for p in self.products:
                if p["identifier"] == identifier:
                    p["values"]["name"][0]["data"] = name
                    p["updated"] = when.isoformat()
                    return
        raise KeyError(identifier)

    def error_body(self, status: int) -> Any:
        messages = {429: "Too many requests", 500: "Internal server error"}
        return {"code": status, "message": messages.get(status, "Injected error")}

    def handle(self, request: Request) -> Response:
        if request.path == TOKEN_PATH and request.method == "POST":
            return self._token(request)
        if not request.path.startswith(PRODUCTS) or request.method != "GET":
            return _error(404, "No route found")
        state = self.tokens.check(request.bearer())
        if state != "ok":
            message = {
                "missing": "Authentication is required",
                "invalid": "The access token provided is invalid.",
                "expired": "The access token provided has expired.",
            }[state]
            return _error(401, message)
        if request.path == PRODUCTS:
            return self._list(request)
        identifier = request.path.removeprefix(PRODUCTS + "/")
        with self.lock:
            self.count("product")
            for p in self.products:
                if p["identifier"] == identifier:
                    return Response(200, {"_links": self._self_link(identifier), **p})
        return _error(404, f'Product "{identifier}" does not exist or you do not have permission.')

    # -- token --------------------------------------------------------------------------

    def _token(self, request: Request) -> Response:
        self.count("token")
        if request.basic_auth() != self.client:
            return _error(
                422,
                'Parameter "client_id" is missing or does not match any client, '
                "or secret is invalid",
            )
        try:
            body = request.json()
        except ValueError:
            return _error(400, "Invalid json message received")
        grant = body.get("grant_type") if isinstance(body, dict) else None
        if grant == "password":
            if (body.get("username"), body.get("password")) != self.user:
                return _error(422, "No user found for the given username and password")
        elif grant == "refresh_token":
            if not self.tokens.redeem_refresh(str(body.get("refresh_token", ""))):
                return _error(422, "Refresh token is invalid or has expired")
        else:
            return _error(422, 'Parameter "grant_type", "username" and "password" are required')
        access, refresh = self.tokens.issue(refresh=True)
        return Response(
            200,
            {
                "access_token": access,
                "expires_in": self.tokens.lifetime,
                "token_type": "bearer",
                "scope": None,
                "refresh_token": refresh,
            },
        )

    # -- listing ------------------------------------------------------------------------

    def _list(self, request: Request) -> Response:
        try:
            limit = int(request.arg("limit", "10") or 10)
        except ValueError:
            return _error(422, "The limit must be an integer.")
        if limit > MAX_LIMIT:
            return _error(422, f"You cannot request more than {MAX_LIMIT} items.")
        if limit < 1:
            return _error(422, "The limit must be greater than 0.")
        try:
            matching = self._search(request.arg("search"))
        except ValueError as exc:
            return _error(422 if "operator" in str(exc) else 400, str(exc))
        matching.sort(key=lambda p: str(p["identifier"]))
        kind = request.arg("pagination_type", "page")
        keep = {k: v[-1] for k, v in request.query.items() if k in ("search", "pagination_type")}
        if kind == "search_after":
            after = request.arg("search_after")
            start = 0
            if after:
                last = unb64(after)  # the identifier the previous page ended on
                start = sum(1 for p in matching if p["identifier"] <= last)
            page = start // limit + 1
        elif kind == "page":
            page = max(1, int(request.arg("page", "1") or 1))
            start = (page - 1) * limit
        else:
            return _error(422, f'Pagination type "{kind}" does not exist.')
        if (fault := self.page_fault(page)) is not None:
            return fault
        self.count("products")
        items = matching[start : start + limit]
        first = {**keep, "limit": limit}
        links: dict[str, Any] = {
            "self": {"href": self._href({**first, **_extra(request)})},
            "first": {"href": self._href(first)},
        }
        # search_after links on whenever a page is full, as Akeneo's SearchAfterHalPaginator
        # does (a catalog that fills its last page ends with an empty page); the page type
        # knows the total and stops exactly.
        full = len(items) == limit
        if (kind == "search_after" and full) or (kind == "page" and start + limit < len(matching)):
            if kind == "search_after":
                nxt = {**first, "search_after": b64(str(items[-1]["identifier"]))}
            else:
                nxt = {**first, "page": page + 1}
            links["next"] = {"href": self._href(nxt)}
        if kind == "page" and page > 1:
            links["previous"] = {"href": self._href({**first, "page": page - 1})}
        body: dict[str, Any] = {
            "_links": links,
            "_embedded": {
                "items": [{"_links": self._self_link(p["identifier"]), **p} for p in items]
            },
        }
        if kind == "page":
            body["current_page"] = page
            if request.arg("with_count") == "true":
                body["items_count"] = len(matching)
        return Response(200, body)

    def _search(self, raw: str | None) -> list[dict[str, Any]]:
        with self.lock:
            products = list(self.products)
        if not raw:
            return products
        try:
            search = json.loads(raw)
        except ValueError:
            raise ValueError("Search query parameter should be valid JSON.") from None
        for prop, rules in search.items():
            for rule in rules:
                products = [p for p in products if _matches(p, prop, rule)]
        return products

    def _href(self, query: dict[str, Any]) -> str:
        return f"{self.url}{PRODUCTS}?{urlencode(query, quote_via=quote)}"

    def _self_link(self, identifier: str) -> dict[str, Any]:
        return {"self": {"href": f"{self.url}{PRODUCTS}/{quote(identifier)}"}}


def _extra(request: Request) -> dict[str, str]:
    return {k: v[-1] for k, v in request.query.items() if k in ("search_after", "page")}


def _matches(product: dict[str, Any], prop: str, rule: dict[str, Any]) -> bool:
    op, value = rule.get("operator"), rule.get("value")
    if prop == "updated":
        try:  # Akeneo takes exactly "yyyy-mm-dd H:i:s" here, in the server's time zone (UTC)
            bound = datetime.strptime(str(value), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
        except ValueError:
            raise ValueError(
                f'Property "updated" expects a string with the format "yyyy-mm-dd H:i:s" '
                f'as data, "{value}" given (operator {op}).'
            ) from None
        stamp = utc(product["updated"])
        if op == ">":
            return stamp > bound
        if op == "<":
            return stamp < bound
        raise ValueError(f'Filter on property "updated" is not supported with operator "{op}"')
    if prop == "enabled" and op in ("=", "!="):
        return bool(product["enabled"] == value) if op == "=" else product["enabled"] != value
    if prop == "identifier" and op == "IN" and isinstance(value, list):
        return str(product["identifier"]) in value
    raise ValueError(f'Filter on property "{prop}" is not supported with operator "{op}"')


def _error(status: int, message: str) -> Response:
    return Response(status, {"code": status, "message": message})


# -- Events API: what Akeneo POSTs to a subscriber -------------------------------------------


def event(
    product: dict[str, Any],
    *,
    action: str = "product.updated",
    when: datetime | None = None,
    author: str = "julia",
    pim_source: str = "https://pim.example.test",
) -> dict[str, Any]:
    """One event of the Events API for ``product`` (removal events carry only its keys)."""
    resource = (
        {"identifier": product["identifier"], "uuid": product.get("uuid")}
        if action == "product.removed"
        else product
    )
    return {
        "action": action,
        "event_id": str(uuid.uuid4()),
        "event_datetime": (when or utc(product["updated"])).isoformat(),
        "author": author,
        "author_type": "ui",
        "pim_source": pim_source,
        "data": {"resource": resource},
    }


def signed_delivery(
    events: Sequence[dict[str, Any]], secret: str, *, timestamp: int | None = None
) -> tuple[bytes, dict[str, str]]:
    """The body and headers of one Events API delivery (at most 10 events, as documented)."""
    if not 0 < len(events) <= 10:
        raise ValueError("a delivery carries 1 to 10 events")
    body = json.dumps({"events": list(events)}, ensure_ascii=False).encode()
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    signature = hmac.new(secret.encode(), stamp.encode() + b"." + body, hashlib.sha256)
    return body, {
        "Content-Type": "application/json",
        "X-Akeneo-Request-Signature": signature.hexdigest(),
        "X-Akeneo-Request-Timestamp": stamp,
    }


def main(argv: Sequence[str] | None = None) -> None:
    def build(args: argparse.Namespace) -> tuple[ApiServer, dict[str, Any]]:
        server = AkeneoServer(make_products(args.products), host=args.host, port=args.port)
        return server, {
            "token_url": server.url + TOKEN_PATH,
            "client_id": CLIENT_ID,
            "client_secret": SECRET,
            "username": USERNAME,
            "password": PASSWORD,
        }

    run_main(argv, description="Akeneo PIM REST API test server", default_port=8781, build=build)


if __name__ == "__main__":
    main()
