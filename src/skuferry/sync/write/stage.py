"""The write stage of a run: the remote looked up when it must be, the writes, what they left.

``write`` walks the remote first when a create's absence is not known (or ``--verify``),
sends the urgent lane's and the plan's writes through the writer, settles what was lost,
and fills the writes' part of the run's summary (the requests it sent among them);
``remember`` keeps what the next run needs. A skipped run still makes the auth check
when one is due (``check_auth``).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from skuferry.completeness import Ledger
from skuferry.models import Action, Kind, Progress, RunSummary
from skuferry.sources.base import Source
from skuferry.state.mirror import Mirror
from skuferry.state.planstore import PlanStore
from skuferry.state.remoteindex import RemoteIndex
from skuferry.sync.map.mapper import Mapper
from skuferry.sync.map.stage import open_mapped
from skuferry.sync.plan.planner import plan
from skuferry.sync.read import stage as read_stage
from skuferry.sync.read.named import NamedPull
from skuferry.sync.read.pulled import reported
from skuferry.sync.read.stage import Opened
from skuferry.sync.write import auth_check, check_then_create, settle
from skuferry.sync.write.doubt import Clock, Doubts
from skuferry.sync.write.fields import Ownership
from skuferry.sync.write.gone import GonePolicy
from skuferry.sync.write.lanes import Arrivals, Lanes, TrackingWriter, UrgentInbox, ordered
from skuferry.sync.write.reread import Reread
from skuferry.sync.write.writer import Writer

if TYPE_CHECKING:
    from skuferry.remote.client import RemoteApi

WRITE_KINDS = (Kind.CREATE, Kind.UPDATE, Kind.RESTORE, Kind.ARCHIVE)


class WriteRun(read_stage.ReadRun, Protocol):
    """What the write stage takes from the run's context (the read stage's too: the
    urgent lane opens the source again)."""

    on_progress: Progress | None
    run_id: int | None
    gone_policy: GonePolicy
    ownership: Ownership
    clock: Clock

    @property
    def inbox(self) -> UrgentInbox | None: ...

    def client(self) -> RemoteApi: ...


def write(
    run: WriteRun, store: PlanStore, read: Opened, mapper: Mapper, counts: dict[Kind, int]
) -> None:
    """The writes of the plan in ``store``; raises what ends the run once they stopped."""
    mirror, options, summary = run.mirror, run.options, run.summary
    client = run.client()
    before = sum(client.requests.values())  # requests so far: an injected client counts on
    index: RemoteIndex | None = None
    orphans = check_then_create.orphan_intents(store, mirror)
    doubt = check_then_create.in_doubt(mirror, run.settings, run.clock(), run.run_id)
    if options.verify or orphans or store.needs_lookup():
        index, _walked = check_then_create.walk_proven(
            client,
            mirror,
            run.settings,
            run.on_progress,
            run.ledger,
            clock=run.clock,
            before_writes=not options.verify,  # --verify reads what it knows by id
        )
        run.stack.callback(index.close)
        check_then_create.settle(orphans, index, mirror, run.ledger, doubt)
    writer = _send(
        run,
        store,
        _lane(run, store, read, mapper),
        index=index,
        tick=_ticker(run.on_progress, total=sum(counts[k] for k in WRITE_KINDS)),
        requests_before=before,
        doubt=doubt,
    )
    remember(mirror, store, read.source)
    summary.interrupted = run.stop.is_set()
    if (ended := writer.fatal or check_then_create.unproven(run.ledger)) is not None:
        raise ended  # exit 3; an unproven walk: creates whose absence it could not prove held


def remember(mirror: Mirror, store: PlanStore, source: Source) -> None:
    """What the writes leave for the next run: gone marks, refusals, digests."""
    mirror.mark_gone(store.keys(Kind.GONE))
    mirror.name_letters(source.name)  # the API's refusals of this run
    mirror.remember_record_digests(store.record_digests())  # next time: recognised, not mapped
    mirror.remember_line_digests(store.line_digests())  # ... and from their lines, not parsed


def check_auth(run: WriteRun) -> None:
    """A run that sent nothing: one cheap authenticated read when none was made for
    ``[api] auth_check_minutes``; a revoked key ends the run (exit 3)."""
    now = time.time()
    minutes = run.settings.api.auth_check_minutes
    if auth_check.due(run.mirror.last_api_contact(), now, minutes=minutes):
        client = run.client()
        auth_check.after_run(client, run.mirror, requests=0, minutes=minutes, now=now)
        count_requests(client, run.summary)  # a 429 on the check counts like any other


def count_requests(client: RemoteApi, summary: RunSummary) -> None:
    """The requests the run's client sent (by tier, by key fingerprint) and the 429s."""
    summary.requests = dict(client.requests)
    summary.requests_by_key = dict(client.requests_by_key)
    summary.rate_limited = client.rate_limited


