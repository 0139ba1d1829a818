"""Pushes to ``skuferry run`` as a real process against the sandbox: ``POST /hooks/sync``
signed with the shared secret (or Akeneo's way) syncs its keys; unsigned, wrongly signed or
stale requests get 401 and trigger nothing; ``POST /hooks/run`` asks for a full run."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from skuferry.sandbox import Sandbox
from skuferry.service.hooks_http import sign, sign_akeneo
from tests.fakes import log_events as events
from tests.fakes import wait_until
from tests.integration.conftest import catalog_rows, clean_env, closed_port_url

pytestmark = pytest.mark.integration

SECRET = b"hook-secret-4b7f0c2e9a"


@pytest.fixture
def daemon(
    tmp_path: Path,
    sandbox: Sandbox,
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    run_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> Iterator[tuple[str, Path]]:
    write_catalog(catalog_rows(5))
    secret_file = tmp_path / "hook_secret"
    secret_file.write_bytes(SECRET + b"\n")
    secret_file.chmod(0o600)
    listen = closed_port_url().removeprefix("http://")
    extra = (
        "[schedule]\ninterval_minutes = 600\nrun_at_start = false\n"
        f'[daemon]\nlisten = "{listen}"\nhook_secret_file = "{secret_file}"\n'
    )
    config = write_config(sandbox.url, extra=extra)
    assert run_cli("sync", "--config", str(config)).returncode == 0
    write_catalog(catalog_rows(5, version=1))  # every price changes in the source
    err = tmp_path / "daemon.log"
    with err.open("wb") as err_f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "skuferry", "--log-format", "json", "run", "-c", str(config)],
            cwd=tmp_path,
            env=clean_env(),
            stderr=err_f,
            stdout=subprocess.DEVNULL,
        )
        try:
            wait_until(
                lambda: any(e.get("event") == "daemon.started" for e in events(err)),
                "the daemon to start",
            )
            yield f"http://{listen}", err
        finally:
            proc.terminate()
            proc.wait(timeout=20)


def prices(sandbox: Sandbox) -> dict[str, float]:
    return {p["sku"]: float(p["price"]) for p in sandbox.products()}


def post(url: str, body: bytes, **headers: str) -> httpx.Response:
    return httpx.post(url, content=body, headers=headers, timeout=10)


def test_signed_hooks_sync_their_keys_and_unsigned_or_stale_ones_trigger_nothing(
    daemon: tuple[str, Path], sandbox: Sandbox
) -> None:
    url, log = daemon
    new = {r["SKU"]: float(r["Price"]) for r in catalog_rows(5, version=1)}
    before = prices(sandbox)
    body = json.dumps({"keys": ["SKU-00001"]}).encode()
    now = str(int(time.time()))

    assert post(f"{url}/hooks/sync", body).status_code == 401, "unsigned"
    wrong = sign(b"another secret", body)
    assert post(f"{url}/hooks/sync", body, **{"X-Skuferry-Signature": wrong}).status_code == 401
    stale_at = str(int(time.time()) - 3600)
    stale = {
        "X-Akeneo-Request-Signature": sign_akeneo(SECRET, body, stale_at),
        "X-Akeneo-Request-Timestamp": stale_at,
    }
    assert post(f"{url}/hooks/sync", body, **stale).status_code == 401, "an hour old"
    assert post(f"{url}/hooks/run", b"{}").status_code == 401

    signed = json.dumps({"keys": ["SKU-00002"]}).encode()
    answer = post(f"{url}/hooks/sync", signed, **{"X-Skuferry-Signature": sign(SECRET, signed)})
    assert answer.status_code == 202 and answer.json()["queued"] == 1
    wait_until(lambda: prices(sandbox)["SKU-00002"] == new["SKU-00002"], "SKU-00002 synced")

    def targeted_runs() -> list[dict[str, Any]]:
        return [e for e in events(log) if e.get("event") == "daemon.targeted.finished"]

    wait_until(lambda: bool(targeted_runs()), "the targeted run's end")
    targeted = targeted_runs()
    assert len(targeted) == 1 and targeted[0]["updated"] == 1, "one run, of the signed key only"
    assert prices(sandbox)["SKU-00001"] == before["SKU-00001"] != new["SKU-00001"]

    akeneo = json.dumps(
        {
            "events": [
                {
                    "action": "product.updated",
                    "event_id": "a1b2",
                    "event_datetime": "2026-11-23T05:00:00+00:00",
                    "data": {"resource": {"identifier": "SKU-00003", "enabled": True}},
                },
                {"action": "product_model.updated", "data": {"resource": {"code": "M-1"}}},
            ]
        }
    ).encode()
    headers = {
        "X-Akeneo-Request-Signature": sign_akeneo(SECRET, akeneo, now),
        "X-Akeneo-Request-Timestamp": now,
    }
    assert post(f"{url}/hooks/sync", akeneo, **headers).json()["queued"] == 1
    wait_until(lambda: prices(sandbox)["SKU-00003"] == new["SKU-00003"], "SKU-00003 synced")
    assert prices(sandbox)["SKU-00001"] == before["SKU-00001"]

    run = b"{}"
    assert (
        post(f"{url}/hooks/run", run, **{"X-Skuferry-Signature": sign(SECRET, run)}).status_code
        == 202
    )
    wait_until(lambda: prices(sandbox) == new, "the full run")
    text = log.read_text()
    assert SECRET.decode() not in text and "a1b2" not in text, "neither secret nor body logged"


def test_a_hook_during_a_long_run_joins_its_urgent_lane(
    tmp_path: Path,
    sandbox_factory: Callable[..., Sandbox],
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    run_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    sandbox = sandbox_factory(updates="patch")
    rows = catalog_rows(60)
    write_catalog(rows)
    secret_file = tmp_path / "hook_secret"
    secret_file.write_bytes(SECRET)
    secret_file.chmod(0o600)
    listen = closed_port_url().removeprefix("http://")
    daemon_extra = (
        f'[daemon]\nlisten = "{listen}"\nhook_secret_file = "{secret_file}"\n'
        "[safety]\nmax_change_ratio = 1.0\n"
    )
    config = write_config(sandbox.url, extra=daemon_extra)
    assert run_cli("sync", "--config", str(config)).returncode == 0
    # the daemon's run: every name changes, one write at a time, each answered in 0.25 s
    # (15 s in all, a slow API's pace); stock is urgent
    sandbox.config.latency_s = 0.25
    slow = write_config(
        sandbox.url,
        max_in_flight=1,
        extra=daemon_extra + "[schedule]\ninterval_minutes = 600\n",
    )
    text = slow.read_text().replace('key = "sku"\n', 'key = "sku"\nurgent = ["stock"]\n', 1)
    slow.write_text(text)
    for row in rows:
        row["Name"] += " (new text)"
    write_catalog(rows)
    log = tmp_path / "daemon.log"

    def renamed() -> int:
        return sum("(new text)" in p["name"] for p in sandbox.products())

    def stock() -> int:
        return next(int(p["stock"]) for p in sandbox.products() if p["sku"] == "SKU-00060")

    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "skuferry", "--log-format", "json", "run", "-c", str(slow)],
            cwd=tmp_path,
            env=clean_env(),
            stderr=err,
            stdout=subprocess.DEVNULL,
        )
        try:
            wait_until(lambda: renamed() >= 5, "the long run to be writing")
            rows[-1]["Stock"] = "4321"  # the last product: the run's own order sends it last
            write_catalog(rows)
            body = json.dumps({"keys": [rows[-1]["SKU"]]}).encode()
            signed = {"X-Skuferry-Signature": sign(SECRET, body)}
            assert post(f"http://{listen}/hooks/sync", body, **signed).status_code == 202

            wait_until(lambda: stock() == 4321, "the pushed stock")
            assert renamed() < 60, "on the CMS before the long run got through its own writes"
            wait_until(
                lambda: any(e.get("event") == "daemon.run.finished" for e in events(log)),
                "the long run's end",
            )
        finally:
            proc.terminate()
            proc.wait(timeout=20)
    found = events(log)
    assert not [e for e in found if e.get("event") == "daemon.targeted.started"], "no 2nd run"
    assert any(e.get("event") == "sync.lane.urgent" for e in found)
    assert stock() == 4321 and renamed() == 60


def test_sync_only_from_another_shell_joins_the_running_runs_urgent_lane(
    sandbox_factory: Callable[..., Sandbox],
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    run_cli: Callable[..., subprocess.CompletedProcess[str]],
    start_cli: Callable[..., subprocess.Popen[bytes]],
) -> None:
    sandbox = sandbox_factory(updates="patch")
    rows = catalog_rows(60)
    write_catalog(rows)
    config = write_config(sandbox.url, max_in_flight=1, extra="[safety]\nmax_change_ratio = 1.0\n")
    assert run_cli("sync", "--config", str(config)).returncode == 0
    sandbox.config.latency_s = 0.25  # the long run: 60 updates, one at a time, 15 s
    for row in rows:
        row["Name"] += " (new text)"
    write_catalog(rows)

    def renamed() -> int:
        return sum("(new text)" in p["name"] for p in sandbox.products())

    long_run = start_cli("sync", "--config", str(config))
    wait_until(lambda: renamed() >= 5, "the long run to be writing")
    rows[-1]["Stock"] = "4321"
    write_catalog(rows)
    named = run_cli("sync", "--config", str(config), "--only", "SKU-00060")
    assert named.returncode == 0, named.stderr
    assert "handed 1 key(s) to the running skuferry run" in named.stdout
    wait_until(
        lambda: (
            next(int(p["stock"]) for p in sandbox.products() if p["sku"] == "SKU-00060") == 4321
        ),
        "the named key's stock",
    )
    assert renamed() < 60, "sent before the long run got through its own writes"
    assert long_run.wait(timeout=120) == 0
    assert renamed() == 60
