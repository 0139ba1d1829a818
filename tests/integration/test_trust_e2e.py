"""Issue 18, items 5-7 through the CLI against the sandbox: a revoked key is noticed by a run
with nothing to send (exit 3, ``/healthz`` 503), lost PATCH answers are settled in the same
run (exit 0), an interrupted run says so, and a stopped daemon promises no next run."""

from __future__ import annotations

import json
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from skuferry.sandbox import Sandbox
from skuferry.sandbox.faults import Faults
from tests.integration.conftest import (
    KEY,
    Cli,
    assert_each_once,
    catalog_keys,
    catalog_rows,
    clean_env,
)

pytestmark = pytest.mark.integration


def _wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _summary(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr
    summary: dict[str, Any] = json.loads(lines[-1])
    return summary


def _with_auth_check(config: Path, minutes: int) -> Path:
    text = config.read_text(encoding="utf-8")
    config.write_text(
        text.replace("[api]\n", f"[api]\nauth_check_minutes = {minutes}\n", 1), encoding="utf-8"
    )
    return config


def _age_last_contact(state: Path, seconds: float) -> None:
    """As if the last run that talked to the API was ``seconds`` ago (no waiting)."""
    conn = sqlite3.connect(state, timeout=30)
    try:
        with conn:
            (value,) = conn.execute(
                "SELECT value FROM meta WHERE name = 'api.last_contact'"
            ).fetchone()
            conn.execute(
                "UPDATE meta SET value = ? WHERE name = 'api.last_contact'",
                (repr(float(value) - seconds),),
            )
    finally:
        conn.close()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_a_key_revoked_while_the_source_is_unchanged_ends_the_next_checked_run_with_exit_3(
    tmp_path: Path,
    sandbox: Sandbox,
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    cli: Cli,
) -> None:
    write_catalog(catalog_rows(5))
    config = _with_auth_check(write_config(sandbox.url), 1)
    assert cli.run("sync", "-c", str(config)).returncode == 0
    quiet = cli.run("sync", "-c", str(config), "--json")
    assert _summary(quiet)["requests"] == {"read": 0, "write": 0}, "contacted a moment ago"

    sandbox.revoke_key(KEY)
    still = cli.run("sync", "-c", str(config), "--json")
    assert still.returncode == 0, "within the interval nothing is sent, nothing is noticed"

    _age_last_contact(tmp_path / "state" / "skuferry.db", 61)
    refused = cli.run("sync", "-c", str(config), "--json")
    assert refused.returncode == 3, refused.stderr
    assert "the API key was refused" in refused.stderr
    assert KEY not in refused.stderr + refused.stdout
    status = json.loads(cli.run("status", "-c", str(config), "--json").stdout)
    assert status["products"] == {"synced": 5}, "a refused key fails no product"
    assert status["runs"][0]["exit_code"] == 3


def test_the_daemon_s_healthz_turns_503_naming_the_refused_key_then_stops_with_no_next_run(
    tmp_path: Path,
    sandbox: Sandbox,
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    cli: Cli,
) -> None:
    write_catalog(catalog_rows(5))
    port = _free_port()
    config = write_config(
        sandbox.url,
        extra=f'\n[schedule]\ninterval_minutes = 0.02\n\n[daemon]\nlisten = "127.0.0.1:{port}"\n',
    )
    _with_auth_check(config, 1)
    daemon = subprocess.Popen(
        [sys.executable, "-m", "skuferry", "run", "-c", str(config)],
        cwd=tmp_path,
        env=clean_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    health = f"http://127.0.0.1:{port}/healthz"

    def answers(status: int) -> bool:
        try:
            return httpx.get(health, timeout=2).status_code == status
        except httpx.TransportError:
            return False

    try:
        _wait_for(lambda: sandbox.stats().products.get("default", 0) == 5, "the first sync")
        _wait_for(lambda: answers(200), "a healthy daemon")
        sandbox.revoke_key(KEY)
        _age_last_contact(tmp_path / "state" / "skuferry.db", 61)
        _wait_for(lambda: answers(503), "/healthz to notice the refused key")
        body = httpx.get(health, timeout=2).json()
        assert body["problems"][0] == "the last run failed (exit 3, AuthError)"
        assert "refused the API key (HTTP 401)" in body["problems"][1]
        assert KEY not in json.dumps(body)
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=20) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    status = cli.run("status", "-c", str(config))
    assert status.returncode == 0, status.stderr
    assert "daemon: not running since" in status.stdout
    assert "next run" not in status.stdout
    data = json.loads(cli.run("status", "-c", str(config), "--json").stdout)
    assert data["daemon"]["running"] is False and data["daemon"]["next_run"] is None
    assert data["products"] == {"synced": 5}


def test_lost_patch_answers_are_settled_in_one_run_and_the_sandbox_holds_the_new_values(
    sandbox: Sandbox,
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    cli: Cli,
) -> None:
    n = 40
    write_catalog(catalog_rows(n))
    config = write_config(sandbox.url, max_in_flight=1)
    assert cli.run("sync", "-c", str(config)).returncode == 0
    sandbox.set_faults(Faults(drop_after_commit=0.15, error_after_commit=0.15, reset=0.1))
    write_catalog(catalog_rows(n, version=1))
    done = cli.run("sync", "-c", str(config), "--json", "--force")  # every price changed
    summary = _summary(done)
    assert done.returncode == 0, summary["problems"]
    assert (summary["updated"], summary["failed"]) == (n, 0)
    faults = sandbox.stats().faults
    assert faults.get("drop_after_commit", 0) + faults.get("error_after_commit", 0) > 0
    assert faults.get("reset", 0) > 0, "some answers were lost before the change landed"
    assert summary["requests"]["read"] >= sum(faults.values()), "each was read back"
    held = {p["sku"]: Decimal(str(p["price"])) for p in sandbox.products()}
    assert held == {r["SKU"]: Decimal(r["Price"]) for r in catalog_rows(n, version=1)}
    assert_each_once(sandbox, catalog_keys(n))
    sandbox.set_faults(Faults())
    again = _summary(cli.run("sync", "-c", str(config), "--json"))
    assert (again["unchanged"], again["requests"]["write"]) == (n, 0), "nothing left in doubt"


@pytest.mark.parametrize("as_json", [False, True])
def test_an_interrupted_run_says_so_and_counts_no_unsent_product_as_failed(
    tmp_path: Path,
    sandbox_factory: Callable[..., Sandbox],
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    *,
    as_json: bool,
) -> None:
    sandbox = sandbox_factory(updates="patch", latency_s=0.05)
    n = 80
    write_catalog(catalog_rows(n))
    config = write_config(sandbox.url, max_in_flight=1)
    proc = subprocess.Popen(
        [sys.executable, "-m", "skuferry", "sync", "-c", str(config), *(["--json"] * as_json)],
        cwd=tmp_path,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(lambda: sandbox.stats().writes_committed >= 5, "the first writes")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    if as_json:
        summary = json.loads(out.strip().splitlines()[-1])
        assert summary["interrupted"] is True and summary["status"] == "interrupted"
        assert summary["failed"] == 0, summary["problems"]
        assert 5 <= summary["created"] < n
    else:
        assert "sync (interrupted)" in out
        assert "interrupted: stopped on request" in out
        assert "failed" not in out


def test_the_sandbox_admin_revokes_a_key_without_echoing_it(sandbox: Sandbox) -> None:
    products = f"{sandbox.url}/api/v1/products"
    auth = {"Authorization": f"Bearer {KEY}"}
    assert httpx.get(products, headers=auth).status_code == 200
    revoke = f"{sandbox.url}/_sandbox/keys/revoke"
    done = httpx.post(revoke, json={"key": KEY})
    assert done.status_code == 200 and KEY not in done.text
    assert httpx.get(products, headers=auth).status_code == 401
    assert httpx.post(revoke, json={"key": KEY}).status_code == 404
    assert httpx.post(revoke, json={"nope": 1}).status_code == 400
