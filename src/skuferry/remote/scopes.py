"""The arithmetic of one counted scope, and the learnt paces as the state file keeps them.

The budget decides and charges inside its store's transactions; this module holds
what it needs that is no transaction: per-scope limits (window allowance,
bucket capacity and rate), the workspace cap's default, and how the learnt paces
kept as named ``meta`` values (``PACE_META``) read, for ``plan`` and ``status``,
which read them without opening a budget.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from skuferry.remote.pace import Pace

EGRESS = "egress"
WINDOW_S = 60.0  # the server's limits are per minute
# The spec's per-workspace caps (§8); a cap below one key's own limit is raised to it,
# so one key configured above the spec's numbers is not throttled by a default.
WORKSPACE_DEFAULTS = {"read": 900, "write": 180, EGRESS: 40}
PACE_META = "budget.pace."  # meta rows: learnt pace per scope, JSON
_EPS = 1e-9


def window_allowance(per_minute: int) -> int:
    """Sends allowed in one sliding window of ``60 + clock_skew_s`` seconds: all N."""
    return max(1, per_minute)


def bucket_capacity(per_minute: int, clock_skew_s: float) -> int:
    """Bucket size: the server's, less what it refills during our clock uncertainty."""
    return max(1, math.floor(per_minute - per_minute / WINDOW_S * clock_skew_s + _EPS))


def bucket_rate(per_minute: int, safety_margin: float) -> float:
    """Tokens per second."""
    return per_minute / WINDOW_S * (1 - safety_margin)


def refill(
    tokens: float, updated_at: float, now: float, *, capacity: float, rate: float
) -> tuple[float, float]:
    """The bucket at ``now``: ``(tokens, as_of)``, clamped to ``capacity``.

    A stamp in the future (a penalty, or another process's clock running ahead)
    earns nothing until it is reached, and is kept so the time is not counted twice.
    """
    if now > updated_at:
        return min(capacity, tokens + (now - updated_at) * rate), now
    return min(float(capacity), tokens), updated_at


def workspace_cap(configured: int | None, tier: str, per_key: int) -> int:
    """All keys' cap: as configured, else the spec's, never below one key's own limit."""
    if configured is not None:
        return configured
    return max(WORKSPACE_DEFAULTS.get(tier, per_key), per_key)


@dataclass(frozen=True, slots=True)
class Scope:
    """One counted thing: a key's tier, or the workspace's."""

    name: str  # the scope's name in the ledger (its bucket, its sends)
    tier: str
    per_minute: int
    allowance: int  # window limiter
    capacity: int  # bucket limiter
    rate: float  # bucket limiter, tokens per second
    charged: bool = True  # False: a workspace cap that cannot bind; only its blocks count
    reserve: int = 0  # slots (tokens) a non-urgent send leaves for the urgent

    @property
    def limit(self) -> int:
        """What the scope may send at once: the capacity a learnt burst starts from."""
        return self.allowance


def learnt_paces(
    rows: Iterable[tuple[str, str]], limits: Mapping[str, int], now: float
) -> dict[str, dict[str, float]]:
    """Paces that still bind, by scope (``write``, ``write@<fp>``), for ``status``.

    ``rows``: the ``(scope, json)`` pairs stored under ``PACE_META`` (``Mirror.metas``).
    """
    out: dict[str, dict[str, float]] = {}
    for scope, value in rows:
        limit = limits.get(scope.partition("@")[0])
        learnt = Pace.loads(value)
        if limit is not None and learnt is not None and not learnt.forgotten(now, limit):
            out[scope] = {
                "burst": round(learnt.burst_at(now, limit), 1),
                "rate_factor": round(learnt.factor_at(now), 3),
            }
    return out


def read_paces(rows: Iterable[tuple[str, str]], tier: str = "write") -> list[Pace]:
    """Learnt paces of ``tier`` among the ``(scope, json)`` pairs of ``Mirror.metas``."""
    out = []
    for scope, value in rows:
        if scope == tier or scope.startswith(f"{tier}@"):
            learnt = Pace.loads(value)
            if learnt is not None:
                out.append(learnt)
    return out
