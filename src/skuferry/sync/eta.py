"""``plan``'s time estimate: what the budget allows, told the way the run will spend it.

Writes go as fast as all keys together may send, capped by the workspace and
slowed by any pace learnt from the server's 429s (read from the state file);
the window limiter sends a whole minute's allowance at once and then waits, so
300 writes at 100/min take two waits (about 121 s), not three minutes.
"""

from __future__ import annotations

import sqlite3

from skuferry.config.load import Settings
from skuferry.remote.budget import planned_eta, read_paces, workspace_cap
from skuferry.remote.pace import human_seconds


def plan_note(
    settings: Settings, *, creates: int, updates: int, conn: sqlite3.Connection | None
) -> str:
    """The dry run's note: how many writes, at what rate and why, and how long."""
    keys = len(settings.api_keys)
    paces = read_paces(conn) if conn is not None else []
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
