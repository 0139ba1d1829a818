"""The daemon keeps to an undo: its runs refuse the undone feed until the export changes,
and it carries out an undo the page asks for in its own thread (it holds the state)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from skuferry import errors
from skuferry.config.schema import Settings
from skuferry.models import Progress, RunOptions, RunSummary
from skuferry.service.daemon import Daemon
from skuferry.sources import change_token
from skuferry.sync.engine import Adapters, run_once
from skuferry.sync.undo import UndoReport, undo_run
from tests.unit.service.test_daemon import RecordingNotifier
from tests.unit.sync.test_undo import Shop, catalog


@pytest.fixture(autouse=True)
def no_racy_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(change_token, "RACY_S", 0.0)


def daemon_of(shop: Shop) -> Daemon:
    loaded = shop.settings.model_copy(
        update={
            "schedule": shop.settings.schedule.model_copy(
                update={"interval_minutes": 60, "run_at_start": False}
            )
        }
    )

    def job(
        settings: Settings,
        options: RunOptions | None = None,
        *,
        stop: threading.Event | None = None,
        on_progress: Progress | None = None,
        adapters: Adapters | None = None,
    ) -> RunSummary:
        del adapters  # the daemon's inbox: not used here
        client = Adapters(client=shop.remote)
        return run_once(settings, options, stop=stop, on_progress=on_progress, adapters=client)

    def undo(settings: Settings, run: int, *, stop: threading.Event) -> UndoReport:
        return undo_run(settings, run, stop=stop, adapters=Adapters(client=shop.remote))

    return Daemon(None, job=job, undo=undo, load=lambda _p: loaded, notifier=RecordingNotifier())


def test_the_daemon_refuses_an_undone_feed_between_runs_until_the_export_changes(
    tmp_path: Path,
) -> None:
    shop = Shop(tmp_path)
    shop.export(catalog(20))
    shop.sync()
    shop.export(catalog(20, factor=100))
    bad = shop.sync(force=True).run_id
    assert bad is not None
    daemon = daemon_of(shop)
    daemon.start()
    try:
        report = daemon.undo_now(bad)  # as the page asks it
        assert report is not None and report.exit_code == errors.EXIT_OK
        assert report.count("put_back") == 20
        with capture_logs() as events:
            outcome = daemon.run_now()
        assert isinstance(outcome.exception, errors.UndoneFeedRefused)
        (failed,) = [e for e in events if e["event"] == "daemon.run.failed"]
        assert f"skuferry undo {bad}" in failed["error"] and failed["exit_code"] == 2
        assert daemon.run_now().exception is not None, "every run, until the export changes"
        assert str(shop.prices()["SKU-0003"]) == catalog(20)[3]["price"], "not written again"
        fixed = catalog(20)
        fixed[0]["price"] = "0.99"  # the corrected export, with one real change
        shop.export(fixed)
        changed = daemon.run_now()
        assert changed.exception is None and changed.summary is not None
        assert (changed.summary.updated, changed.summary.unchanged) == (1, 19)
    finally:
        assert daemon.shutdown() == 0


def test_an_undo_the_daemon_cannot_start_says_why_to_the_page(tmp_path: Path) -> None:
    shop = Shop(tmp_path)
    shop.export(catalog(2))
    shop.sync()
    daemon = daemon_of(shop)
    daemon.start()
    try:
        assert daemon.undo_now(99) is None
        assert "holds no run 99" in daemon.undo_problems[99]
    finally:
        assert daemon.shutdown() == 0
