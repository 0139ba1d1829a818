"""Plain data passed between the source, the planner, the mirror and the engine.

No I/O here: these are the nouns every module shares.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from skuferry.completeness import Ledger
from skuferry.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_PARTIAL

# The product's lifecycle, named here with the nouns every module shares.
from skuferry.lifecycle import State as State  # noqa: PLC0414 - re-exported

# Labels skuferry's own metrics carry: a constant label ([metrics] labels) of the same name
# would clash (the settings refuse it; the metrics render these).
METRIC_LABELS = frozenset({"result", "state", "tier", "key"})


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One record as a source read it: its position and its fields, untyped."""

    # 1-based: csv, the physical line the row starts on; jsonl, the line; http/sql, the record
    line: int
    fields: dict[str, Any]
    # where a problem says the record is, when not just its line: an element of a list
    # (``[mapping] each``) is "record 12 (line 40), item 3"
    label: str | None = None


@dataclass(frozen=True, slots=True)
class RawLines:
    """Consecutive physical lines of a delimited text file, each one whole record, unread.

    A reader that can tell a line holds one record by itself (no quote in it, and not
    inside a quoted field) hands such lines over as text: the planner parses only those
    it does not recognise (the line route), and its reader turns each into exactly
    the records it would have yielded (``LineReader.parse``). ``start``: the line
    number of ``texts[0]``; the lines keep their line breaks.
    """

    start: int
    texts: list[str]


@dataclass(frozen=True, slots=True)
class BadRecord:
    """A record that could not be read or mapped. ``reason`` names line and column.

    A product whose row is bad is *held*: it keeps its last state (no update, no
    archive, no gone). For that its key must be known. The mapper sets ``key``;
    a source does not know the mapping, so it hands over the ``fields`` it could
    read for sure (say the cells before an unclosed quote) and the planner reads
    the key from them with the mapping's key spec (``Mapper.key_of_bad``).
    ``guessed``: the fields were read by position but may be misplaced (a row
    with more fields than its header): the key read from them is held, yet the
    row's own product is not known for sure. A bad record whose product is not
    known for sure keeps a full pull from deciding anything gone (``plan``).
    ``no_product``: the row is known to be no product at all (a line repeating the
    header): reported, and it stops no gone decision.
    """

    line: int
    reason: str
    key: str | None = None
    # What the reader could read for sure, for the key alone; not part of equality.
    fields: Mapping[str, Any] | None = field(default=None, compare=False)
    guessed: bool = field(default=False, compare=False)
    no_product: bool = field(default=False, compare=False)
    # Which stage refused it (``skuferry rejected``): "read", the source could not read
    # the record; "map", the mapping refused its values (see ``STAGES``).
    stage: str = "read"


# The stages that may refuse a product, in the order a product meets them: the source
# reads it, the mapping types it, skuferry's checks before sending (duplicate keys in
# the source, several remote products with its key), the API.
STAGES = ("read", "map", "check", "api")


@dataclass(frozen=True, slots=True)
class Product:
    """A valid source product, mapped to the payload skuferry sends."""

    key: str
    payload: dict[str, Any]  # JSON-ready; decimals are decimal.Decimal (canonical JSON writes them)
    digest: str  # sha256 hex of canonical_json(payload)
    line: int
    record_digest: str | None = None  # hash of the source values + mapping (Mapper.record digest)


# The payload of a product recognised by its record digest: the planner never built it.
UNMAPPED: dict[str, Any] = {}


def was_mapped(product: Product) -> bool:
    """False for a product recognised by its record digest (its payload was never built)."""
    return product.payload is not UNMAPPED


@dataclass(frozen=True, slots=True)
class MirrorRow:
    """What the mirror knows about one key."""

    key: str
    state: State
    digest: str | None = None  # digest last confirmed on the remote (SYNCED) or refused (REJECTED)
    # ARCHIVED: the [gone] patch's digest while its answer is in doubt, a product's digest
    # whose restore was refused, else None (archived for sure)
    remote_id: str | None = None
    intent_digest: str | None = None  # an open create intent: outcome unknown until looked up
    last_error: str | None = None
    record_digest: str | None = None  # Mapper.record digest of the source row behind ``digest``


class Kind(enum.StrEnum):
    CREATE = "create"
    UPDATE = "update"
    UNCHANGED = "unchanged"
    REJECT = "reject"  # bad record, duplicate key in the source
    STILL_REJECTED = "still_rejected"  # refused before with the same data: not resent
    GONE = "gone"
    ARCHIVE = "archive"  # left the source, [gone] action = "patch": one update with the patch
    RESTORE = "restore"  # an archived product is back: its data plus the [gone] restore table


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
    stage: str | None = None  # a REJECT's stage (see ``STAGES``)


