"""The sandbox's API behaviour, without sockets: routes, envelope, validation, limits.

The HTTP handler reads a request, asks this module what to do,
and owns only the wire (bytes, delays, dropped and reset connections).

Choices where the spec is silent, each what a careful real service would do:
``limit`` over 100 is clamped to 100 (``meta.limit`` says so); a non-integer or
< 1 ``page``/``limit`` is 422; lists and single records both carry ``meta``
(``{}`` for single records); POST answers 201 with the stored record; unknown
paths are 404 and known paths with an unsupported method 405 with ``Allow``.
Every authenticated request is charged to its tier before routing, as a
gateway in front of the service would.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from skuferry.sandbox.config import SandboxConfig, Updates
from skuferry.sandbox.faults import FaultKind, FaultPicker
from skuferry.sandbox.limits import Decision, Mode, RateLimiter, TierLimit
from skuferry.sandbox.listing import list_page
from skuferry.sandbox.received import ReceivedUpdates
from skuferry.sandbox.stats import SandboxStats, StatsRecorder
from skuferry.sandbox.store import Collection

DEFAULT_PAGE_SIZE = 20
MAX_PAGE_SIZE = 100
_ROUTE = re.compile(r"^/api/v1/(products|content|projects)(?:/([^/]+))?(/generate)?/?$")


@dataclass(frozen=True, slots=True)
class Route:
    """A matched API path; ``resource`` None means unknown (404)."""

    resource: str | None
    record_id: str | None = None
    generate: bool = False


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    committed: bool = False  # the store changed


def match(path: str) -> Route:
    m = _ROUTE.match(path)
    if m is None:
        return Route(None)
    resource, record_id, generate = m.groups()
    if resource == "projects" and (record_id or generate):
        return Route(None)
    if generate and (resource != "content" or record_id is None):
        return Route(None)
    return Route(resource, record_id, bool(generate))


def tier_for(method: str, route: Route) -> str:
    if method == "GET":
        return "read"
    return "expensive" if route.generate else "write"


def error(status: int, code: str, message: str, **headers: str) -> Reply:
    return Reply(status, {"error": {"code": code, "message": message}}, dict(headers))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json(body: bytes) -> Any:
    """Parse a request body keeping fractional numbers exact; ValueError if not JSON."""
    return json.loads(body, parse_float=Decimal, parse_constant=_reject_constant)


class Api:
    """State and behaviour of one sandbox; every method is thread-safe."""

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self.keys = dict(config.keys)
        self.updates: Updates | None = config.updates
        self.products = Collection(prefix="p", key_field=config.key_field, clock=config.clock)
        self.content = Collection(prefix="c")
        self.stats = StatsRecorder()
        self.faults = FaultPicker(config.faults, seed=config.seed)
        self.limiter = RateLimiter(
            config.limits, mode=config.mode, clock=config.clock, burst=config.burst
        )
        self.received = ReceivedUpdates()
        # products "deleted" before the reader during the walk under way (list_shifted),
        # per workspace: a walk starts again at page 1
        self._shifted: dict[str, int] = {}

    # -- time, keys, limits -------------------------------------------------------

    def now_s(self) -> float:
        """Seconds since the sandbox started, on its clock."""
        return self.config.clock() - self.limiter.epoch

    def workspace_for(self, key: str | None) -> str | None:
        with self._lock:
            return self.keys.get(key) if key is not None else None

    def add_key(self, key: str, workspace: str) -> None:
        with self._lock:
            self.keys[key] = workspace

    def revoke_key(self, key: str) -> bool:
        """The key is refused from now on (401), as a CMS admin revoking it; False if unknown."""
        with self._lock:
            return self.keys.pop(key, None) is not None

    def set_limits(self, limits: Mapping[str, TierLimit] | None, mode: Mode | None) -> None:
        """New limits start from a clean slate, on the same window alignment."""
        with self._lock:
            old = self.limiter
            new_mode = mode or old.mode
            self.limiter = RateLimiter(
                {**old.limits, **(limits or {})},
                mode=new_mode,
                clock=self.config.clock,
                epoch=old.epoch,
                burst=old.burst if new_mode == "bucket" else None,
            )

    def restart_clock(self) -> None:
        """Fresh budgets, with windows and stats times counted from now."""
        with self._lock:
            old = self.limiter
            self.limiter = RateLimiter(
                old.limits, mode=old.mode, clock=self.config.clock, burst=old.burst
            )

    def admit(self, *, key: str | None, workspace: str | None, tier: str) -> Decision | None:
        """Count the arrival; None when unauthenticated, else the limiter's decision."""
        at_s = self.now_s()
        self.stats.arrived(tier=tier, key=key if workspace else None, at_s=at_s)
        if key is None or workspace is None:
            return None
        with self._lock:
            decision = self.limiter.check(key=key, workspace=workspace, tier=tier)
        if not decision.allowed:
            self.stats.limited(tier=tier, key=key, at_s=at_s, retry_after=decision.retry_after)
        elif tier == "write":
            self.stats.admitted_write(at_s)
        return decision

    def pick_fault(self, method: str, route: Route) -> FaultKind | None:
        is_write = method != "GET"
        is_product_write = route.resource == "products" and method in ("POST", "PUT", "PATCH")
        return self.faults.pick(is_write=is_write, is_product_write=is_product_write)

    def snapshot(self) -> SandboxStats:
        return self.stats.snapshot(
            products=self.products.counts(), duplicates=self.products.duplicates()
        )

    def reset(self) -> None:
        """Forget products, content, stats and spent budgets (not keys, limits or faults)."""
        self.products.clear()
        self.content.clear()
        self.stats.clear()
        self.received.clear()
        self.set_limits(None, None)

    # -- dispatch -----------------------------------------------------------------

    def allowed_methods(self, route: Route) -> tuple[str, ...]:
        if route.resource == "projects":
            return ("GET",)
        if route.generate:
            return ()
        if route.record_id is None:
            return ("GET", "POST")
        if route.resource == "content":
            return ("GET",)
        updates = self.updates
        return (
            "GET",
            *(("PATCH",) if updates in ("patch", "both") else ()),
            *(("PUT",) if updates in ("put", "both") else ()),
        )

    def dispatch(
        self, method: str, route: Route, query: Mapping[str, list[str]], body: bytes, ws: str
    ) -> Reply:
        if route.resource is None:
            return error(404, "NOT_FOUND", "no such endpoint")
        if route.generate:
            return error(404, "NOT_FOUND", "content generation is not simulated by the sandbox")
        allowed = self.allowed_methods(route)
        if method not in allowed:
            return error(
                405,
                "METHOD_NOT_ALLOWED",
                f"{method} is not allowed here",
                Allow=", ".join(allowed),
            )
        if method == "GET":
            return self._read(route, query, ws)
        try:
            fields = parse_json(body)
        except (ValueError, RecursionError):
            return error(400, "BAD_REQUEST", "the request body is not valid JSON")
        if not isinstance(fields, dict):
            return error(422, "VALIDATION_ERROR", "the request body must be a JSON object")
        fields.pop("id", None)  # the server owns ids
        if route.resource == "content":
            return Reply(201, {"data": self.content.create(ws, fields), "meta": {}}, committed=True)
        return self._write_product(method, route, fields, ws)

    def _read(self, route: Route, query: Mapping[str, list[str]], ws: str) -> Reply:
        if route.resource == "projects":
            project = {"id": f"prj_{ws}", "name": ws, "platforms": []}
            return self._page([project], 1, query)
        collection = self.products if route.resource == "products" else self.content
        if route.record_id is not None:
            record = collection.get(ws, route.record_id)
            if record is None:
                return error(404, "NOT_FOUND", f"no {route.resource} item {route.record_id}")
            return Reply(200, {"data": record, "meta": {}})
        paging = _paging(query)
        if isinstance(paging, Reply):
            return paging
        page, limit = paging
        if collection is not self.products:
            items, total = collection.page(ws, page=page, limit=limit)
            return Reply(200, {"data": items, "meta": _meta(page, limit, total)})
        faults = self.faults.faults
        lag = faults.list_lag_s
        with self._lock:
            shifted = 0 if page == 1 else self._shifted.get(ws, 0)
        items, total, fault = list_page(
            collection,
            ws,
            page=page,
            limit=limit,
            fault=self.faults.pick_list(page),
            created_by=self.config.clock() - lag if lag > 0 else None,
            shifted=shifted,
        )
        with self._lock:
            self._shifted[ws] = shifted + (fault == "list_shifted")
        if fault is not None:
            self.stats.fault(fault)
        return Reply(200, {"data": items, "meta": _meta(page, limit, total)})

    def _page(
        self, items: list[dict[str, Any]], total: int, query: Mapping[str, list[str]]
    ) -> Reply:
        paging = _paging(query)
        if isinstance(paging, Reply):
            return paging
        page, limit = paging
        start = (page - 1) * limit
        return Reply(200, {"data": items[start : start + limit], "meta": _meta(page, limit, total)})

    def _write_product(self, method: str, route: Route, fields: dict[str, Any], ws: str) -> Reply:
        required = self.config.required_fields
        check = required if method != "PATCH" else tuple(f for f in required if f in fields)
        for name in check:
            value = fields.get(name)
            if not isinstance(value, str) or not value.strip():
                message = f"field '{name}' is required and must be a non-empty string"
                return error(422, "VALIDATION_ERROR", message)
        if method == "POST" or route.record_id is None:
            created = self.products.create(ws, fields)
            return Reply(201, {"data": created, "meta": {}}, committed=True)
        update = self.products.merge if method == "PATCH" else self.products.replace
        record = update(ws, route.record_id, fields)
        if record is None:
            return error(404, "NOT_FOUND", f"no products item {route.record_id}")
        self.received.add(ws, method=method, record_id=route.record_id, body=fields)
        return Reply(200, {"data": record, "meta": {}}, committed=True)


def _paging(query: Mapping[str, list[str]]) -> tuple[int, int] | Reply:
    values: dict[str, int] = {}
    for name, default in (("page", 1), ("limit", DEFAULT_PAGE_SIZE)):
        raw = query.get(name, [str(default)])[-1]
        try:
            values[name] = int(raw)
        except ValueError:
            values[name] = 0
        if values[name] < 1:
            return error(422, "VALIDATION_ERROR", f"'{name}' must be an integer of at least 1")
    return values["page"], min(values["limit"], MAX_PAGE_SIZE)


def _meta(page: int, limit: int, total: int) -> dict[str, int]:
    return {"page": page, "limit": limit, "total": total, "pages": math.ceil(total / limit)}
