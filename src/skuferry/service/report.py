"""What people see: the progress bar, the run summary and the `status` output.

Everything that renders for a terminal lives here (rich); the engine only
returns data. Off a terminal the same facts go out as log events and JSON.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any

from skuferry import logs
from skuferry.models import OUTCOME_COUNTS, RunSummary, count_label
from skuferry.models import Progress as ProgressFn

if TYPE_CHECKING:  # the verbs import their machinery lazily (fast --help); the quick
    # lane prints its summary through here and loads no settings library
    from skuferry.config.schema import Settings
    from skuferry.state.mirror import Mirror

log = logs.get(__name__)


@contextmanager
def progress(*, enabled: bool, quiet: bool = False) -> Iterator[ProgressFn | None]:
    """A rich progress bar on stderr (items done/total, ETA) when ``enabled`` (on a
    terminal); else, unless ``quiet``, a ``sync.progress`` log event every 30 s."""
    if not enabled:  # off a terminal: rich is not even imported
        from skuferry.service.progress_log import ProgressLog

        yield None if quiet else ProgressLog()
        return
    from skuferry.service.progress import progress_bar  # time left told by the budget

    with progress_bar(enabled=enabled) as update:
        yield update


def print_summary(summary: RunSummary, *, stream: IO[str] | None = None) -> None:
    from rich.console import Console  # here, not at import: a --json run never loads rich
    from rich.table import Table

    console = Console(file=stream or sys.stdout, highlight=False, soft_wrap=True)
    data = summary.as_json()
    title = "plan (dry run)" if summary.dry_run else "sync"
    if summary.interrupted:
        title += " (interrupted)"
    table = Table(title=title, show_header=False, box=None, pad_edge=False)
    more = ("drift", "duplicates", "gone", "archived", "restored", "skipped")
    for name in (*OUTCOME_COUNTS, *more):
        if data[name] or name in ("created", "updated", "unchanged"):
            table.add_row(count_label(name, dry_run=summary.dry_run), f"{data[name]:,}")
    if summary.joins:  # [[join]]: read this run, or its unchanged index reused
        table.add_row("joins", ", ".join(f"{k} {v}" for k, v in sorted(summary.joins.items())))
    reqs = ", ".join(f"{k} {v}" for k, v in sorted(summary.requests.items()))
    table.add_row("requests", reqs or "none")
    if summary.rate_limited:
        table.add_row("rate limited (429)", str(summary.rate_limited))
    table.add_row("duration", f"{summary.duration_s:.1f} s")
    console.print(table)
    if summary.interrupted:
        console.print(
            "interrupted: stopped on request (Ctrl-C or SIGTERM); what was in flight is "
            "committed, products not sent yet go out with the next run",
            markup=False,
        )
    for note in summary.notes:
        console.print(f"note: {note}", markup=False)
    if summary.problems:
        console.print(f"[bold]{len(summary.problems)} problem(s):[/bold]")
        for p in summary.problems[:50]:
            console.print(f"  {_problem_line(p)}", markup=False)
        if len(summary.problems) > 50:
            console.print(
                f"  … and {len(summary.problems) - 50} more (see --json or `skuferry status`)"
            )


def _problem_line(problem: dict[str, Any]) -> str:
    """The reason, prefixed with what it does not name already (key, line)."""
    reason = str(problem["reason"])
    where = []
    if problem.get("key") and str(problem["key"]) not in reason:
        where.append(f"key {problem['key']}")
    if problem.get("line") and f"line {problem['line']}" not in reason:
        where.append(f"line {problem['line']}")
    return f"{', '.join(where)}: {reason}" if where else reason


def collect_status(settings: Settings, *, limit: int = 20) -> dict[str, Any]:
    from skuferry.state.mirror import Mirror

    path = settings.state.path
    if not path.exists():
        return {
            "state": str(path),
            "exists": False,
            "products": {},
            "runs": [],
            "rejected": [],
            "archived": [],
            "open_intents": [],
            "walked": False,
            "dead_letters": {"count": 0, "by_stage": {}, "oldest": None},
            "shape": None,
        }
    mirror = Mirror(path, readonly=True)
    try:
        runs = mirror.last_runs(limit)
        # The last run's problems include rows the mapping refused, which never reach the
        # products table; each run's own list stays out of the table of runs.
        last_problems: list[dict[str, Any]] = next(
            (r["summary"].get("problems", []) for r in runs if r["summary"]), []
        )
        for run in runs:
            if run["summary"]:
                run["summary"] = {k: v for k, v in run["summary"].items() if k != "problems"}
        return {
            "state": str(path),
            "exists": True,
            "products": mirror.counts_by_state(),
            "walked": mirror.walked(),
            "runs": runs,
            "rejected": mirror.rejected(limit),
            "archived": mirror.archived(limit),
            "last_run_problems": last_problems[:limit],
            "open_intents": [{"key": k, "digest": d} for k, d in mirror.open_intents()],
            "dead_letters": _dead_letters(mirror),
            "shape": _shape(mirror),
            "freshness": _freshness(settings, mirror),
            "keys": _keys(settings, mirror),
            "daemon": _daemon(mirror),
        }
    finally:
        mirror.close()


def _shape(mirror: Mirror) -> dict[str, Any]:
    """The source's shape as the state knows it (``state.shapes``): the run that learnt
    (or accepted) it, and the refusal holding the sync back, when one does."""
    status = mirror.shape_status()
    refused = status.refused
    return {
        "learned_run": status.learned_run,
        "learned_at": status.learned_at,
        "accepted": status.accepted,
        "held": status.held,
        "refused_run": refused.run_id if refused is not None else None,
        "refused_at": refused.at if refused is not None else None,
        "changes": [c.text for c in refused.breaking] if refused is not None else [],
    }


def _dead_letters(mirror: Mirror) -> dict[str, Any]:
    """The products left rejected or failed, waiting for ``skuferry retry`` (or a source
    fix): how many, by stage, and the one refused longest (``skuferry rejected`` lists all)."""
    count, oldest = mirror.oldest_dead_letter()
    by_stage = {stage: n for stage, n in mirror.dead_letter_counts().items() if n}
    return {
        "count": count,
        "by_stage": by_stage,
        "oldest": oldest.as_json() if oldest is not None else None,
    }


def _daemon(mirror: Mirror) -> dict[str, Any]:
    """What the daemon last published; ``running`` False once it stopped (or its pid is gone),
    and then no ``next_run``: a stopped daemon promises none."""
    pid = mirror.get_meta("daemon.pid")
    stopped = mirror.get_meta("daemon.stopped_at")
    running = pid is not None and _alive(pid)
    return {
        "schedule": mirror.get_meta("daemon.schedule"),
        "running": running,
        "next_run": mirror.get_meta("daemon.next_run") if running else None,
        "pid": pid if running else None,
        "stopped_at": float(stopped) if stopped else None,
    }


def _alive(pid: str) -> bool:
    """Whether the process is there (on this host: the state file is local to the daemon)."""
    import os

    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: there
    except (ValueError, OSError):
        return False
    return True


def _keys(settings: Settings, mirror: Mirror) -> dict[str, Any]:
    """The API keys by fingerprint (never the keys), and the pace learnt from 429s."""
    from skuferry.config.keys import fingerprint
    from skuferry.remote.scopes import PACE_META, learnt_paces

    budget = settings.budget
    limits = {"read": budget.read_per_minute, "write": budget.write_per_minute}
    if budget.egress_per_minute is not None:
        limits["egress"] = budget.egress_per_minute
    return {
        "fingerprints": [fingerprint(key) for key in settings.api_keys],
        "learnt_pace": learnt_paces(mirror.metas(PACE_META), limits, time.time()),
    }


def _freshness(settings: Settings, mirror: Any) -> dict[str, Any]:
    from skuferry.service import freshness

    fresh = freshness.from_metas(mirror, freshness.source_file(settings))
    age = fresh.age_s(time.time())
    return {
        "oldest_unsynced_change": fresh.oldest_unsynced_change,
        "oldest_unsynced_change_age_s": round(age, 1) if age is not None else None,
        "oldest_unsynced_change_kind": fresh.oldest_kind,
        "last_full_pull": fresh.last_full_pull,
    }


def _when(unix: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(unix))


def print_status(data: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False, soft_wrap=True)
    console.print(f"state: {data['state']}")
    if not data["exists"]:
        console.print("no state yet: nothing has been synced with this config")
        return
    products = data["products"]
    console.print(
        "products: " + (", ".join(f"{k} {v:,}" for k, v in sorted(products.items())) or "none")
    )
    daemon = data.get("daemon") or {}
    if daemon.get("running"):
        console.print(
            f"daemon: {daemon['schedule']}; next run {daemon.get('next_run') or 'unknown'}"
        )
    elif daemon.get("schedule"):
        when = f" since {_when(daemon['stopped_at'])}" if daemon.get("stopped_at") else ""
        console.print(f"daemon: not running{when} (was {daemon['schedule']})")
    fresh = data.get("freshness") or {}
    if fresh.get("oldest_unsynced_change") is not None:
        from skuferry.service import freshness

        console.print(
            f"oldest change the CMS may not have yet: "
            f"{_when(fresh['oldest_unsynced_change'])} "
            f"({fresh['oldest_unsynced_change_age_s']:,.0f} s ago; "
            f"{freshness.meaning(fresh.get('oldest_unsynced_change_kind'))})"
        )
    if fresh.get("last_full_pull") is not None:
        console.print(f"last full pull: {_when(fresh['last_full_pull'])}")
    keys = data.get("keys") or {}
    if len(keys.get("fingerprints", [])) > 1:
        console.print(f"api keys: {', '.join(keys['fingerprints'])} (fingerprints)")
    for scope, pace in (keys.get("learnt_pace") or {}).items():
        console.print(
            f"pace learnt from 429s: {scope} burst {pace['burst']:g}, "
            f"{pace['rate_factor']:.0%} of the configured rate"
        )
    if data["open_intents"]:
        console.print(
            f"open write intents (looked up before any re-send): {len(data['open_intents'])}"
        )
    _print_dead_letters(console, data.get("dead_letters") or {})
    shape = data.get("shape") or {}
    if shape.get("held"):
        run = f"run {shape['refused_run']}" if shape.get("refused_run") else "a run"
        console.print(
            f"shape: the source's shape changed ({run}, {_when(shape['refused_at'])}); "
            "nothing is written until the export is fixed or `skuferry accept-shape` "
            "accepts it:",
            markup=False,
        )
        for change in shape.get("changes") or []:
            console.print(f"  - {change}", markup=False)
    runs = Table(title="last runs", box=None, collapse_padding=True, pad_edge=False)
    for col in ("id", "started", "status", "exit", "created", "updated", "rejected", "failed", "s"):
        runs.add_column(col, no_wrap=col in ("started", "status"))  # a date on one line
    for r in data["runs"]:
        s = r.get("summary") or {}
        if isinstance(s, str):
            s = json.loads(s)
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["started_at"]))
        runs.add_row(
            str(r["id"]),
            started,
            str(r["status"]),
            str(r.get("exit_code")),
            *(str(s.get(k, "")) for k in ("created", "updated", "rejected", "failed")),
            str(s.get("duration_s", "")),
        )
    console.print(runs)
    if data.get("archived"):
        console.print("[bold]archived products (left the source; most recent first):[/bold]")
        for a in data["archived"]:
            console.print(f"  {a['key']} ({a['remote_id']}) since {_when(a['at'])}", markup=False)
    if data["rejected"]:
        console.print("[bold]products the API rejected (most recent first):[/bold]")
        for r in data["rejected"]:
            console.print(f"  {r['key']}: {r['reason']}", markup=False)
    if data.get("last_run_problems"):
        console.print("[bold]problems in the last run:[/bold]")
        for p in data["last_run_problems"]:
            console.print(f"  {_problem_line(p)}", markup=False)


def _print_dead_letters(console: Any, letters: dict[str, Any]) -> None:
    count = letters.get("count") or 0
    if not count:
        console.print("dead letters: none (nothing rejected or failed is waiting for retry)")
        return
    stages = ", ".join(f"{stage} {n:,}" for stage, n in (letters.get("by_stage") or {}).items())
    console.print(
        f"dead letters: {count:,} rejected or failed product(s) waiting for "
        f"`skuferry retry` ({stages}); `skuferry rejected` lists them",
        markup=False,
    )
    oldest = letters.get("oldest")
    if oldest:
        what = oldest["key"] if oldest["key"] is not None else f"line {oldest['line']}"
        console.print(
            f"  oldest: {what}, refused since {oldest['first_seen']} "
            f"({oldest['stage']}): {oldest['reason']}",
            markup=False,
        )
