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

import contextlib
import dataclasses
import functools
import itertools
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from skuferry import errors, logs
from skuferry.completeness import Ledger
from skuferry.config.keys import fingerprint
from skuferry.config.schema import Settings
from skuferry.models import (
    Action,
    BadRecord,
    Kind,
    Progress,
    RawLines,
    RawRecord,
    RunOptions,
    RunSummary,
    State,
)
from skuferry.remote.scopes import PACE_META
from skuferry.sources.base import Source
from skuferry.sources.dispatch import open_source
from skuferry.sources.skip import skip_notes, skipped_rows
from skuferry.state.lock import run_lock
from skuferry.state.mirror import LANE_META, Mirror
from skuferry.state.planstore import PlanStore
from skuferry.state.remoteindex import RemoteIndex
from skuferry.state.schema import open_state
from skuferry.sync import skip
from skuferry.sync.map.mapper import Mapper
from skuferry.sync.plan import eta
from skuferry.sync.plan.guard import ratio_guard
from skuferry.sync.plan.lines import LineRoute, line_route
from skuferry.sync.plan.planner import Tally, plan
from skuferry.sync.read import incremental
from skuferry.sync.read.named import NamedPull
from skuferry.sync.read.pieces import (
    join_tokens,
    joins_read,
    open_pieces,
    pieces_notes,
    skipped,
    use_keys,
)
from skuferry.sync.read.pulled import reported
from skuferry.sync.write import auth_check, check_then_create, gone, settle
from skuferry.sync.write.doubt import Clock, Doubts, WallClock
from skuferry.sync.write.fields import Ownership
from skuferry.sync.write.gone import GonePolicy
from skuferry.sync.write.lanes import Arrivals, Lanes, TrackingWriter, UrgentInbox, ordered
from skuferry.sync.write.reread import Reread
from skuferry.sync.write.writer import Writer

if TYPE_CHECKING:
    from skuferry.remote.client import RemoteApi, RemoteClient

log = logs.get(__name__)

GUARD_MIN_UPDATES = 10  # below this many updates the change guard never trips
_WRITE_KINDS = (Kind.CREATE, Kind.UPDATE, Kind.RESTORE, Kind.ARCHIVE)


@dataclass
class Adapters:
    """The edges of a run, injectable for tests (in-memory fakes) and benchmarks."""

    source: Source | None = None
    client: RemoteApi | None = None
    urgent: UrgentInbox | None = None  # the daemon's hooks: keys for the running run's lane
    clock: Clock | None = None  # the run's time (and the mirror's): walks, waits for the list


