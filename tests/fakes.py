"""In-memory fakes of the edges: a remote catalog with scriptable faults, a list source, a clock.

``FakeRemote`` is a ``RemoteApi``; ``tests/remote_contract.py`` holds it to the
behaviour of ``RemoteClient`` against the sandbox (PATCH merges, PUT replaces,
``sku``/``name`` required, errors from ``skuferry.errors``).
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest

from skuferry import errors
from skuferry.models import BadRecord, RawRecord
from skuferry.sources.base import Source


class FakeClock:
    """Time that moves only when told: ``clock()`` reads it, ``wait`` jumps ahead.

    ``now`` may be set or advanced by the test; ``tick`` is added on every read (a
    clock that moves by itself, so that successive reads differ); ``waits`` records
    every wait asked for. A zero or negative wait is a bug (a busy loop): it fails.
    """

    def __init__(self, now: float = 1000.0, *, tick: float = 0.0) -> None:
        self.now = now
        self.tick = tick
        self.waits: list[float] = []

    def __call__(self) -> float:
        self.now += self.tick
        return self.now

    def wait(self, seconds: float, stop: threading.Event | None = None) -> None:
        assert seconds > 0, f"a wait of {seconds} s would spin"
        self.waits.append(seconds)
        self.now += seconds


def write_config_file(
    folder: Path, text: str, *, name: str = "skuferry.toml", mode: int = 0o600
) -> Path:
    """Write a config file as an operator keeps one: UTF-8, private (0600) unless asked."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path


def wait_until(
    predicate: Callable[[], bool], what: str, limit_s: float = 60.0, step_s: float = 0.02
) -> None:
    """Poll until ``predicate`` holds; the limit only guards against a hang."""
    deadline = time.monotonic() + limit_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(step_s)


def log_events(path: Path) -> list[dict[str, Any]]:
    """The JSON log lines of a process's stderr file; other lines (a traceback) left out."""
    found = []
    for line in path.read_text().splitlines():
        try:
            found.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return found


class Crash(BaseException):
    """Stands for kill -9: not a SkuferryError, so nothing handles it."""


@dataclass
class FakeRemote:
    """The CMS product API in memory; `pre`/`post` hooks decide per call what goes wrong."""

    key_field: str = "sku"
    required: tuple[str, ...] = ("sku", "name")  # as the sandbox's required_fields
    products: dict[str, dict[str, Any]] = field(default_factory=dict)
    updates: Literal["patch", "put", "both", "none"] = "both"
    requests: dict[str, int] = field(default_factory=lambda: {"read": 0, "write": 0})
    requests_by_key: dict[str, int] = field(default_factory=dict)  # one key: never filled
    rate_limited: int = 0
    # tier -> requests answered; every later one is a 429 RATE_LIMITED (no clock, no window)
    allowed: dict[str, int] = field(default_factory=dict)
    # hook(kind, payload) -> None or raises; called before (pre) and after (post) committing
    pre: Callable[[str, dict[str, Any]], None] | None = None
    post: Callable[[str, dict[str, Any]], None] | None = None
    posts: int = 0
    _next: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def seed(self, *items: dict[str, Any]) -> list[str]:
        return [self._store(dict(item)) for item in items]

    def _store(self, item: dict[str, Any]) -> str:
        with self._lock:
            self._next += 1
            rid = f"p{self._next:06d}"
            self.products[rid] = {**item, "id": rid}
            return rid

    def by_key(self, key: str) -> list[dict[str, Any]]:
        return [p for p in self.products.values() if str(p.get(self.key_field)) == key]

    def keys(self) -> list[str]:
        return sorted(str(p.get(self.key_field)) for p in self.products.values())

    def _validate(self, payload: dict[str, Any], *, partial: bool) -> None:
        for name in self.required:
            if partial and name not in payload:
                continue
            value = payload.get(name)
            if not isinstance(value, str) or not value.strip():
                message = f"field '{name}' is required and must be a non-empty string"
                raise errors.Rejected(422, "VALIDATION_ERROR", message)

    def _count(self, tier: Literal["read", "write"]) -> None:
        with self._lock:
            self.requests[tier] += 1
            if self.requests[tier] <= self.allowed.get(tier, self.requests[tier]):
                return
            self.rate_limited += 1
        message = f"Rate limit hit ({tier}, per key). Retry in 60 seconds."
        raise errors.RateLimited(429, "RATE_LIMITED", message, retry_after=60.0)

    # -- the client interface (RemoteApi) ------------------------------------------
    def probe(self) -> int:
        return next(self.iter_pages(limit=1), (0, 0, []))[1]

    def iter_pages(self, *, limit: int = 100) -> Iterator[tuple[int, int, list[dict[str, Any]]]]:
        if not 1 <= limit <= 100:
            raise ValueError(f"limit must be 1..100, got {limit}")
        items = list(self.products.values())
        pages = (len(items) + limit - 1) // limit
        if not pages:
            self._count("read")  # page 1 is asked for, and answers meta.pages = 0
        for page in range(1, pages + 1):
            self._count("read")
            yield page, pages, [dict(p) for p in items[(page - 1) * limit : page * limit]]

    def iter_products(self, *, limit: int = 100) -> Iterator[dict[str, Any]]:
        for _page, _pages, items in self.iter_pages(limit=limit):
            yield from items

    def get_product(self, product_id: str) -> dict[str, Any]:
        self._count("read")
        if product_id not in self.products:
            raise errors.NotFound(404, "NOT_FOUND", "no such product")
        return dict(self.products[product_id])

    def create_product(self, payload: dict[str, Any]) -> dict[str, Any]:
        self._count("write")
        if self.pre:
            self.pre("create", payload)
        self._validate(payload, partial=False)
        self.posts += 1
        rid = self._store({k: v for k, v in payload.items() if k != "id"})  # the server owns ids
        if self.post:
            self.post("create", payload)
        return dict(self.products[rid])

    def update_product(
        self, product_id: str, payload: dict[str, Any], *, method: Literal["patch", "put"]
    ) -> dict[str, Any]:
        self._count("write")
        if self.updates not in (method, "both"):
            raise errors.MethodNotAllowed(405, "METHOD_NOT_ALLOWED", f"{method} not allowed")
        if self.pre:
            self.pre("update", payload)
        self._validate(payload, partial=method == "patch")
        if product_id not in self.products:
            raise errors.NotFound(404, "NOT_FOUND", "no such product")
        with self._lock:
            kept = self.products[product_id] if method == "patch" else {}  # PATCH merges
            self.products[product_id] = {**kept, **payload, "id": product_id}
        if self.post:
            self.post("update", payload)
        return dict(self.products[product_id])


class ListSource(Source):
    """Rows as a source yields them: a dict is a row, a str an unreadable row without a
    key, a ``BadRecord`` an unreadable row as given (its ``fields`` may hold the key)."""

    def __init__(self, rows: Sequence[dict[str, Any] | str | BadRecord]) -> None:
        self.rows = rows

    def records(self) -> Iterator[RawRecord | BadRecord]:
        for i, row in enumerate(self.rows, start=2):
            if isinstance(row, str):
                yield BadRecord(line=i, reason=f"line {i}: {row}")
            elif isinstance(row, BadRecord):
                yield dataclasses.replace(row, line=i, reason=f"line {i}: {row.reason}")
            else:
                yield RawRecord(line=i, fields=dict(row))

    def describe(self) -> str:
        return "list"
