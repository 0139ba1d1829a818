"""``plan``'s time estimate: what the budget allows, told the way the run will spend it.

Writes go as fast as all keys together may send, capped by the workspace and
slowed by any pace learnt from the server's 429s (read from the state file);
the window limiter sends a whole minute's allowance at once and then waits, so
300 writes at 100/min take two waits (about 121 s), not three minutes.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from skuferry.config.schema import BudgetSettings, Settings
from skuferry.remote import pace as pacing
from skuferry.remote.pace import Pace, human_seconds
from skuferry.remote.scopes import WINDOW_S, read_paces, workspace_cap


def plan_note(
    settings: Settings, *, creates: int, updates: int, pace_rows: Iterable[tuple[str, str]] = ()
) -> str:
    """The dry run's note: how many writes, at what rate and why, and how long."""
    keys = len(settings.api_keys)
    paces = read_paces(pace_rows)
    writes = creates + updates
    seconds, rate = planned_eta(writes, settings.budget, keys=keys, paces=paces)
    per_key = settings.budget.write_per_minute
    why = [f"{keys} keys of {per_key}/min" if keys > 1 else "1 key"]
    if keys > 1:
        cap = workspace_cap(settings.budget.workspace_write_per_minute, "write", per_key)
        why.append(f"workspace cap {cap}/min")
    if paces:
        why.append("pace learnt from the server's 429s")
    return (
        f"dry run: {creates:,} creates and {updates:,} updates at {rate:.0f}/min "
        f"({', '.join(why)}) ≈ {human_seconds(seconds)}; nothing was written"
    )


def planned_eta(
    writes: int,
    settings: BudgetSettings,
    *,
    keys: int,
    paces: Sequence[Pace] = (),
    now: float | None = None,
) -> tuple[float, float]:
    """``plan``'s estimate: ``(seconds, writes per minute)`` for a fresh budget.

    All keys together, capped by the workspace; a learnt pace (of any key) slows
    every key alike, which is what a gateway in front of the workspace does.
    """
    per_key = settings.write_per_minute
    cap = workspace_cap(settings.workspace_write_per_minute, "write", per_key)
    rate = float(min(cap, per_key * keys) if keys > 1 else per_key)
    burst: float | None = None
    when = time.time() if now is None else now
    if paces:
        factor = min(p.factor_at(when) for p in paces)
        burst = min(p.burst_at(when, per_key) for p in paces) * max(keys, 1)
        rate *= factor
    window_s = WINDOW_S + settings.clock_skew_s
    seconds = pacing.fresh_eta(
        writes, per_minute=rate, limiter=settings.limiter, window_s=window_s, burst=burst
    )
    return seconds, rate
