"""The engine's guarantees against the real sandbox over loopback HTTP, under faults.

Every test judges skuferry by the sandbox's own records (products per key,
duplicates, 429s, early retries, write times), never by skuferry's summary alone.
Limits are raised and catalogs small except where a test needs a budget to bind.
"""

from __future__ import annotations

import json
import random
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from skuferry import errors
from skuferry.config.load import load_settings
from skuferry.config.schema import Settings
from skuferry.remote.budget import Budget
from skuferry.remote.client import RemoteClient
from skuferry.sandbox import Faults, Sandbox
from skuferry.state.budgetbook import BudgetBook
from skuferry.state.mirror import Mirror
from skuferry.state.schema import open_state
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
    closed_port_url,
)

pytestmark = [pytest.mark.integration, pytest.mark.reliability]

MAX_RUNS = 4
OTHER_KEY = "sk-other-tenant"


def settings_for(config: Path) -> Settings:
    return load_settings(config, env={})


def sync_until_clean(settings: Settings, *, max_runs: int = MAX_RUNS) -> list[int]:
    """In-process ``skuferry sync`` until exit 0; the exit codes of the runs made."""
    codes: list[int] = []
    for _ in range(max_runs):
        try:
            code = engine.run_once(settings).exit_code
        except errors.SkuferryError as exc:
            code = exc.exit_code
        codes.append(code)
        if code == errors.EXIT_OK:
            break
    return codes


def open_intents(state: Path) -> list[tuple[str, str]]:
    mirror = Mirror(state, readonly=True)
    try:
        return mirror.open_intents()
    finally:
        mirror.close()


def state_path(config: Path) -> Path:
    return config.parent / "state" / "skuferry.db"


# -- 1. faults on a share of writes -------------------------------------------------------


@dataclass(frozen=True)
class FaultCase:
    name: str
    faults: Faults
    products: int
    seed: int


MIXED = Faults(
    drop_after_commit=0.04,
    error_after_commit=0.04,
    error_before_commit=0.04,
    reset=0.04,
    slow_after_commit=0.04,
    slow_s=2.0,
)
FAULT_CASES = [
    FaultCase("drop_after_commit", Faults(drop_after_commit=0.2), 150, 11),
    FaultCase("error_after_commit", Faults(error_after_commit=0.15), 150, 12),
    FaultCase("error_before_commit", Faults(error_before_commit=0.15), 150, 13),
    FaultCase("reset", Faults(reset=0.15), 150, 14),
    # The client's timeout is 1 s and the answer comes after 2 s: the product is stored.
    FaultCase("slow_after_commit", Faults(slow_after_commit=0.1, slow_s=2.0), 80, 15),
    FaultCase("mixed", MIXED, 150, 16),
]


def _fault_kinds(faults: Faults) -> set[str]:
    return {
        k
        for k in (
            "drop_after_commit",
            "error_after_commit",
            "error_before_commit",
            "reset",
            "slow_after_commit",
        )
        if getattr(faults, k)
    }


@pytest.mark.parametrize("case", FAULT_CASES, ids=lambda c: c.name)
def test_faulty_writes_converge_to_each_product_exactly_once(
    case: FaultCase,
    sandbox_factory: Callable[..., Sandbox],
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    figures: Callable[[str], None],
) -> None:
    sandbox = sandbox_factory(faults=case.faults, seed=case.seed, updates="patch")
    write_catalog(catalog_rows(case.products))
    config = write_config(sandbox.url, timeout_s=1.0)
    settings = settings_for(config)

    codes = sync_until_clean(settings)

    stats = sandbox.stats()
    injected = sum(stats.faults.values())
    assert set(stats.faults) == _fault_kinds(case.faults), "every configured fault was injected"
    assert injected >= case.products * 0.05
    assert codes[-1] == errors.EXIT_OK, f"no clean run in {MAX_RUNS}: exit codes {codes}"
    assert_each_once(sandbox, catalog_keys(case.products))
    assert open_intents(state_path(config)) == []
    rate = sum(getattr(case.faults, k) for k in _fault_kinds(case.faults))
    figures(
        f"faults {case.name:<20} rate {rate:.0%} "
        f"products {case.products}: {injected} faults injected {stats.faults}, "
        f"runs to converge {len(codes)} (exit codes {codes}), duplicates 0, missing 0"
    )

    # Converged means converged: another run with the faults still on writes nothing.
    writes_before = stats.requests_by_key[KEY].get("write", 0)
    assert sync_until_clean(settings, max_runs=1) == [errors.EXIT_OK]
    assert sandbox.stats().requests_by_key[KEY].get("write", 0) == writes_before


