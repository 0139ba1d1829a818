"""Room for the urgent: a backlog never takes the whole window, and keeps its pace.

A discrete simulation on a fake clock: one non-urgent backlog acquires write tokens
back to back; while it waits, the clock jumps, and when it passes the moment the
urgent writes are queued, they acquire (urgent) from inside that wait, as a lane's
thread would. Every send is then checked against both readings of the spec's limit
(a server counting any 60 s window, and a server token bucket of N per minute), per
key and for the workspace.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from skuferry import errors
from skuferry.config.schema import BudgetSettings
from skuferry.remote import budget as budget_module
from skuferry.remote import priority
from skuferry.remote.budget import Budget
from skuferry.state.budgetbook import BudgetBook
from skuferry.state.schema import open_state
from tests.fakes import FakeClock

T = TypeVar("T")
START = 1_700_000_000.0
TOL = 1e-6


class Sim:
    """A backlog of ``backlog`` non-urgent sends; ``urgent`` sends queued at ``at``."""

    def __init__(self, budget: Budget, clock: FakeClock, *, urgent: int, at: float) -> None:
        self.budget, self.clock = budget, clock
        self.urgent, self.at = urgent, START + at
        self.sends: list[tuple[float, str | None, bool]] = []  # (time, key, urgent)
        self.latencies: list[float] = []
        self._inside = False

    def wait(self, seconds: float, stop: threading.Event | None = None) -> None:
        assert seconds > 0
        target = self.clock.now + seconds
        if not self._inside and self.urgent and self.clock.now <= self.at < target:
            self.clock.now = self.at
            self._inside = True
            try:
                for _ in range(self.urgent):
                    key = self.budget.acquire("write", urgent=True)
                    self.sends.append((self.clock.now, key, True))
                    self.latencies.append(self.clock.now - self.at)
            finally:
                self._inside = False
                self.urgent = 0
            # the backlog's own wait is over or not: it asks again
            return
        self.clock.now = target

    def drain(self, backlog: int) -> float:
        for _ in range(backlog):
            key = self.budget.acquire("write")
            self.sends.append((self.clock.now, key, False))
        return self.clock.now - START


@pytest.fixture
def build(tmp_path: Path) -> Iterator[Callable[..., tuple[Budget, Sim]]]:
    opened: list[Budget] = []

    def factory(
        *, urgent: int = 10, at: float = 20.0, name: str = "state.db", **kw: object
    ) -> tuple[Budget, Sim]:
        clock = FakeClock(START)
        holder: list[Sim] = []
        kw.setdefault("limits", {"read": 300, "write": 120})

        def wait(seconds: float, stop: threading.Event | None) -> None:
            holder[0].wait(seconds, stop)

        budget = Budget(
            BudgetBook(lambda: open_state(tmp_path / name)),
            clock=clock,
            wait=wait,
            **kw,  # type: ignore[arg-type]
        )
        opened.append(budget)
        sim = Sim(budget, clock, urgent=urgent, at=at)
        holder.append(sim)
        return budget, sim

    yield factory
    for b in opened:
        b.close()


def most_in_any_window(times: list[float], width: float = 60.0) -> int:
    times = sorted(times)
    best, j = 0, 0
    for i, t in enumerate(times):
        j = max(j, i)
        while j < len(times) and times[j] < t + width - TOL:
            j += 1
        best = max(best, j - i)
    return best


def bucket_low(times: list[float], per_minute: int) -> float:
    """The lowest level of a server's full token bucket of ``per_minute`` these sends reach."""
    level, last, low = float(per_minute), START, float(per_minute)
    for t in sorted(times):
        level = min(float(per_minute), level + (t - last) * per_minute / 60.0) - 1
        last = t
        low = min(low, level)
    return low


def assert_within_limits(times: list[float], per_minute: int, limiter: str = "window") -> None:
    """The window limiter is safe under both readings; the bucket limiter is the choice
    for a server known to count with a token bucket, and is held to that reading."""
    if limiter == "window":
        assert most_in_any_window(times) <= per_minute  # a server counting any minute
    assert bucket_low(times, per_minute) >= -TOL  # a server's token bucket


@pytest.mark.parametrize("at", [0.5, 20.0, 57.0, 59.0, 61.0, 100.0])
def test_window_gives_the_urgent_a_slot_within_seconds_and_keeps_the_bulk_pace(build, at):
    _, sim = build(limiter="window", urgent_share=0.1, at=at)
    finished = sim.drain(300)
    # R = 12 slots of 120 are kept; they come free again X = 0.1 * 60.5 s later
    assert len(sim.latencies) == 10
    assert max(sim.latencies) <= 0.1 * 60.5 + TOL
    assert_within_limits([t for t, _, _ in sim.sends], 120)
    # today's limiter, the same 310 sends: the bulk does not lose its pace
    _, plain = build(limiter="window", urgent=0, name="plain.db")
    assert finished <= plain.drain(310) * 1.05


