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

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skuferry import canonical, errors, logs
from skuferry.budget import Budget
from skuferry.lock import run_lock
from skuferry.mapping import Mapper
from skuferry.mirror import Mirror
from skuferry.models import Action, Kind, Product, RunSummary
from skuferry.plan import plan
from skuferry.planstore import PlanStore
from skuferry.remote import RemoteClient
from skuferry.remoteindex import RemoteIndex
from skuferry.settings import Settings
from skuferry.sources.base import Source, open_source
from skuferry.writer import Writer

log = logs.get(__name__)

MAX_LISTED_PROBLEMS = 1000
GUARD_MIN_UPDATES = 10  # below this many updates the change guard never trips

Progress = Callable[[int, int], None]


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
    orphans = _orphan_intents(store, mirror)
    if verify or orphans or store.needs_lookup():
        index = _walk(client, mirror, settings, on_progress)
        stack.callback(index.close)
        _settle(orphans, index, mirror)

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
    checked: _Checked | None = None
    if index is not None:
        checked = _Checked(index, mirror, summary)
        stack.callback(checked.flush)  # also when the writer stops early
        writes = checked(writes)
        if verify:
            writes = _chain(writes, _repairs(store, index, mirror, summary))
    try:
        writer.run(writes)
        if checked is not None:
            checked.flush()
        results = writer.results
        if results.fatal is None and not stop.is_set() and (results.unknown or results.missing):
            _second_look(client, writer, mirror, settings, summary)
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
        _problem(
            summary,
            action.key,
            action.line,
            action.reason or "rejected earlier; not resent until its data change",
        )
    if counts[Kind.GONE]:
        summary.notes.append(
            f"{counts[Kind.GONE]} product(s) are no longer in the source; they stay on the "
            "remote (the API has no DELETE for products) and are marked gone"
        )


def _problem(summary: RunSummary, key: str | None, line: int | None, reason: str) -> None:
    if len(summary.problems) < MAX_LISTED_PROBLEMS:
        summary.problems.append({"key": key, "line": line, "reason": reason})


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


def _walk(
    client: Any, mirror: Mirror, settings: Settings, on_progress: Progress | None
) -> RemoteIndex:
    index = RemoteIndex(mirror.db.conn, _key_field(settings))
    index.load(client, page_size=settings.api.page_size, on_page=on_progress)
    # Record what the walk found, so a remote product the source adds later is adopted,
    # never POSTed blind because "the mirror has walked".
    mirror.mark_walked(time.time(), remote=index.pairs())
    return index


def _key_field(settings: Settings) -> str:
    return settings.mapping.key


def _orphan_intents(store: PlanStore, mirror: Mirror) -> list[str]:
    """Open intents of keys no longer in the source: a lost create nobody will retry."""
    intents = [key for key, _digest in mirror.open_intents()]
    if not intents:
        return []
    gone = set(store.keys(Kind.GONE))
    return [key for key in intents if key in gone]


def _settle(keys: list[str], index: RemoteIndex, mirror: Mirror) -> None:
    """Link what a lost create made (it is then marked gone like its key), else close it."""
    for key in keys:
        product = mirror.intent_product(key)
        found = index.find(key)
        if product is not None and len(found) == 1:
            mirror.record_created(product, found[0][0])
        else:
            mirror.close_intent(key)


class _Checked:
    """Check-then-create over the write actions: each create is looked up in the index.

    Products found in step are recorded in batches (``flush``), not one durable
    transaction each: 20,000 adoptions cost seconds otherwise.
    """

    BATCH = 500

    def __init__(self, index: RemoteIndex, mirror: Mirror, summary: RunSummary) -> None:
        self._index, self._mirror, self._summary = index, mirror, summary
        self._in_step: list[tuple[Product, str]] = []

    def __call__(self, writes: Iterator[Action]) -> Iterator[Action]:
        for action in writes:
            if action.kind is not Kind.CREATE:
                yield action
                continue
            resolved = _adopt_or_create(
                action, self._index, self._mirror, self._summary, batch=self._in_step
            )
            if len(self._in_step) >= self.BATCH:
                self.flush()
            if resolved is not None:
                yield resolved

    def flush(self) -> None:
        self._mirror.record_in_step(self._in_step)
        self._in_step = []


