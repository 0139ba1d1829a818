"""``sync --only`` while another run holds the lock: the keys wait in the state file for
that run's urgent lane, or run here once it ended; never lost, never run twice."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from skuferry import errors
from skuferry.actions.hand_over import hand_over
from skuferry.config.load import settings_from_dict
from skuferry.config.schema import Settings
from skuferry.models import RunSummary
from skuferry.state.lock import lock_path
from skuferry.state.mirror import Mirror

KEYS = ("A-1", "B-2")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    settings = settings_from_dict(
        {
            "api": {"base_url": "https://cms.example.com", "api_key": "k"},
            "source": {"type": "csv", "path": "unused.csv"},
            "state": {"path": str(tmp_path / "state.db")},
        },
        base_dir=tmp_path,
    )
    Mirror(settings.state.path).close()
    return settings


class OtherRun:
    """The lock as another process holds it: its own open file, flock'd."""

    def __init__(self, settings: Settings) -> None:
        self._fd: int | None = os.open(lock_path(settings.state.path), os.O_RDWR | os.O_CREAT)
        fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def end(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@pytest.fixture
def other_run(settings: Settings) -> Iterator[OtherRun]:
    run = OtherRun(settings)
    yield run
    run.end()


def queued(settings: Settings) -> list[str]:
    mirror = Mirror(settings.state.path, readonly=True)
    try:
        return mirror.handed_keys()
    finally:
        mirror.close()


def never_here() -> RunSummary:
    raise AssertionError("the keys were run here while another run took them")


def test_the_running_run_takes_the_keys_and_nothing_runs_here(
    settings: Settings, other_run: OtherRun
) -> None:
    seen: list[list[str]] = []

    def lane_takes_them(_: float) -> None:  # what the running run's urgent lane does
        seen.append(queued(settings))
        mirror = Mirror(settings.state.path)
        mirror.take_handed_keys()
        mirror.close()

    assert hand_over(settings, KEYS, never_here, sleep=lane_takes_them) is None
    assert seen == [sorted(KEYS)], "queued in the state file for the lane"


def test_keys_run_here_once_the_other_run_ended_first(
    settings: Settings, other_run: OtherRun
) -> None:
    ran: list[list[str]] = []

    def here() -> RunSummary:
        ran.append(queued(settings))
        return RunSummary(created=2)

    summary = hand_over(settings, KEYS, here, sleep=lambda _: other_run.end())
    assert summary == RunSummary(created=2)
    assert ran == [[]], "taken off the lane's queue before running here: not run twice"


def test_keys_not_taken_in_time_stay_queued_and_the_lock_is_named(
    settings: Settings, other_run: OtherRun
) -> None:
    ticks = iter([0.0, 1.0, 5.0])
    with pytest.raises(errors.LockHeld) as raised:
        hand_over(
            settings,
            KEYS,
            never_here,
            wait_s=5.0,
            sleep=lambda _: None,
            clock=lambda: next(ticks),
        )
    assert "did not take the 2 key(s) within 5 s" in str(raised.value)
    assert queued(settings) == sorted(KEYS), "left for the running run or the next one"