def test_without_room_the_urgent_waits_for_the_window(build):
    """The failure the room fixes: today's window lets 120 out at once, then nothing."""
    _, sim = build(limiter="window", urgent_share=0.0, at=20.0)
    sim.drain(300)
    assert max(sim.latencies) > 30


@pytest.mark.parametrize("at", [0.5, 20.0, 45.0, 90.0])
def test_bucket_keeps_half_the_share_standing_and_gives_the_urgent_every_new_token(build, at):
    _, sim = build(limiter="bucket", urgent_share=0.1, at=at)
    finished = sim.drain(300)
    assert len(sim.latencies) == 10
    # 5 of 119 tokens stand; the other 5 come at the refill rate of ~1.98/s
    assert max(sim.latencies) <= 5 / (120 / 60 * 0.99) + TOL
    assert sorted(sim.latencies)[:5] == [0.0] * 5
    assert_within_limits([t for t, _, _ in sim.sends], 120, "bucket")
    _, plain = build(limiter="bucket", urgent=0, name="plain.db")
    assert finished <= plain.drain(310) * 1.05


@pytest.mark.parametrize("limiter", ["window", "bucket"])
def test_several_keys_and_the_workspace_keep_room_and_stay_within_both_readings(build, limiter):
    fps = ("aaaa1111", "bbbb2222", "cccc3333")
    _, sim = build(
        limiter=limiter,
        urgent_share=0.1,
        keys=fps,
        limits={"read": 300, "write": 60},
        workspace_limits={"write": 120},
        at=30.0,
    )
    sim.drain(400)
    assert max(sim.latencies) <= 0.1 * 60.5 + TOL
    for fp in fps:
        assert_within_limits([t for t, k, _ in sim.sends if k == fp], 60, limiter)
    assert_within_limits([t for t, _, _ in sim.sends], 120, limiter)


def test_a_process_that_hears_no_urgent_keeps_no_room_and_fills_its_last_window(build):
    """Issue 41: 300 sends at 100 a minute against a fixed-window server take three
    windows when no urgent key can come (a plain sync); kept at all times, the room
    costs a fourth."""
    limits = {"read": 300, "write": 100}
    _, deaf = build(limiter="window", urgent_share=0.1, urgent=0, hears_urgent=False, limits=limits)
    finished = deaf.drain(300)
    assert finished == pytest.approx(2 * 60.5), "N at once, then N per window: three windows"
    assert_within_limits([t for t, _, _ in deaf.sends], 100)
    _, hearing = build(limiter="window", urgent_share=0.1, urgent=0, name="h.db", limits=limits)
    assert hearing.drain(300) > 170, "the room kept at all times: a window more"


@pytest.mark.parametrize("limiter", ["window", "bucket"])
def test_an_urgent_send_makes_a_deaf_process_keep_room_for_a_window(build, limiter):
    """The room follows demand: the first urgent send of a process that hears no hooks is
    first in line, the next ones find the room kept for them."""
    budget, sim = build(limiter=limiter, urgent_share=0.1, urgent=0, hears_urgent=False)
    capacity = 120 if limiter == "window" else 119
    for _ in range(capacity):  # the whole window or bucket: no room kept
        budget.acquire("write")
    assert sim.clock.now == START
    budget.acquire("write", urgent=True)  # handed over by another shell: waits its turn
    assert sim.clock.now > START
    for _ in range(40):
        budget.acquire("write")  # the backlog again: it now leaves the room
    assert budget.snapshot()["write"]["available"] >= (12 if limiter == "window" else 5)
    sim.clock.now += 2 * 60.5  # long after the last urgent send: the room is given back
    later = sim.clock.now
    for _ in range(capacity):
        budget.acquire("write")
    assert sim.clock.now == later, "the whole window or bucket at once again"
    assert budget.snapshot()["write"]["available"] < 1


def test_a_thread_marked_urgent_uses_the_room(build):
    budget, sim = build(limiter="window", urgent_share=0.1, urgent=0)
    for _ in range(108):  # the backlog's share of the window
        budget.acquire("write")
    assert budget.snapshot()["write"]["available"] == 12
    with priority.urgent():
        assert priority.is_urgent()
        for _ in range(12):
            budget.acquire("write")
    assert not priority.is_urgent()
    assert sim.clock.now == START  # all 120 went at once: the last 12 as urgent


