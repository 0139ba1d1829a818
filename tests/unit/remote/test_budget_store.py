"""The budget's ledger: the state file's budget book and an in-memory one keep one contract.

The budget (the pacing policy) reaches its rows only through the ``BudgetStore``
interface; these tests hold the state's SQLite book and an in-memory ledger to the
same behaviour, then run the budget itself on both, so the policy is seen to rely
on nothing but the interface. The SQLite book alone must also read a ledger left
by an earlier release (same tables, same columns) and share it between processes.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest

from skuferry.errors import Interrupted, StateError
from skuferry.remote.budget import Budget
from skuferry.remote.budgetstore import Bucket, BudgetRows, BudgetStore
from skuferry.remote.scopes import PACE_META
from skuferry.state.budgetbook import BudgetBook
from skuferry.state.schema import open_state
from tests.fakes import FakeClock

T = TypeVar("T")
START = 1_700_000_000.0


@dataclass
class MemoryLedger:
    """What a state file holds for the budget, in memory; shared by the stores over it."""

    buckets: dict[str, Bucket] = field(default_factory=dict)
    sends: list[tuple[str, float]] = field(default_factory=list)
    metas: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, compare=False)


class MemoryRows:
    def __init__(self, ledger: MemoryLedger) -> None:
        self._l = ledger

    def bucket(self, scope: str) -> Bucket | None:
        return self._l.buckets.get(scope)

    def put_tokens(self, scope: str, tokens: float, updated_at: float) -> None:
        blocked = self._l.buckets[scope][2] if scope in self._l.buckets else 0.0
        self._l.buckets[scope] = (tokens, updated_at, blocked)

    def put_bucket(self, scope: str, bucket: Bucket) -> None:
        self._l.buckets[scope] = bucket

    def add_send(self, scope: str, at: float) -> None:
        self._l.sends.append((scope, at))

    def count_sends(self, scope: str, since: float) -> int:
        return len(self.sends(scope, since))

    def logged(self, scope: str) -> int:
        return sum(1 for s, _t in self._l.sends if s == scope)

    def set_logged(self, scope: str, count: int) -> None:
        assert count == self.logged(scope), "an exact count"

    def sends(self, scope: str, since: float) -> list[float]:
        return [t for s, t in self._l.sends if s == scope and t > since]

    def send_at(self, scope: str, since: float, index: int) -> float:
        return sorted(self.sends(scope, since))[index]

    def forget_sends(self, scope: str, until: float) -> None:
        self._l.sends = [(s, t) for s, t in self._l.sends if not (s == scope and t <= until)]

    def metas(self, prefix: str) -> list[tuple[str, str]]:
        return [(n[len(prefix) :], v) for n, v in self._l.metas.items() if n.startswith(prefix)]

    def put_meta(self, name: str, value: str) -> None:
        self._l.metas[name] = value


class MemoryBudgetStore:
    """A ``BudgetStore`` over a ``MemoryLedger``: a body sees a copy, kept if it returns."""

    def __init__(self, ledger: MemoryLedger | None = None) -> None:
        self.ledger = ledger if ledger is not None else MemoryLedger()
        self.closed = 0

    def transact(
        self,
        body: Callable[[BudgetRows], T],
        *,
        write: bool = True,
        stop: threading.Event | None = None,
    ) -> T:
        with self.ledger.lock:
            draft = MemoryLedger(
                dict(self.ledger.buckets), list(self.ledger.sends), dict(self.ledger.metas)
            )
            result = body(MemoryRows(draft))
            if write:
                self.ledger.buckets, self.ledger.sends = draft.buckets, draft.sends
                self.ledger.metas = draft.metas
            return result

    def close(self) -> None:
        self.closed += 1


MakeStore = Callable[[], BudgetStore]


@pytest.fixture(params=["sqlite", "memory"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeStore]:
    """Stores over one ledger: each call is another process's view of the same one."""
    opened: list[BudgetStore] = []
    ledger = MemoryLedger()

    def make() -> BudgetStore:
        store: BudgetStore
        if request.param == "sqlite":
            store = BudgetBook(lambda: open_state(tmp_path / "state.db"))
        else:
            store = MemoryBudgetStore(ledger)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


# -- the contract ---------------------------------------------------------------------