@dataclass
class _Lane:
    """What the urgent lane needs to read keys that arrive mid-run."""

    source: Source
    mapper: Mapper
    inbox: UrgentInbox | None
    reread: Reread | None = None  # a source changed mid-run: read again

    def use(self, source: Source) -> None:
        self.source = source


def _lane(run: WriteRun, store: PlanStore, read: Opened, mapper: Mapper) -> _Lane:
    lane = _Lane(read.source, mapper, run.inbox)
    urgent = run.settings.mapping.urgent
    if run.inbox is not None and urgent:
        lane.reread = Reread(
            run.mirror,
            urgent,
            # read-only: new join indexes go to a temporary folder, the run's stay as they are
            open_fresh=lambda fresh: open_mapped(run, fresh, readonly=True)[1:],
            planned=lambda: store.actions(*WRITE_KINDS),
            on_source=lane.use,
        )
        run.stack.callback(lane.reread.close)
    return lane


def _send(
    run: WriteRun,
    store: PlanStore,
    lane: _Lane,
    *,
    index: RemoteIndex | None,
    tick: Callable[[], None],
    requests_before: int,
    doubt: check_then_create.InDoubt,
) -> Writer:
    """The writes: the urgent lane, then the plan's (urgent updates first), then repairs."""
    settings, mirror, summary, options = run.settings, run.mirror, run.summary, run.options
    client = run.client()
    writer = TrackingWriter(
        client,
        mirror,
        run_id=run.run_id,
        update_method=settings.api.update_method,
        max_in_flight=settings.api.max_in_flight,
        stop=run.stop,
        on_done=tick,
        ownership=run.ownership,
        gone=run.gone_policy,
        summary=summary,
        doubts=Doubts(bound_s=settings.api.list_lag_s),
        clock=run.clock,
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
        defer = check_then_create.handed_over(doubt, writer, mirror)
        checked = check_then_create.Checked(
            index,
            mirror,
            summary,
            writer.ownership,
            verify=options.verify,
            client=client,
            defer=defer,
        )
        run.stack.callback(checked.flush)  # also when the writer stops early
        writes = checked(writes)
        if options.verify:
            writes = itertools.chain(
                writes,
                check_then_create.repairs(
                    store, index, mirror, summary, writer.ownership, client=client, defer=defer
                ),
            )
    try:
        with lane.inbox.ringing(writer.ring) if lane.inbox is not None else nullcontext():
            writer.run(writes)
        if checked is not None:
            checked.flush()
        _after_writes(run, client, writer, requests_before=requests_before)
    finally:
        settle.give_up(writer, mirror)  # what is still in doubt is failed, sent again next run
        check_then_create.give_up(writer)  # creates in doubt: looked up next run
        summary.close()
        count_requests(client, summary)
        if lanes.leftover and lane.inbox is not None:
            lane.inbox.put(lanes.leftover)  # the daemon runs them right after this run
        elif lanes.leftover:  # another process handed them over: back to the state file
            mirror.hand_keys(lanes.leftover)
    return writer


def _after_writes(
    run: WriteRun, client: RemoteApi, writer: Writer, *, requests_before: int
) -> None:
    """Before the run ends: writes whose answer was lost are settled, updates by reading the
    product back, creates by a second walk (``check_then_create.second_look``); then the
    auth check if this run did not talk to the API."""
    settings, mirror, stop = run.settings, run.mirror, run.stop
    rounds = max(1, settings.api.max_retries)
    settle.settle(client, writer, mirror, rounds=rounds)
    if writer.fatal is None and not stop.is_set() and (writer.unknown or writer.missing):
        check_then_create.second_look(client, writer, mirror, settings, clock=run.clock, stop=stop)
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
    read_stage.report_missing(summary, named.missing)
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
    return [a for a in actions if a.kind in WRITE_KINDS]


def _ticker(on_progress: Progress | None, *, total: int) -> Callable[[], None]:
    """One call per finished write: progress as (done, total), total growing if need be."""
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if on_progress:
            on_progress(done, max(total, done))

    return tick
