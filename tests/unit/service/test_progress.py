"""The progress bar's time left comes from the budget, and a wait for budget is said aloud."""

from __future__ import annotations

import io
import re
import sys
import threading
from pathlib import Path

import pytest
import structlog

from skuferry import logs
from skuferry.remote.budget import Budget
from skuferry.service.progress import PacedProgress, progress_bar
from skuferry.state.budgetbook import BudgetBook
from skuferry.state.schema import open_state
from tests.fakes import FakeClock

START = 1_700_000_000.0


def test_time_left_is_the_budgets_and_does_not_freeze_during_a_wait(tmp_path: Path) -> None:
    # The new user: 300 products at write_per_minute = 100, a 3-window run.
    clock = FakeClock(START)
    shown: list[tuple[int, int]] = []
    view = PacedProgress(lambda done, total: shown.append((done, total)), clock=clock)
    seen_while_waiting: list[str] = []

    def wait(seconds: float, stop: threading.Event | None) -> None:
        seen_while_waiting.append(view.text())  # what the bar says as the wait starts...
        clock.now += 17
        seen_while_waiting.append(view.text())  # ...and 17 s into it
        clock.now += seconds - 17

    with Budget(
        BudgetBook(lambda: open_state(tmp_path / "state.db")),
        limits={"write": 100},
        clock=clock,
        wait=wait,
    ) as budget:
        assert view.text() == ""  # nothing to tell before the writes start
        view.watch_budget(budget)
        for done in range(1, 101):
            budget.acquire("write")
            view(done, 300)
        assert shown[-1] == (100, 300)
        assert view.text() == "0:02:01 left"  # two more windows of 60.5 s, not "0:00:01"
        clock.now += 30
        assert view.text() == "0:01:31 left"  # counts down while the window waits
        budget.acquire("write")  # the 101st waits for the oldest send to age out
    assert seen_while_waiting == [
        "waiting for the write budget: 31 s",
        "waiting for the write budget: 14 s",
    ]


def test_short_waits_are_pacing_not_news() -> None:
    clock = FakeClock(START)
    view = PacedProgress(lambda done, total: None, clock=clock)
    view.waiting("write", 0.4)
    assert view.text() == ""


def test_the_bar_stays_on_one_line_in_an_80_column_terminal() -> None:
    import io
    import re
    import time

    from skuferry.service.progress import progress_bar

    out = io.StringIO()
    with progress_bar(enabled=True, file=out, width=80, force_terminal=True) as view:
        assert isinstance(view, PacedProgress)
        view.waiting("write", 43)
        view(12_345, 100_000)
        time.sleep(0.25)  # a refresh or two of the live display
    lines = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue()).splitlines()
    drawn = [line for line in lines if line.strip()]
    assert drawn, "the bar was drawn"
    assert all(line.startswith("syncing") for line in drawn), drawn  # no wrapped tails
    assert any("waiting for the write budget" in line for line in drawn)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_line_while_the_bar_is_shown_starts_on_a_line_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A warning used to be printed straight after ``21/90 0:00:00 left``."""
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    saved = structlog.get_config()  # the other tests' logging, put back afterwards
    logs.configure(level="warning", json=True)  # configured before the bar, as the CLI does
    try:
        with progress_bar(enabled=True, file=terminal, force_terminal=True, width=80) as update:
            assert update is not None
            update(21, 90)
            logs.get("test").warning("source.row.bad", line=3)
            update(22, 90)
    finally:
        structlog.configure(**saved)
    visible = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", terminal.getvalue())  # ANSI codes out
    lines = [line.strip("\r") for line in re.split(r"[\r\n]", visible)]
    logged = [line for line in lines if "source.row.bad" in line]
    assert logged, visible
    assert all(line.startswith('{"') for line in logged), logged