def test_a_bucket_is_none_until_written_and_a_block_survives_new_tokens(make_store):
    store = make_store()
    assert store.transact(lambda rows: rows.bucket("write"), write=False) is None

    def fill(rows: BudgetRows) -> None:
        rows.put_tokens("write", 5.0, START)  # a new bucket is not blocked
        rows.put_bucket("read", (1.0, START, START + 30))
        rows.put_tokens("read", 2.0, START + 1)  # new tokens keep the block

    store.transact(fill)
    got = store.transact(lambda rows: (rows.bucket("write"), rows.bucket("read")), write=False)
    assert got == ((5.0, START, 0.0), (2.0, START + 1, START + 30))
    store.transact(lambda rows: rows.put_bucket("read", (0.0, START + 2, START + 40)))
    assert store.transact(lambda rows: rows.bucket("read")) == (0.0, START + 2, START + 40)


def test_sends_are_counted_after_since_and_forgotten_up_to_until(make_store):
    store = make_store()

    def log(rows: BudgetRows) -> None:
        for at in (START + 3, START + 1, START + 2, START + 4):
            rows.add_send("write", at)
        rows.add_send("read", START + 2)

    store.transact(log)

    def look(rows: BudgetRows) -> tuple[int, list[float], float, float]:
        return (
            rows.count_sends("write", START + 1),  # strictly after: 2, 3, 4
            sorted(rows.sends("write", START + 1)),
            rows.send_at("write", START, 0),  # the oldest after START
            rows.send_at("write", START + 1, 2),  # the third after START + 1
        )

    assert store.transact(look, write=False) == (
        3,
        [START + 2, START + 3, START + 4],
        START + 1,
        START + 4,
    )
    store.transact(lambda rows: rows.forget_sends("write", START + 2))  # 1 and 2 go
    assert store.transact(lambda rows: sorted(rows.sends("write", 0.0))) == [START + 3, START + 4]
    assert store.transact(lambda rows: rows.count_sends("read", 0.0)) == 1  # other scopes stay


def test_named_values_are_found_by_prefix_and_replaced(make_store):
    store = make_store()

    def put(rows: BudgetRows) -> None:
        rows.put_meta(PACE_META + "write", "a")
        rows.put_meta(PACE_META + "write@k1", "b")
        rows.put_meta(PACE_META[:-1], "not a pace")  # the prefix without its dot
        rows.put_meta(PACE_META[:-1] + "/x", "sorts just after the prefix")
        rows.put_meta("cms.origin", "elsewhere")

    store.transact(put)
    store.transact(lambda rows: rows.put_meta(PACE_META + "write", "c"))
    found = store.transact(lambda rows: sorted(rows.metas(PACE_META)), write=False)
    assert found == [("write", "c"), ("write@k1", "b")]


def test_a_body_that_raises_keeps_nothing_and_the_error_goes_on(make_store):
    store = make_store()

    def half(rows: BudgetRows) -> None:
        rows.add_send("write", START)
        rows.put_tokens("write", 1.0, START)
        raise KeyError("the decision failed halfway")

    with pytest.raises(KeyError):
        store.transact(half)
    assert store.transact(lambda rows: (rows.count_sends("write", 0.0), rows.bucket("write"))) == (
        0,
        None,
    )


def test_one_process_sees_what_another_committed(make_store):
    first, second = make_store(), make_store()
    first.transact(lambda rows: rows.add_send("write", START))
    assert second.transact(lambda rows: rows.count_sends("write", 0.0), write=False) == 1


def test_closing_twice_is_harmless(make_store):
    store = make_store()
    store.close()
    store.close()


# -- the policy on either store -------------------------------------------------------


def test_two_budgets_on_one_ledger_share_the_window(make_store):
    clock = FakeClock(START)
    budgets = [
        Budget(make_store(), limits={"write": 10}, clock=clock, wait=clock.wait) for _ in range(2)
    ]
    for i in range(10):  # together they spend the allowance of one window...
        budgets[i % 2].acquire("write")
    assert clock.waits == []
    budgets[0].acquire("write")  # ...and the 11th waits for the oldest to age out
    assert clock.now == pytest.approx(START + 60.5)
    assert budgets[1].snapshot()["write"]["available"] == 9
    for b in budgets:
        b.close()


