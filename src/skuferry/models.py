"""Plain data passed between the source, the planner, the mirror and the engine.

No I/O here: these are the nouns every module shares.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One record as a source read it: its position and its fields, untyped."""

    # 1-based: csv, the physical line the row starts on; jsonl, the line; http/sql, the record
    line: int
    fields: dict[str, Any]


@dataclass(frozen=True, slots=True)
class BadRecord:
    """A record that could not be read or mapped. ``reason`` names line and column."""

    line: int
    reason: str
    key: str | None = None


@dataclass(frozen=True, slots=True)
class Product:
    """A valid source product, mapped to the payload skuferry sends."""

    key: str
    payload: dict[str, Any]  # JSON-ready; decimals are decimal.Decimal (see canonical.py)
    digest: str  # sha256 hex of canonical_json(payload)
    line: int
    fingerprint: str | None = None  # hash of the source values + mapping (Mapper.fingerprint)


class State(enum.StrEnum):
    """Where a product stands in the mirror."""

    SYNCED = "synced"  # the remote holds ``digest`` under ``remote_id``
    PENDING = "pending"  # a create was started; an intent may be open (outcome unknown)
    FAILED = "failed"  # the last attempt failed transiently; retried next run
    REJECTED = "rejected"  # the API or the mapping refused ``digest``; retried when data change
    DRIFT = "drift"  # the source changed but updates are not possible (update_method / 405)
    DUPLICATE = "duplicate"  # the remote holds several products with this key
    GONE = "gone"  # no longer in the source; never deleted remotely
    REMOTE_ONLY = "remote_only"  # found on the remote by a walk, never in this source

    @property
    def in_source(self) -> bool:
        """Whether the source holds (or last held) this product."""
        return self not in (State.GONE, State.REMOTE_ONLY)


@dataclass(frozen=True, slots=True)
class MirrorRow:
    """What the mirror knows about one key."""

    key: str
    state: State
    digest: str | None = None  # digest last confirmed on the remote (SYNCED) or refused (REJECTED)
    remote_id: str | None = None
    intent_digest: str | None = None  # an open create intent: outcome unknown until looked up
    last_error: str | None = None
    fingerprint: str | None = None  # Mapper.fingerprint of the source row behind ``digest``


class Kind(enum.StrEnum):
    CREATE = "create"
    UPDATE = "update"
    UNCHANGED = "unchanged"
    REJECT = "reject"  # bad record, duplicate key in the source
    STILL_REJECTED = "still_rejected"  # refused before with the same data: not resent
    GONE = "gone"


@dataclass(frozen=True, slots=True)
class Action:
    """One step of a plan.

    ``lookup_first`` on CREATE: the product's absence on the remote is not known
    (no full remote walk recorded, or an open intent), so the engine must look it
    up in the remote index before it may POST.
    """

    kind: Kind
    key: str | None
    product: Product | None = None
    remote_id: str | None = None
    reason: str | None = None
    line: int | None = None
    lookup_first: bool = False


MAX_LISTED_PROBLEMS = 1000

Progress = Callable[[int, int], None]  # (done, total): the engine's progress points


@dataclass(slots=True)
class RunSummary:
    """The outcome of one sync run; ``as_json()`` is the contract's JSON summary."""

    created: int = 0
    updated: int = 0
    adopted: int = 0
    unchanged: int = 0
    rejected: int = 0
    failed: int = 0
    drift: int = 0
    gone: int = 0
    duplicates: int = 0
    requests: dict[str, int] = field(default_factory=lambda: {"read": 0, "write": 0})
    rate_limited: int = 0
    duration_s: float = 0.0
    dry_run: bool = False
    interrupted: bool = False
    problems: list[dict[str, Any]] = field(default_factory=list)  # {key, line, reason}
    notes: list[str] = field(default_factory=list)  # one-time remarks, e.g. updates disabled

    def as_json(self) -> dict[str, Any]:
        return {
            "created": self.created,
            "updated": self.updated,
            "adopted": self.adopted,
            "unchanged": self.unchanged,
            "rejected": self.rejected,
            "failed": self.failed,
            "drift": self.drift,
            "gone": self.gone,
            "duplicates": self.duplicates,
            "requests": dict(self.requests),
            "rate_limited": self.rate_limited,
            "duration_s": round(self.duration_s, 3),
            "dry_run": self.dry_run,
            "interrupted": self.interrupted,
            "problems": list(self.problems),
            "notes": list(self.notes),
        }

    def add_problem(self, key: str | None, line: int | None, reason: str) -> None:
        """List a product's problem; the list is capped, the counts are not."""
        if len(self.problems) < MAX_LISTED_PROBLEMS:
            self.problems.append({"key": key, "line": line, "reason": reason})

    @property
    def clean(self) -> bool:
        """True when the remote matches the source for every valid product."""
        return not (
            self.rejected or self.failed or self.drift or self.duplicates or self.interrupted
        )
