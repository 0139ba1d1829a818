"""Per-tier request budgets, shared by every process and thread that uses one state file.

The CMS limits each tier (read, write, egress, ...) per minute, per key. The daemon,
a cron run and the writer threads of one run all spend the same key, so the budget
lives in the state file, not in memory: every ``acquire`` is one short
``BEGIN IMMEDIATE`` transaction (read, decide, charge, commit) and any waiting
happens outside it. Times are wall-clock (``time.time``) because monotonic clocks
are not comparable between processes.

Two limiters, chosen by ``[budget] limiter``:

``window`` (default)
    At most ``M = floor(N * (1 - safety_margin))`` sends of a tier in any sliding
    window of ``60 + clock_skew_s`` seconds, kept as a send log (``budget_sends``)
    pruned as it ages. Safe whether the server counts a token bucket or fixed windows.
``bucket``
    Capacity ``C = floor(N - N/60 * clock_skew_s)``, refilled at
    ``N/60 * (1 - safety_margin)`` per second; a new bucket starts full, and the
    persisted ``(tokens, updated_at)`` means a restart does not refill it.

A 429 ``RATE_LIMITED`` (``penalize``) blocks the tier for every process until
``Retry-After`` (plus a small guard) has passed; a bucket is empty at that moment.
"""

from __future__ import annotations

import math
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

from skuferry import logs
from skuferry.config.load import BudgetSettings
from skuferry.errors import Interrupted, StateError
from skuferry.state.schema import open_state

log = logs.get(__name__)

EGRESS = "egress"
WINDOW_S = 60.0  # the server's limits are per minute
PENALTY_GUARD_S = 0.1  # Retry-After is whole seconds, counted by the server's clock
_MIN_WAIT_S = 0.001  # float rounding can leave a hair of shortfall: never spin on it
_LOG_WAIT_FROM_S = 1.0
_BUSY_TIMEOUT_MS = 2000  # per attempt; between attempts a stop request is honoured
_LOCK_ATTEMPTS = 15
_EPS = 1e-9  # 1200 * 0.99 must floor to 1188, not 1187

Wait = Callable[[float, threading.Event | None], None]
T = TypeVar("T")


def window_allowance(per_minute: int, safety_margin: float) -> int:
    """Sends allowed in one sliding window of ``60 + clock_skew_s`` seconds."""
    return max(1, math.floor(per_minute * (1 - safety_margin) + _EPS))


def bucket_capacity(per_minute: int, clock_skew_s: float) -> int:
    """Bucket size: the server's, less what it refills during our clock uncertainty."""
    return max(1, math.floor(per_minute - per_minute / WINDOW_S * clock_skew_s + _EPS))


def bucket_rate(per_minute: int, safety_margin: float) -> float:
    """Tokens per second."""
    return per_minute / WINDOW_S * (1 - safety_margin)


def refill(
    tokens: float, updated_at: float, now: float, *, capacity: int, rate: float
) -> tuple[float, float]:
    """The bucket at ``now``: ``(tokens, as_of)``, clamped to ``capacity``.

    A stamp in the future (a penalty, or another process's clock running ahead)
    earns nothing until it is reached, and is kept so the time is not counted twice.
    """
    if now > updated_at:
        return min(capacity, tokens + (now - updated_at) * rate), now
    return min(float(capacity), tokens), updated_at


def _default_wait(seconds: float, stop: threading.Event | None) -> None:
    if stop is not None:
        stop.wait(seconds)
    else:
        time.sleep(seconds)


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


