"""Request budgets per key and per workspace, shared by every process that uses one state file.

The CMS limits each tier (read, write, egress, ...) per minute, **per key and per
workspace** (spec §8). The daemon, a cron run and the writer threads of one run
all spend the same keys, so the budget's ledger lives in the state file, not in
memory: this module decides, and a ``BudgetStore`` (the state's budget book, handed
in by the sync) keeps the rows. Every ``acquire`` is one short write transaction of
that store (read, choose a key, charge, commit) and any waiting happens outside it.
Times are wall-clock (``time.time``) because monotonic clocks are not comparable
between processes.

Scopes (the ledger's buckets and logs of sends): with one key, the bare
tier (``write``), as before several keys existed; with several, ``write@<fp>``
per key (``fp``: the key's fingerprint, never the key) and ``write@workspace``
for all of them together. The workspace scope is charged only when its cap is
below the sum of the keys' limits, so it can bind.

Two limiters, chosen by ``[budget] limiter``:

``window`` (default)
    At most N sends of a scope in any sliding window of ``60 + clock_skew_s``
    seconds, kept as a send log pruned as it ages. The margin is in time, not in
    count: N per 60.5 s never puts more than N into any 60 s, which is what a
    fixed-window server and a token bucket of capacity N both allow.
``bucket``
    Capacity ``C = floor(N - N/60 * clock_skew_s)``, refilled at
    ``N/60 * (1 - safety_margin)`` per second; a new bucket starts full, and the
    persisted ``(tokens, updated_at)`` means a restart does not refill it.

``acquire`` picks, among the keys whose every scope allows a send now, the one
with the most left (so the keys share the work evenly), skipping blocked keys.

Room for the urgent (``[budget] urgent_share``, default 0.1). Sends are urgent or
not (a mark on the thread: the writer marks the threads of the urgent lane). An
urgent send obeys the limits above and nothing else; a non-urgent one must also
leave room for it, so a backlog never takes the whole window or bucket:

``window``
    A scope keeps ``R = floor(share * N)`` slots for the urgent, released again
    ``X = share * window`` seconds later: a non-urgent send at ``t`` is allowed
    when the sends in ``(t - (window - X), t]`` leave ``R`` free, i.e. the window
    as it will be ``X`` seconds from now still has room for ``R`` urgent sends.
    Any ``window - X`` seconds then hold at most ``N - R`` non-urgent sends, and
    ``(N - R) / (window - X) = N / window``: the bulk keeps its pace, and ``R``
    urgent sends find room within ``X`` of being queued (a few seconds).
``bucket``
    A non-urgent send leaves ``floor(share * C / 2)`` tokens in the bucket; the
    urgent sends get those at once, and every new token first while they wait
    (the refill gives the other half of the share within ``X``).

In both, while urgent sends of this process wait, a non-urgent one also leaves
one slot (token) per waiting urgent send. The urgent obey exactly today's limits,
and the others stricter ones, so neither reading of the limits sees more.

The room is kept only while it can matter (``hears_urgent``, ``_keeps_room``): in a
process that hears urgent keys at any moment (a daemon's hooks or watched files), while
urgent sends wait, and for one window after an urgent send asked for a token (keys
another shell handed over: a second one is likely soon). Otherwise the backlog has the
whole window. Kept at all times, the room costs a backlog that fills its last window
exactly one window more (300 sends at 100 a minute: 90 go at once, the 10 kept go in
the window's last seconds, and each later window starts that much later: 176 s where
three windows take 122 s). Under a sliding window no release can win that back: the
n-th send comes at least one window after the (n - N)-th, so N sends must all go within
seconds of the start for the three windows to suffice, and then no room is left for an
urgent write until the first window is over. A process that cannot hear an urgent key
therefore keeps none until one shows up; its first urgent write is first in line (the
backlog leaves it the next free slot) but may wait for the window.

Tokens ahead (a lease). A decision that finds its scopes far from their limits charges
up to ``LEASE`` sends at once (at most a quarter of the room left after the room kept
for the urgent, and no more than the rate allows in ``LEASE_S``: none below 240 a
minute), and this process spends them without another transaction for ``LEASE_S``
seconds; those not spent by then are lost (at most a quarter second's budget), never
handed back. The sends a
lease charges are logged ``LEASE_S`` in the future, when the last of them may leave at
the latest, so each stays in the log at least as long as it stays in the server's
window: the limits hold as before, and a budget raised out of the way costs one
transaction per lease, not one per request. A 429 ends the leases.

A 429 ``RATE_LIMITED`` (``penalize``) blocks that key's tier for every process
until ``Retry-After`` (plus a small guard) has passed. When another key of the
tier is still blocked, the workspace is what refused: the workspace tier is
blocked too. The first 429 of an episode also teaches a pace (AIMD, ``pace.learn``):
a smaller burst or rate for that key and tier, kept in ``meta`` and enforced as
one more bucket (``<scope>~pace``) until it has grown back.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from typing import Any, Literal

from skuferry import logs
from skuferry.config.schema import BudgetSettings
from skuferry.errors import Interrupted
from skuferry.remote import pace as pacing
from skuferry.remote import priority
from skuferry.remote.budgetstore import Bucket, BudgetRows, BudgetStore
from skuferry.remote.pace import Pace
from skuferry.remote.scopes import (
    EGRESS,
    PACE_META,
    WINDOW_S,
    Scope,
    bucket_capacity,
    bucket_rate,
    refill,
    window_allowance,
    workspace_cap,
)

log = logs.get(__name__)

PENALTY_GUARD_S = 0.1  # Retry-After is whole seconds, counted by the server's clock
WORKSPACE = "workspace"
_MIN_WAIT_S = 0.001  # float rounding can leave a hair of shortfall: never spin on it
_LOG_WAIT_FROM_S = 1.0
# A marked send waits on its mark, which the writer wakes when the run stops; a stop
# nobody woke it for is looked at this often meanwhile (a backstop, not the way it learns).
STOP_LOOK_S = 10.0
LEASE = 16  # sends one decision may charge ahead, far from the limits
LEASE_S = 0.25  # ... to be spent within this long
_EPS = 1e-9

Wait = Callable[[float, threading.Event | None], None]
OnWait = Callable[[str, float], None]  # (tier, seconds): e.g. the progress bar's notice


def _default_wait(seconds: float, stop: threading.Event | None) -> None:
    if stop is not None:
        stop.wait(seconds)
    else:
        time.sleep(seconds)


def _wait_marked(seconds: float, stop: threading.Event | None, mark: priority.Mark) -> None:
    """Wait ``seconds``, or until ``mark`` is raised or woken (at once: a stop wakes it),
    or ``stop`` is set (within ``STOP_LOOK_S``, had nobody woken the mark): no look at the
    budget's ledger meanwhile, and no wake-up either. A wake of a mark not raised is spent
    here (cleared before the caller reads ``mark.urgent`` again, so no raise is lost)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if mark.raised.wait(min(left, STOP_LOOK_S)):
            if not mark.urgent:
                mark.raised.clear()
            return
        if stop is not None and stop.is_set():
            return


