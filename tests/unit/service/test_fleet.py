"""The fleet's pure parts: shards, the worst exit code, merged metrics, the held lock."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from skuferry import errors
from skuferry.config.schema import Settings
from skuferry.models import RunSummary
from skuferry.service import fleet, fleet_sync, metrics, workspaces
from skuferry.service.daemon import Daemon
from skuferry.service.metrics import RunOutcome
from skuferry.service.notify import Notifier
from skuferry.state import lock
from tests.fakes import wait_until
from tests.unit.service.test_daemon import FakeJob, make_settings

NAMES = st.lists(
    st.from_regex(r"[a-z0-9][a-z0-9_-]{0,20}", fullmatch=True), unique=True, max_size=60
)


@settings(max_examples=50, deadline=None)
@given(names=NAMES, count=st.integers(1, 9))
def test_the_shards_of_n_are_disjoint_and_cover_every_name(names: list[str], count: int) -> None:
    taken = [{n for n in names if workspaces.Shard(k, count).takes(n)} for k in range(count)]
    assert sum(len(t) for t in taken) == len(names)  # no name in two shards
    assert set().union(*taken) == set(names)


def test_a_shard_is_the_same_in_every_process() -> None:
    """sha256, not hash(): another interpreter (another PYTHONHASHSEED) agrees."""
    names = [f"shop-{i}" for i in range(40)]
    here = [workspaces.shard_of(n, 7) for n in names]
    code = (
        "from skuferry.service.workspaces import shard_of; "
        f"print([shard_of(n, 7) for n in {names!r}])"
    )
    there = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": "", "PYTHONPATH": ":".join(sys.path)},
    ).stdout
    assert there.strip() == str(here)
    assert len(set(here)) > 1  # the names spread over the shards


@pytest.mark.parametrize("text", ["2/2", "1", "a/b", "0/0", "-1/3"])
def test_a_bad_shard_is_a_usage_error(text: str) -> None:
    with pytest.raises(errors.UsageError, match="--shard"):
        workspaces.Shard.parse(text)


def test_the_workspaces_of_a_directory_are_its_toml_files_but_underscored_ones(
    tmp_path: Path,
) -> None:
    for name in ("acme.toml", "bolt.toml", "_fleet.toml", ".hidden.toml", "notes.txt"):
        (tmp_path / name).write_text("")
    assert list(workspaces.workspace_files(tmp_path)) == ["acme", "bolt"]


@pytest.mark.parametrize(
    ("codes", "worst"),
    [([], 0), ([0, 1, 0], 1), ([1, 75], 75), ([75, 3], 3), ([3, 2], 2), ([2, 130, 70], 130)],
)
def test_the_worst_exit_code_wins(codes: list[int], worst: int) -> None:
    assert fleet_sync.worst(codes) == worst


def test_one_exposition_of_every_workspace_has_one_family_each_and_every_label() -> None:
    """Each workspace's families are a collector; the registry renders them once, a family
    two workspaces share under one HELP and TYPE (a second TYPE line is invalid)."""
    outcome = RunOutcome(0, 1.0, 1_790_000_000.0, summary=RunSummary(created=2))
    parts = [
        metrics.families(
            {},
            outcome,
            {"synced": n},
            freshness=None,
            budget=None,
            labels={"workspace": name},
            dead_letters=None,
        )
        for name, n in (("acme", 5), ("bolt", 7))
    ]
    pool = metrics.pool_families(slots=4, running=1, waiting=2)
    text = metrics.exposition(*parts, pool)
    assert text.count("# TYPE skuferry_runs_total counter") == 1
    assert text.count("# HELP skuferry_products ") == 1
    families = {f.name: f for f in text_string_to_metric_families(text)}
    products = {s.labels["workspace"]: s.value for s in families["skuferry_products"].samples}
    assert products == {"acme": 5.0, "bolt": 7.0}
    runs = families["skuferry_runs"].samples
    assert {(s.labels["workspace"], s.labels["result"]) for s in runs if s.value} == {
        ("acme", "success"),
        ("bolt", "success"),
    }
    assert families["skuferry_runs_waiting"].samples[0].value == 2
    assert "workspace" not in families["skuferry_run_slots"].samples[0].labels


def test_a_held_lock_refuses_another_process_and_lets_the_holders_runs_through(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state.db"
    held = lock.hold(state)
    try:
        with lock.run_lock(state):  # the holder's own run
            pass
        probe = (
            "import sys; from pathlib import Path; from skuferry.state import lock\n"
            "try:\n"
            f"    with lock.run_lock(Path({str(state)!r})): sys.exit(0)\n"
            "except Exception as exc: print(type(exc).__name__); sys.exit(75)\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", probe], check=False, capture_output=True, text=True
        )
        assert (done.returncode, done.stdout.strip()) == (75, "LockHeld")
        with pytest.raises(errors.LockHeld):  # a second workspace of this process on it
            lock.hold(state)
    finally:
        held.release()
    assert not lock.held_here(state)
    done = subprocess.run(
        [sys.executable, "-c", probe], check=False, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout


def test_a_daemon_holds_its_state_from_start_to_shutdown_and_a_reload_moves_it(
    tmp_path: Path,
) -> None:
    first = make_settings(tmp_path, schedule={"interval_minutes": 60, "run_at_start": False})
    moved = first.model_copy(
        update={"state": first.state.model_copy(update={"path": tmp_path / "moved.db"})}
    )
    configs = [first, moved]
    daemon = Daemon(None, job=FakeJob(), load=lambda _p: configs.pop(0), notifier=Notifier(None))
    daemon.start()
    try:
        assert lock.held_here(first.state.path)
        assert daemon.reload()
        assert lock.held_here(moved.state.path)
        assert not lock.held_here(first.state.path)
    finally:
        daemon.shutdown()
    assert not lock.held_here(moved.state.path)


def test_the_fleet_runs_its_workspaces_through_its_pool_and_names_one_that_does_not_load(
    tmp_path: Path,
) -> None:
    """Every first run is due at start; two go at once (``max_runs``); the others are late,
    say so in /healthz and /metrics, and run when a slot frees."""
    names = ["a", "b", "c", "d"]
    for name in [*names, "broken"]:
        (tmp_path / f"{name}.toml").write_text("")

    def load(path: Path | None) -> Settings:
        assert path is not None
        if path.stem == "broken":
            raise errors.ConfigError([f"{path}: at 'api': missing"])
        folder = tmp_path / path.stem
        folder.mkdir(exist_ok=True)
        return make_settings(folder, schedule={"interval_minutes": 600})

    release = threading.Event()
    started: list[str] = []

    def held(
        *, stop: threading.Event | None, on_progress: object, settings: Settings
    ) -> RunSummary:
        started.append(settings.metrics.labels["workspace"])
        release.wait(30)
        return RunSummary()

    fleet_ = fleet.Fleet(tmp_path, HeldJob(held), load=load, notifier=Notifier(None), max_runs=2)
    fleet_.start()
    try:
        running = fleet_.running()
        assert sorted(running) == names
        assert running["a"].settings.metrics.labels == {"workspace": "a"}
        wait_until(lambda: fleet_.slots.waiting_count() == 2, "two runs waiting for a slot")
        assert len(started) == 2, "two at once"
        late = sorted(set(names) - set(started))
        status, health = fleet_.health()
        assert (status, health["failing"]) == (503, ["broken"])
        assert health["runs"] == {"slots": 2, "running": 2, "waiting": 2}
        assert health["late"] == late
        assert health["workspaces"][late[0]]["late"]["waiting_for_slot_s"] >= 0
        assert "late" not in health["workspaces"][started[0]]
        families = {f.name: f for f in text_string_to_metric_families(fleet_.metrics_text())}
        assert families["skuferry_runs_waiting"].samples[0].value == 2
        waiting = {
            s.labels["workspace"]: s.value for s in families["skuferry_run_waiting_seconds"].samples
        }
        assert waiting[started[0]] == 0 and waiting[late[0]] >= 0
        assert fleet_.liveness()[0] == 200, "a late run is no reason to restart"
        release.set()
        wait_until(lambda: sorted(started) == names, "every workspace's first run")
        wait_until(lambda: fleet_.slots.running() == 0, "the pool to empty")
        assert fleet_.health()[1]["late"] == []
    finally:
        release.set()
        fleet_.shutdown()


class HeldJob(FakeJob):
    """A fake job that hands its step the settings (which workspace runs)."""

    def __call__(self, settings: Settings, options: Any = None, **kw: Any) -> RunSummary:
        step = self.script[0]
        assert callable(step)
        self.calls.append({"settings": settings})
        return step(stop=kw.get("stop"), on_progress=kw.get("on_progress"), settings=settings)
