"""Faults for whole-run tests, and the journal's rules checked where they could break.

- ``FaultyRemote``: the in-memory remote, breaking writes on cue (a lost response, a
  timeout before the server saw the request, a 429, the process dying on either side
  of the server's commit), failing walks, serving inconsistent list pages (``PageFault``:
  empty, short, repeated, shifted by a delete, ``meta.pages`` changing) and a list that
  lags ``lag_s`` behind writes on a fake clock (a GET by id sees a product at once). At
  every POST it checks the state file: the intent for that key is committed, holds this
  very payload, and is not the intent of an earlier POST; and a POST whose outcome was
  lost is followed, before the key is POSTed again, by a clean walk that began once the
  list could show it.
- ``crash_before_transaction(n)``: the process dies just before the mirror's n-th
  transaction of a run (so just after the (n-1)-th committed), or before the n-th step
  of a group-committed batch (``Mirror.batch``: each journal or answer it carries is a
  step), which rolls the whole batch back.
- ``intents_never_reopened()``: a create intent is opened only for a key with no open
  intent: one left open is resolved by lookup first, never overwritten by a blind POST.

A crash is ``Crash`` (a BaseException that nothing in skuferry handles); the test then
starts a fresh run on the same state file, as systemd would after kill -9.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from skuferry import canonical, errors
from skuferry.models import Product
from skuferry.state.mirror import Mirror
from tests.fakes import Crash, FakeClock, FakeRemote

Op = Literal["create", "update"]
When = Literal["before", "after"]  # the server's commit of the write
FaultKind = Literal["unknown", "crash", "rate_limited"]


@dataclass(frozen=True)
class WriteFault:
    """The next ``op`` for ``key`` (None: of any key) fails ``when`` the server commits it."""

    key: str | None
    op: Op
    when: When
    kind: FaultKind

    def error(self) -> BaseException:
        if self.kind == "crash":
            return Crash(f"killed {self.when} the server committed {self.op}")
        if self.kind == "rate_limited":
            return errors.RateLimited(429, "RATE_LIMITED", "slow down", retry_after=1.0)
        return errors.OutcomeUnknown(f"{self.op}: read timeout ({self.when} the commit)")


@dataclass(frozen=True)
class WalkFault:
    """Listing page ``page`` fails: ``crash`` kills the process, else the API is unreachable."""

    page: int
    crash: bool


PageKind = Literal["empty", "short", "repeated", "shifted", "pages_changed"]
PAGE_KINDS: tuple[PageKind, ...] = ("empty", "short", "repeated", "shifted", "pages_changed")


@dataclass(frozen=True)
class PageFault:
    """The next read of list page ``page`` comes back ``kind`` (as the sandbox's list faults)."""

    page: int
    kind: PageKind


@dataclass
class FaultyRemote(FakeRemote):
    state_path: Path | None = None  # the mirror whose journal each POST is checked against
    faults: list[WriteFault] = field(default_factory=list)
    walk_fault: WalkFault | None = None
    page_faults: list[PageFault] = field(default_factory=list)  # each fires once, in order
    clock: FakeClock | None = None  # the list's lag is counted on it
    lag_s: float = 0.0  # a product shows on list pages this long after its create
    fired: list[str] = field(default_factory=list)  # what went wrong since the last disarm()
    violations: list[str] = field(default_factory=list)
    written: set[str] = field(default_factory=set)  # keys whose write was answered with success
    in_doubt: dict[str, float] = field(default_factory=dict)  # POSTed, answer lost: when
    _intent_of_post: dict[str, tuple[str, float]] = field(default_factory=dict)
    _created_at: dict[str, float] = field(default_factory=dict)  # remote id -> created
    get_reads: list[str] = field(default_factory=list)  # ids read by GET /products/:id

    def __post_init__(self) -> None:
        self.pre = lambda op, payload: self._fault(op, payload, "before")
        self.post = lambda op, payload: self._fault(op, payload, "after")

    def disarm(self) -> list[str]:
        """Clear every armed fault; return what fired since the last call."""
        fired, self.fired = self.fired, []
        self.faults, self.walk_fault, self.page_faults = [], None, []
        self.written = set()
        return fired

    def _now(self) -> float:
        return self.clock.now if self.clock is not None else 0.0

    def seed(self, *items: dict[str, Any], listed: bool = False) -> list[str]:
        """Products made on the CMS by someone else; ``listed``: long enough ago that the
        list shows them already (else ``lag_s`` from now)."""
        rids = super().seed(*items)
        if listed:
            for rid in rids:
                self._created_at[rid] -= self.lag_s
        return rids

    def _store(self, item: dict[str, Any]) -> str:
        rid = super()._store(item)
        self._created_at[rid] = self._now()
        return rid

    def _fault(self, op: str, payload: dict[str, Any], when: When) -> None:
        key = str(payload.get(self.key_field))
        for fault in self.faults:
            if (fault.key in (None, key)) and (fault.op, fault.when) == (op, when):
                self.faults.remove(fault)
                self.fired.append(f"{fault.kind} {when} {op} {key}")
                raise fault.error()

    def listed(self) -> list[dict[str, Any]]:
        """The products the list shows now: those created at least ``lag_s`` ago."""
        now = self._now()
        return [
            dict(p)
            for rid, p in self.products.items()
            if self.lag_s <= 0 or now - self._created_at.get(rid, now) >= self.lag_s
        ]

    def _page(
        self, items: list[dict[str, Any]], page: int, limit: int, shift: int
    ) -> tuple[int, list[Any], int]:
        """(meta.pages, items, shift) of one page, with the first armed fault for it applied.
        ``shift``: products deleted before the reader's offset earlier in this walk."""
        fault = next((f for f in self.page_faults if f.page == page), None)
        kind = fault.kind if fault is not None else None
        last = max(1, (len(items) - shift + limit - 1) // limit)
        # what a page cannot do: repeat page 1, be short as the last page (that is a
        # product gone from the list: what a shift by a delete does), break a list of none
        moot = (kind == "repeated" and page == 1) or (kind == "short" and page >= last)
        if fault is not None and items and not moot:
            self.page_faults.remove(fault)
            self.fired.append(f"page {kind} p{page}")
        else:
            kind = None
        if kind == "shifted":  # a product before this page was deleted: every later one moves
            shift += 1
        start, total = (page - 1) * limit + shift, len(items) - shift
        if kind == "repeated":
            start -= limit
        rows = items[start : start + limit]
        if kind == "empty":
            rows = []
        elif kind == "short":
            rows = rows[:-1]
        elif kind == "pages_changed":
            total += limit
        return (total + limit - 1) // limit, rows, shift

    # -- the client interface, observed ---------------------------------------------
    def iter_pages(self, *, limit: int = 100) -> Iterator[tuple[int, int, list[dict[str, Any]]]]:
        """Pages 1..meta.pages as the client walks them (meta re-read on every page)."""
        started, clean = self._now(), True
        page, pages, shift = 1, 1, 0
        while page <= pages:
            self._count("read")
            fault = self.walk_fault
            if fault is not None and fault.page == page:
                self.walk_fault = None
                self.fired.append(f"walk {'crash' if fault.crash else 'unreachable'} p{page}")
                if fault.crash:
                    raise Crash(f"killed while listing page {page}")
                raise errors.Unreachable(f"GET /api/v1/products?page={page}: connection refused")
            before = len(self.fired)
            pages, rows, shift = self._page(self.listed(), page, limit, shift)
            clean = clean and len(self.fired) == before
            if page == 1 and pages == 0:
                break
            yield page, pages, rows
            page += 1
        if clean:  # a clean walk shows every POST that landed long enough before it began
            self.in_doubt = {k: t for k, t in self.in_doubt.items() if t + self.lag_s > started}

    def get_product(self, product_id: str) -> dict[str, Any]:
        self.get_reads.append(product_id)
        return super().get_product(product_id)

    def create_product(self, payload: dict[str, Any]) -> dict[str, Any]:
        key = str(payload.get(self.key_field))
        self._check_journal(key, payload)
        self.in_doubt[key] = self._now()
        try:
            data = super().create_product(payload)
        except errors.HttpError:
            self.in_doubt.pop(key, None)  # the server answered: not applied, and skuferry knows
            raise
        except BaseException:
            self.in_doubt[key] = self._now()  # lost: in doubt from the moment it was lost
            raise
        self.in_doubt.pop(key, None)
        self.written.add(key)
        return data

    def update_product(
        self, product_id: str, payload: dict[str, Any], *, method: Literal["patch", "put"]
    ) -> dict[str, Any]:
        data = super().update_product(product_id, payload, method=method)
        self.written.add(str(payload.get(self.key_field)))
        return data

    def _check_journal(self, key: str, payload: dict[str, Any]) -> None:
        if key in self.in_doubt:
            self._violation(
                f"POST {key}: an earlier POST's outcome was lost and no walk since that could "
                "show it"
            )
        if self.state_path is None:
            return
        with closing(
            sqlite3.connect(f"{self.state_path.resolve().as_uri()}?mode=ro", uri=True)
        ) as db:
            found = db.execute(
                "SELECT payload, started_at FROM intents WHERE key = ?", (key,)
            ).fetchone()
        if found is None:
            self._violation(f"POST {key} without a committed intent")
            return
        intent = (str(found[0]), float(found[1]))
        if intent[0] != canonical.dumps(payload):
            self._violation(f"POST {key}: the open intent holds another payload")
        if self._intent_of_post.get(key) == intent:
            self._violation(f"POST {key} again under the intent of an earlier POST")
        self._intent_of_post[key] = intent

    def _violation(self, what: str) -> None:
        self.violations.append(what)
        raise AssertionError(what)


@contextmanager
def crash_before_transaction(n: int | None, fired: list[str]) -> Iterator[None]:
    """Kill the run just before the mirror's ``n``-th write transaction (None: never)."""
    original = Mirror._write
    count = 0

    def write(self: Mirror) -> Any:
        nonlocal count
        count += 1
        if count == n:
            fired.append(f"crash before mirror transaction {n}")
            raise Crash(f"killed before mirror transaction {n}")
        return original(self)

    Mirror._write = write  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        Mirror._write = original  # type: ignore[method-assign]


@contextmanager
def intents_never_reopened() -> Iterator[None]:
    """Fail the run if a create intent is opened while one is open for the same key."""
    original = Mirror.open_intent

    def open_intent(self: Mirror, product: Product, *, run_id: int | None) -> None:
        if self.has_intent(product.key):
            raise AssertionError(
                f"intent for {product.key} reopened: the open one was never resolved by lookup"
            )
        original(self, product, run_id=run_id)

    Mirror.open_intent = open_intent  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        Mirror.open_intent = original  # type: ignore[method-assign]
