"""What the page shows of a workspace, read from its state file, read-only.

Each page opens the state file with ``mode=ro`` (``Mirror(readonly=True)``) and closes it
before rendering: the page takes no lock and writes nothing, so it never holds up a run
(SQLite's WAL lets a reader and the run's writer go side by side). Everything here is
plain data for the templates.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skuferry.config.schedule import DEFAULT_INTERVAL_MINUTES
from skuferry.errors import StateError
from skuferry.service import freshness
from skuferry.service.console.workspace import Workspace
from skuferry.service.degraded import Degraded
from skuferry.state import deadletters
from skuferry.state.deadletters import DeadLetter
from skuferry.state.mirror import Mirror

if TYPE_CHECKING:
    from skuferry.config.schema import Settings

COUNTS = ("created", "updated", "unchanged", "rejected", "failed")
RECENT_RUNS = 30
PAGE_SIZE = 200  # refused products per page
COMPLETED = ("ok", "partial")  # the run went through (partial: some products refused)
STATES = ("failing", "stale", "running", "new", "ok")  # worst first: the front page's order
STALE_DEFAULT_S = 26 * 3600.0  # a cron schedule: a daily run, and an hour's grace
PACE_MIN_S = 60.0  # a run shorter than this has no per-minute pace worth showing


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
    """The write budget as the limiter sees it now, and the last run's writes.

    ``used`` of ``allowance`` is read from the budget's own ledger (``Budget.snapshot``,
    the decision's home): with the ``window`` limiter the writes sent in its sliding
    window (the last minute and its clock-skew margin), with ``bucket`` the tokens
    spent of its capacity. A run's own pace is given only when the run lasted at least
    ``PACE_MIN_S``: a second's writes divided by a second say nothing of a per-minute cap.
    """

    limiter: str  # window | bucket
    cap_per_minute: float
    used: int | None = None  # None: the ledger could not be read
    allowance: int = 0
    blocked_until: float | None = None  # the CMS answered 429: nothing is sent before
    run_writes: int = 0
    run_duration_s: float | None = None

    @property
    def percent(self) -> int | None:
        if self.used is None or not self.allowance:
            return None
        return round(100 * self.used / self.allowance)

    @property
    def run_per_minute(self) -> float | None:
        """The last run's writes per minute, when it lasted long enough to mean one."""
        if self.run_duration_s is None or self.run_duration_s < PACE_MIN_S:
            return None
        return self.run_writes * 60.0 / self.run_duration_s

    @property
    def now_words(self) -> str:
        """``12 writes in the last minute, of 60 allowed (20 %)``, as the limiter counts."""
        cap = f"{self.cap_per_minute:.0f}/min"
        if self.used is None:
            return f"cap {cap}"
        if self.limiter == "bucket":
            return (
                f"{writes(self.used)} spent of a {self.allowance:,}-write bucket "
                f"({self.percent} %), refilled at {cap}"
            )
        return (
            f"{writes(self.used)} in the last minute, of {self.allowance:,} allowed "
            f"({self.percent} %)"
        )

    @property
    def short_words(self) -> str:
        """The front page's cell: ``12 of 60 (20 %)`` (``now_words`` says it in full)."""
        if self.used is None:
            return f"cap {self.cap_per_minute:.0f}/min"
        return f"{self.used:,} of {self.allowance:,} ({self.percent} %)"

    @property
    def run_words(self) -> str:
        """The last run's writes, and their pace over a long enough run."""
        if self.run_duration_s is None:
            return ""
        pace = self.run_per_minute
        took = f" in {self.run_duration_s:.1f} s" if self.run_duration_s < PACE_MIN_S else ""
        rate = f" ({pace:.0f}/min)" if pace is not None else ""
        return f"last run: {writes(self.run_writes)}{took}{rate}"


def writes(n: int) -> str:
    return f"{n:,} write" if n == 1 else f"{n:,} writes"


@dataclass(frozen=True, slots=True)
class Pending:
    """Work the state file knows is waiting for the next run."""

    by_state: dict[str, int]  # pending (a create in doubt), failed (retried next run)
    open_intents: int
    queued: int  # keys handed to the next run (hooks, ``retry`` beside a run, the page)
    oldest_change_age_s: float | None  # the oldest change the CMS may not have yet
    oldest_change_means: str = "none known"  # what that change is (``Freshness.what``)

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
    stale_after_s: float = STALE_DEFAULT_S
    degraded: Degraded | None = None  # the last config reload failed: the old one runs
    late_s: float | None = None  # its run due has waited this long for a slot (a fleet)

    @property
    def since_good_s(self) -> float | None:
        if self.last_good is None or self.last_good.finished_at is None:
            return None
        return max(0.0, self.now - self.last_good.finished_at)

    @property
    def state(self) -> str:
        """One word for the front page, worst first (``STATES``): ``failing`` (the last
        run ended in an error), ``stale`` (no good run for ``stale_after_s``), ``running``,
        ``new`` (no run yet), ``ok``."""
        last = self.last_run
        if last is None:
            return "new"
        if last.status == "running":
            return "running"
        if last.status == "error":
            return "failing"
        since = self.since_good_s
        if since is None or since > self.stale_after_s:
            return "stale"
        return "ok"

    @property
    def rank(self) -> tuple[int, str]:
        """The front page's order: the worst state first, then by name."""
        return STATES.index(self.state), self.name


