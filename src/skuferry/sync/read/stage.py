"""The read stage of a run: the source opened in pieces, the pull chosen, the skip decision.

What it opens and decides (``Opened``) is what the plan reads and the writes remember;
its own part of the run's summary (the pull, the named keys not found, the records left
out on purpose, the joins) it fills itself (``report``), once the plan is filled it
notes the feed the run read and refuses one an undo took back (``feed_read``), and once
every write landed it moves the incremental window, stores the change token and keeps
the shape the pull showed (``commit``). The shape is watched as the plan reads
(``shape.ShapeWatch``): its verdict goes to the run's ledger, and a broken one ends the
pull before any write.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from skuferry import logs
from skuferry.completeness import Ledger
from skuferry.config.schema import Settings
from skuferry.models import RunOptions, RunSummary, State
from skuferry.shape import Shape, ShapeVerdict, learn
from skuferry.sources.base import Source
from skuferry.sources.dispatch import open_source as open_base
from skuferry.sources.skip import skip_notes, skipped_rows
from skuferry.state.mirror import Mirror
from skuferry.sync import skip
from skuferry.sync.expressions.functions import Table
from skuferry.sync.read import incremental, undone
from skuferry.sync.read.named import NamedPull
from skuferry.sync.read.pieces import (
    join_tokens,
    joins_read,
    open_pieces,
    pieces_notes,
    skipped,
)
from skuferry.sync.read.shape import Mapped, ShapeWatch

# the engine's events, under the engine's logger: one run, one logger to follow
log = logs.get("skuferry.sync.engine")


class ReadRun(Protocol):
    """What the read stage takes from the run's context."""

    settings: Settings
    options: RunOptions
    mirror: Mirror
    summary: RunSummary
    stack: ExitStack
    stop: threading.Event
    archiving: str | None
    pending: tuple[State, ...]
    run_id: int | None

    @property
    def source(self) -> Source | None: ...

    @property
    def ledger(self) -> Ledger: ...

    @property
    def contract(self) -> Shape | None: ...


@dataclass
class Opened:
    """The source as the run reads it, and how: a pull (full or incremental) or named keys."""

    base: Source  # as the source reads it
    source: Source  # the same in pieces: grouped, joined, filtered
    pull: incremental.Pull | None  # None: a named run (--only, retry, hooks)
    named: NamedPull | None
    seen_before: skip.Decision  # the change token this run stores once it commits
    shape: ShapeWatch  # the source's shape as the plan reads it, judged against the contract

    @property
    def skips(self) -> bool:
        """The skip decision says: read nothing, plan nothing."""
        return self.pull is not None and self.seen_before.skip


def open_source(
    run: ReadRun,
    stack: ExitStack,
    *,
    readonly: bool,
    ledger: Ledger | None = None,
    allow_empty: bool = False,
) -> tuple[Source, Source, dict[str, Table]]:
    """The source as read, the same in pieces, and the mapping's tables (read once)."""
    base = run.source or open_base(run.settings.source, stop=run.stop)  # stop ends its waits
    # grouped, unnested, joined, filtered; join indexes beside the state (not in a dry run)
    source, tables = open_pieces(
        run.settings,
        stack,
        base=base,
        readonly=readonly,
        stop=run.stop,
        ledger=ledger,
        allow_empty=allow_empty,
    )
    return base, source, tables


def begin(run: ReadRun, base: Source, source: Source, mapper: Mapped) -> Opened:
    """Choose the pull of the opened source and ask the skip decision (nothing read yet).
    ``mapper``: the mapping, which reads a record's product key and names what the
    shape's fields read."""
    options = run.options
    shape = watch(run, source, mapper)
    if options.only is not None:  # a named run always reads its keys
        run.summary.pull = "named"
        _not_undone(run, base, source, None)
        named = NamedPull(options.only, mapper)
        return Opened(base, source, None, named, skip.Decision(None), shape)
    pull = incremental.choose(
        source,
        incremental.read(run.mirror),
        identity=incremental.config_identity(run.settings),
        force_full=options.full,
        now=datetime.now(UTC),
    )
    run.summary.pull = pull.kind
    decision = _unchanged(run, base, pull, joins=source)
    if not decision.skip:  # a skipped run writes nothing: nothing of it to undo
        _not_undone(run, base, source, decision.token)
    return Opened(base, source, pull, None, decision, shape)


def _not_undone(run: ReadRun, base: Source, source: Source, token: str | None) -> None:
    """The run's token noted in its row (a full or incremental pull's: what an undo of the
    run refuses), and a feed ``skuferry undo`` took back refused (``undone``). ``token``:
    the skip decision's, None when it was not asked (a named or dry run: then worked out
    only when some feed was undone)."""
    mirror, options = run.mirror, run.options
    if token is None and undone.marks(mirror):
        token = undone.token_now(run.settings, base, source)
    if not options.dry_run and options.only is None:
        mirror.note_run_token(token)
    undone.check(mirror, token, force=options.force, dry_run=options.dry_run, summary=run.summary)


