"""The run's context: what a run derives from its settings, once, for every stage."""

from __future__ import annotations

import threading
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from skuferry import canonical, errors
from skuferry.models import RunOptions, RunSummary, State
from skuferry.state.mirror import Mirror
from skuferry.sync.context import Adapters, RunContext
from tests.fakes import FakeRemote
from tests.unit.sync.test_engine import make_settings


def context(
    tmp_path: Path, stack: ExitStack, *, options: RunOptions | None = None, **over: Any
) -> RunContext:
    settings = make_settings(tmp_path, **over)
    mirror = Mirror(settings.state.path)
    stack.callback(mirror.close)
    return RunContext(
        settings,
        options or RunOptions(),
        mirror,
        RunSummary(),
        stack,
        threading.Event(),
        Adapters(client=FakeRemote()),
    )


def test_the_gone_policy_and_what_is_pending_are_derived_once(tmp_path: Path) -> None:
    patch = {"status": "archived"}
    with ExitStack() as stack:
        run = context(tmp_path / "a", stack, gone={"action": "patch", "patch": patch})
        assert run.archiving == canonical.digest(patch) == run.gone_policy.archiving
        assert State.DRIFT in run.pending, "drift is probed again while updates may work"
        assert run.ledger is run.summary.completeness
        assert run.client() is run.client() is run.adapters.client
        left = context(tmp_path / "b", stack, api={"update_method": "none"})
        assert left.archiving is None and State.DRIFT not in left.pending


def test_the_gone_guard_refuses_too_many_archives_unless_forced(tmp_path: Path) -> None:
    with ExitStack() as stack:
        run = context(tmp_path / "a", stack, safety={"max_gone_ratio": 0.1})
        run.guard_gone(9, 20)  # below the guard's minimum
        with pytest.raises(errors.GoneGuardTripped):
            run.guard_gone(50, 100)
        forced = context(
            tmp_path / "b", stack, options=RunOptions(force=True), safety={"max_gone_ratio": 0.1}
        )
        forced.guard_gone(50, 100)
