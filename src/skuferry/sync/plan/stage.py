"""The plan stage of a run: the pull planned into the plan store, counted, and guarded.

``fill`` plans what the read stage opened (unchanged CSV lines recognised unparsed), its
records watched for their shape on the way (``read.shape``); ``report`` is the plan's own
part of the run's summary: what stays unchanged, what is refused, what left the source;
``guard`` refuses a plan that would create products under reformatted keys, empty,
replace or churn the catalog; ``dry_run_report`` is what a dry run says instead of
writing. Whether the pull read the whole source is the ledger's word
(``Ledger.whole_pull``), asked by the guards and the refusals alike.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Protocol

from skuferry import errors, logs
from skuferry.completeness import Ledger
from skuferry.config.schema import Settings
from skuferry.models import (
    Action,
    BadRecord,
    Kind,
    RawLines,
    RawRecord,
    RunOptions,
    RunSummary,
)
from skuferry.remote.scopes import PACE_META
from skuferry.state.mirror import Mirror
from skuferry.state.planstore import PlanStore
from skuferry.sync.map.mapper import Mapper
from skuferry.sync.plan import eta
from skuferry.sync.plan.guard import ratio_guard, replacement_guard
from skuferry.sync.plan.lines import line_route
from skuferry.sync.plan.planner import Tally, plan
from skuferry.sync.read import stage as read_stage
from skuferry.sync.read.pulled import reported
from skuferry.sync.read.stage import Opened

log = logs.get("skuferry.sync.engine")

GUARD_MIN_UPDATES = 10  # below this many updates the change guard never trips
Counts = dict[Kind, int]
_VALID_KINDS = (Kind.CREATE, Kind.UPDATE, Kind.RESTORE, Kind.UNCHANGED, Kind.ARCHIVE)


class PlanRun(Protocol):
    """What the plan stage takes from the run's context."""

    settings: Settings
    options: RunOptions
    mirror: Mirror
    summary: RunSummary
    archiving: str | None

    @property
    def ledger(self) -> Ledger: ...

    def guard_gone(self, leaving: int, known: int) -> None: ...

    def sending(self, updates: Iterable[Action]) -> int: ...


def fill(run: PlanRun, store: PlanStore, read: Opened, mapper: Mapper) -> tuple[Counts, Tally]:
    """Plan the pull into ``store``: its counts by kind, and what the planner found out."""
    read_stage.started(read)
    mirror, pull = run.mirror, read.pull
    route = line_route(read.source, mapper) if pull is not None and pull.since is None else None
    records: Iterable[RawRecord | BadRecord | RawLines]
    if read.named is not None:
        records = read.named.records(read.source)
    elif route is not None:  # unchanged CSV lines recognised unparsed
        records = route.records()
    elif pull is not None:
        records = pull.records(read.source)
    else:  # pragma: no cover - a run has a pull or named keys
        raise RuntimeError("a run without a pull")
    # the pull reports its verdict; absence decides gone only when it is complete
    records = reported(records, run.ledger, read.source.describe(), pull=pull, named=read.named)
    if route is not None:  # the keys of lines left unparsed count toward the key's format
        read.shape.keys_of = route.keys
    records = read.shape.watched(records)  # a broken shape ends the pull here
    tally = Tally()
    store.fill(
        plan(
            records,
            mirror.known(),
            walked=mirror.walked(),
            seen=mirror.seen_table(),
            mapper=mapper,
            ledger=run.ledger,  # gone only when the pull proved itself complete
            archiving=run.archiving,  # ARCHIVE, not GONE
            tally=tally,  # bad rows whose product is unknown: no gone decisions
            resend=run.options.resend,  # retry: refused data sent again
            recognised=store.recognised,  # unchanged by record digest: a bit each, no action
            lines=route,
            learn=None if run.options.dry_run else store.learn,  # ... their digests, learnt
        )
    )
    return store.counts(), tally


def report(summary: RunSummary, store: PlanStore, counts: Counts, tally: Tally) -> None:
    """The plan's part of the summary: unchanged, refused and gone products, with their
    problems and notes."""
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
    # rejected rows whose product cannot be told, and the gone decisions they stopped
    summary.rows_without_key = tally.unsure
    summary.gone_skipped = tally.gone_skipped
    if tally.gone_skipped:
        summary.notes.append(
            f"gone decisions skipped: {tally.unsure} row(s) without a readable key "
            "(any of them could be a product this pull would otherwise mark gone or archive); "
            "fix the rows listed and the next full pull decides"
        )
        log.warning("sync.gone.skipped", rows=tally.unsure)


