"""Several keys, a neighbour, a burst-limited gateway: judged by the sandbox's own records.

Issue 12: spread a sync over the keys of one workspace inside both limits, never
fail a product because someone else spent the budget, and learn a gateway's real
burst from its 429s. Catalogs are small and limits chosen so each test binds a
budget for a few seconds at most.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from skuferry import errors
from skuferry.config.keys import fingerprint
from skuferry.config.load import load_settings
from skuferry.config.schema import Settings
from skuferry.models import RunOptions
from skuferry.remote.pace import BURST_GROW_S, RECENT_S
from skuferry.sandbox import Sandbox
from skuferry.sandbox.neighbour import Neighbour
from skuferry.service import report
from skuferry.service.progress import PacedProgress
from skuferry.sync import engine
from tests.integration.conftest import (
    FAST,
    KEY,
    LOADED_SKEW_S,
    WORKSPACE,
    Cli,
    assert_each_once,
    catalog_keys,
    catalog_rows,
)

pytestmark = [pytest.mark.integration]

KEYS = ("sk-shop-Fz1q-key-one", "sk-shop-Hk7w-key-two", "sk-shop-Pr3m-key-six")
OTHER_KEY = "sk-other-tenant-Qx5v"
IN_FLIGHT_GRACE_S = 0.05  # a request already on the wire when a 429 was sent is no retry


def run_once(settings: Settings) -> int:
    try:
        return engine.run_once(settings).exit_code
    except errors.SkuferryError as exc:
        return exc.exit_code


def add_line(config: Path, table: str, line: str) -> None:
    """Add ``line`` at the top of ``table`` in the config written by ``write_config``."""
    text = config.read_text(encoding="utf-8")
    config.write_text(text.replace(f"{table}\n", f"{table}\n{line}\n", 1), encoding="utf-8")


def too_early(sandbox: Sandbox, keys: tuple[str, ...], retry_after_s: float) -> list[object]:
    """Requests a key sent before the Retry-After it was given had passed."""
    early = [e for e in sandbox.stats().early_retries if e.key in keys]
    return [e for e in early if retry_after_s - e.early_by_s > IN_FLIGHT_GRACE_S]


def test_three_keys_fill_the_workspace_with_zero_429s_and_share_the_work(
    sandbox_factory: Callable[..., Sandbox],
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    figures: Callable[[str], None],
) -> None:
    # Per key 300/min, the workspace 360/min: less than the keys' 900, so the workspace binds.
    products, per_key, per_workspace = 400, 300, 360
    sandbox = sandbox_factory(
        keys=dict.fromkeys(KEYS, WORKSPACE),
        mode="bucket",
        updates="patch",
        key_limits={"read": FAST, "write": per_key},
        workspace_limits={"read": FAST, "write": per_workspace},
    )
    write_catalog(catalog_rows(products))
    config = write_config(
        sandbox.url, key=None, writes=per_key, limiter="bucket", clock_skew_s=LOADED_SKEW_S
    )
    add_line(config, "[budget]", f"workspace_write_per_minute = {per_workspace}")
    settings = load_settings(config, env={"SKUFERRY_API_KEYS": ",".join(KEYS)})
    shown: list[tuple[int, int]] = []
    bar = PacedProgress(lambda done, total: shown.append((done, total)))

    summary = engine.run_once(settings, on_progress=bar)

    assert summary.exit_code == errors.EXIT_OK
    assert shown[-1] == (products, products)
    assert bar.text() == "0:00:00 left"  # the engine showed the bar its budget

    stats = sandbox.stats()
    assert stats.rate_limited == {}, f"429s: {stats.rate_limited_by_key}"
    assert_each_once(sandbox, catalog_keys(products))
    writes = {key: stats.requests_by_key.get(key, {}).get("write", 0) for key in KEYS}
    assert sum(writes.values()) == products
    assert all(n >= products * 0.25 for n in writes.values()), writes
    figures(
        f"three keys, per key {per_key}/min, workspace {per_workspace}/min, {products} "
        f"products: 0 429s, writes per key {sorted(writes.values())}"
    )


def test_a_neighbour_spending_the_workspace_never_fails_a_product(
    sandbox_factory: Callable[..., Sandbox],
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    figures: Callable[[str], None],
) -> None:
    # The workspace refills 6/s; the neighbour spends its key's 300 at once, then 2/s.
    products, per_key, per_workspace = 120, 300, 360
    sandbox = sandbox_factory(
        keys={KEY: WORKSPACE, OTHER_KEY: WORKSPACE},
        mode="bucket",
        updates="patch",
        key_limits={"read": FAST, "write": per_key},
        workspace_limits={"read": FAST, "write": per_workspace},
    )
    write_catalog(catalog_rows(products))
    settings = load_settings(write_config(sandbox.url, writes=per_key, limiter="bucket"), env={})

    with Neighbour(sandbox.url, OTHER_KEY, per_second=2.0) as neighbour:
        code = run_once(settings)

    stats = sandbox.stats()
    ours = stats.rate_limited_by_key.get(KEY, {}).get("write", 0)
    assert neighbour.sent >= per_key, "the neighbour spent its key's budget"
    assert code == errors.EXIT_OK  # first run: rate limiting paced it, it did not fail it
    assert ours >= 1, "skuferry never met the neighbour's spending"
    assert too_early(sandbox, (KEY,), retry_after_s=1.0) == []  # bucket refills: 1 s waits
    assert_each_once(sandbox, catalog_keys(products))
    figures(
        f"neighbour at 2 writes/s after its burst, {products} products: exit {code}, "
        f"{ours} 429s ({ours / (products + ours):.1%} of writes), 0 sent before Retry-After"
    )


def test_a_gateway_with_a_small_burst_is_learnt(
    sandbox_factory: Callable[..., Sandbox],
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    figures: Callable[[str], None],
) -> None:
    # nginx-like: 10 writes/s with a burst of 10; skuferry is told 600/min, nothing of the burst
    products, per_minute, burst = 150, 600, 10
    sandbox = sandbox_factory(
        mode="bucket",
        burst=burst,
        updates="patch",
        key_limits={"read": FAST, "write": per_minute},
        workspace_limits={"read": FAST, "write": per_minute},
    )
    write_catalog(catalog_rows(products))
    config = write_config(sandbox.url, writes=per_minute)
    settings = load_settings(config, env={})

    assert run_once(settings) == errors.EXIT_OK

    stats = sandbox.stats()
    limited = stats.rate_limited.get("write", 0)
    assert 1 <= limited <= 8, f"{limited} 429s: the burst was not learnt after the first"
    assert too_early(sandbox, (KEY,), retry_after_s=1.0) == []
    assert_each_once(sandbox, catalog_keys(products))
    with sqlite3.connect(settings.state.path) as conn:
        (value,) = conn.execute(
            "SELECT value FROM meta WHERE name = 'budget.pace.write'"
        ).fetchone()
    conn.close()
    learnt = json.loads(value)
    # Persisted with the budgets, for the next run: half of what went out in the RECENT_S
    # before the first 429. The server refills 10 a second while they go, so a loaded box
    # that sends its burst slowly learns more than 10 (11 was seen), never more than half
    # of what the server can take in RECENT_S, and far below the 600 it was told.
    most = (burst + per_minute / 60 * RECENT_S) / 2
    assert 1 <= learnt["burst"] <= most, learnt
    shown = report.collect_status(settings)["keys"]["learnt_pace"]
    # `status` tells it, grown back by the time since (one request per BURST_GROW_S): on a
    # loaded machine that can be seconds, so the bound is the learnt burst plus that growth
    grown = learnt["burst"] + (time.time() - learnt["at"]) / BURST_GROW_S
    assert set(shown) == {"write"} and learnt["burst"] - 0.05 <= shown["write"]["burst"]
    assert shown["write"]["burst"] <= min(grown, per_minute) + 0.05
    plan = engine.run_once(settings, RunOptions(dry_run=True))
    assert any("pace learnt from the server's 429s" in note for note in plan.notes), plan.notes
    figures(
        f"gateway burst {burst} at 10/s told 600/min, {products} products: {limited} 429s "
        f"({limited / (products + limited):.1%}), learnt burst {learnt['burst']:.1f}"
    )


def test_a_new_user_with_three_keys_in_a_file(
    sandbox_factory: Callable[..., Sandbox],
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    cli: Cli,
    tmp_path: Path,
) -> None:
    """`plan` shows the workspace cap's ETA, `sync` fills it with 0 429s, no key anywhere."""
    products = 150  # within one minute of the workspace's 180 (the spec's defaults)
    sandbox = sandbox_factory(
        keys=dict.fromkeys(KEYS, WORKSPACE),
        mode="window",
        updates="patch",
        key_limits={"read": FAST, "write": 60},
        workspace_limits={"read": FAST, "write": 180},
    )
    write_catalog(catalog_rows(products))
    keys_file = tmp_path / "api_keys"
    keys_file.write_text("# the shop's keys\n" + "\n".join(KEYS) + "\n", encoding="utf-8")
    keys_file.chmod(0o600)
    config = write_config(sandbox.url, key=None, writes=60)
    add_line(config, "[api]", 'api_keys_file = "api_keys"')

    plan = cli.run("plan", "--config", str(config))
    sync = cli.run("-vv", "sync", "--config", str(config), "--json")
    status = cli.run("status", "--config", str(config))

    assert plan.returncode == 0, plan.stderr
    assert "at 180/min (3 keys of 60/min, workspace cap 180/min) ≈ 0 s" in plan.stdout
    assert sync.returncode == 0, sync.stderr
    stats = sandbox.stats()
    assert stats.rate_limited == {}
    assert_each_once(sandbox, catalog_keys(products))
    assert {k for k, v in stats.requests_by_key.items() if v.get("write")} == set(KEYS)
    output = "".join(r.stdout + r.stderr for r in (plan, sync, status))
    assert not any(key in output for key in KEYS)
    assert status.returncode == 0, status.stderr
    assert ", ".join(fingerprint(key) for key in KEYS) in status.stdout  # named, never shown


