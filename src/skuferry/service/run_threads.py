"""The daemon's runs, each in a daemon thread of its own, under APScheduler.

APScheduler's own pool uses non-daemon threads, which the interpreter joins at exit
without a limit: a run stuck in a slow request would break the 10 s stop. Runs in
daemon threads cannot keep the process alive past the stop deadline.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from apscheduler.executors.pool import BasePoolExecutor


class DaemonThreads:
    """A ``concurrent.futures``-style pool: each call in a new daemon thread, joinable."""

    def __init__(self) -> None:
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()

        def target() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - the future hands it to APScheduler
                future.set_exception(exc)
            else:
                future.set_result(result)

        thread = threading.Thread(target=target, name="skuferry-run", daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()
        return future

    def shutdown(self, wait: bool = True) -> None:
        if wait:
            self.join(math.inf)

    def busy(self) -> bool:
        with self._lock:
            return any(t.is_alive() for t in self._threads)

    def join(self, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> bool:
        """Wait for the runs in flight; False if one is still going at the deadline."""
        deadline = clock() + timeout_s
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            left = deadline - clock()
            thread.join(None if math.isinf(left) else max(0.0, left))
        return not any(t.is_alive() for t in threads)


class ThreadPerRunExecutor(BasePoolExecutor):  # type: ignore[misc]  # apscheduler is untyped
    """APScheduler's pool executor (its public base for pools) on ``DaemonThreads``.

    APScheduler itself submits ``run_job``, counts instances for ``max_instances`` and
    dispatches the job's events; this class only chooses the threads.
    """

    def __init__(self) -> None:
        self.threads = DaemonThreads()
        super().__init__(self.threads)

    def busy(self) -> bool:
        return self.threads.busy()

    def join(self, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> bool:
        """Wait for the runs in flight; False if one is still going at the deadline."""
        return self.threads.join(timeout_s, clock)
