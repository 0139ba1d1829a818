"""``skuferry undo RUN``: a run of its own that puts back on the CMS what run RUN changed.

    history of RUN ──by key──▶ read each product by id ──▶ plan.undoing.step (pure)
                                                                 │
             UndoWriter (pool, journalled, budgeted) ◀───────────┘ put back / archive
                                                                 │
                          read back what was lost (settle) ──────┘

An undo is journalled, budgeted and settled as any run (the write stage's writer, the
run's client and its budgets), recorded in the runs table as a run of kind ``undo``
(its writes have history rows: it can itself be undone), and safe to cut short: run
again, it goes on under the same run id, and what is back already is not written twice
(each product is read first). It refuses the feed RUN read from then on
(``read.undone``: by its skip token and by its content), and forgets the skip token,
so the next run reads the source and says why it stops. A dry run reads the products
and says exactly what would be written, and writes nothing, remote or local.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from skuferry import errors, logs
from skuferry.config.schema import Settings
from skuferry.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_PARTIAL
from skuferry.models import Action, Progress, RunOptions, RunSummary
from skuferry.state.mirror import Mirror
from skuferry.sync import skip
from skuferry.sync.context import Adapters, RunContext, open_mirror
from skuferry.sync.plan import undoing
from skuferry.sync.plan.undoing import Step
from skuferry.sync.read import undone
from skuferry.sync.write import settle
from skuferry.sync.write.doubt import Doubts
from skuferry.sync.write.put_back import UndoWriter
from skuferry.sync.write.stage import count_requests

log = logs.get(__name__)

UNFINISHED = ("running", "error", "interrupted")


@dataclass
class UndoReport:
    """What an undo did (or, dry, would do), product by product."""

    undoes: int
    run_id: int | None  # the undo's own run (None: a dry run)
    dry_run: bool
    summary: RunSummary  # the writes: counts, refusals, failures, requests
    steps: list[Step] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # --only keys the run did not write
    notes: list[str] = field(default_factory=list)
    resumed: bool = False

    def count(self, what: str) -> int:
        return sum(1 for s in self.steps if _outcome(s, self) == what)

    @property
    def status(self) -> str:
        if self.summary.interrupted:
            return "interrupted"
        problems = ("left", "listed", "failed", "gone")
        clean = not self.missing and not any(self.count(p) for p in problems)
        return "ok" if clean and self.summary.clean else "partial"

    @property
    def exit_code(self) -> int:
        return {"ok": EXIT_OK, "partial": EXIT_PARTIAL, "interrupted": EXIT_INTERRUPTED}[
            self.status
        ]

    def as_json(self) -> dict[str, Any]:
        outcomes = ("put_back", "archived", "already", "left", "listed", "failed", "gone")
        return {
            "run_id": self.run_id,
            "undoes": self.undoes,
            "dry_run": self.dry_run,
            "status": self.status,
            "resumed": self.resumed,
            "products": len(self.steps),
            **{name: self.count(name) for name in outcomes},
            "not_applied": self.count("not_applied"),
            "requests": dict(self.summary.requests),
            "duration_s": round(self.summary.duration_s, 3),
            "interrupted": self.summary.interrupted,
            "missing": list(self.missing),
            "notes": [*self.notes, *self.summary.notes],
            "problems": list(self.summary.problems),
            "changes": [_step_json(s, self) for s in self.steps],
        }


def _outcome(step: Step, report: UndoReport) -> str:
    """One product's outcome word: put_back (or would), archived, already, left, listed,
    failed, gone (no longer on the CMS), not_applied (the run's write never landed)."""
    failed = {p["key"] for p in report.summary.problems}
    if step.key in failed:
        return "failed"
    if step.action == undoing.LIST:
        return "listed"
    if step.action == undoing.WRITE:
        return "left" if step.left else "put_back"
    if step.action == undoing.ARCHIVE:
        return "archived"
    if step.reason.startswith("no longer"):
        return "gone"
    if step.reason.startswith("run "):
        return "not_applied"
    return "left" if step.left else "already"


def _step_json(step: Step, report: UndoReport) -> dict[str, Any]:
    return {
        "key": step.key,
        "remote_id": step.remote_id,
        "did": step.kind,  # what the undone run did
        "action": step.action,  # put_back | archive | list | none
        "outcome": _outcome(step, report),
        "reason": step.reason,
        "fields": [
            {
                "field": f.name,
                "sent": f.sent,  # what the undone run sent
                "back": f.back if f.known else None,  # the value put back
                "known": f.known,
                "now": f.now,  # what the CMS held when read
                "result": f.result,  # put_back | already | left
                "reason": f.reason,
            }
            for f in step.fields
        ],
    }


def undo_run(
    settings: Settings,
    run: int,
    *,
    dry_run: bool = False,
    only: tuple[str, ...] | None = None,
    stop: threading.Event | None = None,
    on_progress: Progress | None = None,
    adapters: Adapters | None = None,
) -> UndoReport:
    """Put back what run ``run`` changed (``only``: those keys). Raises a SkuferryError
    when it cannot proceed (no such run, its history pruned, the API unreachable)."""
    adapters = adapters or Adapters()
    started = time.monotonic()
    summary = RunSummary(dry_run=dry_run)
    with ExitStack() as stack:
        mirror = open_mirror(stack, settings, adapters, dry_run=dry_run)
        undone_row = _the_run(mirror, run, settings)
        report = UndoReport(run, None, dry_run, summary)
        if not dry_run:
            report.run_id, report.resumed = _open(mirror, run)
            summary.run_id = report.run_id
        context = RunContext(
            settings,
            RunOptions(dry_run=dry_run),
            mirror,
            summary,
            stack,
            stop or threading.Event(),
            adapters,
            on_progress=on_progress,
            run_id=report.run_id,
        )
        try:
            if not dry_run:
                _refuse_the_feed(mirror, undone_row, report)
            _undo(context, report, run, only)
        except errors.SkuferryError as exc:
            summary.duration_s = time.monotonic() - started
            if report.run_id is not None:
                data = {**report.as_json(), "error": str(exc)}
                mirror.finish_run(
                    report.run_id, status="error", exit_code=exc.exit_code, summary=data
                )
            raise
        summary.duration_s = time.monotonic() - started
        if report.run_id is not None:
            mirror.finish_run(
                report.run_id,
                status=report.status,
                exit_code=report.exit_code,
                summary={k: v for k, v in report.as_json().items() if k != "changes"},
            )
    log.info(
        "sync.undo.finished",
        **{k: v for k, v in report.as_json().items() if k not in ("changes", "problems")},
    )
    return report


def _the_run(mirror: Mirror, run: int, settings: Settings) -> dict[str, Any]:
    """The row of the run to undo, or the reason it cannot be."""
    if not mirror.keep_history:
        raise errors.UsageError(
            "[state] history_days = 0 keeps no history of writes: there is nothing to undo"
        )
    found = mirror.run_row(run)
    if found is None or run <= mirror.history_pruned_through():
        pruned = run <= mirror.history_pruned_through()
        why = (
            f"its history is older than [state] history_days ({settings.state.history_days}) "
            "or beyond history_max_rows, and was pruned"
            if pruned
            else f"the state file {settings.state.path} holds no run {run}"
        )
        raise errors.UsageError(f"run {run} cannot be undone: {why} (see skuferry status)")
    return found


def _open(mirror: Mirror, run: int) -> tuple[int, bool]:
    """The undo's own run: an undo of ``run`` cut short goes on under its id."""
    for earlier in mirror.undos_of(run)[:1]:
        if earlier["status"] in UNFINISHED:
            mirror.resume_run(earlier["id"])
            log.info("sync.undo.resumed", run=run, undo=earlier["id"])
            return earlier["id"], True
    return mirror.start_run(kind="undo", undoes=run), False


def _refuse_the_feed(mirror: Mirror, row: dict[str, Any], report: UndoReport) -> None:
    """From now on the feed the run read is refused; the undo of an undo lets its feed go.
    The skip token goes: the next run reads the source (and says why it stops)."""
    skip.forget(mirror)
    undo_id = report.run_id or 0
    if row["kind"] == "undo":
        for lifted in undone.lift(mirror, undo=row["id"]):
            report.notes.append(
                f"the feed of run {lifted.run} is no longer refused: run {row['id']}, which "
                "took it back, is undone"
            )
        return
    if undone.mark(mirror, row["token"], feed=row["feed"], run=row["id"], undo=undo_id):
        report.notes.append(
            f"the feed run {row['id']} read is refused from now on: the next runs stop (exit 2) "
            "until the export or the config changes, or sync --force"
        )
    else:
        report.notes.append(
            f"run {row['id']}'s feed cannot be recognised (it read only part of the source: "
            "an incremental window or keys fetched one by one, without a change token): a run "
            "over the same export would write it again; fix the export before the next run"
        )


def _undo(context: RunContext, report: UndoReport, run: int, only: tuple[str, ...] | None) -> None:
    mirror, settings = context.mirror, context.settings
    entries = mirror.run_entries(run, list(only) if only is not None else None)
    by_key = [(key, list(rows)) for key, rows in itertools.groupby(entries, key=lambda e: e.key)]
    if only is not None:
        written = {key for key, _ in by_key}
        report.missing = [k for k in only if k not in written]
        for key in report.missing:
            context.summary.add_problem(key, None, f"run {run} did not write this product")
    if not by_key:
        report.notes.append(f"run {run} wrote nothing to undo")
        return
    client = context.client()
    policy = context.gone_policy
    patch = dict(policy.patch) if policy.archiving is not None else None
    total = len(by_key)
    tick = _ticker(context.on_progress, total)

    def steps() -> Iterator[Step]:
        for key, rows in by_key:
            if context.stop.is_set():
                return
            step = _step(client, undoing.written(key, rows), run, patch, dict(policy.restore))
            report.steps.append(step)
            tick()
            yield step

    if context.dry_run:
        for _ in steps():
            pass
        context.summary.requests = dict(client.requests)
        report.summary.interrupted = context.stop.is_set()
        return
    writer = UndoWriter(
        client,
        mirror,
        run_id=report.run_id,
        update_method=settings.api.update_method,
        max_in_flight=settings.api.max_in_flight,
        stop=context.stop,
        ownership=context.ownership,
        gone=policy,
        summary=context.summary,
        doubts=Doubts(bound_s=settings.api.list_lag_s),
        clock=context.clock,
    )
    try:
        writer.run(_actions(writer, steps()))
        settle.settle(client, writer, mirror, rounds=max(1, settings.api.max_retries))
    finally:
        settle.give_up(writer, mirror)
        context.summary.close()
        count_requests(client, context.summary)
    for key, late in writer.late.items():
        report.notes.append(
            f"{key}: " + "; ".join(f"{f.name} {f.reason}" for f in late) + " (left)"
        )
    context.summary.interrupted = context.stop.is_set()
    if writer.fatal is not None:
        raise writer.fatal


def _actions(writer: UndoWriter, steps: Iterable[Step]) -> Iterator[Action]:
    """The steps that write, as the writer's actions (a step with nothing to send but a
    row to set, say every field already back, goes too: it needs no request)."""
    for step in steps:
        if step.action in (undoing.WRITE, undoing.ARCHIVE):
            yield writer.action(step)
        elif step.target is not None and step.fields and not step.left:
            yield writer.action(step)  # all back already: the row set, no request


def _step(
    client: Any,
    done: undoing.Written,
    run: int,
    patch: dict[str, Any] | None,
    restore: dict[str, Any],
) -> Step:
    """Read the product by id, then the pure step."""
    remote: dict[str, Any] | None = None
    if not done.refused and done.remote_id is not None:
        try:
            remote = client.get_product(done.remote_id)
        except errors.NotFound:
            remote = None
    return undoing.step(done, remote, run=run, patch=patch, restore=restore)


def _ticker(on_progress: Progress | None, total: int) -> Any:
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if on_progress is not None:
            on_progress(done, total)

    return tick


__all__ = ["UndoReport", "undo_run"]
