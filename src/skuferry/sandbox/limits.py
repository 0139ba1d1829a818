"""Rate limits of the sandbox: per API key and per workspace, per tier, in two modes.

The spec calls the limits "a token bucket per minute" yet says ``Retry-After``
counts "until the current 1-minute window resets"; a client cannot tell which
reading the real service follows, so the sandbox offers both:

``window``  fixed 1-minute windows aligned to the limiter's epoch (the sandbox's
            start); at most N requests per tier and scope in each window;
            ``Retry-After`` is the whole seconds left in the window.
``bucket``  capacity N, refilled at N/60 tokens per second, starting full;
            ``Retry-After`` is the whole seconds until one token is back.
            With ``burst`` B (< N), the capacity is B at the same refill rate:
            a gateway such as nginx ``limit_req rate=10r/s burst=20``, whose
            bursts are far smaller than "N per minute" suggests.

A request must pass both its key's and its workspace's limit; a refused request
consumes nothing. No locking here: the caller serialises access.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from skuferry.errors import UsageError

Mode = Literal["bucket", "window"]
MODES: tuple[Mode, ...] = ("bucket", "window")
WINDOW_S = 60.0
_EPSILON = 1e-9  # float noise must not turn 60.000000001 s into a Retry-After of 61


@dataclass(frozen=True, slots=True)
class TierLimit:
    """Requests per minute allowed to one API key and to one workspace."""

    per_key: int
    per_workspace: int


def default_limits() -> dict[str, TierLimit]:
    """The spec's table (section 8)."""
    return {
        "read": TierLimit(per_key=300, per_workspace=900),
        "write": TierLimit(per_key=60, per_workspace=180),
        "expensive": TierLimit(per_key=10, per_workspace=20),
        "egress": TierLimit(per_key=20, per_workspace=40),
    }


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether a request may proceed; when not, which scope refused and for how long."""

    allowed: bool
    retry_after: int = 0  # whole seconds, >= 1 when refused
    scope: str = ""  # "key" or "workspace" when refused


def _whole_seconds(seconds: float) -> int:
    return max(1, math.ceil(seconds - _EPSILON))


class RateLimiter:
    """Admits or refuses requests; ``clock`` returns seconds (monotonic)."""

    def __init__(
        self,
        limits: Mapping[str, TierLimit],
        *,
        mode: Mode = "window",
        clock: Callable[[], float],
        epoch: float | None = None,
        burst: int | None = None,
    ) -> None:
        if mode not in MODES:
            raise UsageError(f"unknown rate-limit mode {mode!r}; expected one of {MODES}")
        if burst is not None and (burst < 1 or mode != "bucket"):
            raise UsageError("a burst is at least 1, and only a token bucket has one")
        self.burst = burst
        for tier, limit in limits.items():
            if limit.per_key < 1 or limit.per_workspace < 1:
                raise UsageError(f"limits of tier {tier!r} must be at least 1 per minute")
        self.limits = dict(limits)
        self.mode: Mode = mode
        self._clock = clock
        self.epoch = clock() if epoch is None else epoch
        # scope -> (window index, used) in window mode; scope -> (tokens, updated) in bucket mode
        self._windows: dict[tuple[str, str, str], tuple[int, int]] = {}
        self._buckets: dict[tuple[str, str, str], tuple[float, float]] = {}

    def check(self, *, key: str, workspace: str, tier: str) -> Decision:
        """Admit (and charge both scopes) or refuse (charging nothing)."""
        limit = self.limits.get(tier)
        if limit is None:
            return Decision(allowed=True)
        now = self._clock()
        scopes = (
            ("key", ("key", key, tier), limit.per_key),
            ("workspace", ("workspace", workspace, tier), limit.per_workspace),
        )
        refusals = [
            (wait, name)
            for name, scope, capacity in scopes
            if (wait := self._wait(scope, capacity, now)) > 0
        ]
        if refusals:
            wait, name = max(refusals)
            return Decision(allowed=False, retry_after=_whole_seconds(wait), scope=name)
        for _name, scope, capacity in scopes:
            self._charge(scope, capacity, now)
        return Decision(allowed=True)

    def _wait(self, scope: tuple[str, str, str], capacity: int, now: float) -> float:
        """Seconds until ``scope`` could admit one more request (0 = now)."""
        if self.mode == "window":
            index = self._window_index(now)
            seen_index, used = self._windows.get(scope, (index, 0))
            if seen_index != index or used < capacity:
                return 0.0
            return self.epoch + (index + 1) * WINDOW_S - now
        tokens = self._tokens(scope, capacity, now)
        if tokens >= 1.0:
            return 0.0
        return (1.0 - tokens) * WINDOW_S / capacity

    def _charge(self, scope: tuple[str, str, str], capacity: int, now: float) -> None:
        if self.mode == "window":
            index = self._window_index(now)
            seen_index, used = self._windows.get(scope, (index, 0))
            self._windows[scope] = (index, used + 1 if seen_index == index else 1)
        else:
            self._buckets[scope] = (self._tokens(scope, capacity, now) - 1.0, now)

    def _window_index(self, now: float) -> int:
        return math.floor((now - self.epoch) / WINDOW_S)

    def _tokens(self, scope: tuple[str, str, str], per_minute: int, now: float) -> float:
        """Tokens now: refilled at ``per_minute``/60 per second, up to the burst (or N)."""
        size = float(min(per_minute, self.burst or per_minute))
        tokens, updated = self._buckets.get(scope, (size, now))
        return min(size, tokens + (now - updated) * per_minute / WINDOW_S)


def min_elapsed(n_requests: int, per_minute: int, mode: Mode, burst: int | None = None) -> float:
    """Shortest span from the first to the n-th request these rules allow.

    Assumes the first request comes at the start of a window (window mode) or
    with a full bucket (bucket mode), as when a run starts with the sandbox.
    """
    if n_requests <= 0 or per_minute < 1:
        return 0.0
    if mode == "window":
        return (math.ceil(n_requests / per_minute) - 1) * WINDOW_S
    size = min(per_minute, burst or per_minute)
    return max(0, n_requests - size) * WINDOW_S / per_minute
