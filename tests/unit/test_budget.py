"""Budgets: sliding window, token bucket, penalties, sharing across instances and processes.

Every test but the subprocess one runs on a fake clock whose ``wait`` advances it,
so minutes of budget time take milliseconds and nothing depends on timing.
"""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from skuferry.config.load import BudgetSettings
from skuferry.errors import Interrupted
from skuferry.remote.budget import Budget

START = 1_700_000_000.0
TOL = 1e-6


class FakeClock:
    def __init__(self, now: float = START) -> None:
        self.now = now
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    def wait(self, seconds: float, stop: threading.Event | None) -> None:
        assert seconds > 0
        self.waits.append(seconds)
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


@pytest.fixture
def make(state: Path, clock: FakeClock) -> Iterator[Callable[..., Budget]]:
    opened: list[Budget] = []

    def factory(**kw: object) -> Budget:
        kw.setdefault("limits", {"read": 60, "write": 60})
        kw.setdefault("wait", clock.wait)
        b = Budget(state, clock=clock, **kw)  # type: ignore[arg-type]
        opened.append(b)
        return b

    yield factory
    for b in opened:
        b.close()


def max_in_window(times: list[float], width: float) -> int:
    """Most sends in any half-open window [t, t + width): windows starting at a send suffice."""
    best = 0
    j = 0
    for i, t in enumerate(times):
        j = max(j, i)
        while j < len(times) and times[j] < t + width - TOL:
            j += 1
        best = max(best, j - i)
    return best


def drive(b: Budget, clock: FakeClock, tier: str, seconds: float, seed: int) -> list[float]:
    """Acquire for `seconds` of fake time, with random idle gaps between some requests."""
    rng = random.Random(seed)
    end = clock.now + seconds
    sent: list[float] = []
    while clock.now < end:
        b.acquire(tier)
        sent.append(clock.now)
        if rng.random() < 0.2:
            clock.now += rng.uniform(0, 3)
    return sent


# -- sliding window --------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_window_never_exceeds_allowance_in_any_window(make, clock: FakeClock, state: Path, seed):
    b = make(limits={"read": 60})
    allowance, width = 59, 60.5  # floor(60 * 0.99), 60 s + 0.5 s skew
    sent = drive(b, clock, "read", 180, seed)

    assert max_in_window(sent, width) == allowance
    # ...and the budget is used: one more send fits as soon as the oldest ages out.
    assert max_in_window(sent, width + 0.01) > allowance
    # old sends are pruned, so the log never grows beyond one window
    with sqlite3.connect(state) as conn:
        rows = conn.execute("SELECT count(*) FROM budget_sends").fetchone()[0]
    conn.close()
    assert rows <= allowance


def test_window_burst_then_waits_exactly_until_oldest_ages_out(make, clock: FakeClock):
    b = make(limits={"write": 1200})
    for _ in range(1188):
        b.acquire("write")
    assert clock.now == START  # the whole allowance at once
    b.acquire("write")
    assert clock.now == pytest.approx(START + 60.5, abs=0.002)
    assert clock.now >= START + 60.5


# -- token bucket ----------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_bucket_burst_then_refill_rate(make, clock: FakeClock, seed):
    b = make(limits={"write": 60}, limiter="bucket")
    capacity, rate = 59, 0.99  # floor(60 - 1 * 0.5); 1/s * 0.99
    for _ in range(capacity):
        b.acquire("write")
    assert clock.now == START
    sent = [START] * capacity + drive(b, clock, "write", 180, seed)

    for i in range(len(sent)):
        for j in range(i, len(sent)):
            assert j - i + 1 <= capacity + rate * (sent[j] - sent[i]) + TOL
    # and the refill rate is used, not left idle (bar the random gaps' idle capacity)
    elapsed = sent[-1] - START
    assert len(sent) - capacity >= rate * elapsed - capacity - 2


def test_bucket_first_sync_numbers(make, clock: FakeClock):
    b = make(limits={"write": 1200}, limiter="bucket")
    for _ in range(1800):
        b.acquire("write")
    # 1190 at once, 610 more at 19.8/s: ~30.8 s, within 1.05 x the server's 30 s
    assert 30.0 < clock.now - START < 31.5