def _adopt_or_create(
    action: Action,
    index: RemoteIndex,
    mirror: Mirror,
    summary: RunSummary,
    *,
    batch: list[tuple[Product, str]] | None = None,
) -> Action | None:
    """Adopt the one remote product holding this key, report several, or create.

    A product found in step is appended to ``batch`` when given (the caller
    records the batch), else recorded at once.
    """
    product = action.product
    if product is None:
        raise RuntimeError(f"create action without a product: {action.key}")
    matches = index.find(product.key)
    if not matches:
        if mirror.has_intent(product.key):
            mirror.close_intent(product.key)  # looked up: the lost POST never landed
        return Action(Kind.CREATE, product.key, product, line=product.line)
    if len(matches) > 1:
        ids = [rid for rid, _ in matches]
        mirror.record_duplicate(product.key, ids)
        summary.duplicates += 1
        _problem(
            summary,
            product.key,
            product.line,
            f"the remote holds {len(ids)} products with this key ({', '.join(ids[:5])}); "
            "not creating another — merge them on the remote",
        )
        return None
    remote_id, body = matches[0]
    in_step = not canonical.differs(product.payload, body)
    if in_step and batch is not None:
        batch.append((product, remote_id))
    else:
        mirror.record_adopted(product, remote_id, in_step=in_step)
    summary.adopted += 1
    log.debug("sync.adopted", key=product.key, remote_id=remote_id, in_step=in_step)
    return (
        None
        if in_step
        else Action(Kind.UPDATE, product.key, product, remote_id=remote_id, line=product.line)
    )


def _repairs(
    store: PlanStore, index: RemoteIndex, mirror: Mirror, summary: RunSummary
) -> Iterator[Action]:
    """--verify: products deleted or edited on the remote side are put right."""
    unchanged = set(store.keys(Kind.UNCHANGED))
    repaired = 0
    # Materialised: the loop below writes to the products table it would be reading.
    for key, remote_id, _digest in list(mirror.synced_items()):
        if key not in unchanged:
            continue
        payload = mirror.payload(key)
        if payload is None:
            continue
        product = Product(key=key, payload=payload, digest=canonical.digest(payload), line=0)
        body = index.by_id(remote_id)
        if body is None:
            mirror.record_remote_missing(key)
            summary.unchanged -= 1
            repaired += 1
            log.warning("verify.missing", key=key, remote_id=remote_id)
            resolved = _adopt_or_create(Action(Kind.CREATE, key, product), index, mirror, summary)
        elif canonical.differs(payload, body):
            summary.unchanged -= 1
            repaired += 1
            log.warning(
                "verify.edited",
                key=key,
                remote_id=remote_id,
                fields=canonical.differs(payload, body),
            )
            resolved = Action(Kind.UPDATE, key, product, remote_id=remote_id)
        else:
            continue
        if resolved is not None:
            yield resolved
    if repaired:
        summary.notes.append(
            f"verify: {repaired} product(s) deleted or edited on the remote were put right"
        )


def _chain(*parts: Iterator[Action]) -> Iterator[Action]:
    for part in parts:
        yield from part


def _second_look(
    client: Any, writer: Writer, mirror: Mirror, settings: Settings, summary: RunSummary
) -> None:
    """Creates whose response was lost, products deleted remotely: one fresh walk, then act."""
    results = writer.results
    todo = results.unknown + results.missing
    results.unknown, results.missing = [], []
    log.info("sync.second_look", products=len(todo))
    index = _walk(client, mirror, settings, None)
    try:
        retries: list[Action] = []
        for product in todo:
            found = index.find(product.key)
            if len(found) == 1 and mirror.has_intent(product.key):
                remote_id, body = found[0]
                if canonical.differs(product.payload, body):
                    mirror.record_adopted(product, remote_id, in_step=False)
                    retries.append(Action(Kind.UPDATE, product.key, product, remote_id=remote_id))
                else:
                    mirror.record_created(product, remote_id)  # our lost POST did land
                    results.created += 1
                continue
            resolved = _adopt_or_create(
                Action(Kind.CREATE, product.key, product), index, mirror, summary
            )
            if resolved is not None:
                retries.append(resolved)
        writer.run(retries)
    finally:
        index.close()


def _collect(writer: Writer, summary: RunSummary, client: Any) -> None:
    results = writer.results
    summary.created += results.created
    summary.updated += results.updated
    summary.drift += results.drift
    summary.rejected += len(results.rejected)
    for item in results.rejected:
        _problem(summary, item["key"], item["line"], item["reason"])
    failed = dict(results.failed)
    for product in results.unknown + results.missing:
        failed.setdefault(product.key, "outcome unknown; will be looked up before any re-send")
    summary.failed = len(failed)
    for key, reason in failed.items():
        _problem(summary, key, None, reason)
    summary.notes.extend(results.notes)
    requests = getattr(client, "requests", None)
    if requests:
        summary.requests = dict(requests)
    summary.rate_limited = int(getattr(client, "rate_limited", 0))