def feed_read(run: ReadRun, read: Opened) -> None:
    """The plan is filled, nothing is guarded or written yet: the feed the run read, by its
    content, noted in its row (what an undo of the run refuses, token or not), and a feed
    ``skuferry undo`` took back refused (``undone``), even when the source had no change
    token (a file written in the last two seconds, an API without validators)."""
    mirror, options = run.mirror, run.options
    feed = undone.feed_now(run.settings, read.base, read.source)
    if not options.dry_run:
        mirror.note_run_feed(feed)
    undone.check(
        mirror,
        read.seen_before.token,
        feed=feed,
        force=options.force,
        dry_run=options.dry_run,
        summary=run.summary,
    )


def watch(run: ReadRun, source: Source, mapper: Mapped, *, judging: bool = True) -> ShapeWatch:
    """The watch over this run's records: the contract it is held to, where it reports."""
    mirror, run_id = run.mirror, run.run_id

    def refused(seen: Shape | None, verdict: ShapeVerdict) -> None:
        mirror.refuse_shape(seen, verdict, run_id=run_id)

    return ShapeWatch(
        source,
        mapper,
        run.contract,
        run.ledger,
        accept=accept_hint(run.settings),
        refused=None if run.options.dry_run else refused,
        judging=judging,
        headed=run.settings.mapping.each is None,
    )


def accept_hint(settings: Settings) -> str:
    """How a refusal names the way to accept a shape on purpose."""
    where = settings.config_path
    return "skuferry accept-shape" + (f" --config {where}" if where is not None else "")


def _unchanged(
    run: ReadRun, base: Source, pull: incremental.Pull, *, joins: Source
) -> skip.Decision:
    """The skip decision. A run that reads forgets the stored change token until it
    commits; a dry run neither skips nor stores. ``joins``: the source in pieces, whose
    joins' tokens were taken as they opened (not asked again)."""
    if run.options.dry_run:
        return skip.Decision(None)
    found = skip.decide(
        run.settings,
        run.mirror,
        base,
        options=run.options,
        full_pull=pull.full,
        joins=join_tokens(joins),
        pending=lambda: skip.has_pending_work(run.mirror, run.pending, run.archiving),
    )
    if not found.skip:  # a skipped run tells it with its output (``skip.skipped_run``)
        log.info("sync.source.checked", skip=False, why=found.reason)
        skip.forget(run.mirror)  # stored again only when this run commits
    return found


def started(read: Opened) -> None:
    """The plan begins: what it reads, and why."""
    if read.named is not None:
        log.info(
            "sync.plan.started",
            source=read.source.describe(),
            pull="named",
            keys=len(read.named.keys),
        )
    elif read.pull is not None:
        log.info(
            "sync.plan.started",
            source=read.source.describe(),
            pull=read.pull.kind,
            why=read.pull.reason,
        )


def report(summary: RunSummary, read: Opened) -> None:
    """The read stage's part of the summary, after the plan's: named keys not found,
    records left out on purpose and the joins' remarks (notes, never rejections)."""
    if read.named is not None:
        report_missing(summary, read.named.missing)
    summary.notes.extend(skip_notes(read.base))  # [source] skip_if_empty
    summary.notes.extend(pieces_notes(read.source))  # where, each, joins' duplicate keys
    summary.skipped = skipped_rows(read.base) + skipped(read.source)
    summary.joins = {
        name: "read" if was_read else "reused" for name, was_read in joins_read(read.source).items()
    }
    if read.pull is not None:
        summary.notes.extend(read.pull.notes())  # records whose change time was not read
        if (why := incremental.unproven(read.source)) is not None:
            summary.notes.append(why)  # on every run, not only in `check`
            log.warning("sync.window.unproven", source=read.source.describe(), why=why)


def report_missing(summary: RunSummary, missing: list[str]) -> None:
    """Named keys the source does not hold: each a problem (exit 1), and one note."""
    summary.missing += len(missing)
    for key in missing:
        summary.add_problem(key, None, "not in the source")
    if missing:
        shown = ", ".join(missing[:10]) + (", ..." if len(missing) > 10 else "")
        summary.notes.append(f"{len(missing)} named key(s) are not in the source: {shown}")


def skipped_unchanged(run: ReadRun, read: Opened) -> None:
    """The unchanged source was not read: the skipped run's summary, and the pull counts
    toward ``full_every`` while its window stays."""
    skip.skipped_run(run.summary, run.mirror)
    if read.pull is not None:
        incremental.finish(run.mirror, read.pull, committed=False)


def commit(run: ReadRun, read: Opened) -> None:
    """All writes over: the next window starts at this pull's start and, when every write
    landed, the next run may skip an unchanged source."""
    keep_shape(run, read.shape)
    if read.pull is None:
        return
    summary = run.summary
    committed = not summary.interrupted and not summary.failed
    incremental.finish(run.mirror, read.pull, committed=committed)
    if committed:
        skip.remember(run.mirror, read.seen_before.token, summary)


def keep_shape(run: ReadRun, shape: ShapeWatch, *, accepted: bool = False) -> Shape | None:
    """A whole pull whose shape held (or was accepted) is the contract from now on."""
    seen = shape.seen
    if seen is None or not seen.whole or not (accepted or run.ledger.shape_holds()):
        return None
    kept = learn(run.contract, seen, accepted=accepted)
    run.mirror.learn_shape(kept, run_id=run.run_id, accepted=accepted)
    return kept