MAX_LISTED_PROBLEMS = 1000


class BudgetView(Protocol):
    """What a progress display reads from the run's budget (``remote.budget.Budget``)."""

    on_wait: Callable[[str, float], None] | None  # (tier, seconds) as a wait for budget starts

    def eta(self, tier: str, n: int) -> float:
        """Seconds until ``n`` more requests of ``tier`` can have been sent."""
        ...


class Progress(Protocol):
    """What the engine reports a run's progress to: the terminal bar, the daemon's status.

    Called with (done, total) at every progress point; shown the run's budget once the
    writes start (``watch_budget``), so that a display can tell the time left at the
    budget's pace and say when a request waits for it.
    """

    def __call__(self, done: int, total: int) -> None: ...

    def watch_budget(self, budget: BudgetView) -> None: ...


# A problem as listed in the summary: key, line, reason.
Problem = tuple[str | None, int | None, str]


# What a run did to products, as every report of it lists them first (JSON, table, daemon).
OUTCOME_COUNTS = ("created", "updated", "adopted", "unchanged", "rejected", "failed")
_WOULD = frozenset({"created", "updated", "archived", "restored"})  # a dry run's writes


def count_label(name: str, *, dry_run: bool) -> str:
    """A count's name as a person reads it: a dry run wrote nothing, so what it counted
    ``would be created``; every summary printed (``plan``, a workspace's line) says so."""
    return f"would be {name}" if dry_run and name in _WOULD else name


