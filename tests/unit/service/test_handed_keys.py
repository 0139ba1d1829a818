"""Keys another process's ``sync --only`` left in the state: an idle daemon runs them.

The clock is a ``FakeClock``: when the daemon looks again is the test's to say.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from skuferry.models import RunOptions, RunSummary
from skuferry.service.handed_keys import HANDED_POLL_S, HandedKeys
from skuferry.state.mirror import Mirror
from tests.fakes import FakeClock, wait_until
from tests.unit.service.test_daemon import FakeJob, make_settings, started

__all__ = ["started"]  # the daemon fixture, shared with test_daemon.py


def hand(state: Path, *keys: str) -> None:
    """What ``sync --only`` does when a daemon holds the state's lock."""
    mirror = Mirror(state)
    try:
        mirror.hand_keys(keys)
    finally:
        mirror.close()


def left(state: Path) -> list[str]:
    mirror = Mirror(state)
    try:
        return mirror.handed_keys()
    finally:
        mirror.close()


def test_the_keys_are_taken_once_and_leave_the_state(tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    hand(state, "A-1", "B-2")
    handed = HandedKeys(FakeClock())
    assert handed.take(state) == ["A-1", "B-2"]
    assert left(state) == [], "taken: another look must not run them again"


def test_between_polls_the_state_is_not_read(tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    clock = FakeClock()
    handed = HandedKeys(clock)
    assert handed.take(state) == []  # a first look: nothing handed yet
    hand(state, "A-1")
    clock.now += HANDED_POLL_S / 2
    assert handed.take(state) == [], "too soon after the last look"
    clock.now += HANDED_POLL_S
    assert handed.take(state) == ["A-1"]


def test_an_idle_daemon_runs_the_handed_keys_as_a_targeted_run(
    tmp_path: Path, started: Any
) -> None:
    seen: list[RunOptions | None] = []
    asked = threading.Event()

    class Job(FakeJob):
        def __call__(
            self, settings: Any, options: RunOptions | None = None, **kw: Any
        ) -> RunSummary:
            seen.append(options)
            if options is not None:
                asked.set()
            return super().__call__(settings, options, **kw)

    settings = make_settings(tmp_path, schedule={"run_at_start": False})
    started(settings, Job(RunSummary()), idle_tick_s=0.05, interval_s=3600.0)
    hand(settings.state.path, "SKU-7")
    wait_until(asked.is_set, "the targeted run of the handed key")
    assert RunOptions(only=("SKU-7",)) in seen
    assert left(settings.state.path) == []