def run_once(
    settings: Settings,
    options: RunOptions | None = None,
    *,
    stop: threading.Event | None = None,
    on_progress: Progress | None = None,
    adapters: Adapters | None = None,
    urgent: UrgentInbox | None = None,
    **flags: Any,
) -> RunSummary:
    """Run one sync. Raises a SkuferryError when the run as a whole cannot proceed.

    ``options`` are the run's flags (``models.RunOptions``); single flags may be given
    as keywords too (``run_once(settings, verify=True)``), over ``options``.
    """
    options = dataclasses.replace(options or RunOptions(), **flags)
    dry_run = options.dry_run
    stop = stop or threading.Event()
    adapters = adapters or Adapters()
    if urgent is not None:  # the daemon's inbox: keys pushed while this run writes
        adapters = dataclasses.replace(adapters, urgent=urgent)
    started = time.monotonic()
    summary = RunSummary(dry_run=dry_run)
    state_path = settings.state.path
    with ExitStack() as stack:
        if not dry_run:
            stack.enter_context(run_lock(state_path))
        mirror = Mirror(state_path, readonly=dry_run, **_mirror_clock(adapters))
        stack.callback(mirror.close)
        run_id = None if dry_run else mirror.start_run()
        try:
            _run(
                settings,
                mirror,
                summary,
                run_id=run_id,
                options=options,
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
            mirror.finish_run(
                run_id,
                status=summary.status,
                exit_code=summary.exit_code,
                summary=summary.as_json(),
            )
    log.info("sync.finished", **{k: v for k, v in summary.as_json().items() if k != "problems"})
    return summary


def exit_code(summary: RunSummary) -> int:
    """``summary.exit_code`` (kept for callers of the engine's old helper)."""
    return summary.exit_code


def _run(
    settings: Settings,
    mirror: Mirror,
    summary: RunSummary,
    *,
    run_id: int | None,
    options: RunOptions,
    stop: threading.Event,
    on_progress: Progress | None,
    adapters: Adapters,
    stack: ExitStack,
) -> None:
    base, source, mapper = _open_source(
        settings,
        adapters,
        stack,
        dry_run=options.dry_run,
        stop=stop,
        ledger=summary.completeness,  # each join's verdict
        allow_empty=options.allow_empty_source,  # ... and an empty join refused, unless
    )
    named = NamedPull(options.only, mapper) if options.only is not None else None
    pull = (
        None if named else _choose_pull(settings, mirror, source, summary, force_full=options.full)
    )
    seen_before = skip.Check(None)  # a named run always reads its keys
    if pull is not None:
        seen_before = _unchanged(
            settings, mirror, base, pull, options=options, summary=summary, joins=source
        )
        if seen_before.skip and _skip_unchanged(
            settings, mirror, summary, pull, stop, stack, on_progress, adapters
        ):
            return  # nothing read or planned (sync/skip.py)
    full = pull is not None and pull.full  # absence proves nothing in incremental, named pulls
    store = stack.enter_context(contextlib.closing(mirror.plan_store()))
    if named is not None:
        summary.pull = "named"
        log.info("sync.plan.started", source=source.describe(), pull="named", keys=len(named.keys))
    elif pull is not None:
        log.info("sync.plan.started", source=source.describe(), pull=pull.kind, why=pull.reason)
    route = line_route(source, mapper) if pull is not None and pull.since is None else None
    records: Iterable[RawRecord | BadRecord | RawLines] = (
        named.records(source)
        if named is not None
        else route.records()
        if route is not None
        else _records(pull, source)
    )
    # the pull reports its verdict; absence decides gone only when it is complete
    records = reported(records, summary.completeness, source.describe(), pull=pull, named=named)
    tally = _fill(
        store,
        records,
        mirror,
        mapper,
        settings,
        ledger=summary.completeness,
        resend=options.resend,
        lines=route,  # unchanged CSV lines recognised unparsed (sync/plan/lines.py)
        learn=None if options.dry_run else store.learn,  # ... their digests, learnt
    )
    counts = store.counts()
    _count_plan(store, counts, summary, tally)
    if named is not None:
        _report_missing(named.missing, summary)
    _count_skips(base, source, summary)
    if pull is not None:
        summary.notes.extend(pull.notes())  # records whose change time was not read
    _guards(
        settings,
        mirror,
        store,
        counts,
        force=options.force,
        allow_empty_source=options.allow_empty_source,
        full=full,
    )

    if summary.dry_run:
        _dry_run_report(
            settings, store, counts, summary, verify=options.verify, paces=mirror.metas(PACE_META)
        )
        return
    _note_refusals(mirror, store, source=source.name, whole=full)
    if pull is not None:
        incremental.note_pending(mirror, pull, writes=counts[Kind.CREATE] + counts[Kind.UPDATE])
    # Gone or drifted products back in step are SYNCED before --verify reads the synced rows,
    # so a remote edit made while they were away is put right too.
    mirror.mark_in_step(store.keys(Kind.UNCHANGED))
    client = adapters.client or _client(settings, stop, stack, on_progress)
    before = sum(client.requests.values())  # requests so far: an injected client counts on
    index: RemoteIndex | None = None
    orphans = check_then_create.orphan_intents(store, mirror)
    clock = adapters.clock or WallClock()
    doubt = check_then_create.in_doubt(mirror, settings, clock())
    if options.verify or orphans or store.needs_lookup():
        index, _walked = check_then_create.walk_proven(
            client,
            mirror,
            settings,
            on_progress,
            summary.completeness,
            clock=clock,
            before_writes=not options.verify,  # --verify reads what it knows by id
        )
        stack.callback(index.close)
        check_then_create.settle(orphans, index, mirror, summary.completeness, doubt)

    writer = _send(
        settings,
        mirror,
        store,
        summary,
        client=client,
        index=index,
        lane=_lane(
            settings, mirror, store, adapters, stack, stop=stop, source=source, mapper=mapper
        ),
        run_id=run_id,
        options=options,
        stop=stop,
        tick=_ticker(on_progress, total=sum(counts[k] for k in _WRITE_KINDS)),
        stack=stack,
        requests_before=before,
        clock=clock,
        doubt=doubt,
    )
    _remember(mirror, store, source)
    summary.interrupted = stop.is_set()
    if (ended := writer.fatal or check_then_create.unproven(summary.completeness)) is not None:
        raise ended  # exit 3; an unproven walk: creates whose absence it could not prove held
    if pull is not None:  # all writes committed: the next window starts at this pull's start
        _commit_pull(mirror, pull, summary, seen_before)


def _remember(mirror: Mirror, store: PlanStore, source: Source) -> None:
    """What the writes leave for the next run: gone marks, refusals, digests."""
    mirror.mark_gone(store.keys(Kind.GONE))
    mirror.name_letters(source.name)  # the API's refusals of this run
    mirror.remember_fingerprints(store.fingerprints())  # next time: recognised, not mapped
    mirror.remember_line_digests(store.line_digests())  # ... and from their lines, not parsed


def _records(pull: incremental.Pull | None, source: Source) -> Iterator[RawRecord | BadRecord]:
    if pull is None:  # pragma: no cover - a run has a pull or named keys
        raise RuntimeError("a run without a pull")
    return pull.records(source)


def _report_missing(missing: list[str], summary: RunSummary) -> None:
    summary.missing += len(missing)  # a named key that is not there is a problem: exit 1
    for key in missing:
        summary.add_problem(key, None, "not in the source")
    if missing:
        shown = ", ".join(missing[:10]) + (", ..." if len(missing) > 10 else "")
        summary.notes.append(f"{len(missing)} named key(s) are not in the source: {shown}")


@dataclass
class _Lane:
    """What the urgent lane needs to read keys that arrive mid-run (sync/write/lanes.py)."""

    source: Source
    mapper: Mapper
    inbox: UrgentInbox | None
    reread: Reread | None = None  # a source changed mid-run: read again (sync/write/reread.py)

    def use(self, source: Source) -> None:
        self.source = source


def _lane(
    settings: Settings,
    mirror: Mirror,
    store: PlanStore,
    adapters: Adapters,
    stack: ExitStack,
    *,
    stop: threading.Event,
    source: Source,
    mapper: Mapper,
) -> _Lane:
    lane = _Lane(source, mapper, adapters.urgent)
    if adapters.urgent is not None and settings.mapping.urgent:
        lane.reread = Reread(
            mirror,
            settings.mapping.urgent,
            # read-only: new join indexes go to a temporary folder, the run's stay as they are
            open_fresh=lambda fresh: _open_source(
                settings, adapters, fresh, dry_run=True, stop=stop
            )[1:],
            planned=lambda: store.actions(*_WRITE_KINDS),
            on_source=lane.use,
        )
        stack.callback(lane.reread.close)
    return lane


def _send(
    settings: Settings,
    mirror: Mirror,
    store: PlanStore,
    summary: RunSummary,
    *,
    client: RemoteApi,
    index: RemoteIndex | None,
    lane: _Lane,
    run_id: int | None,
    options: RunOptions,
    stop: threading.Event,
    tick: Callable[[], None],
    stack: ExitStack,
    requests_before: int,
    clock: Clock,
    doubt: check_then_create.InDoubt,
) -> Writer:
    """The writes: the urgent lane, then the plan's (urgent updates first), then repairs."""
    writer = TrackingWriter(
        client,
        mirror,
        run_id=run_id,
        update_method=settings.api.update_method,
        max_in_flight=settings.api.max_in_flight,
        stop=stop,
        on_done=tick,
        ownership=Ownership.from_mapping(settings.mapping),
        gone=GonePolicy.from_settings(settings.gone),
        summary=summary,
        doubts=Doubts(bound_s=settings.api.list_lag_s),
        clock=clock,
    )
    lanes = Lanes(
        ordered(store, mirror, settings.mapping.urgent),
        take=Arrivals(mirror, lane.inbox, reread=lane.reread),
        fetch=lambda keys: _fetch_urgent(mirror, lane, keys, summary),
        in_flight=writer.in_flight,
        can_send=lambda action: index is not None or not action.lookup_first,
        express=not options.verify,  # --verify reads each update's product first
        hasten=writer.hasten,
    )
    writer.lanes = lanes  # the lane's writes are urgent, and need not wait for a worker
    writes: Iterator[Action] = iter(lanes)
    checked: check_then_create.Checked | None = None
    if index is not None:
        checked = check_then_create.Checked(
            index,
            mirror,
            summary,
            writer.ownership,
            verify=options.verify,
            client=client,
            defer=check_then_create.handed_over(doubt, writer, mirror),
        )
        stack.callback(checked.flush)  # also when the writer stops early
        writes = checked(writes)
        if options.verify:
            writes = itertools.chain(
                writes,
                check_then_create.repairs(
                    store, index, mirror, summary, writer.ownership, client=client
                ),
            )
    try:
        writer.run(writes)
        if checked is not None:
            checked.flush()
        _after_writes(
            client,
            writer,
            mirror,
            settings,
            stop=stop,
            requests_before=requests_before,
            clock=clock,
        )
    finally:
        settle.give_up(writer, mirror)  # what is still in doubt is failed, sent again next run
        check_then_create.give_up(writer)  # creates in doubt: looked up next run
        summary.close()
        _count_requests(client, summary)
        if lanes.leftover and lane.inbox is not None:
            lane.inbox.put(lanes.leftover)  # the daemon runs them right after this run
        elif lanes.leftover:  # another process handed them over: back to the state file
            mirror.set_metas({LANE_META + k: str(time.time()) for k in lanes.leftover})
    return writer


def _mirror_clock(adapters: Adapters) -> dict[str, Any]:
    """An injected clock times the mirror's records too: a create's doubt is measured on it."""
    return {} if adapters.clock is None else {"clock": adapters.clock}


def _fetch_urgent(
    mirror: Mirror, lane: _Lane, keys: list[str], summary: RunSummary
) -> list[Action]:
    """Read ``keys`` from the source again and plan them against the mirror as it is now."""
    named = NamedPull(keys, lane.mapper)
    records = named.records(lane.source)
    actions = list(
        plan(
            # a named read decides no absence: its verdicts stay out of the run's ledger
            reported(records, Ledger(), lane.source.describe(), pull=None, named=named),
            mirror.known(),
            walked=mirror.walked(),
            mapper=lane.mapper,
            full=False,
        )
    )
    _report_missing(named.missing, summary)
    refused = [a for a in actions if a.kind in (Kind.REJECT, Kind.STILL_REJECTED)]
    for action in refused:
        summary.rejected += 1
        summary.add_problem(action.key, action.line, action.reason or "rejected")
    if refused:
        mirror.note_refusals(
            ((a.key, a.stage or "api", a.reason or "rejected", a.line) for a in refused),
            source=lane.source.name,
            whole=False,
        )
    return [a for a in actions if a.kind in _WRITE_KINDS]


_VALID_KINDS = (Kind.CREATE, Kind.UPDATE, Kind.RESTORE, Kind.UNCHANGED, Kind.ARCHIVE)


def _note_refusals(mirror: Mirror, store: PlanStore, *, source: str, whole: bool) -> None:
    """What `skuferry rejected` lists (state/deadletters.py): the plan's refusals."""
    mirror.note_refusals(
        _refusals(store),
        valid=itertools.chain.from_iterable(store.keys(k) for k in _VALID_KINDS),
        source=source,
        whole=whole,
    )


def _refusals(store: PlanStore) -> Iterator[tuple[str | None, str, str, int | None]]:
    """(key, stage, reason, line) of each product the plan refused, or still refuses."""
    for action in store.actions(Kind.REJECT, Kind.STILL_REJECTED):
        if action.kind is Kind.STILL_REJECTED:  # the API refused these very data before
            reason = action.reason or "rejected earlier; not resent until its data change"
            yield action.key, "api", reason, action.line
        else:
            yield action.key, action.stage or "read", action.reason or "refused", action.line


def _commit_pull(
    mirror: Mirror, pull: incremental.Pull, summary: RunSummary, seen_before: skip.Check
) -> None:
    """All writes committed: the next window starts at this pull's start, and the next run
    may skip an unchanged source."""
    committed = not summary.interrupted and not summary.failed
    incremental.finish(mirror, pull, committed=committed)
    if committed:
        skip.remember(mirror, seen_before.token, summary)


def _unchanged(
    settings: Settings,
    mirror: Mirror,
    source: Source,
    pull: incremental.Pull,
    *,
    options: RunOptions,
    summary: RunSummary,
    joins: Source,
) -> skip.Check:
    """The unchanged check (sync/skip.py). A run that reads forgets the stored
    fingerprint until it commits; a dry run neither skips nor stores. ``joins``: the
    source in pieces, whose joins' tokens were taken as they opened (not asked again)."""
    if summary.dry_run:
        return skip.Check(None)
    archiving = GonePolicy.from_settings(settings.gone).archiving
    found = skip.check(
        settings,
        mirror,
        source,
        options=options,
        full_pull=pull.full,
        joins=join_tokens(joins),
        pending=lambda: skip.has_pending_work(mirror, skip.pending_states(settings), archiving),
    )
    log.info("sync.source.checked", skip=found.skip, why=found.reason)
    if not found.skip:
        skip.forget(mirror)  # stored again only when this run commits
    return found


def _skip_unchanged(  # noqa: PLR0917 - the run's edges, passed on from _run
    settings: Settings,
    mirror: Mirror,
    summary: RunSummary,
    pull: incremental.Pull,
    stop: threading.Event,
    stack: ExitStack,
    on_progress: Progress | None,
    adapters: Adapters,
) -> bool:
    """Nothing read, nothing planned (sync/skip.py); the auth check still runs. True."""
    skip.carry(summary, mirror, in_step=mirror.counts_by_state().get(State.SYNCED, 0))
    incremental.finish(mirror, pull, committed=False)  # counts toward full_every, keeps the window
    now = time.time()
    minutes = settings.api.auth_check_minutes
    if auth_check.due(mirror.last_api_contact(), now, minutes=minutes):
        client = adapters.client or _client(settings, stop, stack, on_progress)
        auth_check.after_run(client, mirror, requests=0, minutes=minutes, now=now)
        _count_requests(client, summary)  # a 429 on the check counts like any other
    return True


def _after_writes(
    client: RemoteApi,
    writer: Writer,
    mirror: Mirror,
    settings: Settings,
    *,
    stop: threading.Event,
    requests_before: int,
    clock: Clock | None = None,
) -> None:
    """Before the run ends: writes whose answer was lost are settled, updates by reading the
    product back (settle.py), creates by a second walk (check_then_create.second_look); then
    the auth check (auth_check.py) if this run did not talk to the API."""
    rounds = max(1, settings.api.max_retries)
    settle.settle(client, writer, mirror, rounds=rounds)
    if writer.fatal is None and not stop.is_set() and (writer.unknown or writer.missing):
        check_then_create.second_look(client, writer, mirror, settings, clock=clock, stop=stop)
        settle.settle(client, writer, mirror, rounds=rounds)  # updates the second look sent
    if writer.fatal is None and not stop.is_set():
        # one cheap authenticated read if this run did not talk to the API, and none did
        # for [api] auth_check_minutes: a revoked key ends the run (exit 3)
        auth_check.after_run(
            client,
            mirror,
            requests=sum(client.requests.values()) - requests_before,
            minutes=settings.api.auth_check_minutes,
            now=time.time(),
        )


def _open_source(
    settings: Settings,
    adapters: Adapters,
    stack: ExitStack,
    *,
    dry_run: bool,
    stop: threading.Event,
    ledger: Ledger | None = None,
    allow_empty: bool = False,
) -> tuple[Source, Source, Mapper]:
    """The source as read, the same in pieces (sync/read/pieces.py), and the mapping."""
    base = adapters.source or open_source(settings.source, stop=stop)  # stop ends its waits
    # grouped, unnested, joined, filtered; join indexes beside the state (not in a dry run)
    source, tables = open_pieces(
        settings,
        stack,
        base=base,
        readonly=dry_run,
        stop=stop,
        ledger=ledger,
        allow_empty=allow_empty,
    )
    joins = [join.name for join in settings.join]
    mapper = Mapper(
        settings.mapping,
        source_name=source.name,
        tables=tables,
        joins=joins,
        empty_values=settings.source.empty_values,
    )
    use_keys(source, mapper.key_of)  # a record the filter fails on holds its product
    return base, source, mapper


def _count_skips(base: Source, source: Source, summary: RunSummary) -> None:
    """Records left out on purpose, and the joins' remarks: notes, never rejections."""
    summary.notes.extend(skip_notes(base))  # [source] skip_if_empty
    summary.notes.extend(pieces_notes(source))  # where, each, joins' duplicate keys
    summary.skipped = skipped_rows(base) + skipped(source)
    summary.joins = {
        name: "read" if read else "reused" for name, read in joins_read(source).items()
    }


def _ticker(on_progress: Progress | None, *, total: int) -> Callable[[], None]:
    """One call per finished write: progress as (done, total), total growing if need be."""
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if on_progress:
            on_progress(done, max(total, done))

    return tick


def _client(
    settings: Settings, stop: threading.Event, stack: ExitStack, on_progress: Progress | None
) -> RemoteClient:
    from skuferry.remote.budget import Budget  # with httpx: only a run that sends loads them
    from skuferry.remote.client import RemoteClient
    from skuferry.state.budgetbook import BudgetBook

    keys = [fingerprint(key) for key in settings.api_keys]
    state_file = functools.partial(open_state, settings.state.path)
    budget = Budget.from_settings(settings.budget, BudgetBook(state_file), keys=keys)
    stack.callback(budget.close)
    if on_progress is not None:  # the terminal bar: time left and waits told by the budget
        on_progress.watch_budget(budget)
    client = RemoteClient.from_settings(settings, stop=stop, budget=budget)
    stack.callback(client.close)
    return client


def _fill(
    store: PlanStore,
    records: Iterable[RawRecord | BadRecord | RawLines],
    mirror: Mirror,
    mapper: Mapper,
    settings: Settings,
    *,
    ledger: Ledger,
    resend: frozenset[str] = frozenset(),
    lines: LineRoute | None = None,
    learn: Callable[[int, str, bytes], None] | None = None,
) -> Tally:
    """Plan the pull into ``store``; what the planner found out on the way."""
    tally = Tally()
    store.fill(
        plan(
            records,
            mirror.known(),
            walked=mirror.walked(),
            seen=mirror.seen_table(),
            mapper=mapper,
            ledger=ledger,  # gone only when the pull proved itself complete
            archiving=GonePolicy.from_settings(settings.gone).archiving,  # ARCHIVE, not GONE
            tally=tally,  # bad rows whose product is unknown: no gone decisions
            resend=resend,  # retry: refused data sent again
            recognised=store.recognised,  # unchanged by fingerprint: a bit each, no action
            lines=lines,
            learn=learn,
        )
    )
    return tally


def _count_plan(
    store: PlanStore, counts: dict[Kind, int], summary: RunSummary, tally: Tally
) -> None:
    summary.unchanged = counts[Kind.UNCHANGED]
    summary.rejected = counts[Kind.REJECT] + counts[Kind.STILL_REJECTED]
    summary.rows_rejected = counts[Kind.REJECT]  # refused at the source (metric rows_rejected)
    summary.gone = counts[Kind.GONE] + counts[Kind.ARCHIVE]
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
    if counts[Kind.ARCHIVE]:
        summary.notes.append(
            f"{counts[Kind.ARCHIVE]} product(s) left the source: each gets the [gone] patch once"
        )
    _count_unsure(tally, summary)


def _count_unsure(tally: Tally, summary: RunSummary) -> None:
    """Rejected rows whose product cannot be told, and the gone decisions they stopped."""
    summary.rows_without_key = tally.unsure
    summary.gone_skipped = tally.gone_skipped
    if tally.gone_skipped:
        summary.notes.append(
            f"gone decisions skipped: {tally.unsure} row(s) without a readable key "
            "(any of them could be a product this pull would otherwise mark gone or archive); "
            "fix the rows listed and the next full pull decides"
        )
        log.warning("sync.gone.skipped", rows=tally.unsure)


def _choose_pull(
    settings: Settings, mirror: Mirror, source: Source, summary: RunSummary, *, force_full: bool
) -> incremental.Pull:
    pull = incremental.choose(
        source,
        incremental.read(mirror),
        identity=incremental.config_identity(settings),
        force_full=force_full,
        now=datetime.now(UTC),
    )
    summary.pull = pull.kind
    return pull


def _guards(
    settings: Settings,
    mirror: Mirror,
    store: PlanStore,
    counts: dict[Kind, int],
    *,
    force: bool,
    allow_empty_source: bool,
    full: bool,
) -> None:
    if not full:  # an incremental pull is small or empty by design
        return
    known = mirror.count()
    valid = sum(
        counts[k]
        for k in (Kind.CREATE, Kind.UPDATE, Kind.UNCHANGED, Kind.STILL_REJECTED, Kind.RESTORE)
    )
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
    ratio_guard(
        counts[Kind.UPDATE],
        known,
        max_ratio=settings.safety.max_change_ratio,
        minimum=GUARD_MIN_UPDATES,
        force=force,
        error=errors.ChangeGuardTripped,
        what="would be updated",
        key="max_change_ratio",
        advice="Check the export, then run again with --force if the change is real.",
    )
    gone.guard(counts[Kind.ARCHIVE], known, max_ratio=settings.safety.max_gone_ratio, force=force)


def _dry_run_report(
    settings: Settings,
    store: PlanStore,
    counts: dict[Kind, int],
    summary: RunSummary,
    *,
    verify: bool,
    paces: Iterable[tuple[str, str]] = (),
) -> None:
    summary.created = counts[Kind.CREATE]
    summary.updated = counts[Kind.UPDATE]
    summary.archived = counts[Kind.ARCHIVE]
    summary.restored = counts[Kind.RESTORE]
    writes = summary.created + summary.updated + summary.archived + summary.restored
    # keys, workspace cap and learnt pace (sync/plan/eta.py)
    summary.notes.append(
        eta.plan_note(
            settings, creates=summary.created, updates=writes - summary.created, pace_rows=paces
        )
    )
    if store.needs_lookup() or verify:
        summary.notes.append(
            "a remote walk (1 read per 100 products) would run first to look up existing products"
        )


def _count_requests(client: RemoteApi, summary: RunSummary) -> None:
    """The requests the run's client sent (by tier, by key fingerprint) and the 429s."""
    summary.requests = dict(client.requests)
    summary.requests_by_key = dict(client.requests_by_key)
    summary.rate_limited = client.rate_limited