@dataclass(slots=True)
class RunSummary:
    """The outcome of one sync run, and the one place where a run counts it.

    Each stage fills its own part, as it finishes or as things happen: the read stage
    the pull, the named keys not found, the records left out on purpose and the joins;
    the plan what stays unchanged, what is refused and what left the source (and the
    rows without a key that stopped the gone decisions); the writes what they created,
    updated, adopted, archived, restored, failed or found drifted or duplicated, and
    the requests they sent; a skipped run repeats the standing counts of the run it
    skips. The engine adds only the run's one duration. ``as_json()`` is the contract's
    JSON summary.

    Problems and notes are listed in a fixed order, whatever the order they came in:
    the plan's (and those of keys read mid-run) as they come; then, once the writes are
    over (``close``), what the lookups found (``duplicate``), the API's refusals
    (``refused``), the failures (``fail``: one per key, its last reason), the ``--verify``
    repairs' note and the writes' notes (``write_note``).
    """

    run_id: int | None = None  # the runs table's row: what `skuferry undo RUN` takes (dry: None)
    created: int = 0
    updated: int = 0
    adopted: int = 0
    unchanged: int = 0
    rejected: int = 0
    rows_rejected: int = 0  # of ``rejected``: source rows that could not be read or mapped
    failed: int = 0
    drift: int = 0
    gone: int = 0
    archived: int = 0
    restored: int = 0
    duplicates: int = 0
    skipped: int = 0  # records left out on purpose: [source] where, skip_if_empty
    joins: dict[str, str] = field(default_factory=dict)  # [[join]] name -> "read" | "reused"
    # Rejected rows whose key cannot be read for sure; in a full pull they stop every
    # gone decision (``gone_skipped``): any of them could be a product that seems to have left.
    rows_without_key: int = 0
    gone_skipped: bool = False
    requests: dict[str, int] = field(default_factory=lambda: {"read": 0, "write": 0})
    requests_by_key: dict[str, int] = field(default_factory=dict)  # by key fingerprint
    rate_limited: int = 0
    duration_s: float = 0.0
    dry_run: bool = False
    interrupted: bool = False
    pull: str = "full"  # "incremental": only the source's changes were read; "named": --only
    problems: list[dict[str, Any]] = field(default_factory=list)  # {key, line, reason}
    notes: list[str] = field(default_factory=list)  # one-time remarks, e.g. updates disabled

    repaired: int = 0  # --verify: products found deleted or edited on the remote (a note)
    # --only / retry: named keys the source does not hold (listed as problems; exit 1)
    missing: int = 0
    # Every pull and walk of the run reports its verdict here; absence is decided from it.
    completeness: Ledger = field(default_factory=Ledger, compare=False, repr=False)
    # Listed when the writes are over (``close``), in this order:
    _found: list[Problem] = field(default_factory=list, init=False, repr=False)
    _refused: list[Problem] = field(default_factory=list, init=False, repr=False)
    _failures: dict[str, str] = field(default_factory=dict, init=False, repr=False)
    _write_notes: list[str] = field(default_factory=list, init=False, repr=False)
    _closed: bool = field(default=False, init=False, repr=False)

    def as_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "created": self.created,
            "updated": self.updated,
            "adopted": self.adopted,
            "unchanged": self.unchanged,
            "rejected": self.rejected,
            "rows_rejected": self.rows_rejected,
            "failed": self.failed,
            "drift": self.drift,
            "gone": self.gone,
            "archived": self.archived,
            "restored": self.restored,
            "duplicates": self.duplicates,
            "skipped": self.skipped,
            "joins": dict(self.joins),
            "rows_without_key": self.rows_without_key,
            "gone_skipped": self.gone_skipped,
            "requests": dict(self.requests),
            "requests_by_key": dict(self.requests_by_key),
            "rate_limited": self.rate_limited,
            "duration_s": round(self.duration_s, 3),
            "dry_run": self.dry_run,
            "interrupted": self.interrupted,
            "status": self.status,  # ok, partial or interrupted
            "pull": self.pull,
            "problems": list(self.problems),
            "notes": list(self.notes),
        }

    def add_problem(self, key: str | None, line: int | None, reason: str) -> None:
        """List a product's problem; the list is capped, the counts are not."""
        if len(self.problems) < MAX_LISTED_PROBLEMS:
            self.problems.append({"key": key, "line": line, "reason": reason})

    def refused(self, key: str | None, line: int | None, reason: str) -> None:
        """The API refused a write: one more rejected product."""
        self.rejected += 1
        _listed(self._refused, (key, line, reason))

    def duplicate(self, key: str, line: int | None, reason: str) -> None:
        """A lookup found several remote products with a create's key: not created."""
        self.duplicates += 1
        _listed(self._found, (key, line, reason))

    def fail(self, key: str, reason: str, *, replace: bool = True) -> None:
        """A product's write failed: counted once per key, listed with its last reason
        (or, ``replace=False``, with the reason it already has)."""
        if key not in self._failures:
            self.failed += 1
        elif not replace:
            return
        self._failures[key] = reason

    def repair(self, *, planned_unchanged: bool) -> None:
        """--verify found a product deleted or edited on the remote. One planned unchanged
        is counted as what its repair does instead (created, updated...)."""
        self.repaired += 1
        if planned_unchanged:
            self.unchanged -= 1

    def write_note(self, note: str) -> None:
        """A remark of the writes (updates turned off...), listed after the plan's notes."""
        self._write_notes.append(note)

    def close(self) -> None:
        """The writes are over: list their problems and notes after the plan's (once)."""
        if self._closed:
            return
        self._closed = True
        failures = ((key, None, reason) for key, reason in self._failures.items())
        for key, line, reason in itertools.chain(self._found, self._refused, failures):
            self.add_problem(key, line, reason)
        if self.repaired:
            self.notes.append(
                f"verify: {self.repaired} product(s) deleted or edited on the remote were put right"
            )
        self.notes.extend(self._write_notes)

    @property
    def clean(self) -> bool:
        """True when the remote matches the source for every valid product."""
        return not (
            self.rejected
            or self.failed
            or self.drift
            or self.duplicates
            or self.missing
            or self.interrupted
        )

    @property
    def status(self) -> str:
        """``ok``, ``partial`` or ``interrupted``: the run's status in the runs table."""
        if self.interrupted:
            return "interrupted"
        return "ok" if self.clean else "partial"

    @property
    def exit_code(self) -> int:
        """The run's exit code (the contract's 0, 1 or 130), derived here only."""
        return {"ok": EXIT_OK, "partial": EXIT_PARTIAL, "interrupted": EXIT_INTERRUPTED}[
            self.status
        ]


def _listed(problems: list[Problem], problem: Problem) -> None:
    """Keep ``problem`` for the listing, as far as the listing can show it."""
    if len(problems) < MAX_LISTED_PROBLEMS:
        problems.append(problem)


@dataclass(frozen=True, slots=True)
class RunOptions:
    """The flags of one run: ``skuferry sync``'s options, the daemon's every-Nth verify."""

    dry_run: bool = False  # plan only: nothing is written, remote or local
    verify: bool = False  # walk the remote to repair products deleted or edited there
    force: bool = False  # past the change and gone guards
    allow_empty_source: bool = False  # an empty source may mark the whole catalog gone
    full: bool = False  # pull everything even from a source set up for incremental pulls
    # named keys (sync --only, retry, hooks): only these are read, planned and written;
    # nothing is decided gone and the incremental watermark stays where it was
    only: tuple[str, ...] | None = None
    resend: frozenset[str] = frozenset()  # retry: data the API refused are sent again
    accept_shape: bool = False  # the source's shape now is accepted first (``sync.accept``)
    moved_cms: bool = False  # the CMS workspace moved: the state is bound to this one
