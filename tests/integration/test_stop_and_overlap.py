"""A one-shot sync stopped by SIGTERM, and a cron run overlapping a running one."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from skuferry.sandbox import Sandbox
from skuferry.state.lock import lock_path
from tests.integration.conftest import assert_each_once, catalog_keys, catalog_rows, clean_env

pytestmark = pytest.mark.integration

N = 120


def _wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _start_sync(tmp_path: Path, config: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "skuferry", "sync", "--config", str(config), *extra],
        cwd=tmp_path,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigterm_lets_requests_in_flight_finish_then_exits_130(
    tmp_path: Path,
    sandbox_factory: Callable[..., Sandbox],
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    run_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    sandbox = sandbox_factory(updates="patch", latency_s=0.05)
    write_catalog(catalog_rows(N))
    config = write_config(sandbox.url, max_in_flight=2)
    proc = _start_sync(tmp_path, config)
    try:
        _wait_for(lambda: sandbox.stats().writes_committed >= 10, "the first writes")
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    stored = sandbox.stats().writes_committed
    assert 10 <= stored < N, "stopped part-way, not at once and not after the whole run"
    status = run_cli("status", "--config", str(config), "--json")
    assert '"open_intents": []' in status.stdout, "every request in flight was committed"
    again = run_cli("sync", "--config", str(config))
    assert again.returncode == 0, again.stderr
    assert_each_once(sandbox, catalog_keys(N))


def test_an_overlapping_cron_run_exits_75_at_once_and_silently_with_quiet(
    tmp_path: Path,
    sandbox_factory: Callable[..., Sandbox],
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    run_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    sandbox = sandbox_factory(updates="patch", latency_s=0.05)
    write_catalog(catalog_rows(N))
    config = write_config(sandbox.url, max_in_flight=1)
    first = _start_sync(tmp_path, config)
    try:
        lock = lock_path(tmp_path / "state" / "skuferry.db")
        _wait_for(lambda: sandbox.stats().writes_committed >= 1, "the first run to be writing")
        assert lock.exists()
        overlap = run_cli("sync", "--config", str(config), "--quiet")
        assert overlap.returncode == 75
        assert overlap.stdout == "" and overlap.stderr == "", "cron mails nothing for an overlap"
        loud = run_cli("sync", "--config", str(config))
        assert loud.returncode == 75 and "another skuferry run" in loud.stderr
        assert first.poll() is None, "the running sync was not disturbed"
        first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert first.returncode == 0
    assert_each_once(sandbox, catalog_keys(N))
