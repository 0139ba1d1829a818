"""The fleet's pure parts: shards, the worst exit code, merged metrics, the held lock."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from skuferry import errors
from skuferry.config.schema import Settings
from skuferry.service import fleet, fleet_sync, workspaces
from skuferry.service.daemon import Daemon
from skuferry.service.notify import Notifier
from skuferry.state import lock
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


def test_merged_metrics_have_one_family_each_and_every_workspace_label() -> None:
    one = (
        "# HELP skuferry_runs_total Runs.\n# TYPE skuferry_runs_total counter\n"
        'skuferry_runs_total{result="success",workspace="acme"} 2.0\n'
        "# HELP skuferry_products Products.\n# TYPE skuferry_products gauge\n"
        'skuferry_products{workspace="acme"} 5.0\n'
    )
    two = one.replace("acme", "bolt").replace("2.0", "3.0")
    text = fleet.merge_expositions([one, two]).decode()
    assert text.count("# TYPE skuferry_runs_total counter") == 1
    assert text.count("# HELP skuferry_products Products.") == 1
    families = {f.name: f for f in text_string_to_metric_families(text)}
    runs = {s.labels["workspace"]: s.value for s in families["skuferry_runs"].samples}
    assert runs == {"acme": 2.0, "bolt": 3.0}


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


def test_the_fleet_spreads_its_first_runs_and_names_a_workspace_that_does_not_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fleet, "STEP_S", 10.0)  # whole seconds: next_run() shows seconds
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

    fleet_ = fleet.Fleet(tmp_path, FakeJob(), load=load, notifier=Notifier(None))
    fleet_.start()
    try:
        running = fleet_.running()
        assert sorted(running) == names
        # in name order, 10 s apart ("broken" is the third file); "a" ran at once
        due = [datetime.fromisoformat(running[n].next_run() or "") for n in names[1:]]
        gaps = [(later - earlier).total_seconds() for earlier, later in pairwise(due)]
        assert 19 <= gaps[0] <= 21 and 9 <= gaps[1] <= 11, gaps  # next_run() in whole seconds
        assert running["a"].settings.metrics.labels == {"workspace": "a"}
        status, health = fleet_.health()
        assert (status, health["failing"]) == (503, ["broken"])
        assert fleet_.liveness()[0] == 200
    finally:
        fleet_.shutdown()
