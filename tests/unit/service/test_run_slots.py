"""The fleet's pool of runs: at most N at once, the others late in order, urgent ones
first, a stop while waiting lets the waiter go; and the daemon's side of it: a run of
pushed keys takes no slot, a run asked for goes before the scheduled ones."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from skuferry.models import RunSummary
from skuferry.service import run_slots
from skuferry.service.daemon import Daemon
from skuferry.service.notify import Notifier
from skuferry.service.run_slots import RunSlots, default_size, usable_cores
from tests.fakes import wait_until
from tests.unit.service.test_daemon import make_settings


class Runner:
    """Threads that each take a slot of ``slots`` and hold it until released."""

    def __init__(self, slots: RunSlots) -> None:
        self.slots = slots
        self.order: list[str] = []
        self.waited: dict[str, float | None] = {}
        self.release: dict[str, threading.Event] = {}
        self.threads: list[threading.Thread] = []
        self.stop = threading.Event()

    def start(self, name: str, urgent: Callable[[], bool] = lambda: False) -> None:
        self.release[name] = threading.Event()

        def run() -> None:
            with self.slots.slot(name, stop=self.stop, urgent=urgent) as waited:
                self.waited[name] = waited
                if waited is None:
                    return
                self.order.append(name)
                self.release[name].wait(10)

        thread = threading.Thread(target=run, name=name)
        self.threads.append(thread)
        thread.start()

    def join(self) -> None:
        for event in self.release.values():
            event.set()
        for thread in self.threads:
            thread.join(10)


def seen(runner: Runner, name: str) -> bool:
    return name in runner.order or name in runner.slots.waiting()


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> Iterator[Runner]:
    # An hour's backstop: a waiter goes on its grant or its wake alone, never on a clock.
    monkeypatch.setattr(run_slots, "STOP_LOOK_S", 3600.0)
    found = Runner(RunSlots(2))
    yield found
    found.join()


def test_at_most_n_run_at_once_and_the_others_go_in_their_order(runner: Runner) -> None:
    for name in ("a", "b", "c", "d"):
        runner.start(name)
        wait_until(partial(seen, runner, name), f"{name} running or waiting")
    assert runner.order == ["a", "b"]
    assert list(runner.slots.waiting()) == ["c", "d"], "longest waiting first"
    assert runner.slots.running() == 2
    runner.release["b"].set()
    wait_until(lambda: runner.order == ["a", "b", "c"], "c takes b's slot")
    runner.release["a"].set()
    wait_until(lambda: runner.order == ["a", "b", "c", "d"], "then d")
    assert runner.slots.waiting() == {}
    assert runner.waited["a"] == pytest.approx(0, abs=0.5)
    assert runner.waited["d"] is not None and runner.waited["d"] > 0


def test_an_urgent_waiter_goes_first(runner: Runner) -> None:
    asked = threading.Event()
    for name in ("a", "b", "c"):
        runner.start(name)
        wait_until(partial(seen, runner, name), f"{name} running or waiting")
    runner.start("hooked", urgent=asked.is_set)
    wait_until(lambda: list(runner.slots.waiting()) == ["c", "hooked"], "c, then hooked")
    asked.set()  # a hook asked for hooked's run while it waited
    runner.release["a"].set()
    wait_until(lambda: len(runner.order) == 3, "a slot handed on")
    assert runner.order[2] == "hooked", "before c, which waited longer"


def test_a_stop_while_waiting_lets_the_waiter_go_and_keeps_the_line(runner: Runner) -> None:
    for name in ("a", "b", "c"):
        runner.start(name)
    wait_until(lambda: "c" in runner.slots.waiting(), "c waiting")
    runner.stop.set()
    runner.slots.wake("c")  # c's daemon stops: it wakes its waiting run
    wait_until(lambda: "c" in runner.waited, "c to give up")
    assert runner.waited["c"] is None, "no run: the daemon stopped"
    assert runner.slots.waiting() == {}
    assert runner.slots.running() == 2, "the runs holding slots end as their own stop says"


def test_the_default_is_twice_the_cores() -> None:
    assert default_size(2) == 4
    assert default_size(1) == 2
    assert default_size(16) == 32


@pytest.mark.parametrize(
    ("cpu_max", "cores"),
    [("max 100000", None), ("200000 100000", 2), ("50000 100000", 1), ("150000 100000", 2)],
)
def test_the_cores_are_the_container_s_quota_when_it_has_one(
    tmp_path: Path, cpu_max: str, cores: int | None
) -> None:
    """A pod limited to 2 CPUs on a 64-core node runs 4 at once, not 128."""
    found = tmp_path / "cpu.max"
    found.write_text(cpu_max + "\n")
    mine = usable_cores(tmp_path / "none")  # no cgroup file: the cores it may run on
    assert usable_cores(found) == (mine if cores is None else min(mine, cores))


def test_a_pool_needs_a_slot() -> None:
    with pytest.raises(ValueError, match="at least one"):
        RunSlots(0)


def test_a_late_daemon_runs_pushed_keys_at_once_and_its_full_run_when_a_slot_frees(
    tmp_path: Path,
) -> None:
    """A targeted run takes no slot; the late full run still runs, never skipped."""
    slots = RunSlots(1)
    hold = threading.Event()
    calls: list[tuple[str, tuple[str, ...] | None]] = []

    def job(settings: Any, options: Any = None, **_kw: Any) -> RunSummary:
        calls.append((settings.metrics.labels.get("workspace", "?"), options.only))
        if settings.state.path.parent.name == "busy":
            hold.wait(20)
        return RunSummary()

    def labelled(name: str) -> Any:
        def load(_p: Path | None) -> Any:
            base = make_settings(tmp_path / name, schedule={"interval_minutes": 600})
            metrics = base.metrics.model_copy(update={"labels": {"workspace": name}})
            return base.model_copy(update={"metrics": metrics})

        return load

    daemons = []
    try:
        for name in ("busy", "late"):
            (tmp_path / name).mkdir()
            daemon = Daemon(
                None,
                job=job,
                load=labelled(name),
                notifier=Notifier(None),
                idle_tick_s=0.05,
                name=name,
                slots=slots,
            )
            daemon.start()
            threading.Thread(target=daemon.serve_forever, daemon=True).start()
            daemons.append(daemon)
            if name == "busy":
                wait_until(lambda: slots.running() == 1, "busy's first run in its slot")
        late = daemons[1]
        wait_until(lambda: late.waiting_for_slot_s() is not None, "late's first run waiting")
        assert late.board.health()[1]["late"]["waiting_for_slot_s"] >= 0
        late.push_keys(["K-1"])  # a hook: sent now, without a slot
        wait_until(lambda: ("late", ("K-1",)) in calls, "the targeted run")
        assert late.waiting_for_slot_s() is not None, "the full run still waits"
        hold.set()
        wait_until(lambda: ("late", None) in calls, "late's full run once busy's ended")
        assert late.waiting_for_slot_s() is None
        assert "late" not in late.board.health()[1]
    finally:
        hold.set()
        for daemon in daemons:
            daemon.request_stop()


def test_a_fire_time_that_meets_a_waiting_run_is_logged_late_not_skipped(
    tmp_path: Path,
) -> None:
    slots = RunSlots(1)
    stop = threading.Event()
    held = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with slots.slot("other", stop=stop):
            held.set()
            release.wait(20)

    threading.Thread(target=holder, daemon=True).start()
    held.wait(5)
    daemon = Daemon(
        None,
        job=lambda *_a, **_k: RunSummary(),
        load=lambda _p: make_settings(tmp_path),
        notifier=Notifier(None),
        interval_s=0.05,
        idle_tick_s=0.05,
        name="late",
        slots=slots,
    )
    with capture_logs() as logged:
        daemon.start()
        threading.Thread(target=daemon.serve_forever, daemon=True).start()
        try:
            wait_until(
                lambda: any(e["event"] == "daemon.run.late" for e in logged),
                "a fire time while the run due waits",
            )
            assert not any(e["event"] == "daemon.run.overlap_skipped" for e in logged)
            release.set()
            wait_until(
                lambda: any(e["event"] == "daemon.run.finished" for e in logged), "the late run"
            )
        finally:
            release.set()
            daemon.request_stop()


def test_a_daemon_that_stops_wakes_its_run_waiting_for_a_slot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 41: a run waiting for a slot no longer looks at its stop twice a second (a
    fleet may have hundreds waiting); the daemon's shutdown wakes it, and it gives up."""
    monkeypatch.setattr(run_slots, "STOP_LOOK_S", 3600.0)
    slots = RunSlots(1)
    stop, held, release = threading.Event(), threading.Event(), threading.Event()

    def holder() -> None:
        with slots.slot("other", stop=stop):
            held.set()
            release.wait(30)

    threading.Thread(target=holder, daemon=True).start()
    assert held.wait(5)
    daemon = Daemon(
        None,
        job=lambda *_a, **_k: RunSummary(),
        load=lambda _p: make_settings(tmp_path),
        notifier=Notifier(None),
        idle_tick_s=0.05,
        name="late",
        slots=slots,
        stop_timeout_s=3600.0,  # the shutdown waits for the waiting run: only a wake ends it
    )
    daemon.start()
    serving = threading.Thread(target=daemon.serve_forever, daemon=True)
    serving.start()
    try:
        wait_until(lambda: "late" in slots.waiting(), "late's first run waiting for a slot")
        daemon.request_stop()
        wait_until(lambda: "late" not in slots.waiting(), "the waiting run gave up")
        serving.join(20)
        assert not serving.is_alive(), "the daemon stopped"
        assert slots.running() == 1, "the holder's slot is its own"
    finally:
        release.set()
        stop.set()