def test_check_tries_every_key_and_names_a_refused_one_by_fingerprint(
    sandbox_factory: Callable[..., Sandbox],
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    cli: Cli,
) -> None:
    sandbox = sandbox_factory(keys=dict.fromkeys(KEYS[:2], WORKSPACE))
    write_catalog(catalog_rows(3))
    config = write_config(sandbox.url, key=None)

    good = cli.run("check", "--config", str(config), env={"SKUFERRY_API_KEYS": ",".join(KEYS[:2])})
    revoked = cli.run(
        "check", "--config", str(config), env={"SKUFERRY_API_KEYS": ",".join(KEYS)}
    )  # the third is unknown

    assert good.returncode == 0, good.stderr
    assert "with each of 2 keys" in good.stdout
    assert revoked.returncode == errors.EXIT_UNAVAILABLE
    assert f"key {fingerprint(KEYS[2])}" in revoked.stderr
    assert not any(
        key in good.stdout + good.stderr + revoked.stdout + revoked.stderr for key in KEYS
    )


def test_sandbox_command_serves_a_small_burst(tmp_path: Path) -> None:
    """`skuferry sandbox --burst 5`: five writes at once, then 429 with Retry-After."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "skuferry",
            "sandbox",
            "--port",
            "0",
            "--burst",
            "5",
            "--key",
            KEYS[0],
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=tmp_path,
    )
    try:
        assert proc.stdout is not None
        first = next(line for line in proc.stdout if "sandbox CMS API at" in line)
        assert "mode bucket, burst 5" in first, first
        url = first.split(" at ", 1)[1].split()[0]
        headers = {"Authorization": f"Bearer {KEYS[0]}"}
        with httpx.Client(base_url=url, headers=headers, timeout=5) as client:
            answers = [client.post("/api/v1/content", json={"title": "x"}) for _ in range(8)]
        assert [a.status_code for a in answers].count(201) == 5
        assert answers[-1].status_code == 429 and answers[-1].headers["Retry-After"] == "1"
    finally:
        proc.terminate()
        proc.communicate(timeout=30)  # reaps it and closes the pipe
