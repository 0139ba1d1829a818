"""One sync run: the stages composed, read > map > plan > write.

    source ──read (pull or named keys; the skip decision)──▶ map ──▶ plan (pure)
                                                                        │
                                   PlanStore (temp table) ◀─────────────┘
                                         │ guards: empty source, change ratio, gone ratio
                                         ▼
                  remote index (walk) ◀── only when a create's absence is not known, or --verify
                                         │ adopt / report duplicates / repair
                                         ▼
                                     Writer (pool, journalled) ──▶ second look for lost creates

Before anything is read: the CMS is the one the state file mirrors (``write.workspace``).
While the records are read, their shape is held to the contract the state learnt
(``read.shape``): a broken one ends the run before the plan is done, nothing written.

The run's context is built once from the settings; each stage takes from it what it
reads and fills its own part of the summary. Nothing is written, remote or local, before
the whole source has been read and planned: a source that fails halfway changes nothing.
"""

from __future__ import annotations

import contextlib
import threading
import time
from contextlib import ExitStack

from skuferry import errors, logs
from skuferry.config.schema import Settings
from skuferry.models import Kind, Progress, RunOptions, RunSummary
from skuferry.state.mirror import Mirror
from skuferry.sync import skip
from skuferry.sync.accept import accept
from skuferry.sync.context import Adapters, RunContext, open_mirror
from skuferry.sync.map import stage as map_stage
from skuferry.sync.plan import stage as plan_stage
from skuferry.sync.read import incremental
from skuferry.sync.read import stage as read_stage
from skuferry.sync.write import stage as write_stage
from skuferry.sync.write import workspace

__all__ = ["Adapters", "run_once"]

log = logs.get(__name__)


def run_once(
    settings: Settings,
    options: RunOptions | None = None,
    *,
    stop: threading.Event | None = None,
    on_progress: Progress | None = None,
    adapters: Adapters | None = None,
) -> RunSummary:
    """Run one sync. Raises a SkuferryError when the run as a whole cannot proceed.

    ``options``: the run's flags; ``adapters``: what a caller brings instead of the
    settings' own (a source, a client, a clock, the daemon's urgent inbox).
    """
    options = options or RunOptions()
    dry_run = options.dry_run
    adapters = adapters or Adapters()
    started = time.monotonic()
    summary = RunSummary(dry_run=dry_run)
    with ExitStack() as stack:
        mirror = open_mirror(stack, settings, adapters, dry_run=dry_run)
        run = RunContext(
            settings,
            options,
            mirror,
            summary,
            stack,
            stop or threading.Event(),
            adapters,
            on_progress=on_progress,
            run_id=None if dry_run else mirror.start_run(),
        )
        summary.run_id = run.run_id
        try:
            if options.accept_shape and not dry_run:  # the new shape is the contract first
                accepted = accept(
                    settings, mirror, adapters, stack=stack, stop=run.stop, run_id=run.run_id
                )
                summary.notes.append(accepted.note())
            _run(run)
        except errors.SkuferryError as exc:
            summary.duration_s = time.monotonic() - started
            skip.record(mirror, run.run_id, summary, error=exc)
            raise
        summary.duration_s = time.monotonic() - started
        skip.record(mirror, run.run_id, summary)
        if not dry_run:
            prune(mirror, settings)
    skip.finished(summary)
    return summary


def prune(mirror: Mirror, settings: Settings) -> None:
    """The history beyond ``[state] history_days`` and ``history_max_rows``, whole runs at a
    time, after a run ends (a few indexed reads when there is nothing to prune)."""
    state = settings.state
    deleted = mirror.prune_history(days=state.history_days, max_rows=state.history_max_rows)
    if deleted:
        log.info("state.history.pruned", rows=deleted)


def _run(run: RunContext) -> None:
    """Read, plan, write: nothing is written before the whole source was read and planned."""
    workspace.bind(run)  # the CMS is the one the state mirrors, before anything is decided
    options = run.options
    base, source, mapper = map_stage.open_mapped(
        run,
        run.stack,
        readonly=options.dry_run,
        ledger=run.ledger,  # each join's verdict
        allow_empty=options.allow_empty_source,  # ... and an empty join refused, unless
    )
    read = read_stage.begin(run, base, source, mapper)
    if read.skips:  # nothing read or planned; the auth check still runs
        read_stage.skipped_unchanged(run, read)
        write_stage.check_auth(run)
        return
    mirror, summary = run.mirror, run.summary
    store = run.stack.enter_context(contextlib.closing(mirror.plan_store()))
    counts, tally = plan_stage.fill(run, store, read, mapper)
    read_stage.feed_read(run, read)  # an undone feed is refused here, even without a token
    plan_stage.report(summary, store, counts, tally)
    read_stage.report(summary, read)
    plan_stage.guard(run, store, counts, read)
    if run.dry_run:
        plan_stage.dry_run_report(run, store, counts)
        return
    plan_stage.note_refusals(run, store, read)
    if read.pull is not None:
        incremental.note_pending(
            mirror, read.pull, writes=counts[Kind.CREATE] + counts[Kind.UPDATE]
        )
    # Gone or drifted products back in step are SYNCED before --verify reads the synced rows,
    # so a remote edit made while they were away is put right too.
    mirror.mark_in_step(store.keys(Kind.UNCHANGED))
    write_stage.write(run, store, read, mapper, counts)
    read_stage.commit(run, read)  # all writes committed: the next window starts at its start