def test_urgent_sends_waiting_hold_the_backlog_back(build):
    """While an urgent send of this process waits, a non-urgent one leaves it a slot."""
    budget, sim = build(limiter="bucket", urgent_share=0.0, urgent=0)
    for _ in range(119):
        budget.acquire("write")
    budget._count_waiting(+1)  # a lane's thread in its wait
    before = sim.clock.now
    budget.acquire("write")  # must leave the next token to the waiting urgent send
    assert sim.clock.now - before == pytest.approx(2 / (120 / 60 * 0.99))
    budget._count_waiting(-1)


def test_from_settings_keeps_a_tenth_by_default(tmp_path: Path):
    clock = FakeClock(START)
    with Budget.from_settings(
        BudgetSettings(),
        BudgetBook(lambda: open_state(tmp_path / "s.db")),
        clock=clock,
        wait=clock.wait,
    ) as budget:
        for _ in range(54):  # 60 per minute: 6 kept
            budget.acquire("write")
        assert clock.now == START
        budget.acquire("write")
        assert clock.now > START
    with pytest.raises(ValueError):
        BudgetSettings(urgent_share=0.9)


def test_a_waiting_write_whose_mark_is_raised_takes_the_room_at_its_next_look(build):
    """A backlog write of a product the lane wants is hastened while it waits."""
    budget, sim = build(limiter="window", urgent_share=0.1, urgent=0)
    for _ in range(108):
        budget.acquire("write")
    mark = priority.Mark()
    looks: list[float] = []

    def wait(seconds: float, stop: threading.Event | None = None) -> None:
        looks.append(seconds)
        mark.raise_()  # the lane asks for this product meanwhile
        sim.clock.now += seconds

    budget._wait = wait
    with priority.marked(mark):
        budget.acquire("write")
    assert len(looks) == 1, "one wait, then the room kept for the urgent"


class CountingBook(BudgetBook):
    """The state's budget book, counting its transactions."""

    transactions = 0

    def transact(self, body: Callable[..., T], **kw: Any) -> T:
        self.transactions += 1
        return super().transact(body, **kw)


def test_a_marked_backlog_write_waits_on_its_mark_not_on_the_ledger(tmp_path: Path):
    """Issue 40 item 14: a waiting backlog write looked at the ledger twice a second, each
    time a write transaction; it waits on its mark's condition now, in real time."""
    book = CountingBook(lambda: open_state(tmp_path / "state.db"))
    with Budget(book, limits={"read": 300, "write": 120}, urgent_share=0.1) as budget:
        for _ in range(108):  # the backlog's share of the window: the next waits ~54 s
            budget.acquire("write")
        mark, done = priority.Mark(), threading.Event()

        def backlog_write() -> None:
            budget.acquire("write")
            done.set()

        waiting = threading.Thread(target=priority.with_mark(backlog_write, mark))
        before = book.transactions
        waiting.start()
        assert not done.wait(1.5), "a backlog write waits its turn"
        assert book.transactions - before == 1, "one look, then a wait on the mark alone"
        mark.raise_()  # the lane wants this product: it goes at once, in the room kept
        assert done.wait(5)
        waiting.join()
        assert book.transactions - before == 2


def test_a_marked_backlog_write_gives_up_when_its_mark_is_woken_on_a_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Issue 41: a waiting backlog write no longer looks at the stop four times a second;
    whoever stops the writes wakes its mark, and it gives up at once. The backstop is an
    hour here, so only the wake can end the wait."""
    monkeypatch.setattr(budget_module, "STOP_LOOK_S", 3600.0)
    book = CountingBook(lambda: open_state(tmp_path / "state.db"))
    with Budget(book, limits={"read": 300, "write": 120}, urgent_share=0.1) as budget:
        for _ in range(108):
            budget.acquire("write")
        mark, stop = priority.Mark(), threading.Event()
        waiting_now, outcome = threading.Event(), []
        budget.on_wait = lambda _key, _seconds: waiting_now.set()

        def backlog_write() -> None:
            try:
                budget.acquire("write", stop=stop)
                outcome.append("sent")
            except errors.Interrupted:
                outcome.append("gave up")

        waiting = threading.Thread(target=priority.with_mark(backlog_write, mark))
        waiting.start()
        assert waiting_now.wait(10)
        before = book.transactions
        mark.wake()  # woken, but no stop: a wake is spent, the write goes on waiting
        waiting.join(1.0)
        assert waiting.is_alive() and outcome == [], "a wake alone does not send it"
        assert book.transactions - before == 1, "it looked once more, then waits again"
        stop.set()
        mark.wake()
        waiting.join(30)
        assert not waiting.is_alive() and outcome == ["gave up"]
        assert not mark.urgent, "a wake is not a raise"