@dataclass(frozen=True, slots=True)
class Totals:
    """The front page's head: every workspace the process serves, added up."""

    workspaces: int
    by_state: dict[str, int]  # STATES, worst first, each counted (0 included)
    last_runs: dict[str, int]  # COUNTS summed over each workspace's last run
    refused: int
    pending: int

    @classmethod
    def of(cls, rows: Sequence[Overview]) -> Totals:
        by_state = dict.fromkeys(STATES, 0)
        last_runs = dict.fromkeys(COUNTS, 0)
        for o in rows:
            by_state[o.state] += 1
            if o.last_run is not None:
                for name in COUNTS:
                    last_runs[name] += o.last_run.counts[name]
        return cls(
            workspaces=len(rows),
            by_state=by_state,
            last_runs=last_runs,
            refused=sum(o.refused for o in rows),
            pending=sum(o.pending.total for o in rows),
        )


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
    path = settings.state.path
    if not path.exists():
        return Overview(
            name=ws.name,
            state_exists=False,
            last_run=None,
            last_good=None,
            next_run=ws.next_run(),
            pending=Pending({}, 0, ws.waiting(), None),
            budget=budget(settings, None),
            refused=0,
            now=now,
            stale_after_s=stale_after(settings),
            degraded=ws.degraded(),
            late_s=ws.waiting_for_slot_s(),
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
            oldest_change_means=fresh.what,
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
        budget=budget(settings, last_run),
        refused=count,
        products=products,
        now=now,
        stale_after_s=stale_after(settings),
        degraded=ws.degraded(),
        late_s=ws.waiting_for_slot_s(),
    )


def stale_after(settings: Settings) -> float:
    """How long without a good run makes a workspace stale: two of its intervals (at least
    ten minutes), or a day and an hour with a cron schedule."""
    schedule = settings.schedule
    if schedule.cron:
        return STALE_DEFAULT_S
    minutes = schedule.interval_minutes or DEFAULT_INTERVAL_MINUTES
    return max(600.0, 2 * 60.0 * minutes)


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


def budget(settings: Settings, run: Run | None, *, path: Path | None = None) -> Budget:
    """The write budget now, from the state's budget ledger read-only, and ``run``'s writes.

    The figures are the limiter's own (``Budget.snapshot``): one key's write scope, or
    with several keys their scopes together, or the workspace's cap when it binds more.
    """
    from skuferry.config.keys import fingerprint
    from skuferry.remote.budget import Budget as Limiter
    from skuferry.state.budgetbook import BudgetBook
    from skuferry.state.statefile import open_readonly

    conf = settings.budget
    base = Budget(
        limiter=conf.limiter,
        cap_per_minute=float(conf.write_per_minute),
        run_writes=run.writes if run is not None else 0,
        run_duration_s=run.duration_s if run is not None else None,
    )
    state = settings.state.path if path is None else path
    if not state.exists():
        return base
    keys = [fingerprint(key) for key in settings.api_keys]
    try:
        with Limiter.from_settings(
            conf, BudgetBook(functools.partial(open_readonly, state)), keys=keys
        ) as limiter:
            scopes = limiter.snapshot()
    except (StateError, sqlite3.Error, ValueError):
        return base
    mine = {n: e for n, e in scopes.items() if n == "write" or n.startswith("write@")}
    groups = [[e for n, e in mine.items() if n != "write@workspace"]]
    if "write@workspace" in mine:
        groups.append([mine["write@workspace"]])
    figures = []
    now = time.time()
    blocked = max((e["blocked_until"] for e in mine.values()), default=0.0)
    for group in groups:
        allowance = sum(e["capacity"] for e in group)
        available = sum(e["available"] for e in group if e["blocked_until"] <= now)
        used = sum(e["capacity"] for e in group if e["blocked_until"] <= now) - available
        figures.append((used / allowance if allowance else 0.0, round(used), round(allowance)))
    _ratio, used, allowance = max(figures)
    return replace(
        base, used=used, allowance=allowance, blocked_until=blocked if blocked > now else None
    )