def guard(run: PlanRun, store: PlanStore, counts: Counts, read: Opened) -> None:
    """Refuse products about to be created under keys that left the source reformatted
    (any pull, whatever ``--force``); refuse a whole pull that would treat the catalog as
    gone, replace it, or change, archive or mark gone too much of it at once (unless
    forced)."""
    whole = run.ledger.whole_pull()

    def vanished() -> Iterable[str]:
        if whole:
            return itertools.chain(store.keys(Kind.GONE), store.keys(Kind.ARCHIVE))
        # a pull of some records only: any key it did not read may be the one
        planned = {k for kind in Kind for k in store.keys(kind)}
        in_source = run.mirror.keys()  # in the source as far as the mirror knows
        return (k for k in in_source if k not in planned)

    created = list(store.keys(Kind.CREATE)) if counts[Kind.CREATE] else []
    read.shape.judge_keys(created, vanished)
    if not whole:  # an incremental or named pull is small or empty by design
        return
    options, safety = run.options, run.settings.safety
    known = run.mirror.count()
    valid = sum(
        counts[k]
        for k in (Kind.CREATE, Kind.UPDATE, Kind.UNCHANGED, Kind.STILL_REJECTED, Kind.RESTORE)
    )
    if valid == 0 and known and not options.allow_empty_source:
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
    if (
        not options.force
        and updates > GUARD_MIN_UPDATES
        and updates > known * safety.max_change_ratio
    ):
        updates = run.sending(store.actions(Kind.UPDATE))  # only those that change the CMS
    ratio_guard(
        updates,
        known,
        max_ratio=safety.max_change_ratio,
        minimum=GUARD_MIN_UPDATES,
        force=options.force,
        error=errors.ChangeGuardTripped,
        what="would be updated",
        key="max_change_ratio",
        advice="Check the export, then run again with --force if the change is real.",
    )
    leaving = counts[Kind.GONE] + counts[Kind.ARCHIVE]
    if valid == 0:  # an empty source, allowed: marked gone is what --allow-empty-source says;
        leaving = counts[Kind.ARCHIVE]  # archiving (a change on the CMS) still takes --force
    replacement_guard(leaving, counts[Kind.CREATE], known, force=options.force)
    run.guard_gone(leaving, known)  # the [gone] policy's own guard, under every action


def dry_run_report(run: PlanRun, store: PlanStore, counts: Counts) -> None:
    """What a dry run would write, how long it would take, and whether it would walk."""
    summary = run.summary
    summary.created = counts[Kind.CREATE]
    summary.updated = counts[Kind.UPDATE]
    summary.archived = counts[Kind.ARCHIVE]
    summary.restored = counts[Kind.RESTORE]
    writes = summary.created + summary.updated + summary.archived + summary.restored
    # keys, workspace cap and learnt pace
    summary.notes.append(
        eta.plan_note(
            run.settings,
            creates=summary.created,
            updates=writes - summary.created,
            pace_rows=run.mirror.metas(PACE_META),
        )
    )
    if store.needs_lookup() or run.options.verify:
        summary.notes.append(
            "a remote walk (1 read per 100 products) would run first to look up existing products"
        )


def note_refusals(run: PlanRun, store: PlanStore, read: Opened) -> None:
    """What `skuferry rejected` lists: the plan's refusals (all of them, in a full pull)."""
    run.mirror.note_refusals(
        _refusals(store),
        valid=itertools.chain.from_iterable(store.keys(k) for k in _VALID_KINDS),
        source=read.source.name,
        whole=run.ledger.whole_pull(),
    )


def _refusals(store: PlanStore) -> Iterator[tuple[str | None, str, str, int | None]]:
    """(key, stage, reason, line) of each product the plan refused, or still refuses."""
    for action in store.actions(Kind.REJECT, Kind.STILL_REJECTED):
        if action.kind is Kind.STILL_REJECTED:  # the API refused these very data before
            reason = action.reason or "rejected earlier; not resent until its data change"
            yield action.key, "api", reason, action.line
        else:
            yield action.key, action.stage or "read", action.reason or "refused", action.line
