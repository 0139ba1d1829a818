"""Discontinued products: the ``[gone]`` policy, its bodies, and the guard. Pure.

The API has no DELETE for products. With ``action = "patch"`` a product that
leaves the source gets one update carrying the ``[gone] patch`` table (say
``{ status = "archived", stock = 0 }``) and is ``archived`` in the mirror; when
it comes back it is updated with its source data plus the ``[gone] restore``
table. The planner decides who moves; this module says what the
moves carry and refuses a run that would archive too much at once.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from skuferry import canonical
from skuferry.config.schema import GoneSettings
from skuferry.errors import GoneGuardTripped
from skuferry.sync.plan.guard import ratio_guard

GUARD_MIN_ARCHIVES = 10  # below this many archives the guard never trips (as the change guard)


@dataclass(frozen=True)
class GonePolicy:
    action: Literal["leave", "patch"] = "leave"
    patch: Mapping[str, Any] = field(default_factory=dict)
    restore: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, gone: GoneSettings) -> GonePolicy:
        return cls(action=gone.action, patch=dict(gone.patch), restore=dict(gone.restore))

    @functools.cached_property  # asked by every archive and restore of a run: hashed once
    def archiving(self) -> str | None:
        """A digest of the patch when archiving is on (None: leave products as they are).

        A refused archive is remembered under it, so it is retried only when the patch changes.
        """
        return canonical.digest(dict(self.patch)) if self.action == "patch" else None


def sent_after_archive(sent: Mapping[str, Any] | None, patch: Mapping[str, Any]) -> dict[str, Any]:
    """What was last sent, once archived: the patch's values of the fields the source gives.

    Only those are recorded, so a restore sends them again from the source (stock = 0 is put
    back to the real stock); patch fields the source never gives stay out of the diff.
    """
    before = dict(sent or {})
    return {**before, **{k: v for k, v in patch.items() if k in before}}


def restore_body(changed: Mapping[str, Any], restore: Mapping[str, Any]) -> dict[str, Any]:
    """The update that brings an archived product back: the restore table, the source's
    changed fields over it (the source is the truth for what it gives)."""
    return {**restore, **changed}


def guard(leaving: int, known: int, *, max_ratio: float, force: bool, archiving: bool) -> None:
    """Refuse a run that would archive (``archiving``) or mark gone more than ``max_ratio``
    of the ``known`` products: under every ``[gone]`` action, a product marked gone is one
    the next runs no longer keep in step."""
    ratio_guard(
        leaving,
        known,
        max_ratio=max_ratio,
        minimum=GUARD_MIN_ARCHIVES,
        force=force,
        error=GoneGuardTripped,
        what="left the source and would be " + ("archived" if archiving else "marked gone"),
        key="max_gone_ratio",
        advice="Check the export, then run again with --force if they are really discontinued.",
    )
