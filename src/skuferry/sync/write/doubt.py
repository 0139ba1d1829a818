"""A create in doubt is settled only once the list could show it.

Many CMSs serve their list pages from a search index or a read replica: a product
shows up there a moment after it is created, while a GET by id sees it at once. A
create whose answer was lost (the POST may have landed) is settled by a walk of
the list, so a walk that comes too early does not find it, and sending it again
would make a duplicate. So a walk proves a create in doubt absent only when the
list has caught up with the moment its answer was lost. That is proven by either:

- **a witness**: a create of this same run, whose id is known, *sent after* the lost
  answer came back, was already on the list when the walk began. The list shows
  writes in the order they were made (a replica, an index refreshed at intervals),
  so it then shows the lost one too, if it landed. How long each known create took
  to appear is measured on the way (``lag_s``: from its answer to the first page
  that showed it) and logged;
- **the bound**: the walk began at least ``[api] list_lag_s`` after the answer was
  lost, and no create of this run was still missing from it more than ``list_lag_s``
  after its answer (a list seen lagging longer breaks the bound: nothing is proven
  by time then, and the products stay in doubt for the next run).
  ``list_lag_s = 0`` says the list shows every write at once: no wait.

Until one of them holds, the product stays in doubt and is not sent again; the
second look waits (measured lag, at most the bound) and walks again. Pure: the
clock's readings are given to it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

from skuferry.sync.write.walks import Walked

MIN_WAIT_S = 0.05  # the shortest pause between two walks of one second look


class Clock(Protocol):
    """The run's time: read it, and wait (a stop request ends the wait)."""

    def __call__(self) -> float: ...

    def wait(self, seconds: float, stop: threading.Event | None = None) -> None: ...


class WallClock:
    """``time.time`` (the mirror's clock too), waiting on the stop event."""

    def __call__(self) -> float:
        return time.time()

    def wait(self, seconds: float, stop: threading.Event | None = None) -> None:
        (stop or threading.Event()).wait(seconds)


@dataclass
class Doubts:
    """The run's creates as the list must show them: known ones and those in doubt."""

    bound_s: float  # [api] list_lag_s
    sent: dict[str, float] = field(default_factory=dict)  # known id -> its POST went out
    answered: dict[str, float] = field(default_factory=dict)  # known id -> its answer came
    lost: dict[str, float] = field(default_factory=dict)  # key -> its answer was lost
    seen: dict[str, float] = field(default_factory=dict)  # known id -> first page showing it
    broken: str = ""  # why the bound is not to be trusted, once a walk showed it
    lagged_s: float = 0.0  # the longest a known create was seen missing after its answer

    # -- what the writes and the walks tell it ----------------------------------------
    def created(self, remote_id: str, *, sent: float, answered: float) -> None:
        self.sent[remote_id] = sent
        self.answered[remote_id] = answered

    def in_doubt(self, key: str, *, lost: float) -> None:
        self.lost[key] = max(lost, self.lost.get(key, lost))

    def watch(self, remote_id: str, read_at: float) -> None:
        """A page read at ``read_at`` showed ``remote_id`` (``walks.walk``'s hook)."""
        if remote_id in self.sent and remote_id not in self.seen:
            self.seen[remote_id] = read_at

    def after(self, walked: Walked) -> None:
        """Check the bound against the run's own creates once a complete walk is over."""
        if not walked.verdict.complete:
            return
        for rid, answered in self.answered.items():
            if rid in self.seen:
                continue
            self.lagged_s = max(self.lagged_s, walked.started - answered)
            if walked.started - answered > self.bound_s and not self.broken:
                self.broken = (
                    f"product {rid}, created {walked.started - answered:.1f} s before a walk, "
                    f"was not on the list: it lags more than [api] list_lag_s = {self.bound_s:g}"
                )

    # -- what the second look asks ------------------------------------------------------
    def proven_absent(self, key: str, walked: Walked) -> bool:
        """Whether ``walked`` could show the create in doubt for ``key`` had it landed."""
        lost = self.lost.get(key)
        if not walked.verdict.complete:
            return False
        if lost is None:
            return True
        if self._witness(lost, walked.started):
            return True
        return not self.broken and walked.started - lost >= self.bound_s

    def _witness(self, lost: float, before: float) -> bool:
        return any(
            self.sent[rid] >= lost and seen_at <= before for rid, seen_at in self.seen.items()
        )

    def wait_s(self, keys: list[str], now: float, *, last: bool = False) -> float | None:
        """How long to wait before the next walk could prove ``keys`` absent; None: never
        in this run (the bound is broken and no witness is to come). ``last``: the next
        walk is the last one, so it waits out the bound rather than guess at a witness's
        lag (a witness only ever shortens the wait)."""
        lost = max(self.lost.get(k, now) for k in keys)
        witnesses = [rid for rid, sent in self.sent.items() if sent >= lost]
        if any(rid in self.seen for rid in witnesses):
            return 0.0  # a witness is on the list: the next walk begins after it
        to_bound = lost + self.bound_s - now
        if witnesses and (self.broken or not last):
            # one is coming: once the list's lag, as measured, has passed
            lag = self.lag_s()
            if lag is None:  # none seen yet: it lags more than it was seen missing
                lag = max(MIN_WAIT_S, 2 * self.lagged_s)
            due = min(self.answered[rid] for rid in witnesses) + lag
            wait = max(MIN_WAIT_S, due - now)
            return wait if self.broken else min(wait, max(to_bound, MIN_WAIT_S))
        if self.broken:
            return None
        return max(0.0, to_bound)

    def lag_s(self) -> float | None:
        """The list's lag as measured on the run's own creates: the shortest time from a
        create's answer to the first page that showed it (each is an upper bound of the
        lag, the shortest the tightest); None while none was seen."""
        lags = [self.seen[rid] - self.answered[rid] for rid in self.seen]
        return max(0.0, min(lags)) if lags else None