def test_faulty_writes_converge_when_run_as_a_subprocess(
    sandbox_factory: Callable[..., Sandbox],
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    run_cli: Callable[..., subprocess.CompletedProcess[str]],
    figures: Callable[[str], None],
) -> None:
    sandbox = sandbox_factory(faults=MIXED, seed=21, updates="patch")
    write_catalog(catalog_rows(150))
    config = write_config(sandbox.url, timeout_s=1.0)

    codes: list[int] = []
    summaries: list[dict[str, Any]] = []
    for _ in range(MAX_RUNS):
        result = run_cli("sync", "--json", "--config", str(config))
        assert "Traceback" not in result.stderr
        codes.append(result.returncode)
        summaries.append(json.loads(result.stdout.strip().splitlines()[-1]))
        if result.returncode == 0:
            break

    assert codes[-1] == 0, f"exit codes {codes}; last stderr tail: {result.stderr[-2000:]}"
    assert sum(sandbox.stats().faults.values()) > 0
    assert_each_once(sandbox, catalog_keys(150))
    # skuferry's own accounting agrees with the sandbox's: one create or adoption per product
    assert sum(s["created"] + s["adopted"] for s in summaries) >= 150
    figures(
        f"faults mixed (subprocess)        rate 20% products 150: runs to converge "
        f"{len(codes)} (exit codes {codes}), faults {sandbox.stats().faults}, duplicates 0"
    )


# -- 2. kill -9 mid-run ----------------------------------------------------------------------


