"""What the page shows of a workspace, read from its state file, read-only.

Each page opens the state file with ``mode=ro`` (``Mirror(readonly=True)``) and closes it
before rendering: the page takes no lock and writes nothing, so it never holds up a run
(SQLite's WAL lets a reader and the run's writer go side by side). Everything here is
plain data for the templates.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from skuferry.service import freshness
from skuferry.service.console.workspace import Workspace
from skuferry.state import deadletters
from skuferry.state.deadletters import DeadLetter
from skuferry.state.mirror import Mirror

COUNTS = ("created", "updated", "unchanged", "rejected", "failed")
RECENT_RUNS = 30
PAGE_SIZE = 200  # refused products per page
COMPLETED = ("ok", "partial")  # the run went through (partial: some products refused)


@dataclass(frozen=True, slots=True)
class Run:
    """One row of the runs table, flattened for the page."""

    id: int
    started_at: float
    finished_at: float | None
    status: str  # ok | partial | interrupted | error | running
    exit_code: int | None
    counts: dict[str, int]
    duration_s: float | None
    writes: int
    error: str | None

    @classmethod
    def of(cls, row: dict[str, Any]) -> Run:
        summary = row.get("summary") or {}
        requests = summary.get("requests") or {}
        duration = summary.get("duration_s")
        if duration is None and row.get("finished_at") is not None:
            duration = row["finished_at"] - row["started_at"]
        return cls(
            id=int(row["id"]),
            started_at=float(row["started_at"]),
            finished_at=row.get("finished_at"),
            status=str(row.get("status") or "running"),
            exit_code=row.get("exit_code"),
            counts={name: int(summary.get(name) or 0) for name in COUNTS},
            duration_s=None if duration is None else float(duration),
            writes=int(requests.get("write") or 0),
            error=summary.get("error"),
        )


@dataclass(frozen=True, slots=True)
class Budget:
    """The last run's writes against the write budget: its pace and the cap, per minute."""

    writes: int
    per_minute: float | None  # the last run's own pace (None: no duration to divide by)
    cap_per_minute: float

    @property
    def percent(self) -> int | None:
        if self.per_minute is None or not self.cap_per_minute:
            return None
        return round(100 * self.per_minute / self.cap_per_minute)


@dataclass(frozen=True, slots=True)
class Pending:
    """Work the state file knows is waiting for the next run."""

    by_state: dict[str, int]  # pending (a create in doubt), failed (retried next run)
    open_intents: int
    queued: int  # keys handed to the next run (hooks, ``retry`` beside a run, the page)
    oldest_change_age_s: float | None  # the oldest source change not yet on the CMS

    @property
    def total(self) -> int:
        return sum(self.by_state.values()) + self.open_intents + self.queued


@dataclass(frozen=True, slots=True)
class Overview:
    """One workspace's line on the front page, and the head of its own page."""

    name: str
    state_exists: bool
    last_run: Run | None
    last_good: Run | None  # the last run that went through (ok or partial)
    next_run: str | None
    pending: Pending
    budget: Budget
    refused: int
    products: dict[str, int] = field(default_factory=dict)
    now: float = 0.0

    @property
    def since_good_s(self) -> float | None:
        if self.last_good is None or self.last_good.finished_at is None:
            return None
        return max(0.0, self.now - self.last_good.finished_at)


@dataclass(frozen=True, slots=True)
class Refused:
    """One page of refused products and the filter that chose them."""

    total: int  # matching the filter
    letters: list[DeadLetter]
    text: str
    stage: str
    offset: int
    limit: int

    @property
    def shown_to(self) -> int:
        return self.offset + len(self.letters)


def overview(ws: Workspace, *, wall_clock: float | None = None) -> Overview:
    settings = ws.settings
    now = time.time() if wall_clock is None else wall_clock
    cap = float(settings.budget.write_per_minute)
    path = settings.state.path
    if not path.exists():
        return Overview(
            name=ws.name,
            state_exists=False,
            last_run=None,
            last_good=None,
            next_run=ws.next_run(),
            pending=Pending({}, 0, ws.waiting(), None),
            budget=Budget(0, None, cap),
            refused=0,
            now=now,
        )
    mirror = Mirror(path, readonly=True)
    try:
        last = _runs(mirror, None, 1)
        good = _runs(mirror, "status IN ('ok', 'partial')", 1)
        products = mirror.counts_by_state()
        count, _oldest = mirror.oldest_dead_letter()
        fresh = freshness.from_metas(mirror, freshness.source_file(settings))
        pending = Pending(
            by_state={s: products.get(s, 0) for s in ("pending", "failed")},
            open_intents=len(mirror.open_intents()),
            queued=len(mirror.handed_keys()) + ws.waiting(),
            oldest_change_age_s=fresh.age_s(now),
        )
    finally:
        mirror.close()
    last_run = last[0] if last else None
    return Overview(
        name=ws.name,
        state_exists=True,
        last_run=last_run,
        last_good=good[0] if good else None,
        next_run=ws.next_run(),
        pending=pending,
        budget=_budget(last_run, cap),
        refused=count,
        products=products,
        now=now,
    )


def recent_runs(ws: Workspace, limit: int = RECENT_RUNS) -> list[Run]:
    """The last ``limit`` runs, newest first."""
    path = ws.settings.state.path
    if not path.exists():
        return []
    mirror = Mirror(path, readonly=True)
    try:
        return _runs(mirror, None, limit)
    finally:
        mirror.close()


def refused(
    ws: Workspace, *, text: str = "", stage: str = "", offset: int = 0, limit: int = PAGE_SIZE
) -> Refused:
    """The refused products matching the filter, one page of them."""
    path = ws.settings.state.path
    if not path.exists():
        return Refused(0, [], text, stage, 0, limit)
    mirror = Mirror(path, readonly=True)
    try:
        total, letters = deadletters.page(
            mirror.db, text=text, stage=stage, limit=limit, offset=offset
        )
    finally:
        mirror.close()
    return Refused(total, letters, text, stage, offset, limit)


def _runs(mirror: Mirror, where: str | None, limit: int) -> list[Run]:
    found = mirror.db.table("runs").rows_where(
        where,
        select="id, started_at, finished_at, status, exit_code, summary",
        order_by="id DESC",
        limit=limit,
    )
    runs = []
    for row in found:
        row["summary"] = json.loads(row["summary"]) if row["summary"] else None
        runs.append(Run.of(row))
    return runs


def _budget(run: Run | None, cap: float) -> Budget:
    if run is None:
        return Budget(0, None, cap)
    pace = None
    if run.duration_s and run.duration_s > 0:
        pace = run.writes * 60.0 / run.duration_s
    return Budget(run.writes, pace, cap)
