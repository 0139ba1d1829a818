"""A new shape of the source, accepted on purpose: ``skuferry accept-shape``,
``sync --accept-shape``.

The source is read whole through the same watch a run reads it through
(``read.shape.ShapeWatch``, told not to judge), and what it shows becomes the contract
(``shape.learn``, accepted): a field the source no longer gives is *gone* from then on,
so its products keep their value on the CMS (``[mapping] send_nulls`` sends null). Keys
that left the source and came back reformatted (``shape.renamed_keys``: a spreadsheet
stripped the leading zeros, a prefix was added) are the same products: their rows take
the new keys, CMS ids kept, and the next run sends each new key to its product instead
of creating a copy. The stored skip token is dropped, so the next run reads.

What cannot be accepted: a key that the source no longer gives at all (no product could
be told from another); fix the export or ``[mapping] key``.

Nothing is sent to the CMS here: accepting is a change of the state file alone.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime

from skuferry import errors, logs
from skuferry.config.schema import Settings
from skuferry.models import RawRecord, RunOptions, RunSummary
from skuferry.shape import Shape, ShapeVerdict, renamed_keys
from skuferry.state.mirror import Mirror
from skuferry.sync import skip
from skuferry.sync.context import Adapters, RunContext, open_mirror
from skuferry.sync.map import stage as map_stage
from skuferry.sync.read import incremental
from skuferry.sync.read import stage as read_stage
from skuferry.sync.read.pulled import reported

log = logs.get("skuferry.sync.engine")


@dataclass
class Accepted:
    """What accepting found and did."""

    source: str
    verdict: ShapeVerdict  # the changes from the contract before
    shape: Shape | None  # the contract now (None: the pull was not whole, nothing kept)
    before_run: int | None = None  # the run that had learnt the contract before
    before_at: float | None = None
    renamed: list[tuple[str, str]] = field(default_factory=list)  # keys given their new form

    @property
    def changed(self) -> bool:
        return bool(self.verdict.changes) or bool(self.renamed)

    def lines(self) -> list[str]:
        """What the terminal shows, a line each."""
        found: list[str] = []
        since = ""
        if self.before_at is not None:
            when = datetime.fromtimestamp(self.before_at, UTC).strftime("%Y-%m-%d %H:%M UTC")
            run = f"run {self.before_run}, " if self.before_run is not None else ""
            since = f" (learnt {run}{when})"
        if not self.verdict.changes:
            found.append(f"the shape of {self.source} is the one the state knows{since}")
        else:
            found.append(
                f"the shape of {self.source} changed since the one the state knows{since}:"
            )
            found.extend(f"  - {c.text}" for c in self.verdict.changes)
        gone = sorted(self.shape.gone()) if self.shape is not None else []
        if gone:
            found.append(
                f"field(s) {', '.join(map(repr, gone))}: gone from the source; their products "
                "keep their values on the CMS ([mapping] send_nulls sends null instead)"
            )
        if self.renamed:
            shown = ", ".join(f"{old!r} -> {new!r}" for old, new in self.renamed[:3])
            found.append(
                f"{len(self.renamed)} key(s) take their new form in the state (e.g. {shown}): "
                "the next sync sends each new key to the product it names, CMS ids kept"
            )
        if self.shape is not None:
            found.append("accepted: the next sync is held to this shape")
        return found

    def note(self) -> str:
        """The run's note when ``sync --accept-shape`` accepted before it read."""
        breaking = [c.text for c in self.verdict.breaking]
        parts = [f"shape accepted: {'; '.join(breaking)}"] if breaking else []
        if self.renamed:
            parts.append(f"{len(self.renamed)} key(s) took their new form")
        return "; ".join(parts) or "shape accepted: no change from the one known"


def accept_shape(settings: Settings, *, adapters: Adapters | None = None) -> Accepted:
    """``skuferry accept-shape``: under the run lock, read the source and accept its shape."""
    adapters = adapters or Adapters()
    with ExitStack() as stack:
        mirror = open_mirror(stack, settings, adapters)
        return accept(settings, mirror, adapters, stack=stack)


def accept(
    settings: Settings,
    mirror: Mirror,
    adapters: Adapters,
    *,
    stack: ExitStack,
    stop: threading.Event | None = None,
    run_id: int | None = None,
) -> Accepted:
    """Read the source whole and make its shape the contract; rename reformatted keys.

    Its own context and ledger: a run that follows (``sync --accept-shape``) reads anew."""
    run = RunContext(
        settings,
        RunOptions(full=True, allow_empty_source=True),
        mirror,
        RunSummary(),
        stack,
        stop or threading.Event(),
        adapters,
        run_id=run_id,
    )
    _base, source, mapper = map_stage.open_mapped(
        run, stack, readonly=True, ledger=run.ledger, allow_empty=True
    )
    watch = read_stage.watch(run, source, mapper, judging=False)
    pull = incremental.Pull(full=True, started_at=datetime.now(UTC), reason="accept-shape")
    records = reported(pull.records(source), run.ledger, source.describe(), pull=pull)
    keys: set[str] = set()
    key_of = mapper.key_reader()
    for record in watch.watched(records):
        if type(record) is RawRecord and (key := key_of(record)):
            keys.add(key)
    verdict = watch.verdict or ShapeVerdict()
    key_lost = [c for c in verdict.breaking if c.target == mapper.key_field]
    if key_lost:
        raise errors.ShapeChanged(
            f"{key_lost[0].text}: a shape without its key cannot be accepted; fix the export "
            "or [mapping] key"
        )
    status = mirror.shape_status()
    known = set(mirror.keys())
    created = sorted(keys - known)
    renamed = mirror.rename_keys(renamed_keys((k for k in known if k not in keys), created))
    kept = read_stage.keep_shape(run, watch, accepted=True)
    skip.forget(mirror)  # the next run reads the source again
    for old, new in renamed[:10]:
        log.info("shape.key.renamed", old=old, new=new)
    log.info(
        "shape.accepted",
        source=source.name,
        changes=[c.text for c in verdict.changes],
        renamed=len(renamed),
    )
    return Accepted(
        source.name,
        verdict,
        kept,
        before_run=status.learned_run,
        before_at=status.learned_at,
        renamed=renamed,
    )
