"""One run wrapper for sync and the daemon; the exit code and status derived once, on RunSummary."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from skuferry import errors
from skuferry.cli import main
from skuferry.config.load import settings_from_dict
from skuferry.config.schema import Settings
from skuferry.models import RunOptions, RunSummary
from skuferry.service import hooks, runner
from skuferry.service.metrics import RunOutcome
from skuferry.sync import engine
from skuferry.sync.engine import Adapters, run_once
from tests.fakes import FakeRemote, ListSource


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
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, object]]:
    """What the hooks were told, in order."""
    seen: list[tuple[str, object]] = []
    monkeypatch.setattr(hooks, "before_run", lambda s: seen.append(("before", None)))

    def after(s: Settings, outcome: RunOutcome, *, stopping: bool = False) -> None:
        seen.append(("after", (outcome.result, stopping)))

    monkeypatch.setattr(hooks, "after_run", after)
    return seen


def ticking() -> Callable[[], float]:
    now = iter([100.0, 102.5])
    return lambda: next(now)


@pytest.mark.parametrize(
    ("summary", "status", "code"),
    [
        (RunSummary(created=3), "ok", errors.EXIT_OK),
        (RunSummary(rejected=1), "partial", errors.EXIT_PARTIAL),
        (RunSummary(drift=2), "partial", errors.EXIT_PARTIAL),
        (RunSummary(failed=1, interrupted=True), "interrupted", errors.EXIT_INTERRUPTED),
    ],
)
def test_status_and_exit_code_come_from_the_summary(
    summary: RunSummary, status: str, code: int
) -> None:
    assert (summary.status, summary.exit_code) == (status, code)
    outcome = RunOutcome.from_summary(summary, duration_s=0.0, finished_at=0.0)
    assert outcome.exit_code == code


def test_a_run_has_one_duration_its_summary_s(
    settings: Settings, calls: list[tuple[str, object]]
) -> None:
    run = RunSummary(created=1, duration_s=2.0)
    outcome = runner.run_watched(settings, lambda: run, clock=ticking(), wall_clock=lambda: 5.0)
    assert calls == [("before", None), ("after", ("success", False))]
    # the metrics and the pings see the duration the JSON summary reports, not a second one
    assert (outcome.exit_code, outcome.duration_s, outcome.finished_at) == (0, 2.0, 5.0)
    assert outcome.summary == run and outcome.exception is None


def test_a_run_that_raised_is_timed_between_the_hooks(
    settings: Settings, calls: list[tuple[str, object]]
) -> None:
    def job() -> RunSummary:
        raise errors.SourceError("gone")

    outcome = runner.run_watched(settings, job, clock=ticking(), wall_clock=lambda: 5.0)
    assert (outcome.error_type, outcome.duration_s, outcome.finished_at) == (
        "SourceError",
        2.5,
        5.0,
    )


def test_a_failed_run_is_an_outcome_carrying_the_error(
    settings: Settings, calls: list[tuple[str, object]]
) -> None:
    failure = errors.StateError("cannot open state file x")

    def job() -> RunSummary:
        raise failure

    outcome = runner.run_watched(settings, job, stopping=lambda: True)
    assert outcome.exception is failure
    assert (outcome.exit_code, outcome.error_type) == (failure.exit_code, "StateError")
    assert calls == [("before", None), ("after", ("failed", True))]


def test_a_dry_run_touches_no_hook(settings: Settings, calls: list[tuple[str, object]]) -> None:
    outcome = runner.run_watched(settings, lambda: RunSummary(dry_run=True), watched=False)
    assert calls == [] and outcome.exit_code == errors.EXIT_OK


def test_a_crash_is_not_an_outcome(settings: Settings, calls: list[tuple[str, object]]) -> None:
    def job() -> RunSummary:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        runner.run_watched(settings, job)
    assert calls == [("before", None)]


def test_a_run_takes_its_flags_as_run_options_only(settings: Settings) -> None:
    remote = FakeRemote()
    rows: list[dict[str, object] | str] = [{"sku": "A-1", "name": "Anvil"}]
    planned = run_once(
        settings, RunOptions(dry_run=True), adapters=Adapters(ListSource(list(rows)), remote)
    )
    assert planned.dry_run and planned.created == 1
    assert remote.requests == {"read": 0, "write": 0}  # a dry run sends nothing
    with pytest.raises(TypeError):
        run_once(settings, dry_run=True)  # type: ignore[call-arg]  # one way in: the options


def test_sync_hands_even_a_crashed_run_to_the_hooks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, calls: list[tuple[str, object]]
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        '[api]\nbase_url = "https://cms.example.com"\n[source]\ntype = "csv"\npath = "c.csv"\n',
        encoding="utf-8",
    )
    config.chmod(0o600)
    monkeypatch.setenv("SKUFERRY_API_KEY", "k")

    def broken(*args: object, **kwargs: object) -> RunSummary:
        raise RuntimeError("a bug")

    monkeypatch.setattr(engine, "run_once", broken)
    done = CliRunner().invoke(main, ["sync", "--config", str(config)])
    assert done.exit_code == 70, done.output  # EXIT_SOFTWARE, worded by the CLI edge
    assert "internal error: RuntimeError: a bug" in done.output
    assert calls == [("before", None), ("after", ("failed", False))]
