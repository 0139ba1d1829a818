"""Off a terminal, a long run logs its progress at a steady interval (issue 40 item 21)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from structlog.testing import capture_logs

from skuferry.service import report
from skuferry.service.progress_log import EVERY_S, ProgressLog


class FakeBudget:
    on_wait: Callable[[str, float], None] | None = None

    def eta(self, tier: str, n: int) -> float:
        assert tier == "write"
        return n * 1.0  # 60 writes a minute


def test_a_progress_event_every_interval_with_done_total_rate_and_eta() -> None:
    now = [100.0]
    progress = ProgressLog(clock=lambda: now[0])
    with capture_logs() as logged:
        progress(0, 250)  # the first point starts the clock: no event yet
        now[0] += 10
        progress(10, 250)
        assert logged == [], "not before the interval"
        progress.watch_budget(FakeBudget())
        now[0] += EVERY_S - 10
        progress(30, 250)
        now[0] += 5
        progress(35, 250)
        now[0] += EVERY_S
        progress(65, 250)
    events = [e for e in logged if e["event"] == "sync.progress"]
    assert [(e["done"], e["total"]) for e in events] == [(30, 250), (65, 250)]
    assert events[0]["rate_per_min"] == 60.0 and events[0]["eta_s"] == 220
    assert events[1]["rate_per_min"] == round(65 * 60 / (2 * EVERY_S + 5), 1)


def test_off_a_terminal_the_run_gets_the_log_and_quiet_gets_nothing() -> None:
    with report.progress(enabled=False) as shown:
        assert isinstance(shown, ProgressLog)
    with report.progress(enabled=False, quiet=True) as silent:
        assert silent is None


def test_writer_threads_share_it() -> None:
    now = [0.0]
    progress = ProgressLog(every_s=1.0, clock=lambda: now[0])
    progress(0, 10)
    now[0] = 5.0
    with capture_logs() as logged:
        threads = [threading.Thread(target=progress, args=(i, 10)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len([e for e in logged if e["event"] == "sync.progress"]) == 1, "one per interval"