def test_idle_bucket_never_overfills(make, clock: FakeClock):
    b = make(limits={"write": 60}, limiter="bucket")
    b.acquire("write")
    clock.now += 600  # ten idle minutes refill far more than the capacity
    assert b.snapshot()["write"]["available"] == 59
    for _ in range(59):
        b.acquire("write")
    assert clock.now == START + 600
    b.acquire("write")
    assert clock.now > START + 600


def test_restart_does_not_refill(make, clock: FakeClock):
    first = make(limits={"write": 60}, limiter="bucket")
    for _ in range(59):
        first.acquire("write")
    first.close()
    second = make(limits={"write": 60}, limiter="bucket")
    assert second.snapshot()["write"]["available"] == 0
    second.acquire("write")
    assert clock.now >= START + 1 / 0.99
    clock.now += 10
    assert second.snapshot()["write"]["available"] == pytest.approx(9.9, abs=0.01)


def test_window_restart_keeps_the_send_log(make, clock: FakeClock):
    first = make(limits={"write": 60})
    for _ in range(59):
        first.acquire("write")
    first.close()
    second = make(limits={"write": 60})
    second.acquire("write")
    assert clock.now >= START + 60.5


def test_lowered_limit_is_clamped(make, clock: FakeClock):
    big = make(limits={"write": 120}, limiter="bucket")
    big.acquire("write")  # persists a bucket of 118 left of 119
    big.close()
    small = make(limits={"write": 60}, limiter="bucket")
    assert small.snapshot()["write"]["available"] == 59
    for _ in range(59):
        small.acquire("write")
    assert clock.now == START
    small.acquire("write")
    assert clock.now > START


# -- penalties, egress, interruption ---------------------------------------------------


@pytest.mark.parametrize("limiter", ["window", "bucket"])
def test_penalize_blocks_the_tier_for_every_instance(make, clock: FakeClock, limiter):
    a = make(limiter=limiter)
    b = make(limiter=limiter)
    a.penalize("write", 10)
    assert b.snapshot()["write"]["blocked_until"] == pytest.approx(START + 10.1)
    assert b.snapshot()["write"]["available"] == 0

    b.acquire("read")  # other tiers are not blocked
    assert clock.now == START
    b.acquire("write")
    assert clock.now >= START + 10.1
    if limiter == "bucket":  # empty when the block lifts: one refill interval more
        assert clock.now == pytest.approx(START + 10.1 + 1 / 0.99, abs=0.002)
    else:
        assert clock.now == pytest.approx(START + 10.1, abs=0.002)


def test_penalize_never_shortens_a_longer_block(make, clock: FakeClock):
    b = make()
    b.penalize("write", 30)
    b.penalize("write", 5)
    b.acquire("write")
    assert clock.now >= START + 30.1


def test_egress_is_charged_for_every_request(make, clock: FakeClock):
    b = make(limits={"read": 300, "write": 60}, egress_per_minute=5)
    for tier in ("read", "write", "read", "write"):  # egress allowance floor(5 * 0.99) = 4
        b.acquire(tier)
    snap = b.snapshot()
    assert snap["egress"]["available"] == 0
    assert snap["read"]["available"] == 297 - 2
    assert snap["write"]["available"] == 59 - 2
    assert clock.now == START
    b.acquire("read")
    assert clock.now >= START + 60.5
    # the read that waited for egress was charged once, on both tiers
    assert b.snapshot()["read"]["available"] == 297 - 1  # the first two aged out too


def test_egress_waiting_charges_nothing_else(make, clock: FakeClock):
    b = make(limits={"read": 300}, egress_per_minute=1)
    b.acquire("read")
    stop = threading.Event()

    def interrupting_wait(seconds: float, ev: threading.Event | None) -> None:
        assert ev is stop
        stop.set()

    b._wait = interrupting_wait  # the stop arrives while waiting for egress
    with pytest.raises(Interrupted):
        b.acquire("read", stop=stop)
    assert b.snapshot()["read"]["available"] == 297 - 1


