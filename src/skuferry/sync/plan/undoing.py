"""What the undo of a run puts back, product by product. Pure.

A restore is a new version (as Contentstack's entry versions have it): the undo of run R
is a run of its own whose writes bring each product R changed back to the values it had
before R, as far as that is still R's doing. For each product, from R's history rows
(``state.history``) and the product as the CMS holds it now (read by id first):

- R updated it (an update, a restore, or the ``[gone]`` patch of an archive): each field R
  sent goes back to its value before R when the CMS still holds what R sent. A field the
  CMS holds otherwise (edited there since, or a later run changed it) is left and listed;
  one already back is not written again (an undo cut short and run again writes nothing
  twice). A value before R that skuferry never knew is left and listed, except the fields
  of the ``[gone]`` tables: undoing an archive sends the ``restore`` table's, undoing a
  restore the ``patch``'s;
- R created it: archived with the ``[gone]`` patch when one is configured, else listed with
  its remote id for the operator (the API has no DELETE for products);
- R's write was refused or failed: nothing to put back.

Afterwards the mirror holds what the CMS holds: the row as it was before R (its state, the
digest and record digest it was in step with) when every field went back, else the
digest unknown (the next run compares), and the fields put back as last sent. So a
corrected export syncs as a normal change, and the change guard counts against these.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from skuferry.canonical import same_value
from skuferry.state.history import Entry

# What becomes of one field
PUT_BACK = "put_back"
ALREADY = "already"  # the CMS holds the value before R again: nothing to write
LEFT = "left"  # not written: the CMS holds something else, or the value before R is not known

# What the undo does with one product
WRITE = "put_back"  # its fields go back (an update)
ARCHIVE = "archive"  # R created it: the [gone] patch
LIST = "list"  # R created it, and there is no [gone] patch: listed for the operator
NOTHING = "none"  # nothing to write (all back or left, not applied, gone from the CMS)


@dataclass(frozen=True, slots=True)
class FieldBack:
    """One field R sent: what R sent, the value before R, what the CMS holds, the verdict."""

    name: str
    sent: Any  # what R sent
    back: Any  # the value before R (``known`` False: not known)
    known: bool
    now: Any  # what the CMS holds (None: null or absent: the two compare alike)
    result: str  # PUT_BACK | ALREADY | LEFT
    reason: str = ""
    was_sent: bool = False  # skuferry had sent the value before: it is "last sent" again


@dataclass(frozen=True, slots=True)
class Target:
    """The mirror's row once the undo's write landed."""

    state: str  # "synced" or "archived"
    digest: str | None  # None: not known (the next run compares)
    record_digest: str | None


@dataclass(frozen=True, slots=True)
class Step:
    """The undo of one product."""

    key: str
    remote_id: str | None
    kind: str  # what R did: create | update | restore | archive
    action: str  # WRITE | ARCHIVE | LIST | NOTHING
    reason: str = ""  # why LIST or NOTHING, or what was left
    fields: tuple[FieldBack, ...] = ()
    body: dict[str, Any] = field(default_factory=dict)  # what goes out
    target: Target | None = None
    history_kind: str = "update"  # the undo's own write, as its history names it

    @property
    def left(self) -> list[FieldBack]:
        return [f for f in self.fields if f.result == LEFT]

    @property
    def sent_back(self) -> dict[str, Any]:
        """The fields last sent once the step landed: those skuferry had sent before R, back."""
        return {f.name: f.back for f in self.fields if f.result != LEFT and f.was_sent}


@dataclass(frozen=True, slots=True)
class Written:
    """What run R did to one product, from its history rows (those that landed or may
    have)."""

    key: str
    kind: str
    remote_id: str | None
    before: dict[str, Any]  # each field's value before R (known ones)
    after: dict[str, Any]  # each field's value R sent last
    prior: dict[str, Any] | None  # the mirror's row before R's first write
    refused: str = ""  # R's writes were all refused or failed: why


def written(key: str, entries: Iterable[Entry]) -> Written:
    """R's rows for ``key`` (in order) as one write: the earliest value before each field,
    the last value sent."""
    rows = list(entries)
    landed = [e for e in rows if e.landed is not False]
    if not landed:
        last = rows[-1]
        why = f"{last.outcome}" + (f" (HTTP {last.status})" if last.status else "")
        why += f": {last.error}" if last.error else ""
        return Written(key, last.kind, last.remote_id, {}, {}, last.prior, refused=why)
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}
    seen: set[str] = set()
    for entry in landed:
        for name, value in entry.after.items():
            if name not in seen and entry.before is not None and name in entry.before:
                before[name] = entry.before[name]
            seen.add(name)
            after[name] = value
    kind = "create" if any(e.kind == "create" for e in landed) else landed[0].kind
    remote_id = next((e.remote_id for e in reversed(landed) if e.remote_id), None)
    return Written(key, kind, remote_id, before, after, landed[0].prior)


def step(
    done: Written,
    remote: Mapping[str, Any] | None,
    *,
    run: int,
    patch: Mapping[str, Any] | None,
    restore: Mapping[str, Any],
) -> Step:
    """The undo of what run ``run`` did to one product (``done``), against the product as
    the CMS holds it (``remote``; None: not there any more). ``patch``: the ``[gone]``
    patch when archiving is on, else None; ``restore``: its restore table."""
    key, rid = done.key, done.remote_id
    if done.refused:
        why = f"run {run}'s write was not applied: {done.refused}"
        return Step(key, rid, done.kind, NOTHING, why)
    if remote is None:
        return Step(key, rid, done.kind, NOTHING, "no longer on the CMS (deleted there since)")
    if done.kind == "create":
        return _created(done, remote, run=run, patch=patch)
    filled = dict(done.before)
    if done.kind == "archive":  # undoing the [gone] patch: the restore table fills in
        filled = {**{k: v for k, v in restore.items() if k in done.after}, **filled}
    elif done.kind == "restore" and patch is not None:  # undoing a restore: the patch
        filled = {**{k: v for k, v in patch.items() if k in done.after}, **filled}
    backs = tuple(
        _field(name, sent, filled, remote, run=run, was_sent=name in done.before)
        for name, sent in done.after.items()
    )
    body = {f.name: f.back for f in backs if f.result == PUT_BACK}
    prior = done.prior or {}
    archived = prior.get("state") == "archived"
    full = not any(f.result == LEFT for f in backs)
    target = Target(
        "archived" if archived else "synced",
        prior.get("digest") if full else None,
        prior.get("record_digest") if full else None,
    )
    history_kind = "archive" if archived else ("restore" if done.kind == "archive" else "update")
    left = [f for f in backs if f.result == LEFT]
    reason = (
        f"{len(left)} field(s) left: " + "; ".join(f"{f.name}: {f.reason}" for f in left)
        if left
        else ""
    )
    return Step(
        key,
        rid,
        done.kind,
        WRITE if body else NOTHING,
        reason,
        backs,
        body,
        target,
        history_kind,
    )


def _field(
    name: str,
    sent: Any,
    before: Mapping[str, Any],
    remote: Mapping[str, Any],
    *,
    run: int,
    was_sent: bool,
) -> FieldBack:
    now = remote.get(name)  # absent reads as null, as the CMS compares
    known = name in before
    back = before.get(name)
    if same_value(now, sent):
        if not known:
            why = f"its value before run {run} is not known to skuferry"
            return FieldBack(name, sent, None, False, now, LEFT, why)
        result = ALREADY if same_value(back, sent) else PUT_BACK
        return FieldBack(name, sent, back, True, now, result, was_sent=was_sent)
    if known and same_value(now, back):
        return FieldBack(name, sent, back, True, now, ALREADY, was_sent=was_sent)
    why = (
        f"changed on the CMS since run {run} (it holds {_shown(now)}, "
        f"run {run} sent {_shown(sent)})"
    )
    return FieldBack(name, sent, back, known, now, LEFT, why)


def _created(
    done: Written, remote: Mapping[str, Any], *, run: int, patch: Mapping[str, Any] | None
) -> Step:
    key, rid = done.key, done.remote_id
    if patch is None:
        return Step(
            key,
            rid,
            "create",
            LIST,
            f"created by run {run}; the API has no DELETE for products: remove it on the CMS "
            f'(remote id {rid}), or set [gone] action = "patch" to archive it',
        )
    backs = tuple(
        FieldBack(
            name,
            None,
            value,
            True,
            remote.get(name),
            ALREADY if same_value(remote.get(name), value) else PUT_BACK,
        )
        for name, value in patch.items()
    )
    if all(f.result == ALREADY for f in backs):
        return Step(key, rid, "create", NOTHING, "", backs, target=Target("archived", None, None))
    return Step(
        key,
        rid,
        "create",
        ARCHIVE,
        "",
        backs,
        dict(patch),
        Target("archived", None, None),
        "archive",
    )


def _shown(value: Any) -> str:
    if value is None:
        return "nothing"
    return repr(value) if isinstance(value, str) else str(value)
