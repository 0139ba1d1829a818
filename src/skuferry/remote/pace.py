"""Pure arithmetic of the budgets: pacing learnt from 429s (AIMD) and truthful ETAs.

No I/O: the budget reads its ledger, calls these, and writes the result back.

Learning. A 429 that arrives while skuferry believed it had budget means the
server's real limit is smaller or burstier than configured. ``learn`` lowers
the burst of that key and tier (to half of what was just sent in a burst), or,
when skuferry was already pacing at the rate rather than bursting, the rate
(multiplied by ``RATE_DECREASE``). Both grow back with time while no 429 comes:
the burst by one request every ``BURST_GROW_S``, the rate by ``RATE_GROW_PER_MIN``
of the configured rate per minute, so a transient neighbour is forgotten within
the hour and a real gateway is probed only about once a minute.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

BURST_GROW_S = 6.0  # one more request of burst per 6 s without a 429
RATE_GROW_PER_MIN = 0.05  # +5 % of the configured rate per minute without a 429
RATE_DECREASE = 0.75  # multiplicative decrease of the rate when already paced
MIN_RATE_FACTOR = 0.05
RECENT_S = 5.0  # "what was just sent in a burst": sends of the last few seconds


@dataclass(frozen=True, slots=True)
class Pace:
    """What was learnt for one key and tier, as of ``at`` (epoch seconds)."""

    burst: float  # requests that may go at once
    factor: float  # share of the configured rate, (0, 1]
    at: float

    def burst_at(self, now: float, capacity: int) -> float:
        return min(float(capacity), self.burst + max(0.0, now - self.at) / BURST_GROW_S)

    def factor_at(self, now: float) -> float:
        return min(1.0, self.factor + max(0.0, now - self.at) / 60.0 * RATE_GROW_PER_MIN)

    def forgotten(self, now: float, capacity: int) -> bool:
        """Grown back to the configured limits: the pace no longer binds."""
        return self.burst_at(now, capacity) >= capacity and self.factor_at(now) >= 1.0

    def dumps(self) -> str:
        return json.dumps({"burst": self.burst, "factor": self.factor, "at": self.at})

    @classmethod
    def loads(cls, text: str) -> Pace | None:
        try:
            data = json.loads(text)
            pace = cls(float(data["burst"]), float(data["factor"]), float(data["at"]))
        except (ValueError, TypeError, KeyError):
            return None  # a damaged row is forgotten, not fatal
        if not (pace.burst >= 1 and 0 < pace.factor <= 1 and math.isfinite(pace.at)):
            return None
        return pace


def learn(
    previous: Pace | None, *, now: float, capacity: int, recent: int, pacing_tokens: float | None
) -> Pace:
    """The pace after a 429 on a key that believed it had budget.

    ``recent``: requests of this key and tier sent in the last ``RECENT_S``;
    ``pacing_tokens``: the learnt bucket's tokens just before the 429 (None when
    nothing was learnt yet). With the learnt bucket empty, skuferry was sending
    at the rate, not bursting: the rate is too high, not the burst.
    """
    burst = previous.burst_at(now, capacity) if previous else float(capacity)
    factor = previous.factor_at(now) if previous else 1.0
    if pacing_tokens is not None and pacing_tokens < 1.0:
        return Pace(
            burst=max(1.0, burst), factor=max(MIN_RATE_FACTOR, factor * RATE_DECREASE), at=now
        )
    burst = max(1.0, min(burst, float(max(recent, 1))) / 2)
    return Pace(burst=burst, factor=factor, at=now)


# -- ETA ------------------------------------------------------------------------------


def window_eta(
    sends: Sequence[float], n: int, *, allowance: int, window_s: float, now: float
) -> float:
    """Seconds until the n-th next request fits at most ``allowance`` per sliding window.

    ``sends``: times of the sends still inside the window. Free slots go now; each
    later request waits for the slot that ages out next, one window after it was
    used, so a wait shrinks as the minute passes instead of freezing.
    """
    if n <= 0:
        return 0.0
    recent = sorted(t for t in sends if t > now - window_s)[-allowance:]
    free = allowance - len(recent)
    if n <= free:
        return 0.0
    slots = sorted(recent + [now] * free)
    i = n - free - 1
    return max(0.0, slots[i % allowance] + window_s * (1 + i // allowance) - now)


def bucket_eta(tokens: float, n: int, *, rate_per_s: float) -> float:
    """Seconds until the n-th next request, from ``tokens`` refilled at ``rate_per_s``."""
    if n <= tokens or n <= 0:
        return 0.0
    return (n - math.floor(tokens + 1e-9)) / rate_per_s if rate_per_s > 0 else math.inf


def fresh_eta(
    n: int, *, per_minute: float, limiter: str, window_s: float, burst: float | None = None
) -> float:
    """ETA of n requests from a budget that has spent nothing (``plan``'s estimate).

    ``per_minute`` is what all keys together may send (the workspace cap, learnt
    pace included); ``burst`` what they may send at once when a pace was learnt.
    """
    if n <= 0 or per_minute <= 0:
        return 0.0
    if limiter == "window" and burst is None:
        allowance = max(1, math.floor(per_minute + 1e-9))
        return window_eta((), n, allowance=allowance, window_s=window_s, now=0.0)
    start = per_minute if burst is None else burst
    return bucket_eta(start, n, rate_per_s=per_minute / 60.0)


def human_seconds(seconds: float) -> str:
    """``43 s``, ``12 min``, ``2.5 h``: for notes and the progress bar."""
    if not math.isfinite(seconds):
        return "unknown"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
