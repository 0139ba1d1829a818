"""The names the daemon's logs publish stay as they were when its code moved.

Log readers match the ``logger`` field and the events' fields: the daemon's events keep
the daemon's logger wherever the code that logs them lives, and the watch's start keeps
its ``settle_s`` field, named as the config key ``watch_settle_s`` is.
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from apscheduler.triggers.interval import IntervalTrigger

from skuferry import logs
from skuferry.errors import SourceError
from skuferry.models import RunSummary
from skuferry.service.handed_keys import HandedKeys
from skuferry.service.listeners import Listeners
from skuferry.service.metrics import RunOutcome
from skuferry.service.run_events import log_failure, log_finished
from skuferry.service.run_threads import ThreadPerRunExecutor
from skuferry.service.scheduler import SyncSchedule
from skuferry.service.watch import FileWatch
from tests.fakes import FakeClock, wait_until
from tests.unit.service.test_daemon import make_settings

DAEMON = "skuferry.service.daemon"


def json_events(emit: Callable[[io.StringIO], None]) -> list[dict[str, Any]]:
    out = io.StringIO()
    logs.configure(level="info", json=True, stream=out)
    emit(out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def finished() -> None:
    summary = RunSummary(created=1)
    outcome = RunOutcome.from_summary(summary, duration_s=0.1, finished_at=0.0)
    log_finished(outcome, summary, {"run": 1}, scheduled=True)


def failed() -> None:
    exc = SourceError("the export is gone")
    log_failure(1, exc, RunOutcome.from_error(exc, duration_s=0.1, finished_at=0.0))


def overlap(out: io.StringIO) -> None:
    """A run that outlasts its interval: the next one due is skipped, and said so."""
    executor = ThreadPerRunExecutor()
    schedule = SyncSchedule(executor, lambda: 60)
    release = threading.Event()

    def run() -> None:
        release.wait(15)  # outlasts the interval; only a hang guard bounds it

    schedule.add(run, IntervalTrigger(seconds=0.05), grace_s=60, first_in_s=0.0)
    schedule.scheduler.start()
    try:
        wait_until(lambda: "daemon.run.overlap_skipped" in out.getvalue(), "an overlap")
    finally:
        release.set()
        schedule.scheduler.shutdown(wait=False)
        executor.join(15)


def handed_unreadable(tmp_path: Path) -> None:
    (tmp_path / "state.db").mkdir()  # a folder where the state should be: unreadable
    HandedKeys(FakeClock()).take(tmp_path / "state.db")


def listen_kept(tmp_path: Path) -> None:
    old = make_settings(tmp_path, daemon={"listen": "127.0.0.1:9101"})
    new = make_settings(tmp_path, daemon={"listen": "127.0.0.1:9102"})
    Listeners().reloaded(old, new, lambda: None)


@pytest.mark.parametrize(
    ("event", "emit"),
    [
        ("daemon.run.finished", lambda _tmp, _out: finished()),
        ("daemon.run.failed", lambda _tmp, _out: failed()),
        ("daemon.run.overlap_skipped", lambda _tmp, out: overlap(out)),
        ("daemon.handed.read_failed", lambda tmp, _out: handed_unreadable(tmp)),
        ("daemon.reload.listen_kept", lambda tmp, _out: listen_kept(tmp)),
    ],
)
def test_the_daemon_s_events_keep_the_daemon_s_logger(
    tmp_path: Path, event: str, emit: Callable[[Path, io.StringIO], None]
) -> None:
    found = [e for e in json_events(lambda out: emit(tmp_path, out)) if e["event"] == event]
    assert found, f"no {event}"
    assert {e["logger"] for e in found} == {DAEMON}


def test_the_watch_start_keeps_its_settle_s_field(tmp_path: Path) -> None:
    path = tmp_path / "products.csv"
    path.write_text("sku\nA\n", encoding="utf-8")
    out = io.StringIO()
    logs.configure(level="info", json=True, stream=out)
    watcher = FileWatch(path, lambda: None, quiet_s=0.4, poll_s=0.05, force_polling=True).start()
    try:
        wait_until(lambda: "watch.started" in out.getvalue(), "the watch to start")
    finally:
        watcher.stop()
    (line,) = [json.loads(s) for s in out.getvalue().splitlines() if "watch.started" in s]
    assert line["settle_s"] == 0.4
    assert "quiet_s" not in line
