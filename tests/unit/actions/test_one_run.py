"""One run as a verb runs it: the stop signals reach the engine, the hooks see the run,
and what the engine raised reaches the command line's edge unchanged."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from skuferry import errors
from skuferry.actions.one_run import STOP_SIGNALS, one_run, stop_on_signals
from skuferry.config.load import settings_from_dict
from skuferry.config.schema import Settings
from skuferry.models import RunOptions, RunSummary
from skuferry.service import hooks
from skuferry.service.metrics import RunOutcome
from skuferry.sync import engine


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return settings_from_dict(
        {
            "api": {"base_url": "https://cms.example.com", "api_key": "k"},
            "source": {"type": "csv", "path": "unused.csv"},
            "state": {"path": str(tmp_path / "state.db")},
        },
        base_dir=tmp_path,
    )


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    monkeypatch.setattr(hooks, "before_run", lambda s: seen.append("before"))

    def after(s: Settings, outcome: RunOutcome, *, stopping: bool = False) -> None:
        seen.append(f"after {outcome.result}")

    monkeypatch.setattr(hooks, "after_run", after)
    return seen


@pytest.mark.parametrize("sig", STOP_SIGNALS)
def test_a_stop_signal_sets_the_event_and_the_old_handler_comes_back(sig: int) -> None:
    before: list[int] = []
    previous = signal.signal(sig, lambda s, _: before.append(s))
    try:
        with stop_on_signals() as stop:
            signal.raise_signal(sig)
            assert stop.is_set(), "the run is told to stop, not killed"
        signal.raise_signal(sig)
        assert before == [sig], "the handler of before is back"
    finally:
        signal.signal(sig, previous)


def test_the_engine_gets_the_options_and_the_stop_event(
    settings: Settings, calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    got: dict[str, Any] = {}

    def run_once(s: Settings, options: RunOptions, **kwargs: Any) -> RunSummary:
        got.update(settings=s, options=options, **kwargs)
        return RunSummary(created=1)

    monkeypatch.setattr(engine, "run_once", run_once)
    options = RunOptions(only=("A-1",))
    assert one_run(settings, options, quiet=True, watched=True) == RunSummary(created=1)
    assert got["settings"] is settings and got["options"] is options
    assert isinstance(got["stop"], threading.Event) and got["on_progress"] is None
    assert calls == ["before", "after success"]


def test_what_the_engine_raised_is_raised_again_after_the_hooks_saw_it(
    settings: Settings, calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    failure = errors.StateError("cannot open state file x")

    def run_once(*args: object, **kwargs: object) -> RunSummary:
        raise failure

    monkeypatch.setattr(engine, "run_once", run_once)
    with pytest.raises(errors.StateError) as raised:
        one_run(settings, RunOptions(), quiet=True, watched=True)
    assert raised.value is failure
    assert calls == ["before", "after failed"]


def test_a_dry_run_pings_no_hook(
    settings: Settings, calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine, "run_once", lambda *a, **k: RunSummary(dry_run=True))
    one_run(settings, RunOptions(dry_run=True), quiet=False, watched=False)
    assert calls == []
