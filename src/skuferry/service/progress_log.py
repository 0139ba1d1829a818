"""A run's progress off a terminal: one log event at a steady interval.

With no bar to watch (cron, CI, a pipe, a service's journal), a long run was silent from
its start to its end: the Shopify stand-in's 250 products at the sandbox's 60 writes a
minute took four minutes and five log lines. ``ProgressLog`` is the bar's stand-in: every
``every_s`` seconds of a run it logs ``sync.progress`` with what is done of the total,
the pace so far (per minute) and the time left, told by the budget as the bar tells it
(``budget.eta`` for the writes still to send), once the writes have started. A one-shot
``sync`` off a terminal and every run of the daemon (whose journal is always off one) log it.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from skuferry import logs
from skuferry.models import BudgetView

log = logs.get(__name__)

EVERY_S = 30.0


class ProgressLog:
    """A ``Progress`` (``models.Progress``) that logs instead of drawing. Thread-safe."""

    def __init__(
        self,
        *,
        every_s: float = EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        also: Callable[[int, int], None] | None = None,
    ) -> None:
        self._every_s = every_s
        self._clock = clock
        self._also = also  # every point goes there first (the daemon's watchdog and STATUS=)
        self._lock = threading.Lock()
        self._start: tuple[float, int] | None = None  # (when, done) at the first point
        self._next = 0.0
        self._eta: Callable[[int], float] | None = None

    def __call__(self, done: int, total: int) -> None:
        if self._also is not None:
            self._also(done, total)
        now = self._clock()
        with self._lock:
            if self._start is None:
                self._start, self._next = (now, done), now + self._every_s
                return
            if now < self._next:
                return
            self._next = now + self._every_s
            since, first = self._start
        rate = (done - first) * 60.0 / (now - since) if now > since else 0.0
        eta = self._eta(max(0, total - done)) if self._eta is not None else None
        log.info(
            "sync.progress",
            done=done,
            total=total,
            rate_per_min=round(rate, 1),
            eta_s=round(eta) if eta is not None and math.isfinite(eta) else None,
        )

    def watch_budget(self, budget: BudgetView) -> None:
        """Called by the engine once the writes start: the time left is the budget's."""
        self._eta = lambda n: budget.eta("write", n)
