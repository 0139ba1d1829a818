"""Absence is proven, never assumed: the one completeness rule of a run.

Every reader of a run reports what it read here, once it stops: the source's pull,
each ``[[join]]`` partner, an ``item_url`` fetch, each walk of the CMS's list pages.
A report is a ``Verdict``: complete, or not complete with the reason. Three
decisions rest on absence, and each asks this ledger first, never its reader:

- a product is gone (or filtered out) only when the pull that lacks it is complete
  (``may_mark_gone``);
- a product the walk did not find is created only when that walk is complete
  (``may_create_unseen``);
- a field gets its ``default`` (or null) for a missing join partner only when that
  join's pull is complete (``may_default``).

Two more facts rest on the same verdicts, and are asked here too:

- the pull read the whole source (``whole_pull``: a full pull read to its end, even
  with rows whose product cannot be told): the guards' ratios and the expiry of the
  plan's dead letters count only over such a pull;
- the source's shape holds (``shape_holds``): the read stage reports its verdict on
  the shape (``Reader.SHAPE``, see ``skuferry.shape``), and a pull whose shape broke
  proves nothing absent.

An incomplete verdict never guesses: the decision is not taken (the product is held,
the create waits) and the run says why (``reasons``). A reader whose incompleteness
must end the run (a torn export: exit 3, nothing written) raises its ``SourceError``
after reporting.

Pure and thread-safe: the ledger is a list of frozen verdicts behind a lock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum


class Reader(StrEnum):
    """Which kind of read a verdict is about; ``where`` names the one read."""

    SOURCE = "source"  # the primary pull: decides gone and filtered-out
    ROWS = "rows"  # rejected rows whose product cannot be told: any could be the absent one
    SHAPE = "shape"  # the source's shape against the contract the state learnt
    JOIN = "join"  # a [[join]] partner file or API: decides defaults
    ITEMS = "items"  # item_url fetches of a pull
    WALK = "walk"  # a walk of the CMS's list pages: decides creates of the unseen


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one reader proved: ``complete``, or not, and ``reason`` why not."""

    reader: Reader
    where: str  # "catalog.csv", a join's name ("pim"), "GET /api/v1/products"
    complete: bool
    reason: str = ""

    def __str__(self) -> str:
        if self.complete:
            return f"{self.reader} {self.where}: complete"
        return f"{self.reader} {self.where}: not complete: {self.reason}"


class Ledger:
    """The verdicts of one run; the only place that says whether absence is proven."""

    def __init__(self) -> None:
        self._verdicts: list[Verdict] = []
        self._lock = threading.Lock()

    # -- readers report -------------------------------------------------------------
    def report(self, verdict: Verdict) -> Verdict:
        with self._lock:
            self._verdicts.append(verdict)
        return verdict

    def complete(self, reader: Reader, where: str) -> Verdict:
        return self.report(Verdict(reader, where, complete=True))

    def incomplete(self, reader: Reader, where: str, reason: str) -> Verdict:
        return self.report(Verdict(reader, where, complete=False, reason=reason))

    # -- decisions ask ----------------------------------------------------------------
    def _proven(self, reader: Reader, where: str | None = None) -> bool:
        """True when at least one verdict of this kind is in, and every one is complete."""
        with self._lock:
            seen = [
                v
                for v in self._verdicts
                if v.reader is reader and (where is None or v.where == where)
            ]
        return bool(seen) and all(v.complete for v in seen)

    def may_mark_gone(self) -> bool:
        """A product absent from the pull may be marked gone or filtered out."""
        return (
            self._proven(Reader.SOURCE)
            and self._all_complete(Reader.ITEMS)
            and self._all_complete(Reader.ROWS)
            and self._all_complete(Reader.SHAPE)
        )

    def whole_pull(self) -> bool:
        """The pull read the whole source: a full pull to its end (not incremental, not
        named). The guards' ratios and the plan's dead-letter expiry count over it."""
        return self._proven(Reader.SOURCE)

    def shape_holds(self) -> bool:
        """No shape verdict says the source broke its contract."""
        return self._all_complete(Reader.SHAPE)

    def may_create_unseen(self) -> bool:
        """A product the walk of the CMS did not find may be created."""
        return self._proven(Reader.WALK)

    def may_default(self, join: str) -> bool:
        """A record without a partner in ``join`` may take the join's default (or null)."""
        return self._proven(Reader.JOIN, join)

    def _all_complete(self, reader: Reader) -> bool:
        with self._lock:
            return all(v.complete for v in self._verdicts if v.reader is reader)

    # -- what the run says ----------------------------------------------------------
    def verdicts(self) -> Iterator[Verdict]:
        with self._lock:
            yield from list(self._verdicts)

    def reasons(self) -> list[str]:
        """One line per incomplete verdict, for the run's notes and ``check``."""
        return [str(v) for v in self.verdicts() if not v.complete]
