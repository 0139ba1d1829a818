"""Odoo 19 External JSON-2 API for ``product.product``, as documented by Odoo.

Written from "External JSON-2 API" (Odoo 19.0 developer reference: ``POST
/json/2/<model>/<method>``, ``Authorization: bearer <api key>``, ``X-Odoo-Database``, a JSON
object of the method's parameters, the bare return value on success, and on error a 4xx/5xx
with ``{"name", "message", "arguments", "context", "debug"}``, e.g. 401 "Invalid apikey"),
and the ORM reference ("Search domains": prefix ``&``/``|``/``!`` and ``[field, operator,
value]`` terms; ``search_read``/``search_count``; ``active`` records only unless the domain
names ``active``; ``fields``: an empty value reads as ``false``, a many2one as ``[id,
"display name"]``; datetimes as ``"YYYY-MM-DD HH:MM:SS"`` in UTC).

    POST /json/2/product.product/search_read   {"domain", "fields", "offset", "limit", "order"}
    POST /json/2/product.product/search_count  {"domain"}
    POST /json/2/product.product/read          {"ids", "fields"}

By hand: ``python -m skuferry.sandbox.pims.odoo --port 8784``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from skuferry.sandbox.pims.base import ApiServer, Request, Response, run_main
from skuferry.sandbox.pims.catalog import Article, articles

API_KEY = "7f3e9a1c5b2d8e4f6a0c3b9d1e7f5a2c4b8d0e6f"  # test value: 160 bits in hex, as Odoo makes
DATABASE = "nordhafen"
MODEL = "product.product"
_CATEGORIES = {"outdoor": 4, "kitchen": 5, "tools": 6, "home": 7, "tea": 8}
_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    ">": lambda a, b: a is not False and a > b,
    ">=": lambda a, b: a is not False and a >= b,
    "<": lambda a, b: a is not False and a < b,
    "<=": lambda a, b: a is not False and a <= b,
    "in": lambda a, b: a in b,
    "not in": lambda a, b: a not in b,
    "ilike": lambda a, b: a is not False and str(b).lower() in str(a).lower(),
    "like": lambda a, b: a is not False and str(b) in str(a),
}


def record(a: Article) -> dict[str, Any]:
    """A product.product as ``search_read`` returns it: ``false`` for empty, many2one pairs."""
    stamp = a.updated.strftime("%Y-%m-%d %H:%M:%S")
    return {
        "id": a.index + 1,
        "display_name": f"[{a.sku}] {a.name}",
        "name": a.name,
        "default_code": a.sku,
        "barcode": a.ean or False,
        "list_price": float(a.price),
        "standard_price": float(a.price * 6 / 10),
        "qty_available": float(a.stock),
        "categ_id": [_CATEGORIES[a.category], f"All / Saleable / {a.category.title()}"],
        "uom_id": [1, "Units"],
        "type": "consu",
        "is_storable": True,
        "sale_ok": True,
        "active": a.enabled,
        "description_sale": False if a.index % 4 else a.description,
        "product_tmpl_id": [a.index + 1, a.name],
        "create_date": "2026-01-15 09:30:00",
        "write_date": stamp,
    }


def make_records(n: int) -> list[dict[str, Any]]:
    return [record(a) for a in articles(n)]


class OdooError(Exception):
    def __init__(self, status: int, name: str, message: str) -> None:
        super().__init__(message)
        self.status, self.name = status, name


class OdooServer(ApiServer):
    name = "odoo"

    def __init__(
        self,
        records: Sequence[dict[str, Any]] = (),
        *,
        api_key: str = API_KEY,
        database: str = DATABASE,
        require_database: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.records = list(records)
        self.api_key, self.database, self.require_database = api_key, database, require_database

    def touch(self, default_code: str, when: datetime, name: str = "geändert") -> None:
        with self.lock:
            for r in self.records:
                if r["default_code"] == default_code:
                    r["name"], r["write_date"] = name, when.strftime("%Y-%m-%d %H:%M:%S")
                    return
        raise KeyError(default_code)

    def error_body(self, status: int) -> Any:
        return _error_body(
            OdooError(status, "werkzeug.exceptions.InternalServerError", f"Injected error {status}")
        )

    def handle(self, request: Request) -> Response:
        try:
            return Response(200, self._call(request))
        except OdooError as exc:
            return Response(exc.status, _error_body(exc))

    def _call(self, request: Request) -> Any:
        parts = request.path.strip("/").split("/")
        if request.method != "POST" or len(parts) != 4 or parts[:2] != ["json", "2"]:
            raise OdooError(404, "werkzeug.exceptions.NotFound", "404 Not Found")
        scheme, _, key = (request.header("authorization") or "").partition(" ")
        if scheme.lower() != "bearer" or key.strip() != self.api_key:
            raise OdooError(401, "werkzeug.exceptions.Unauthorized", "Invalid apikey")
        database = request.header("x-odoo-database")
        if database != self.database and (database is not None or self.require_database):
            raise OdooError(
                404,
                "werkzeug.exceptions.NotFound",
                f"Database {database!r} not found" if database else "No database",
            )
        model, method = parts[2], parts[3]
        if model != MODEL:
            raise OdooError(404, "werkzeug.exceptions.NotFound", f"Model {model!r} not found")
        try:
            params = request.json()
        except ValueError:
            raise OdooError(400, "werkzeug.exceptions.BadRequest", "Invalid JSON data") from None
        if not isinstance(params, dict):
            raise OdooError(400, "werkzeug.exceptions.BadRequest", "Expected a JSON object")
        params.pop("context", None)
        allowed = {
            "search_read": {"domain", "fields", "offset", "limit", "order"},
            "search_count": {"domain", "limit"},
            "read": {"ids", "fields"},
        }
        if method not in allowed:
            raise OdooError(
                404,
                "werkzeug.exceptions.NotFound",
                f"The method {method!r} does not exist on the model {model!r}",
            )
        unknown = sorted(set(params) - allowed[method])
        if unknown:
            raise OdooError(
                422,
                "builtins.TypeError",
                f"{method}() got an unexpected keyword argument '{unknown[0]}'",
            )
        with self.lock:
            rows = list(self.records)
        if method == "read":
            wanted = set(params.get("ids") or [])
            return [_fields(r, params.get("fields")) for r in rows if r["id"] in wanted]
        rows = search(rows, params.get("domain") or [])
        if method == "search_count":
            self.count("search_count")
            return len(rows)
        rows = _order(rows, params.get("order") or "id")
        offset, limit = int(params.get("offset") or 0), params.get("limit")
        if limit and (fault := self.page_fault(offset // int(limit) + 1)) is not None:
            raise OdooError(
                fault.status, "werkzeug.exceptions.InternalServerError", "Injected error"
            )
        self.count("search_read")
        rows = rows[offset : offset + int(limit)] if limit else rows[offset:]
        return [_fields(r, params.get("fields")) for r in rows]


def search(rows: list[dict[str, Any]], domain: list[Any]) -> list[dict[str, Any]]:
    """The rows a domain selects; archived rows only when the domain names ``active``."""
    names_active = any(isinstance(t, list) and t and t[0] == "active" for t in domain)
    if not names_active:
        domain = ["&", ["active", "=", True], *domain] if domain else [["active", "=", True]]
    return [r for r in rows if _evaluate(r, list(domain))]


def _evaluate(row: dict[str, Any], domain: list[Any]) -> bool:
    """Polish-notation domain; consecutive terms are implicitly ANDed."""

    def one(tokens: list[Any]) -> bool:
        if not tokens:
            raise OdooError(422, "builtins.ValueError", "Invalid domain: missing operand")
        head = tokens.pop(0)
        if head == "!":
            return not one(tokens)
        if head in ("&", "|"):
            left, right = one(tokens), one(tokens)
            return (left and right) if head == "&" else (left or right)
        if not (isinstance(head, list) and len(head) == 3):
            raise OdooError(422, "builtins.ValueError", f"Invalid leaf {head!r}")
        name, op, value = head
        if name not in row or op not in _OPS:
            raise OdooError(422, "builtins.ValueError", f"Invalid leaf {head!r}")
        if name in ("write_date", "create_date") and isinstance(value, str):
            _check_datetime(value)
        mine = row[name][0] if isinstance(row[name], list) else row[name]
        return bool(_OPS[op](mine, value))

    result = True
    while domain:
        result = one(domain) and result
    return result


def _check_datetime(value: str) -> None:
    """Odoo reads a datetime as ``YYYY-MM-DD HH:MM:SS`` (or a bare date), nothing else."""
    text = value[:19] if len(value) > 10 else value + " 00:00:00"
    try:
        datetime.strptime(text, "%Y-%m-%d %H:%M:%S")
    except ValueError:
        raise OdooError(
            422,
            "builtins.ValueError",
            f"time data {text!r} does not match format '%Y-%m-%d %H:%M:%S'",
        ) from None


def _order(rows: list[dict[str, Any]], order: str) -> list[dict[str, Any]]:
    for part in reversed([p.strip() for p in order.split(",") if p.strip()]):
        name, _, direction = part.partition(" ")
        if rows and name not in rows[0]:
            raise OdooError(422, "builtins.ValueError", f"Invalid field {name!r} in order")
        rows = sorted(rows, key=_sort_key(name), reverse=direction.strip().lower() == "desc")
    return rows


def _sort_key(name: str) -> Callable[[dict[str, Any]], Any]:
    def key(row: dict[str, Any]) -> Any:
        value = row[name]
        return value if isinstance(value, (int, float)) and name == "id" else str(value)

    return key


def _fields(row: dict[str, Any], fields: list[str] | None) -> dict[str, Any]:
    if not fields:
        return dict(row)
    unknown = [f for f in fields if f not in row]
    if unknown:
        raise OdooError(
            422, "builtins.ValueError", f"Invalid field {unknown[0]!r} on model {MODEL!r}"
        )
    return {"id": row["id"], **{f: row[f] for f in fields}}


def _error_body(exc: OdooError) -> dict[str, Any]:
    message = str(exc)
    return {
        "name": exc.name,
        "message": message,
        "arguments": [message, exc.status],
        "context": {},
        "debug": f"Traceback (most recent call last):\n{exc.name}: {message}\n",
    }


def main(argv: Sequence[str] | None = None) -> None:
    def build(args: argparse.Namespace) -> tuple[ApiServer, dict[str, Any]]:
        server = OdooServer(make_records(args.products), host=args.host, port=args.port)
        return server, {
            "search_read_url": f"{server.url}/json/2/{MODEL}/search_read",
            "api_key": API_KEY,
            "database": DATABASE,
        }

    run_main(argv, description="Odoo 19 JSON-2 API test server", default_port=8784, build=build)


if __name__ == "__main__":
    main()
