"""The fleet's pool of runs: at most N workspaces' full runs at once in one process.

A run holds what it reads and plans (about 5 MiB for 3,000 products) and a share of
the cores while it goes. A fleet of hundreds would otherwise run them all at once when
their schedules meet (at start, after an outage) and hold all of that at the same
moment, finishing no sooner on a few cores. So a full run (scheduled, or asked for by a
hook, the page or a watched file) takes a slot first, and waits for one when all are
taken: it is late, never skipped, and ``/healthz``, the page and
``skuferry_runs_waiting`` say so.

Who goes next when a slot frees: a workspace whose run was asked for (a hook, the page,
a watched file) or that has pushed keys waiting, then the one that has waited longest.
Runs of named keys (hooks' keys, the page's retry, a handed ``sync --only``) take no
slot: they are small and an operator is waiting for them.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from skuferry import logs

# The daemon's logger: a run's start and wait are the daemon's events.
log = logs.get("skuferry.service.daemon")

# A waiting run waits to be granted or woken (``wake``: its daemon stops); it looks at its
# stop event this often meanwhile only as a backstop. Hundreds may wait at once, and each
# wake of a thread costs CPU.
STOP_LOOK_S = 10.0


def default_size(cores: int | None = None) -> int:
    """Twice the cores (at least 2): runs wait on the network and the CMS half the time."""
    return max(2, 2 * (cores if cores is not None else usable_cores()))


def usable_cores(cgroup: Path = Path("/sys/fs/cgroup/cpu.max")) -> int:
    """The cores this process may use: those it may run on, fewer under a CPU quota (a
    container's ``limits.cpu``, cgroup v2's ``cpu.max``: "200000 100000" is 2)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    try:
        quota, period = cgroup.read_text(encoding="ascii").split()[:2]
    except (OSError, ValueError):
        return cores
    if quota == "max":
        return cores
    try:
        allowed = math.ceil(int(quota) / int(period))
    except (ValueError, ZeroDivisionError):
        return cores
    return max(1, min(cores, allowed))


@dataclass(eq=False)
class _Waiter:
    name: str
    since: float  # monotonic
    ticket: int
    urgent: Callable[[], bool]
    granted: threading.Event = field(default_factory=threading.Event)
    woken: threading.Event = field(default_factory=threading.Event)  # granted, or a stop


class RunSlots:
    """At most ``size`` runs at once; the others wait in order (urgent first). Thread-safe."""

    def __init__(self, size: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        if size < 1:
            raise ValueError("a pool needs at least one slot")
        self.size = size
        self._clock = clock
        self._lock = threading.Lock()
        self._running: dict[str, int] = {}  # name -> runs holding a slot (one at most)
        self._waiting: list[_Waiter] = []
        self._tickets = itertools.count()

    @contextmanager
    def slot(
        self,
        name: str,
        *,
        stop: threading.Event,
        urgent: Callable[[], bool] = lambda: False,
    ) -> Iterator[float | None]:
        """Hold a slot for the block; yields the seconds waited, or None when ``stop`` was
        set before one came (the run does not start)."""
        waited = self._take(name, stop, urgent)
        if waited is None:
            yield None
            return
        try:
            yield waited
        finally:
            self._give_back(name)

    def _take(self, name: str, stop: threading.Event, urgent: Callable[[], bool]) -> float | None:
        with self._lock:
            waiter = _Waiter(name, self._clock(), next(self._tickets), urgent)
            self._waiting.append(waiter)
            self._grant()
        if not waiter.granted.is_set():
            log.info(
                "daemon.run.waiting",
                reason="every run slot is taken",
                slots=self.size,
                others_waiting=self.waiting_count() - 1,
            )
        while not waiter.granted.is_set():
            waiter.woken.wait(STOP_LOOK_S)
            waiter.woken.clear()  # before looking: a wake from now on is seen next time
            if waiter.granted.is_set():
                break
            if stop.is_set():
                with self._lock:
                    if not waiter.granted.is_set():
                        self._waiting.remove(waiter)
                        return None
                # granted as the stop came: hand the slot on
                self._give_back(name)
                return None
        return self._clock() - waiter.since

    def _give_back(self, name: str) -> None:
        with self._lock:
            left = self._running.get(name, 0) - 1
            if left > 0:
                self._running[name] = left
            else:
                self._running.pop(name, None)
            self._grant()

    def _grant(self) -> None:
        """Hand free slots to the waiters first in line (the lock is held)."""
        while self._waiting and sum(self._running.values()) < self.size:
            first = min(self._waiting, key=_order)
            self._waiting.remove(first)
            self._running[first.name] = self._running.get(first.name, 0) + 1
            first.granted.set()
            first.woken.set()

    def wake(self, name: str) -> None:
        """``name``'s daemon stops: its run waiting for a slot, if any, gives up now."""
        with self._lock:
            for waiter in self._waiting:
                if waiter.name == name:
                    waiter.woken.set()

    # --- what health, metrics and the page read --------------------------------------

    def waiting(self) -> dict[str, float]:
        """``{name: seconds waited}`` of the runs waiting for a slot, longest first."""
        now = self._clock()
        with self._lock:
            found = sorted(self._waiting, key=lambda w: w.since)
            return {w.name: now - w.since for w in found}

    def waiting_count(self) -> int:
        with self._lock:
            return len(self._waiting)

    def running(self) -> int:
        with self._lock:
            return sum(self._running.values())


def _order(waiter: _Waiter) -> tuple[bool, int]:
    try:
        urgent = bool(waiter.urgent())
    except Exception:  # noqa: BLE001 - a predicate that breaks loses its place, not the pool
        urgent = False
    return (not urgent, waiter.ticket)
