"""The daemon's one way to run a job: the scheduled run and a targeted one share it."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from skuferry.errors import SourceError
from skuferry.models import RunOptions, RunSummary
from skuferry.service.daemon import Daemon
from tests.unit.service.test_daemon import FakeJob, RecordingNotifier, make_settings


class Calls(FakeJob):
    """A fake job that keeps how it was called."""

    def __init__(self, *script: RunSummary | Exception) -> None:
        super().__init__(*script)
        self.args: list[tuple[RunOptions | None, dict[str, Any]]] = []

    def __call__(self, settings: Any, options: RunOptions | None = None, **kw: Any) -> RunSummary:
        self.args.append((options, kw))
        return super().__call__(settings, options, **kw)


def daemon_with(tmp_path: Path, job: Calls) -> Daemon:
    settings = make_settings(
        tmp_path, schedule={"interval_minutes": 60, "run_at_start": False, "verify_every": 2}
    )
    return Daemon(None, job=job, load=lambda _p: settings, notifier=RecordingNotifier())


def test_a_targeted_run_names_its_keys_and_tells_its_own_number(tmp_path: Path) -> None:
    job = Calls(RunSummary(updated=1))
    daemon = daemon_with(tmp_path, job)
    daemon.start()
    try:
        with capture_logs() as events:
            outcome = daemon.run_now(["A-1", "B-2"], resend=True)
            scheduled = daemon.run_now()
            daemon.run_now(["C-3"])
        assert outcome.exit_code == 0 and scheduled.exit_code == 0
        (options, kw), (none, plain), (again, _kw) = job.args
        assert options == RunOptions(only=("A-1", "B-2"), resend=frozenset({"A-1", "B-2"}))
        assert kw["adapters"].urgent is daemon.inbox, "keys pushed meanwhile join the run"
        assert isinstance(kw["stop"], threading.Event)
        assert none == RunOptions(verify=False) and plain["adapters"] is None
        assert again == RunOptions(only=("C-3",)), "a hook's keys are not resent as a retry"
        finished = [e for e in events if e["event"].endswith(".finished")]
        numbered = [(e["event"], e.get("targeted"), e.get("run")) for e in finished]
        assert numbered == [
            ("daemon.targeted.finished", 1, None),
            ("daemon.run.finished", None, 1),
            ("daemon.targeted.finished", 2, None),
        ]
        assert "result" not in finished[0] and finished[1]["result"] == "success"
        assert finished[0]["updated"] == 1
        started = [e["event"] for e in events if e["event"].endswith(".started")]
        assert started == [
            "daemon.targeted.started",
            "daemon.run.started",
            "daemon.targeted.started",
        ]
    finally:
        assert daemon.shutdown() == 0


def test_a_targeted_run_that_fails_is_logged_as_any_run(tmp_path: Path) -> None:
    daemon = daemon_with(tmp_path, Calls(SourceError("the export is gone")))
    daemon.start()
    try:
        with capture_logs() as events:
            outcome = daemon.run_now(["A-1"])
        assert outcome.exception is not None and daemon.last_outcome is outcome
        (failed,) = [e for e in events if e["event"] == "daemon.run.failed"]
        assert (failed["run"], failed["error_type"]) == (1, "SourceError")
    finally:
        assert daemon.shutdown() == 0