class Budget:
    """Per-tier request budgets in the state file at ``state_path``; see the module docs."""

    def __init__(
        self,
        state_path: Path,
        *,
        limits: Mapping[str, int],
        limiter: Literal["window", "bucket"] = "window",
        egress_per_minute: int | None = None,
        safety_margin: float = 0.01,
        clock_skew_s: float = 0.5,
        clock: Callable[[], float] = time.time,
        wait: Wait | None = None,
    ) -> None:
        per_minute = dict(limits)
        if egress_per_minute is not None:
            per_minute[EGRESS] = egress_per_minute
        if any(n < 1 for n in per_minute.values()):
            raise ValueError(f"every per-minute limit must be at least 1: {per_minute}")
        if not 0 <= safety_margin < 1 or clock_skew_s < 0:
            raise ValueError("safety_margin must be in [0, 1) and clock_skew_s >= 0")
        if limiter not in ("window", "bucket"):
            raise ValueError(f"unknown limiter {limiter!r}")
        self._per_minute = per_minute
        self._limiter = limiter
        self._charge_egress = egress_per_minute is not None
        self._window_s = WINDOW_S + clock_skew_s
        self._allowance = {t: window_allowance(n, safety_margin) for t, n in per_minute.items()}
        self._capacity = {t: bucket_capacity(n, clock_skew_s) for t, n in per_minute.items()}
        self._rate = {t: bucket_rate(n, safety_margin) for t, n in per_minute.items()}
        self._clock = clock
        self._wait = wait if wait is not None else _default_wait
        self._lock = threading.Lock()  # one connection, shared by the writer threads
        self._closed = False
        self._conn = open_state(state_path)
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            # Budget rows need no fsync per commit (up to ~20/s): losing the last ones
            # to a power cut costs at most a slightly early send after reboot.
            self._conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as exc:
            self._conn.close()
            raise StateError(f"cannot prepare the budget state in {state_path}: {exc}") from exc

    @classmethod
    def from_settings(cls, settings: BudgetSettings, state_path: Path, **kw: Any) -> Budget:
        """A budget for the configured read/write (and egress) limits; ``kw`` as ``__init__``."""
        return cls(
            state_path,
            limits={"read": settings.read_per_minute, "write": settings.write_per_minute},
            limiter=settings.limiter,
            egress_per_minute=settings.egress_per_minute,
            safety_margin=settings.safety_margin,
            clock_skew_s=settings.clock_skew_s,
            **kw,
        )

    def __enter__(self) -> Budget:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- the public operations -------------------------------------------------------

    def acquire(self, tier: str, *, stop: threading.Event | None = None) -> None:
        """Block until one request of ``tier`` may be sent, then charge it (and egress).

        Raises ``Interrupted`` when ``stop`` is set while a wait is due; nothing is
        charged then. When the budget allows a send right away, it is charged even
        if ``stop`` is set: the caller decides whether to start new work.
        """
        tiers = self._tiers_for(tier)
        while True:
            seconds, blocker = self._transact(lambda conn: self._try_charge(conn, tiers), stop)
            if seconds <= 0:
                return
            if stop is not None and stop.is_set():
                raise Interrupted(f"stopped while waiting for the {blocker} budget")
            if seconds >= _LOG_WAIT_FROM_S:
                log.debug("budget.wait", tier=blocker, seconds=round(seconds, 3))
            self._wait(seconds, stop)
            if stop is not None and stop.is_set():
                raise Interrupted(f"stopped while waiting for the {blocker} budget")

    def penalize(self, tier: str, seconds: float) -> None:
        """After a 429: nobody sharing the state sends ``tier`` until now + seconds + guard."""

        def apply(conn: sqlite3.Connection) -> float:
            now = self._clock()
            until = now + max(0.0, seconds) + PENALTY_GUARD_S
            row = self._row(conn, tier)
            tokens, updated_at, blocked_until = row if row else (0.0, now, 0.0)
            if self._limiter == "bucket":
                # The server's bucket is empty when the block lifts, and refills from there.
                tokens, updated_at = 0.0, max(until, updated_at)
            conn.execute(
                "INSERT INTO budget_bucket (tier, tokens, updated_at, blocked_until) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (tier) DO UPDATE SET tokens = excluded.tokens, "
                "updated_at = excluded.updated_at, blocked_until = excluded.blocked_until",
                (tier, tokens, updated_at, max(until, blocked_until)),
            )
            return until

        until = self._transact(apply, None)
        log.info("budget.blocked", tier=tier, seconds=seconds, until=round(until, 3))

    def snapshot(self) -> dict[str, dict[str, float]]:
        """Per tier: ``available`` now (0 while blocked), ``capacity``, ``per_minute``,
        ``blocked_until`` (epoch seconds, 0 when never blocked)."""

        def read(conn: sqlite3.Connection) -> dict[str, dict[str, float]]:
            now = self._clock()
            out: dict[str, dict[str, float]] = {}
            for tier, per_minute in self._per_minute.items():
                row = self._row(conn, tier)
                blocked_until = row[2] if row else 0.0
                if self._limiter == "window":
                    capacity = float(self._allowance[tier])
                    available = capacity - self._sends_in_window(conn, tier, now)
                else:
                    capacity = float(self._capacity[tier])
                    available = self._bucket_at(row, tier, now)[0]
                if blocked_until > now:
                    available = 0.0
                out[tier] = {
                    "available": max(0.0, available),
                    "capacity": capacity,
                    "per_minute": float(per_minute),
                    "blocked_until": blocked_until,
                }
            return out

        return self._transact(read, None, begin="BEGIN")

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()

    # -- one decision, inside one transaction ----------------------------------------

    def _tiers_for(self, tier: str) -> tuple[str, ...]:
        if tier not in self._per_minute:
            raise ValueError(f"no budget configured for tier {tier!r}")
        if self._charge_egress and tier != EGRESS:
            return (tier, EGRESS)
        return (tier,)

    def _try_charge(self, conn: sqlite3.Connection, tiers: tuple[str, ...]) -> tuple[float, str]:
        """Charge every tier and return ``(0, tier)``, or charge nothing and return how
        long to wait and for which tier. All-or-nothing, so egress is never spent on a
        request that did not go."""
        now = self._clock()
        rows = {t: self._row(conn, t) for t in tiers}
        waits: dict[str, float] = {}
        for t in tiers:
            row = rows[t]
            blocked = (row[2] - now) if row else 0.0
            if self._limiter == "window":
                waits[t] = max(blocked, self._window_wait(conn, t, now))
            else:
                tokens, as_of = self._bucket_at(row, t, now)
                short = (as_of - now) + (1 - tokens) / self._rate[t] if tokens < 1 else 0.0
                waits[t] = max(blocked, short)
        blocker = max(tiers, key=lambda t: waits[t])
        if waits[blocker] > 0:
            return max(waits[blocker], _MIN_WAIT_S), blocker
        for t in tiers:
            if self._limiter == "window":
                conn.execute("INSERT INTO budget_sends (tier, ts) VALUES (?, ?)", (t, now))
            else:
                tokens, as_of = self._bucket_at(rows[t], t, now)
                conn.execute(
                    "INSERT INTO budget_bucket (tier, tokens, updated_at) VALUES (?, ?, ?) "
                    "ON CONFLICT (tier) DO UPDATE SET tokens = excluded.tokens, "
                    "updated_at = excluded.updated_at",
                    (t, tokens - 1, as_of),
                )
        return 0.0, tiers[0]

    def _row(self, conn: sqlite3.Connection, tier: str) -> tuple[float, float, float] | None:
        row = conn.execute(
            "SELECT tokens, updated_at, blocked_until FROM budget_bucket WHERE tier = ?", (tier,)
        ).fetchone()
        return (float(row[0]), float(row[1]), float(row[2])) if row else None

    def _bucket_at(
        self, row: tuple[float, float, float] | None, tier: str, now: float
    ) -> tuple[float, float]:
        capacity = self._capacity[tier]
        if row is None:  # a brand-new bucket starts full
            return float(capacity), now
        return refill(row[0], row[1], now, capacity=capacity, rate=self._rate[tier])

    def _sends_in_window(self, conn: sqlite3.Connection, tier: str, now: float) -> int:
        # A send at ts counts while now < ts + window; index range (tier, ts).
        count: int = conn.execute(
            "SELECT count(*) FROM budget_sends WHERE tier = ? AND ts > ?",
            (tier, now - self._window_s),
        ).fetchone()[0]
        return count

    def _window_wait(self, conn: sqlite3.Connection, tier: str, now: float) -> float:
        """Seconds until one more send fits the window (0: now); prunes aged sends."""
        cutoff = now - self._window_s
        conn.execute("DELETE FROM budget_sends WHERE tier = ? AND ts <= ?", (tier, cutoff))
        count = self._sends_in_window(conn, tier, now)
        over = count - self._allowance[tier]
        if over < 0:
            return 0.0
        # The oldest `over + 1` sends must age out; the last of them decides.
        (ts,) = conn.execute(
            "SELECT ts FROM budget_sends WHERE tier = ? AND ts > ? ORDER BY ts LIMIT 1 OFFSET ?",
            (tier, cutoff, over),
        ).fetchone()
        return float(ts) + self._window_s - now

    # -- the transaction and its retries ---------------------------------------------

    def _transact(
        self,
        body: Callable[[sqlite3.Connection], T],
        stop: threading.Event | None,
        *,
        begin: str = "BEGIN IMMEDIATE",
    ) -> T:
        """Run ``body`` in one transaction; retry while another process holds the lock."""
        last: sqlite3.OperationalError | None = None
        for attempt in range(_LOCK_ATTEMPTS):
            with self._lock:
                try:
                    return self._run_once(body, begin)
                except sqlite3.OperationalError as exc:
                    if not _is_busy(exc):
                        raise StateError(f"budget state failed: {exc}") from exc
                    last = exc
                except sqlite3.Error as exc:
                    raise StateError(f"budget state failed: {exc}") from exc
            if stop is not None and stop.is_set():
                raise Interrupted("stopped while the budget state was locked")
            self._wait(min(0.05 * 2**attempt, 1.0), stop)
        raise StateError(f"budget state stayed locked by another process: {last}")

    def _run_once(self, body: Callable[[sqlite3.Connection], T], begin: str) -> T:
        conn = self._conn
        conn.execute(begin)
        try:
            result = body(conn)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return result
