"""One sync run: pull, plan, check-then-create, update, report.

    source ──map──▶ plan (pure) ──▶ PlanStore (temp table)
                                         │ guards: empty source, change ratio
                                         ▼
                  remote index (walk) ◀── only when a create's absence is not known, or --verify
                                         │ adopt / report duplicates / repair
                                         ▼
                                     Writer (pool, journalled) ──▶ second look for lost creates

Nothing is written, remote or local, before the whole source has been read and
planned: a source that fails halfway changes nothing.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skuferry import errors, logs
from skuferry.config.load import Settings
from skuferry.models import Action, Kind, Progress, RunSummary
from skuferry.remote.budget import Budget
from skuferry.remote.client import RemoteClient
from skuferry.sources.base import Source, open_source
from skuferry.state.lock import run_lock
from skuferry.state.mirror import Mirror
from skuferry.state.planstore import PlanStore
from skuferry.state.remoteindex import RemoteIndex
from skuferry.sync import check_then_create
from skuferry.sync.mapping import Mapper
from skuferry.sync.plan import plan
from skuferry.sync.writer import Writer

log = logs.get(__name__)

GUARD_MIN_UPDATES = 10  # below this many updates the change guard never trips


@dataclass
class Adapters:
    """The edges of a run, injectable for tests (in-memory fakes) and benchmarks."""

    source: Source | None = None
    client: Any = None  # RemoteClient-like: iter_pages, create/update/get_product, requests


def run_once(
    settings: Settings,
    *,
    dry_run: bool = False,
    verify: bool = False,
    force: bool = False,
    allow_empty_source: bool = False,
    stop: threading.Event | None = None,
    on_progress: Progress | None = None,
    adapters: Adapters | None = None,
) -> RunSummary:
    """Run one sync. Raises a SkuferryError when the run as a whole cannot proceed."""
    stop = stop or threading.Event()
    adapters = adapters or Adapters()
    started = time.monotonic()
    summary = RunSummary(dry_run=dry_run)
    state_path = settings.state.path
    with ExitStack() as stack:
        if not dry_run:
            stack.enter_context(run_lock(state_path))
        mirror = Mirror(state_path, readonly=dry_run)
        stack.callback(mirror.close)
        run_id = None if dry_run else mirror.start_run()
        try:
            _run(
                settings,
                mirror,
                summary,
                run_id=run_id,
                verify=verify,
                force=force,
                allow_empty_source=allow_empty_source,
                stop=stop,
                on_progress=on_progress,
                adapters=adapters,
                stack=stack,
            )
        except errors.SkuferryError as exc:
            summary.duration_s = time.monotonic() - started
            if run_id is not None:
                mirror.finish_run(
                    run_id,
                    status="error",
                    exit_code=exc.exit_code,
                    summary={**summary.as_json(), "error": str(exc)},
                )
            raise
        summary.duration_s = time.monotonic() - started
        if run_id is not None:
            status = (
                "interrupted" if summary.interrupted else ("ok" if summary.clean else "partial")
            )
            mirror.finish_run(
                run_id, status=status, exit_code=exit_code(summary), summary=summary.as_json()
            )
    log.info("sync.finished", **{k: v for k, v in summary.as_json().items() if k != "problems"})
    return summary


def exit_code(summary: RunSummary) -> int:
    if summary.interrupted:
        return errors.EXIT_INTERRUPTED
    return errors.EXIT_OK if summary.clean else errors.EXIT_PARTIAL


def _run(
    settings: Settings,
    mirror: Mirror,
    summary: RunSummary,
    *,
    run_id: int | None,
    verify: bool,
    force: bool,
    allow_empty_source: bool,
    stop: threading.Event,
    on_progress: Progress | None,
    adapters: Adapters,
    stack: ExitStack,
) -> None:
    source = adapters.source or open_source(settings.source)
    mapper = Mapper(settings.mapping, source_name=_short_name(source))
    store = PlanStore(mirror.db.conn)
    stack.callback(store.close)
    log.info("sync.plan.started", source=source.describe())
    store.fill(
        plan(
            source.records(),
            mirror.lookup(),
            walked=mirror.walked(),
            seen=mirror.seen_table(),
            mapper=mapper,
        )
    )
    counts = store.counts()
    _count_plan(store, counts, summary)
    _guards(settings, mirror, store, counts, force=force, allow_empty_source=allow_empty_source)

    if summary.dry_run:
        _dry_run_report(settings, store, counts, summary, verify=verify)
        return

    client = adapters.client or _client(settings, stop, stack)
    index: RemoteIndex | None = None
    orphans = check_then_create.orphan_intents(store, mirror)
    if verify or orphans or store.needs_lookup():
        index = check_then_create.walk(client, mirror, settings, on_progress)
        stack.callback(index.close)
        check_then_create.settle(orphans, index, mirror)

    total = counts[Kind.CREATE] + counts[Kind.UPDATE]
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if on_progress:
            on_progress(done, max(total, done))

    writer = Writer(
        client,
        mirror,
        run_id=run_id,
        update_method=settings.api.update_method,
        max_in_flight=settings.api.max_in_flight,
        stop=stop,
        on_done=tick,
    )
    writes: Iterator[Action] = store.actions(Kind.CREATE, Kind.UPDATE)
    checked: check_then_create.Checked | None = None
    if index is not None:
        checked = check_then_create.Checked(index, mirror, summary)
        stack.callback(checked.flush)  # also when the writer stops early
        writes = checked(writes)
        if verify:
            writes = itertools.chain(
                writes, check_then_create.repairs(store, index, mirror, summary)
            )
    try:
        writer.run(writes)
        if checked is not None:
            checked.flush()
        results = writer.results
        if results.fatal is None and not stop.is_set() and (results.unknown or results.missing):
            check_then_create.second_look(client, writer, mirror, settings, summary)
    finally:
        _collect(writer, summary, client)
    mirror.mark_gone(store.keys(Kind.GONE))
    mirror.remember_fingerprints(store.fingerprints())  # next time: recognised, not mapped
    mirror.mark_in_step(store.keys(Kind.UNCHANGED))  # gone or drifted products back in step
    summary.interrupted = stop.is_set()
    if writer.results.fatal is not None:
        raise writer.results.fatal


def _short_name(source: Source) -> str:
    """A file's basename (as the source's own messages use), a URL as it is."""
    where = source.describe()
    if "://" in where:
        return next(t for t in where.split() if "://" in t)  # the URL, no "http "/"sql " label
    return Path(where).name


def _client(settings: Settings, stop: threading.Event, stack: ExitStack) -> RemoteClient:
    budget = Budget.from_settings(settings.budget, settings.state.path)
    stack.callback(budget.close)
    client = RemoteClient(
        base_url=settings.api.base_url,
        api_key=settings.api_key(),
        timeout_s=settings.api.timeout_s,
        budget=budget,
        max_retries=settings.api.max_retries,
        max_connections=settings.api.max_in_flight + 2,
        stop=stop,
    )
    stack.callback(client.close)
    return client


def _count_plan(store: PlanStore, counts: dict[Kind, int], summary: RunSummary) -> None:
    summary.unchanged = counts[Kind.UNCHANGED]
    summary.rejected = counts[Kind.REJECT] + counts[Kind.STILL_REJECTED]
    summary.gone = counts[Kind.GONE]
    for action in store.actions(Kind.REJECT, Kind.STILL_REJECTED):
        summary.add_problem(
            action.key,
            action.line,
            action.reason or "rejected earlier; not resent until its data change",
        )
    if counts[Kind.GONE]:
        summary.notes.append(
            f"{counts[Kind.GONE]} product(s) are no longer in the source; they stay on the "
            "remote (the API has no DELETE for products) and are marked gone"
        )


def _guards(
    settings: Settings,
    mirror: Mirror,
    store: PlanStore,
    counts: dict[Kind, int],
    *,
    force: bool,
    allow_empty_source: bool,
) -> None:
    known = mirror.count()
    valid = sum(counts[k] for k in (Kind.CREATE, Kind.UPDATE, Kind.UNCHANGED, Kind.STILL_REJECTED))
    if valid == 0 and known and not allow_empty_source:
        what = (
            "the source is empty"
            if store.records == 0
            else f"none of the source's {store.records} records is valid"
        )
        raise errors.EmptySourceRefused(
            f"{what} but the mirror holds {known} products: refusing to treat the whole "
            "catalog as gone (a failed export, a renamed column?). "
            "Pass --allow-empty-source if this is intended."
        )
    updates = counts[Kind.UPDATE]
    ratio = settings.safety.max_change_ratio
    if known and updates > GUARD_MIN_UPDATES and updates / known > ratio and not force:
        raise errors.ChangeGuardTripped(
            f"{updates} of {known} known products ({updates / known:.0%}) would be updated, "
            f"more than [safety] max_change_ratio = {ratio}: nothing was written. "
            "Check the export, then run again with --force if the change is real."
        )


def _dry_run_report(
    settings: Settings,
    store: PlanStore,
    counts: dict[Kind, int],
    summary: RunSummary,
    *,
    verify: bool,
) -> None:
    summary.created = counts[Kind.CREATE]
    summary.updated = counts[Kind.UPDATE]
    writes = summary.created + summary.updated
    per_min = settings.budget.write_per_minute
    minutes = writes / per_min if per_min else 0.0
    summary.notes.append(
        f"dry run: {summary.created:,} creates and {summary.updated:,} updates at "
        f"{per_min}/min ≈ {_human_minutes(minutes)}; nothing was written"
    )
    if store.needs_lookup() or verify:
        summary.notes.append(
            "a remote walk (1 read per 100 products) would run first to look up existing products"
        )


def _human_minutes(minutes: float) -> str:
    if minutes < 1:
        return f"{minutes * 60:.0f} s"
    if minutes < 120:
        return f"{minutes:.0f} min"
    return f"{minutes / 60:.1f} h"


def _collect(writer: Writer, summary: RunSummary, client: Any) -> None:
    results = writer.results
    summary.created += results.created
    summary.updated += results.updated
    summary.drift += results.drift
    summary.rejected += len(results.rejected)
    for item in results.rejected:
        summary.add_problem(item["key"], item["line"], item["reason"])
    failed = dict(results.failed)
    for product in results.unknown + results.missing:
        failed.setdefault(product.key, "outcome unknown; will be looked up before any re-send")
    summary.failed = len(failed)
    for key, reason in failed.items():
        summary.add_problem(key, None, reason)
    summary.notes.extend(results.notes)
    requests = getattr(client, "requests", None)
    if requests:
        summary.requests = dict(requests)
    summary.rate_limited = int(getattr(client, "rate_limited", 0))