class Budget:
    """Request budgets per key and workspace, kept in ``store``; see above.

    The budget owns ``store`` once given it, and closes it (even when the limits
    given are refused).
    """

    def __init__(
        self,
        store: BudgetStore,
        *,
        limits: Mapping[str, int],
        limiter: Literal["window", "bucket"] = "window",
        egress_per_minute: int | None = None,
        safety_margin: float = 0.01,
        clock_skew_s: float = 0.5,
        urgent_share: float = 0.0,
        keys: Sequence[str] = (),
        workspace_limits: Mapping[str, int] | None = None,
        hears_urgent: bool = True,
        clock: Callable[[], float] = time.time,
        wait: Wait | None = None,
    ) -> None:
        self._store = store
        with ExitStack() as refused:  # limits refused: the store given is let go too
            refused.callback(store.close)
            per_minute = dict(limits)
            if egress_per_minute is not None:
                per_minute[EGRESS] = egress_per_minute
            workspace = dict(workspace_limits or {})
            if any(n < 1 for n in [*per_minute.values(), *workspace.values()]):
                raise ValueError(f"every per-minute limit must be at least 1: {per_minute}")
            if not 0 <= safety_margin < 1 or clock_skew_s < 0:
                raise ValueError("safety_margin must be in [0, 1) and clock_skew_s >= 0")
            if not 0 <= urgent_share <= 0.5:
                raise ValueError("urgent_share must be in [0, 0.5]")
            if limiter not in ("window", "bucket"):
                raise ValueError(f"unknown limiter {limiter!r}")
            if len(set(keys)) != len(keys):
                raise ValueError("key fingerprints must be distinct")
            self._limiter = limiter
            self._charge_egress = egress_per_minute is not None
            self._window_s = WINDOW_S + clock_skew_s
            self._margin, self._skew = safety_margin, clock_skew_s
            self._share = urgent_share
            # One key keeps the bare tier names (and so today's state); several are told apart.
            self.keys: tuple[str, ...] = tuple(keys) or ("",)
            several = len(self.keys) > 1
            self._per_minute = per_minute
            self._key_scopes = {
                (fp, tier): self._scope(f"{tier}@{fp}" if several else tier, tier, n)
                for fp in self.keys
                for tier, n in per_minute.items()
            }
            self._workspace: dict[str, Scope] = {}
            if several:
                for tier, n in per_minute.items():
                    cap = workspace_cap(workspace.get(tier), tier, n)
                    self._workspace[tier] = self._scope(
                        f"{tier}@{WORKSPACE}", tier, cap, charged=cap < n * len(self.keys)
                    )
            refused.pop_all()
        self._clock = clock
        self._wait = wait if wait is not None else _default_wait
        self._injected_wait = wait is not None  # a test's clock: its wait is the whole wait
        self.on_wait: OnWait | None = None
        self._turn = 0  # which key is tried first; rotates so ties share the work
        # Urgent sends of this process waiting now. Read once per decision, so all the
        # scopes of one decision leave the same room.
        self._urgent_waiting = 0
        self._waiting_lock = threading.Lock()
        # Whether urgent keys may arrive at any moment (a daemon's hooks, watched files),
        # and when an urgent send last asked for a token: the room is kept while it can
        # matter (``_keeps_room``).
        self._hears_urgent = hears_urgent
        self._urgent_at = -math.inf
        # Sends charged ahead: per tiers, (key, how many left, until when).
        self._leases: dict[tuple[str, ...], tuple[str, int, float]] = {}
        self._lease_lock = threading.Lock()

    def _scope(self, name: str, tier: str, n: int, *, charged: bool = True) -> Scope:
        allowance, capacity = window_allowance(n), bucket_capacity(n, self._skew)
        share = self._share
        return Scope(
            name=name,
            tier=tier,
            per_minute=n,
            allowance=allowance,
            capacity=capacity,
            rate=bucket_rate(n, self._margin),
            charged=charged,
            reserve=math.floor(share * allowance + _EPS)
            if self._limiter == "window"
            else math.floor(share * capacity / 2 + _EPS),
        )

    @classmethod
    def from_settings(
        cls, settings: BudgetSettings, store: BudgetStore, *, keys: Sequence[str] = (), **kw: Any
    ) -> Budget:
        """A budget for the configured limits and key fingerprints; ``kw`` as ``__init__``."""
        workspace = {
            "read": settings.workspace_read_per_minute,
            "write": settings.workspace_write_per_minute,
            EGRESS: settings.workspace_egress_per_minute,
        }
        return cls(
            store,
            limits={"read": settings.read_per_minute, "write": settings.write_per_minute},
            limiter=settings.limiter,
            egress_per_minute=settings.egress_per_minute,
            safety_margin=settings.safety_margin,
            clock_skew_s=settings.clock_skew_s,
            urgent_share=settings.urgent_share,
            keys=keys,
            workspace_limits={t: n for t, n in workspace.items() if n is not None},
            **kw,
        )

    def __enter__(self) -> Budget:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- the public operations -------------------------------------------------------

    def acquire(
        self, tier: str, *, stop: threading.Event | None = None, urgent: bool | None = None
    ) -> str | None:
        """Block until one request of ``tier`` may be sent, charge it, and return the key.

        ``urgent`` (default: this thread's mark, ``priority.current``, looked at again on
        every wake: a mark raised meanwhile counts) lets the request use the room kept
        for the urgent (see the module docstring).

        The key is named by the fingerprint given at construction (None when the
        budget was built without keys). Raises ``Interrupted`` when ``stop`` is set
        while a wait is due; nothing is charged then. When the budget allows a send
        right away, it is charged even if ``stop`` is set: the caller decides
        whether to start new work.
        """
        tiers = self._tiers_for(tier)
        leased = self._from_lease(tiers)
        if leased is not None:
            return leased or None
        mark = priority.current() if urgent is None else None
        waiting = False
        logged: bool | None = None  # the urgency last logged as waiting
        try:
            while True:
                now_urgent = (mark is not None and mark.urgent) if urgent is None else urgent
                if now_urgent:
                    self._urgent_at = self._clock()  # demand: the room is kept a window
                seconds, got, ahead = self._store.transact(
                    functools.partial(self._try_charge, tiers=tiers, urgent=now_urgent), stop=stop
                )
                if seconds <= 0:
                    if ahead:
                        with self._lease_lock:
                            self._leases[tiers] = (got, ahead, self._clock() + LEASE_S)
                    return got or None
                if stop is not None and stop.is_set():
                    raise Interrupted(f"stopped while waiting for the {got} budget")
                if now_urgent and not waiting:
                    waiting = True
                    self._count_waiting(+1)
                if seconds >= _LOG_WAIT_FROM_S and logged != now_urgent:
                    logged = now_urgent  # once per wait (a marked write looks again often)
                    log.debug("budget.wait", tier=got, seconds=round(seconds, 3), urgent=now_urgent)
                if self.on_wait is not None:
                    self.on_wait(got, seconds)
                if mark is not None and not now_urgent and not self._injected_wait:
                    _wait_marked(seconds, stop, mark)  # its mark may be raised
                else:
                    self._wait(seconds, stop)
                if stop is not None and stop.is_set():
                    raise Interrupted(f"stopped while waiting for the {got} budget")
        finally:
            if waiting:
                self._count_waiting(-1)

    def _from_lease(self, tiers: tuple[str, ...]) -> str | None:
        """A send charged ahead for ``tiers``, still good: its key (None: none left)."""
        with self._lease_lock:
            lease = self._leases.get(tiers)
            if lease is None:
                return None
            fp, left, until = lease
            if self._clock() >= until:
                del self._leases[tiers]
                return None
            if left <= 1:
                del self._leases[tiers]
            else:
                self._leases[tiers] = (fp, left - 1, until)
            return fp

    def _count_waiting(self, step: int) -> None:
        with self._waiting_lock:
            self._urgent_waiting += step

    def penalize(self, tier: str, seconds: float, *, key: str | None = None) -> None:
        """After a 429 on ``key``: it sends no ``tier`` until now + seconds + guard.

        The first 429 of an episode (the key was not blocked yet) lowers its learnt
        pace; when another key of the tier is blocked too, so is the workspace.
        """
        fp = key if key in self.keys else self.keys[0]
        scope = self._key_scopes[(fp, tier)]
        with self._lease_lock:  # refused: nothing more goes on what was charged ahead
            unspent = sum(
                left for on, (k, left, _) in self._leases.items() if k == fp and tier in on
            )
            self._leases.clear()

        def apply(rows: BudgetRows) -> tuple[float, Pace | None, bool]:
            now = self._clock()
            until = now + max(0.0, seconds) + PENALTY_GUARD_S
            row = rows.bucket(scope.name)
            new_episode = row is None or row[2] <= now
            learnt = self._learn(rows, scope, now, until, unspent) if new_episode else None
            self._block(rows, scope, until, now)
            others = [s for (k, t), s in self._key_scopes.items() if t == tier and k != fp]
            workspace = self._workspace.get(tier)
            if workspace is not None and any(
                (r := rows.bucket(s.name)) is not None and r[2] > now for s in others
            ):
                self._block(rows, workspace, until, now)
                return until, learnt, True
            return until, learnt, False

        until, learnt, whole = self._store.transact(apply)
        log.info(
            "budget.blocked",
            tier=tier,
            key=fp or None,
            seconds=seconds,
            until=round(until, 3),
            workspace=whole or None,
        )
        if learnt is not None:
            log.info(
                "budget.pace.learnt",
                tier=tier,
                key=fp or None,
                burst=round(learnt.burst, 1),
                rate_factor=round(learnt.factor, 3),
            )

    def snapshot(self) -> dict[str, dict[str, float]]:
        """Per scope (the tier with one key): ``available`` now (0 while blocked),
        ``capacity``, ``per_minute``, ``blocked_until`` (epoch seconds, 0 when never
        blocked), and ``burst`` / ``rate_factor`` while a learnt pace binds."""

        def read(rows: BudgetRows) -> dict[str, dict[str, float]]:
            now = self._clock()
            paces = self._paces(rows, now)
            out: dict[str, dict[str, float]] = {}
            scopes = [*self._key_scopes.values(), *self._workspace.values()]
            for scope in scopes:
                if not scope.charged:
                    continue
                row = rows.bucket(scope.name)
                blocked_until = row[2] if row else 0.0
                capacity, available = self._available(rows, scope, row, now)
                entry = {
                    "available": 0.0 if blocked_until > now else max(0.0, available),
                    "capacity": capacity,
                    "per_minute": float(scope.per_minute),
                    "blocked_until": blocked_until,
                }
                learnt = paces.get(scope.name)
                if learnt is not None:
                    entry["burst"] = learnt.burst_at(now, scope.limit)
                    entry["rate_factor"] = learnt.factor_at(now)
                out[scope.name] = entry
            return out

        return self._store.transact(read, write=False)

    def eta(self, tier: str, n: int) -> float:
        """Seconds until ``n`` more requests of ``tier`` can all have been sent.

        All keys together, the workspace cap, blocks and learnt pace included: what
        the progress bar shows as the time remaining.
        """
        if n <= 0:
            return 0.0

        def read(rows: BudgetRows) -> float:
            now = self._clock()
            paces = self._paces(rows, now)
            keys = [self._key_scopes[(fp, tier)] for fp in self.keys]
            groups: list[list[Scope]] = [keys]
            workspace = self._workspace.get(tier)
            if workspace is not None and workspace.charged:
                groups.append([workspace])
            blocked = [max(0.0, (r[2] if (r := rows.bucket(s.name)) else 0.0) - now) for s in keys]
            seconds = min(blocked)
            if workspace is not None:
                row = rows.bucket(workspace.name)
                seconds = max(seconds, (row[2] - now) if row else 0.0)
            for group in groups:
                seconds = max(seconds, self._group_eta(rows, group, n, now))
            learnt = [(s, paces[s.name]) for s in keys if s.name in paces]
            if learnt:
                tokens = sum(self._pace_bucket(rows, s, p, now)[0] for s, p in learnt)
                tokens += sum(s.limit for s in keys if s.name not in paces)
                rate = sum(
                    s.per_minute
                    / WINDOW_S
                    * (paces[s.name].factor_at(now) if s.name in paces else 1.0)
                    for s in keys
                )
                seconds = max(seconds, pacing.bucket_eta(tokens, n, rate_per_s=rate))
            return seconds

        return self._store.transact(read, write=False)

    def close(self) -> None:
        self._store.close()

    # -- one decision, inside one transaction ----------------------------------------

    def _tiers_for(self, tier: str) -> tuple[str, ...]:
        if tier not in self._per_minute:
            raise ValueError(f"no budget configured for tier {tier!r}")
        if self._charge_egress and tier != EGRESS:
            return (tier, EGRESS)
        return (tier,)

    def _try_charge(
        self, rows: BudgetRows, tiers: tuple[str, ...], *, urgent: bool = True
    ) -> tuple[float, str, int]:
        """Charge a key's scopes (and the workspace's) and return ``(0, key, ahead)``
        (``ahead``: sends charged ahead, a lease), or charge nothing and return how long to
        wait and for which tier. All-or-nothing, so egress is never spent on a request
        that did not go."""
        now = self._clock()
        leave = 0 if urgent else self._urgent_waiting
        keep = not urgent and self._keeps_room(now, leave)
        workspace = [self._workspace[t] for t in tiers if t in self._workspace]
        if workspace:
            waits = {
                s.tier: self._wait_for(rows, s, now, keep=keep, leave=leave) for s in workspace
            }
            blocker = max(waits, key=lambda t: waits[t])
            if waits[blocker] > 0:
                return max(waits[blocker], _MIN_WAIT_S), blocker, 0
        paces = self._paces(rows, now)
        best: tuple[float, str] | None = None  # (headroom, key) of the best free key
        soonest: tuple[float, str] = (math.inf, tiers[0])
        for offset in range(len(self.keys)):
            fp = self.keys[(self._turn + offset) % len(self.keys)]
            scopes = [self._key_scopes[(fp, t)] for t in tiers]
            waits = {s.tier: self._wait_for(rows, s, now, keep=keep, leave=leave) for s in scopes}
            for s in scopes:
                learnt = paces.get(s.name)
                if learnt is not None:
                    tokens, as_of = self._pace_bucket(rows, s, learnt, now)
                    rate = s.per_minute / WINDOW_S * learnt.factor_at(now)
                    short = (as_of - now) + (1 - tokens) / rate if tokens < 1 else 0.0
                    waits[s.tier] = max(waits[s.tier], short)
            blocker = max(waits, key=lambda t: waits[t])
            if waits[blocker] > 0:
                soonest = min(soonest, (waits[blocker], blocker))
                continue
            main = scopes[0]
            if self._limiter == "window":  # pruned by ``_wait_for``: the log is the window
                headroom = float(main.allowance - rows.logged(main.name))
            else:
                headroom = self._available(rows, main, rows.bucket(main.name), now)[1]
            headroom /= max(main.limit, 1)
            if best is None or headroom > best[0]:
                best = (headroom, fp)
        if best is None:
            return max(soonest[0], _MIN_WAIT_S), soonest[1], 0
        fp = best[1]
        self._turn += 1
        charged = [*(self._key_scopes[(fp, t)] for t in tiers), *workspace]
        for s in charged:
            if s.charged:
                self._charge(rows, s, now)
            learnt = paces.get(s.name)
            if learnt is not None:
                tokens, as_of = self._pace_bucket(rows, s, learnt, now)
                rows.put_tokens(f"{s.name}~pace", tokens - 1, as_of)
        ahead = 0 if paces else self._ahead(rows, charged, now, keep=keep, leave=leave)
        for s in charged:
            if s.charged and ahead:
                self._charge(rows, s, now, n=ahead, logged_at=now + LEASE_S)
        return 0.0, fp, ahead

    def _ahead(
        self, rows: BudgetRows, scopes: list[Scope], now: float, *, keep: bool, leave: int
    ) -> int:
        """How many sends to charge ahead (a lease) on ``scopes``, just charged one: a
        quarter of the room each has left after the room kept, no more than its rate
        sends in ``LEASE_S`` (what a lease unspent may waste), at most ``LEASE`` - 1."""
        ahead = LEASE - 1
        for s in scopes:
            if not s.charged:
                continue
            ahead = min(ahead, math.floor(s.per_minute / WINDOW_S * LEASE_S))
            kept = (s.reserve if keep else 0) + leave
            if self._limiter == "window":
                room = s.allowance - kept - rows.logged(s.name)  # this one is logged
            else:
                room = math.floor(self._bucket_at(rows.bucket(s.name), s, now)[0]) - kept
            ahead = min(ahead, room // 4)
        return max(0, ahead)

    def _keeps_room(self, now: float, waiting: int) -> bool:
        """Whether a non-urgent send leaves the room kept for the urgent now: in a process
        that hears urgent keys, while urgent sends wait, and one window after the last
        urgent send asked (see the module docstring)."""
        return self._hears_urgent or waiting > 0 or now - self._urgent_at < self._window_s

    def _wait_for(
        self, rows: BudgetRows, scope: Scope, now: float, *, keep: bool, leave: int
    ) -> float:
        """Seconds until ``scope`` allows one more send (0: now); ``keep``: a non-urgent
        send that leaves the room kept for the urgent (see the module docstring), and
        ``leave`` slots more for the urgent sends waiting now."""
        row = rows.bucket(scope.name)
        blocked = (row[2] - now) if row else 0.0
        if not scope.charged:
            return max(0.0, blocked)
        if self._limiter == "window":
            self._prune(rows, scope, now)
            logged = rows.logged(scope.name)  # the window's sends, or more: never fewer
            wait = self._window_wait(
                rows,
                scope,
                now,
                span=self._window_s,
                allowance=scope.allowance - leave,
                logged=logged,
            )
            if keep and scope.reserve > 0:
                ahead = self._window_s * scope.reserve / scope.allowance  # X
                kept = self._window_wait(
                    rows,
                    scope,
                    now,
                    span=self._window_s - ahead,
                    allowance=scope.allowance - scope.reserve - leave,
                    logged=logged,
                )
                wait = max(wait, kept)
            return max(blocked, wait)
        tokens, as_of = self._bucket_at(row, scope, now)
        need = min(float(scope.capacity), 1.0 + (scope.reserve if keep else 0) + leave)
        short = (as_of - now) + (need - tokens) / scope.rate if tokens < need else 0.0
        return max(blocked, short)

    def _charge(
        self,
        rows: BudgetRows,
        scope: Scope,
        now: float,
        *,
        n: int = 1,
        logged_at: float | None = None,
    ) -> None:
        """Charge ``n`` sends; the window logs them at ``logged_at`` (default ``now``)."""
        if self._limiter == "window":
            for _ in range(n):
                rows.add_send(scope.name, now if logged_at is None else logged_at)
        else:
            tokens, as_of = self._bucket_at(rows.bucket(scope.name), scope, now)
            rows.put_tokens(scope.name, tokens - n, as_of)

    def _available(
        self,
        rows: BudgetRows,
        scope: Scope,
        row: Bucket | None,
        now: float,
    ) -> tuple[float, float]:
        """``(capacity, available)`` of a scope now, blocks aside."""
        if self._limiter == "window":
            return float(scope.allowance), scope.allowance - self._sends_in_window(
                rows, scope.name, now
            )
        return float(scope.capacity), self._bucket_at(row, scope, now)[0]

    def _block(self, rows: BudgetRows, scope: Scope, until: float, now: float) -> None:
        row = rows.bucket(scope.name)
        tokens, updated_at, blocked_until = row if row else (float(scope.capacity), now, 0.0)
        if self._limiter == "bucket":
            # The server's bucket is empty when the block lifts, and refills from there.
            tokens, updated_at = 0.0, max(until, updated_at)
        rows.put_bucket(scope.name, (tokens, updated_at, max(until, blocked_until)))

    # -- learnt pace -------------------------------------------------------------------

    def _paces(self, rows: BudgetRows, now: float) -> dict[str, Pace]:
        """Learnt paces that still bind, by scope name."""
        limits = {s.name: s.limit for s in self._key_scopes.values()}
        out: dict[str, Pace] = {}
        for scope, value in rows.metas(PACE_META):
            learnt = Pace.loads(value) if scope in limits else None
            if learnt is not None and not learnt.forgotten(now, limits[scope]):
                out[scope] = learnt
        return out

    def _learn(
        self, rows: BudgetRows, scope: Scope, now: float, until: float, unspent: int = 0
    ) -> Pace:
        """The pace after a 429 (``unspent``: sends this process charged ahead, not sent)."""
        previous = self._paces(rows, now).get(scope.name)
        tokens = self._pace_bucket(rows, scope, previous, now)[0] if previous else None
        if self._limiter == "window":
            recent = rows.count_sends(scope.name, now - pacing.RECENT_S) - unspent
        else:
            recent = round(scope.capacity - self._bucket_at(rows.bucket(scope.name), scope, now)[0])
        learnt = pacing.learn(
            previous, now=now, capacity=scope.limit, recent=recent, pacing_tokens=tokens
        )
        rows.put_meta(PACE_META + scope.name, learnt.dumps())
        # One request when the block lifts (Retry-After is obeyed exactly), then the pace.
        rows.put_tokens(f"{scope.name}~pace", 1.0, until)
        return learnt

    def _pace_bucket(
        self, rows: BudgetRows, scope: Scope, learnt: Pace, now: float
    ) -> tuple[float, float]:
        burst = math.floor(learnt.burst_at(now, scope.limit) + _EPS)
        rate = scope.per_minute / WINDOW_S * learnt.factor_at(now)
        row = rows.bucket(f"{scope.name}~pace")
        if row is None:
            return float(burst), now
        return refill(row[0], row[1], now, capacity=float(burst), rate=rate)

    # -- the ledger's rows, read as the limiter sees them ----------------------------------

    def _bucket_at(self, row: Bucket | None, scope: Scope, now: float) -> tuple[float, float]:
        if row is None:  # a brand-new bucket starts full
            return float(scope.capacity), now
        return refill(row[0], row[1], now, capacity=scope.capacity, rate=scope.rate)

    def _sends_in_window(self, rows: BudgetRows, name: str, now: float) -> int:
        return rows.count_sends(name, now - self._window_s)

    def _prune(self, rows: BudgetRows, scope: Scope, now: float) -> None:
        rows.forget_sends(scope.name, now - self._window_s)

    def _window_wait(
        self,
        rows: BudgetRows,
        scope: Scope,
        now: float,
        *,
        span: float,
        allowance: int,
        logged: int,
    ) -> float:
        """Seconds until one more send leaves at most ``allowance`` in the last ``span``;
        ``logged``: the sends in the log, never fewer (fewer than allowed: no count)."""
        allowance = max(1, allowance)
        if logged < allowance:
            return 0.0
        cutoff = now - span
        count = rows.count_sends(scope.name, cutoff)
        if span == self._window_s:  # the whole log, pruned: its count is known exactly now
            rows.set_logged(scope.name, count)
        over = count - allowance
        if over < 0:
            return 0.0
        # The oldest `over + 1` sends must age out; the last of them decides.
        return rows.send_at(scope.name, cutoff, over) + span - now

    def _group_eta(self, rows: BudgetRows, scopes: list[Scope], n: int, now: float) -> float:
        """ETA of n sends shared by ``scopes`` (the keys together, or the workspace)."""
        if self._limiter == "window":
            sends: list[float] = []
            for s in scopes:
                sends += rows.sends(s.name, now - self._window_s)
            allowance = sum(s.allowance for s in scopes)
            return pacing.window_eta(
                sends, n, allowance=allowance, window_s=self._window_s, now=now
            )
        tokens = sum(self._bucket_at(rows.bucket(s.name), s, now)[0] for s in scopes)
        return pacing.bucket_eta(tokens, n, rate_per_s=sum(s.rate for s in scopes))