def test_interrupted_wait_raises(make, clock: FakeClock):
    stop = threading.Event()
    seen: list[threading.Event | None] = []

    def wait(seconds: float, ev: threading.Event | None) -> None:
        seen.append(ev)
        stop.set()  # SIGTERM arrives during the sleep

    b = make(limits={"write": 1}, wait=wait)
    b.acquire("write", stop=stop)  # available: goes at once
    with pytest.raises(Interrupted):
        b.acquire("write", stop=stop)
    assert seen == [stop]
    with pytest.raises(Interrupted):  # already stopping: no wait is even started
        b.acquire("write", stop=stop)
    assert seen == [stop]


def test_unknown_tier_is_a_programming_error(make):
    with pytest.raises(ValueError, match="expensive"):
        make().acquire("expensive")


def test_from_settings(state: Path, clock: FakeClock):
    settings = BudgetSettings(
        read_per_minute=120,
        write_per_minute=30,
        egress_per_minute=20,
        limiter="bucket",
        safety_margin=0.0,
        clock_skew_s=0.0,
    )
    with Budget.from_settings(settings, state, clock=clock, wait=clock.wait) as b:
        snap = b.snapshot()
    assert {t: v["capacity"] for t, v in snap.items()} == {"read": 120, "write": 30, "egress": 20}


def test_logs_long_waits_and_blocks(make, clock: FakeClock):
    b = make(limits={"write": 1})
    with capture_logs() as events:
        b.acquire("write")
        b.penalize("write", 3)
        b.acquire("write")
    names = [(e["event"], e["log_level"]) for e in events]
    assert ("budget.blocked", "info") in names
    waits = [e for e in events if e["event"] == "budget.wait"]
    assert waits and waits[0]["log_level"] == "debug" and waits[0]["tier"] == "write"
    assert waits[0]["seconds"] >= 1


# -- concurrency -------------------------------------------------------------------------


def test_locked_state_is_retried(make, clock: FakeClock, state: Path):
    b = make()
    blocker = sqlite3.connect(state, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    retries: list[float] = []

    def wait(seconds: float, stop: threading.Event | None) -> None:
        retries.append(seconds)
        if blocker.in_transaction:
            blocker.execute("COMMIT")  # the other process finishes its transaction

    b._wait = wait
    b._conn.execute("PRAGMA busy_timeout = 10")
    b.acquire("write")
    blocker.close()
    assert retries  # it hit the lock, backed off, and got through
    assert b.snapshot()["write"]["available"] == 58


def test_threads_share_one_instance(state: Path):
    with Budget(state, limits={"write": 1000}) as b:  # real clock; 400 < 990: nobody waits

        def worker() -> None:
            for _ in range(50):
                b.acquire("write")

        threads = [threading.Thread(target=worker) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert b.snapshot()["write"]["available"] == 990 - 400


CHILD = textwrap.dedent(
    """
    import sys, threading, time
    from pathlib import Path
    from skuferry import logs
    from skuferry.remote.budget import Budget
    from skuferry.errors import Interrupted

    logs.configure(level="warning", stream=sys.stderr)  # stdout carries only timestamps

    state, start = Path(sys.argv[1]), float(sys.argv[2])
    time.sleep(max(0.0, start - time.time()))
    stop = threading.Event()
    timer = threading.Timer(3.0, stop.set)
    timer.start()
    with Budget(state, limits={"read": 20}) as budget:
        try:
            while True:
                budget.acquire("read", stop=stop)
                print(time.time(), flush=True)
                time.sleep(0.05)
        except Interrupted:
            pass
    timer.cancel()
    """
)


def test_two_processes_share_one_window(state: Path):
    Budget(state, limits={"read": 20}).close()  # create and migrate the file first
    start = time.time() + 1.5  # both start spending together
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(state), repr(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        outputs.append([float(line) for line in out.split()])

    counts = [len(o) for o in outputs]
    assert all(c > 0 for c in counts), counts  # both made progress
    allowance = 19  # floor(20 * 0.99); alone, each would have sent 19 in 3 s
    assert sum(counts) <= allowance, counts
    assert max_in_window(sorted(outputs[0] + outputs[1]), 60.5) <= allowance
