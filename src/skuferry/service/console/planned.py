"""What the next run would do with one product, computed on request.

A full plan reads the whole source and maps every record: seconds of CPU for a large
catalog, taken from the daemon's own runs. The page asks for one key instead: the
source is read as ``sync --only KEY --dry-run`` reads it (fetched by key when the
source can), the record mapped, and the planner's own rule (``decide``) applied to the
mirror's row, read-only. Nothing is written and no lock is taken; one such plan runs
at a time in the process.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from skuferry import canonical
from skuferry.config.schema import Settings
from skuferry.errors import SkuferryError
from skuferry.lifecycle import State, archive_refused
from skuferry.models import BadRecord, Kind, MirrorRow
from skuferry.state.mirror import Mirror
from skuferry.sync.map.mapper import Mapper
from skuferry.sync.plan.planner import decide
from skuferry.sync.plan.rule import leaving
from skuferry.sync.read.named import NamedPull
from skuferry.sync.read.pieces import open_pieces
from skuferry.sync.write.gone import GonePolicy

_ONE_AT_A_TIME = threading.Lock()

_WORDS = {
    Kind.CREATE: "create it on the CMS",
    Kind.UPDATE: "update it on the CMS",
    Kind.UNCHANGED: "nothing: it is in step",
    Kind.STILL_REJECTED: "nothing: the same data were refused (send it again to retry)",
    Kind.RESTORE: "restore it (it is archived on the CMS)",
}


@dataclass(frozen=True, slots=True)
class Change:
    field: str
    old: str | None  # canonical JSON; None: not sent before
    new: str | None  # None: no longer sent


@dataclass(frozen=True, slots=True)
class Planned:
    key: str
    # create | update | unchanged | still_rejected | restore | refused | archive | gone | missing
    action: str
    words: str
    line: int | None = None
    changes: list[Change] = field(default_factory=list)


class BusyError(Exception):
    """Another plan is being computed."""


def plan_one(settings: Settings, key: str) -> Planned:
    """The next run's decision for ``key``. Raises ``BusyError`` while another plan runs and
    ``SkuferryError`` when the source cannot be read."""
    if not _ONE_AT_A_TIME.acquire(blocking=False):
        raise BusyError
    try:
        return _plan(settings, canonical.key(key))
    finally:
        _ONE_AT_A_TIME.release()


def _plan(settings: Settings, key: str) -> Planned:
    with ExitStack() as stack:
        source, tables = open_pieces(settings, stack, readonly=True)
        mapper = Mapper(
            settings.mapping,
            source_name=source.describe(),
            tables=tables,
            joins=[join.name for join in settings.join],
            empty_values=settings.source.empty_values,
        )
        pull = NamedPull([key], mapper)
        mapped = [r if isinstance(r, BadRecord) else mapper.map(r) for r in pull.records(source)]
    if not mapped:
        return _leaving(settings, key)
    result = mapped[-1]
    if isinstance(result, BadRecord):
        return Planned(key, "refused", f"nothing: refused ({result.reason})", result.line)
    mirror = Mirror(settings.state.path, readonly=True)
    try:
        row = mirror.rows([key]).get(key)
        before = mirror.payload(key) or {}
        walked = mirror.walked()
    finally:
        mirror.close()
    action = decide(result, row, walked=walked)
    words = _WORDS.get(action.kind, action.kind.value)
    changes = _changes(before, result.payload) if action.kind is not Kind.UNCHANGED else []
    return Planned(key, action.kind.value, words, result.line, changes)


def _leaving(settings: Settings, key: str) -> Planned:
    """A key the source does not hold: what the ``[gone]`` policy does with it, through the
    planner's own rule (``leaving``). A move waits for a read that proves the absence (a
    whole read of the source, the guard of ``max_gone_ratio``), as in a run."""
    row, before = None, {}
    if settings.state.path.exists():
        mirror = Mirror(settings.state.path, readonly=True)
        try:
            row = mirror.rows([key]).get(key)
            before = mirror.payload(key) or {}
        finally:
            mirror.close()
    if row is None:
        return Planned(key, "missing", "nothing: neither the source nor the state knows this key")
    policy = GonePolicy.from_settings(settings.gone)
    kind = leaving(row, archiving=policy.archiving)
    if kind is Kind.ARCHIVE:
        patch = dict(policy.patch)
        return Planned(
            key,
            "archive",
            'archive it: the source no longer holds it, so the [gone] policy (action = "patch") '
            "sends it the patch once, when a run has read the whole source",
            changes=_changes({k: before.get(k) for k in patch if k in before}, patch),
        )
    if kind is Kind.GONE:
        return Planned(
            key,
            "gone",
            "nothing on the CMS: the source no longer holds it and the [gone] policy is "
            'action = "leave", so the next whole read marks it gone here and the CMS keeps it',
        )
    return Planned(
        key, "missing", _LEFT_ALONE.get(_left_state(row, policy.archiving), _LEFT_ALONE["other"])
    )


_LEFT_ALONE = {
    "archived": "nothing: the source no longer holds it and it was archived on the CMS "
    "([gone] patch sent); it is restored if it comes back",
    "refused": "nothing: the source no longer holds it and the CMS refused its [gone] patch; "
    "it is sent again when the patch changes",
    "gone": "nothing: the source no longer holds it; already marked gone ([gone] action = "
    '"leave": the CMS keeps it as it is)',
    "remote_only": "nothing: the product is only on the CMS, never in this source",
    "other": "nothing: the source does not hold this key",
}


def _left_state(row: MirrorRow, archiving: str | None) -> str:
    if archive_refused(row, archiving):
        return "refused"
    return {State.ARCHIVED: "archived", State.GONE: "gone", State.REMOTE_ONLY: "remote_only"}.get(
        row.state, "other"
    )


def _changes(before: dict[str, Any], after: dict[str, Any]) -> list[Change]:
    found = []
    for name in sorted(set(before) | set(after)):
        old = canonical.dumps(before[name]) if name in before else None
        new = canonical.dumps(after[name]) if name in after else None
        if old != new:
            found.append(Change(name, old, new))
    return found


__all__ = ["BusyError", "Change", "Planned", "SkuferryError", "plan_one"]
