"""The page on the daemon's ``listen`` address: mounted beside /healthz, and its hands
reach the daemon's runs (a retry is a targeted run that resends refused data)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from skuferry.config.schema import Settings
from skuferry.models import RunOptions, RunSummary
from skuferry.service.console.workspace import DaemonWorkspace
from skuferry.service.daemon import Daemon
from skuferry.sync.context import Adapters
from tests.fakes import wait_until
from tests.unit.service.test_daemon import make_settings, started

pytestmark = pytest.mark.integration  # the daemon's HTTP endpoint on loopback

__all__ = ["started"]

TOKEN = "console-token-Lp4kS8dF2gH6"


class OptionsJob:
    """Records every run's options."""

    def __init__(self) -> None:
        self.options: list[RunOptions | None] = []
        self.lock = threading.Lock()

    def __call__(
        self,
        settings: Settings,
        options: RunOptions | None = None,
        *,
        stop: threading.Event | None = None,
        on_progress: Callable[[int, int], None] | None = None,
        adapters: Adapters | None = None,
    ) -> RunSummary:
        with self.lock:
            self.options.append(options)
        return RunSummary()


def test_the_page_is_served_beside_health_and_its_retry_resends(
    tmp_path: Path, started: Callable[..., tuple[Daemon, Any, dict[str, int]]]
) -> None:
    settings = make_settings(
        tmp_path,
        daemon={"listen": "127.0.0.1:0", "console_token_env": "SKUFERRY_TEST_CONSOLE"},
        schedule={"interval_minutes": 600, "run_at_start": False},
    )
    job = OptionsJob()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("SKUFERRY_TEST_CONSOLE", TOKEN)
        daemon, _, _ = started(settings, job, interval_s=None)
    url = daemon.endpoint_url
    assert url is not None
    page = httpx.get(url + "/")
    assert page.status_code == 200 and 'href="/workspaces/default"' in page.text
    assert "Content-Security-Policy" in page.headers
    assert httpx.get(url + "/healthz").status_code in (200, 503)

    bearer = {"Authorization": f"Bearer {TOKEN}"}
    answer = httpx.post(url + "/workspaces/default/retry", data={"key": "SKU-1"}, headers=bearer)
    assert answer.status_code == 202
    wait_until(lambda: len(job.options) == 1, "the retry's run")
    assert job.options[0] == RunOptions(only=("SKU-1",), resend=frozenset({"SKU-1"}))

    assert httpx.post(url + "/workspaces/default/run", headers=bearer).status_code == 202
    wait_until(lambda: len(job.options) == 2, "the full run")
    assert job.options[1] is None or job.options[1].only is None


def test_a_daemon_workspace_is_named_and_hands_on_to_its_daemon(tmp_path: Path) -> None:
    class Recorder:
        settings = make_settings(tmp_path)
        board: Any = None
        asked: list[Any] = []

        def next_run(self) -> str | None:
            return "soon"

        def waiting(self) -> int:
            return 3

        degraded = None

        def waiting_for_slot_s(self) -> float | None:
            return None

        def request_run(self, reason: str = "") -> None:
            self.asked.append(("run", reason))

        def request_retry(self, keys: list[str]) -> None:
            self.asked.append(("retry", keys))

        def request_undo(self, run: int) -> None:
            self.asked.append(("undo", run))

        undo_problems: dict[int, str] = {7: "its history was pruned"}

    daemon = Recorder()
    ws = DaemonWorkspace(daemon, "shop")
    assert (ws.name, ws.next_run(), ws.waiting(), ws.settings) == (
        "shop",
        "soon",
        3,
        daemon.settings,
    )
    ws.run_now()
    ws.retry(("A", "B"))
    ws.undo(7)
    assert daemon.asked == [("run", "the operator's page"), ("retry", ["A", "B"]), ("undo", 7)]
    assert (ws.undo_problem(7), ws.undo_problem(8)) == ("its history was pruned", None)
