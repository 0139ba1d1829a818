"""Faults for whole-run tests, and the journal's rules checked where they could break.

- ``FaultyRemote``: the in-memory remote, breaking writes on cue (a lost response, a
  timeout before the server saw the request, a 429, the process dying on either side
  of the server's commit) and failing walks. At every POST it checks the state file:
  the intent for that key is committed, holds this very payload, and is not the intent
  of an earlier POST; and a POST whose outcome was lost is followed by a complete walk
  before the key is POSTed again.
- ``crash_before_transaction(n)``: the process dies just before the mirror's n-th
  transaction of a run (so just after the (n-1)-th committed).
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
from tests.fakes import Crash, FakeRemote

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


@dataclass
class FaultyRemote(FakeRemote):
    state_path: Path | None = None  # the mirror whose journal each POST is checked against
    faults: list[WriteFault] = field(default_factory=list)
    walk_fault: WalkFault | None = None
    fired: list[str] = field(default_factory=list)  # what went wrong since the last disarm()
    violations: list[str] = field(default_factory=list)
    written: set[str] = field(default_factory=set)  # keys whose write was answered with success
    in_doubt: set[str] = field(default_factory=set)  # POSTed, answer lost, no walk since
    _intent_of_post: dict[str, tuple[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.pre = lambda op, payload: self._fault(op, payload, "before")
        self.post = lambda op, payload: self._fault(op, payload, "after")

    def disarm(self) -> list[str]:
        """Clear every armed fault; return what fired since the last call."""
        fired, self.fired = self.fired, []
        self.faults, self.walk_fault = [], None
        self.written = set()
        return fired

    def _fault(self, op: str, payload: dict[str, Any], when: When) -> None:
        key = str(payload.get(self.key_field))
        for fault in self.faults:
            if (fault.key in (None, key)) and (fault.op, fault.when) == (op, when):
                self.faults.remove(fault)
                self.fired.append(f"{fault.kind} {when} {op} {key}")
                raise fault.error()

    # -- the client interface, observed ---------------------------------------------
    def iter_pages(self, *, limit: int = 100) -> Iterator[tuple[int, int, list[dict[str, Any]]]]:
        for page, pages, items in super().iter_pages(limit=limit):
            fault = self.walk_fault
            if fault is not None and fault.page == page:
                self.walk_fault = None
                self.fired.append(f"walk {'crash' if fault.crash else 'unreachable'} p{page}")
                if fault.crash:
                    raise Crash(f"killed while listing page {page}")
                raise errors.Unreachable(f"GET /api/v1/products?page={page}: connection refused")
            yield page, pages, items
        self.in_doubt.clear()  # a complete walk: every landed POST is now visible

    def create_product(self, payload: dict[str, Any]) -> dict[str, Any]:
        key = str(payload.get(self.key_field))
        self._check_journal(key, payload)
        self.in_doubt.add(key)
        try:
            data = super().create_product(payload)
        except errors.HttpError:
            self.in_doubt.discard(key)  # the server answered: not applied, and skuferry knows
            raise
        self.in_doubt.discard(key)
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
            self._violation(f"POST {key}: an earlier POST's outcome was lost and no walk since")
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

    Mirror._write = write  # type: ignore[method-assign]
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

    Mirror.open_intent = open_intent  # type: ignore[method-assign]
    try:
        yield
    finally:
        Mirror.open_intent = original  # type: ignore[method-assign]