def wait_for_writes(sandbox: Sandbox, proc: subprocess.Popen[bytes], above: int) -> bool:
    """Until the sandbox has committed more than ``above`` writes, or the process ended."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if sandbox.stats().writes_committed > above:
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.005)
    raise AssertionError("the sync subprocess made no write within 60 s")


def kill_mid_write(
    sandbox: Sandbox,
    start: Callable[[], subprocess.Popen[bytes]],
    rng: random.Random,
    *,
    max_delay_s: float = 0.5,
) -> bool:
    """Start a sync, let it write for a seeded random moment, then SIGKILL it.

    True when the kill landed while the run was still going.
    """
    before = sandbox.stats().writes_committed
    proc = start()
    writing = wait_for_writes(sandbox, proc, before)
    if writing:
        time.sleep(rng.uniform(0.0, max_delay_s))
        proc.kill()  # SIGKILL: no handler, no cleanup, no flush
    code = proc.wait(timeout=60)
    return code == -9


def test_kill_9_at_random_moments_then_a_full_run_leaves_no_duplicate_and_no_gap(
    sandbox_factory: Callable[..., Sandbox],
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    cli: Cli,
    figures: Callable[[str], None],
) -> None:
    products = 300
    # 40 ms per answer and 4 in flight: ~100 writes/s, so a run lasts long enough to be cut.
    sandbox = sandbox_factory(latency_s=0.04, updates="patch")
    write_catalog(catalog_rows(products))
    config = write_config(sandbox.url)
    rng = random.Random(4242)

    kills, with_intents = 0, 0
    for _ in range(5):
        if kill_mid_write(sandbox, lambda: cli.start("sync", "--config", str(config)), rng):
            kills += 1
            with_intents += bool(open_intents(state_path(config)))
    landed = sandbox.stats().writes_committed

    assert kills >= 4, f"only {kills} of 5 kills landed mid-run"
    assert with_intents >= 1, "no kill left an open intent: the journal was never put to the test"
    assert 0 < landed < products, "the kills must leave work for the final run"
    final = cli.run("sync", "--json", "--config", str(config))
    assert final.returncode == 0, final.stderr[-2000:]
    assert_each_once(sandbox, catalog_keys(products))
    assert open_intents(state_path(config)) == []
    summary = json.loads(final.stdout.strip().splitlines()[-1])
    figures(
        f"kill -9: {kills} kills mid-write ({with_intents} with open intents), "
        f"{landed} of {products} products written before the final run, final run created "
        f"{summary['created']} adopted {summary['adopted']}; duplicates 0, missing 0"
    )


# -- 3. someone else spends the workspace's write budget --------------------------------------


@pytest.fixture
def hog() -> Iterator[Callable[[Sandbox, int], None]]:
    """Start a second key of the same workspace POSTing content until skuferry has had N 429s."""
    threads: list[threading.Thread] = []
    stop = threading.Event()

    def start(sandbox: Sandbox, until_429s: int) -> None:
        started = threading.Event()

        def spend() -> None:
            pace = 0.125  # ~8 writes/s after its burst: most of the workspace's 12/s
            with httpx.Client(
                base_url=sandbox.url, timeout=5.0, headers={"Authorization": f"Bearer {OTHER_KEY}"}
            ) as client:
                while not stop.is_set():
                    limited = sandbox.stats().rate_limited_by_key.get(KEY, {}).get("write", 0)
                    if limited >= until_429s:
                        return
                    reply = client.post("/api/v1/content", json={"title": "campaign copy"})
                    if reply.status_code == 429:
                        started.set()  # its own bucket is empty: the burst is over
                        stop.wait(0.05)
                    elif started.is_set():
                        stop.wait(pace)

        thread = threading.Thread(target=spend, name="other-tenant", daemon=True)
        threads.append(thread)
        thread.start()
        assert started.wait(30), "the other key never spent its budget"

    yield start
    stop.set()
    for thread in threads:
        thread.join(10)


def test_a_second_key_spending_the_budget_gets_skuferry_429s_it_obeys(
    sandbox_factory: Callable[..., Sandbox],
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    hog: Callable[[Sandbox, int], None],
    figures: Callable[[str], None],
) -> None:
    products, per_key, per_workspace, max_in_flight = 200, 600, 720, 4
    # Bucket mode: the workspace refills 12/s, so every Retry-After is 1 s and the test is short.
    sandbox = sandbox_factory(
        keys={KEY: WORKSPACE, OTHER_KEY: WORKSPACE},
        mode="bucket",
        updates="patch",
        key_limits={"read": FAST, "write": per_key},
        workspace_limits={"read": FAST, "write": per_workspace},
    )
    write_catalog(catalog_rows(products))
    config = write_config(
        sandbox.url, writes=per_key, limiter="bucket", max_in_flight=max_in_flight
    )
    hog(sandbox, 3)  # the other key has spent its burst: the workspace has ~120 writes left

    codes = sync_until_clean(settings_for(config), max_runs=1)

    stats = sandbox.stats()
    ours = stats.rate_limited_by_key.get(KEY, {}).get("write", 0)
    assert ours >= 1, "skuferry never met the other key's spending"
    assert stats.requests_by_key[OTHER_KEY]["write"] > per_key, "the other key spent the budget"
    retry_after_s = 1.0  # refill of 12/s (workspace) and 10/s (key): always under a second
    early = [e for e in stats.early_retries if e.key == KEY]
    # A request already on the wire when the 429 was answered reaches the server within a
    # loopback round trip of it; it was not a retry. Anything later is sending too early.
    in_flight_grace_s = 0.05
    too_early = [e for e in early if retry_after_s - e.early_by_s > in_flight_grace_s]
    assert too_early == [], f"{len(too_early)} sent before Retry-After passed: {too_early[:5]}"
    assert len(early) <= (max_in_flight - 1) * ours
    assert codes == [errors.EXIT_OK]
    assert_each_once(sandbox, catalog_keys(products))
    figures(
        f"second key spending the budget: skuferry got {ours} 429s, "
        f"{len(too_early)} requests before Retry-After ({len(early)} already in flight "
        f"when a 429 was sent), finished with exit {codes[-1]}, duplicates 0"
    )


# -- 4. skuferry alone with the budget: zero 429s, both readings --------------------------------


def test_alone_with_a_token_bucket_budget_skuferry_never_trips_it(
    sandbox_factory: Callable[..., Sandbox],
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    figures: Callable[[str], None],
) -> None:
    per_minute, products = 120, 140  # 20 more than the bucket holds: the refill rate binds
    sandbox = sandbox_factory(
        mode="bucket",
        updates="patch",
        key_limits={"read": FAST, "write": per_minute},
        workspace_limits={"read": FAST, "write": per_minute},
    )
    write_catalog(catalog_rows(products))
    config = write_config(
        sandbox.url, writes=per_minute, limiter="bucket", clock_skew_s=LOADED_SKEW_S
    )

    codes = sync_until_clean(settings_for(config), max_runs=1)

    stats = sandbox.stats()
    assert stats.rate_limited == {}, f"429s: {stats.rate_limited}"
    assert stats.responses.get(429, 0) == 0
    assert codes == [errors.EXIT_OK]
    assert_each_once(sandbox, catalog_keys(products))
    figures(
        f"alone, bucket {per_minute}/min, {products} products: 0 429s, "
        f"writes spread over {stats.write_times[-1] - stats.write_times[0]:.1f} s"
    )


class SimulatedClock:
    """Loopback time with waits that jump ahead instead of sleeping, shared by both sides."""

    def __init__(self) -> None:
        self._offset = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return time.monotonic() + self._offset + 1_000_000.0

    def wait(self, seconds: float, stop: threading.Event | None) -> None:
        with self._lock:
            self._offset += max(0.0, seconds)


def test_alone_with_a_fixed_window_budget_skuferry_never_trips_it_in_simulated_time(
    sandbox_factory: Callable[..., Sandbox],
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    figures: Callable[[str], None],
) -> None:
    """The window limiter against 1-minute windows, a minute of waiting made instant.

    Server and client read one simulated clock, so what the server counts per window
    is exactly what the client planned; one writer thread keeps the waits sequential.
    """
    per_minute, products = 120, 260  # three windows' worth
    clock = SimulatedClock()
    sandbox = sandbox_factory(
        mode="window",
        updates="patch",
        clock=clock,
        key_limits={"read": FAST, "write": per_minute},
        workspace_limits={"read": FAST, "write": per_minute},
    )
    write_catalog(catalog_rows(products))
    config = write_config(
        sandbox.url, writes=per_minute, max_in_flight=1, clock_skew_s=LOADED_SKEW_S
    )
    settings = settings_for(config)
    budget = Budget.from_settings(
        settings.budget,
        BudgetBook(lambda: open_state(settings.state.path)),
        clock=clock,
        wait=clock.wait,
    )
    with budget, RemoteClient.from_settings(settings, stop=None, budget=budget) as client:
        summary = engine.run_once(settings, adapters=engine.Adapters(client=client))

    stats = sandbox.stats()
    assert stats.rate_limited == {}, f"429s: {stats.rate_limited}"
    assert summary.exit_code == errors.EXIT_OK
    assert_each_once(sandbox, catalog_keys(products))
    windows = {int(t // 60) for t in stats.write_times}
    assert len(windows) >= 3, "the budget bound: the writes needed three windows"
    figures(
        f"alone, window {per_minute}/min, {products} products (simulated time): 0 429s, "
        f"writes in {len(windows)} windows over {stats.write_times[-1]:.0f} simulated s"
    )


@pytest.mark.slow
def test_alone_with_a_fixed_window_budget_skuferry_never_trips_it_in_real_time(
    sandbox_factory: Callable[..., Sandbox],
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    figures: Callable[[str], None],
) -> None:
    """The default limiter against 1-minute windows: one real minute of waiting (~62 s)."""
    per_minute, products = 120, 140
    sandbox = sandbox_factory(
        mode="window",
        updates="patch",
        key_limits={"read": FAST, "write": per_minute},
        workspace_limits={"read": FAST, "write": per_minute},
    )
    write_catalog(catalog_rows(products))
    config = write_config(sandbox.url, writes=per_minute, clock_skew_s=LOADED_SKEW_S)

    codes = sync_until_clean(settings_for(config), max_runs=1)

    stats = sandbox.stats()
    assert stats.rate_limited == {}, f"429s: {stats.rate_limited}"
    assert codes == [errors.EXIT_OK]
    assert_each_once(sandbox, catalog_keys(products))
    figures(
        f"alone, window {per_minute}/min, {products} products (real time): 0 429s, "
        f"writes spread over {stats.write_times[-1] - stats.write_times[0]:.1f} s"
    )


# -- 5. bad key, unreachable, garbage: clear error, exit 3, state intact ------------------------


def _mirror_view(state: Path) -> tuple[list[tuple[str, str]], dict[str, int]]:
    mirror = Mirror(state, readonly=True)
    try:
        return mirror.open_intents(), mirror.counts_by_state()
    finally:
        mirror.close()


@pytest.mark.parametrize("failure", ["bad_key", "unreachable", "html", "garbage_json"])
def test_a_failed_run_says_why_exits_3_and_the_next_good_run_resolves_everything(
    failure: str,
    sandbox_factory: Callable[..., Sandbox],
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    cli: Cli,
) -> None:
    products = 200
    sandbox = sandbox_factory(latency_s=0.04, updates="patch")
    write_catalog(catalog_rows(products))
    good = write_config(sandbox.url, max_retries=1)
    state = state_path(good)
    # A run killed mid-write leaves open intents: the failing run must not disturb them.
    rng = random.Random(99)
    for _ in range(3):
        kill_mid_write(
            sandbox, lambda: cli.start("sync", "--config", str(good)), rng, max_delay_s=0.3
        )
        if open_intents(state):
            break
    before = _mirror_view(state)
    assert before[0], "setup: a killed run left open intents"
    committed = sandbox.stats().writes_committed

    url = sandbox.url
    if failure == "bad_key":
        bad = write_config(sandbox.url, key="sk-revoked-key-0000", name="bad.toml")
    elif failure == "unreachable":
        url = closed_port_url()
        bad = write_config(url, name="bad.toml", max_retries=1)
    else:
        sandbox.set_faults(Faults(garbage="html" if failure == "html" else "json"))
        bad = write_config(sandbox.url, name="bad.toml", max_retries=1)
    result = cli.run("sync", "--config", str(bad))

    assert result.returncode == 3, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith("skuferry: ")
    expected = {
        "bad_key": ["API key was refused", "401"],
        "unreachable": ["could not be reached", url],
        "html": ["502", "<!DOCTYPE html>"],
        "garbage_json": ["not JSON", '{"data"'],
    }[failure]
    for part in expected:
        assert part in message, message
    assert _mirror_view(state) == before, "the failed run changed the state"
    assert sandbox.stats().writes_committed == committed, "the failed run wrote to the remote"

    sandbox.set_faults(Faults())
    final = cli.run("sync", "--json", "--config", str(good))
    assert final.returncode == 0, final.stderr[-2000:]
    assert_each_once(sandbox, catalog_keys(products))
    assert open_intents(state) == []