def test_a_429_blocks_every_budget_on_the_ledger_and_teaches_a_pace(make_store):
    clock = FakeClock(START)
    one = Budget(make_store(), limits={"write": 60}, limiter="bucket", clock=clock, wait=clock.wait)
    other = Budget(
        make_store(), limits={"write": 60}, limiter="bucket", clock=clock, wait=clock.wait
    )
    for _ in range(10):
        one.acquire("write")
    one.penalize("write", 5)
    snap = other.snapshot()["write"]
    assert snap["available"] == 0.0 and snap["blocked_until"] == pytest.approx(START + 5.1)
    assert snap["burst"] == pytest.approx(5.0)  # half of the ten just sent
    other.acquire("write")  # waits out the block, then goes
    assert clock.now >= START + 5.1
    one.close()
    other.close()


def test_a_budget_that_refuses_its_limits_closes_its_store(tmp_path: Path):
    store = MemoryBudgetStore()
    with pytest.raises(ValueError, match="at least 1"):
        Budget(store, limits={"write": 0})
    assert store.closed == 1


# -- the state file alone -------------------------------------------------------------


def test_the_book_reads_the_ledger_an_earlier_release_left(tmp_path: Path):
    """An existing budget database keeps working: same tables, same columns, same names."""
    path = tmp_path / "state.db"
    open_state(path).close()
    with sqlite3.connect(path) as conn:  # rows as the budget wrote them before the book
        conn.execute(
            "INSERT INTO budget_bucket (tier, tokens, updated_at, blocked_until) "
            "VALUES ('write', 3.5, ?, ?)",
            (START, START + 9),
        )
        conn.executemany(
            "INSERT INTO budget_sends (tier, ts) VALUES ('read', ?)", [(START + 1,), (START + 2,)]
        )
        conn.execute("INSERT INTO meta (name, value) VALUES (?, '{}')", (PACE_META + "write",))
    conn.close()
    book = BudgetBook(lambda: open_state(path))
    try:
        got = book.transact(
            lambda rows: (
                rows.bucket("write"),
                sorted(rows.sends("read", 0.0)),
                rows.metas(PACE_META),
            ),
            write=False,
        )
    finally:
        book.close()
    assert got == ((3.5, START, START + 9), [START + 1, START + 2], [("write", "{}")])


def test_a_ledger_locked_past_every_attempt_is_a_state_error(tmp_path: Path):
    path = tmp_path / "state.db"
    waits: list[float] = []
    book = BudgetBook(lambda: open_state(path), wait=lambda s, _stop: waits.append(s))
    book._conn.execute("PRAGMA busy_timeout = 1")
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StateError, match="stayed locked by another process"):
            book.transact(lambda rows: rows.add_send("write", START))
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
        book.close()
    assert len(waits) == 15 and waits[0] == 0.05 and waits[-1] == 1.0  # backs off, capped


def test_a_stop_while_the_ledger_is_locked_interrupts(tmp_path: Path):
    path = tmp_path / "state.db"
    stop = threading.Event()
    book = BudgetBook(lambda: open_state(path), wait=lambda s, _stop: stop.set())
    book._conn.execute("PRAGMA busy_timeout = 1")
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(Interrupted):
            book.transact(lambda rows: rows.add_send("write", START), stop=stop)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
        book.close()


def test_the_book_keeps_each_scopes_count_and_takes_it_again_after_an_older_release(
    tmp_path: Path,
):
    """``logged`` is a look-up, not a count of the window; a send logged by a release that
    does not keep the counts is noticed (the log's highest rowid) and counted."""
    book = BudgetBook(lambda: open_state(tmp_path / "state.db"))
    try:

        def three(rows: BudgetRows) -> None:
            for i in range(3):
                rows.add_send("write", START + i)

        book.transact(three)
        book.transact(lambda rows: rows.add_send("read", START))
        assert book.transact(lambda rows: (rows.logged("write"), rows.logged("read"))) == (3, 1)
        book.transact(lambda rows: rows.add_send("write", START + 3))
        assert book.transact(lambda rows: rows.logged("write")) == 4
        with closing(sqlite3.connect(tmp_path / "state.db")) as older, older:
            older.execute("INSERT INTO budget_sends (tier, ts) VALUES ('write', ?)", (START + 9,))
        assert book.transact(lambda rows: rows.logged("write")) == 5, "counted again"
        book.transact(lambda rows: rows.forget_sends("write", START + 1))  # 0 and 1 go
        assert book.transact(lambda rows: rows.logged("write")) == 3
        assert book.transact(lambda rows: rows.count_sends("write", 0.0)) == 3
    finally:
        book.close()
