"""The terminal progress bar, with the time left told by the budget, not by recent speed.

A sync's pace is the budget's, not the machine's: 300 writes at 100/min go in
three bursts a minute apart, so "time left" computed from the recent speed says
one second during each minute's wait. Here the time left is the budget's own
ETA for the writes still to send (keys, workspace cap, blocks, learnt pace), and
while a request waits for budget the bar says so: "waiting for the write
budget: 43 s".
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TextColumn
from rich.text import Text

from skuferry.models import BudgetView
from skuferry.models import Progress as ProgressFn

_SHOW_WAIT_FROM_S = 1.0  # shorter waits are the budget's normal pacing, not news


class PacedProgress:
    """Done/total from the engine; time left and waits from the budget it is shown."""

    def __init__(
        self, update: Callable[[int, int], None], *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._update = update
        self._clock = clock
        self._lock = threading.Lock()
        self._eta: Callable[[int], float] | None = None
        self._eta_s: float | None = None
        self._eta_at = 0.0
        self._wait: tuple[str, float] | None = None  # (tier, until on our clock)

    def __call__(self, done: int, total: int) -> None:
        self._update(done, total)
        if self._eta is not None:
            seconds = self._eta(max(0, total - done))
            with self._lock:
                self._eta_s, self._eta_at = seconds, self._clock()

    def watch_budget(self, budget: BudgetView) -> None:
        """Called by the engine once the writes start: their pace is this budget's."""
        self._eta = lambda n: budget.eta("write", n)
        budget.on_wait = self.waiting

    def waiting(self, tier: str, seconds: float) -> None:
        with self._lock:
            self._wait = (tier, self._clock() + seconds)

    def text(self) -> str:
        """``waiting for the write budget: 43 s``, ``0:02:01 left``, or nothing yet."""
        now = self._clock()
        with self._lock:
            wait, eta_s, eta_at = self._wait, self._eta_s, self._eta_at
        if wait is not None and wait[1] - now >= _SHOW_WAIT_FROM_S:
            return f"waiting for the {wait[0]} budget: {math.ceil(wait[1] - now)} s"
        if eta_s is None or not math.isfinite(eta_s):
            return ""
        left = max(0, round(eta_s - (now - eta_at)))
        return f"{left // 3600}:{left // 60 % 60:02d}:{left % 60:02d} left"


class _PaceColumn(ProgressColumn):
    def __init__(self, view: PacedProgress) -> None:
        super().__init__()
        self._view = view

    def render(self, task: Task) -> Text:
        # One line whatever the terminal's width: cut with an ellipsis, never wrapped (a
        # wrapped bar leaves a trail of half lines in an 80-column terminal).
        return Text(
            self._view.text(), style="progress.remaining", no_wrap=True, overflow="ellipsis"
        )


@contextmanager
def progress_bar(*, enabled: bool, **console: Any) -> Iterator[ProgressFn | None]:
    """A rich progress bar on stderr (done/total, time left by the budget) on a terminal."""
    if not enabled:
        yield None
        return
    bar = Progress(
        TextColumn("[bold]syncing"),
        BarColumn(bar_width=20),  # room for the count and the wait in 80 columns
        MofNCompleteColumn(),
        console=Console(stderr=True, **console),
        transient=True,
    )
    task = bar.add_task("sync", total=None)
    view = PacedProgress(lambda done, total: bar.update(task, completed=done, total=total))
    bar.columns = (*bar.columns, _PaceColumn(view))
    with bar:
        yield view
