"""Runs triggered by a new export: one quiet version of the file, one call, one run.

The quiet time is measured on a ``FakeClock`` that only the test moves: the file
changes in real time (inotify or polling see it), but "it stayed put for quiet_s"
happens only when the test says so. A slow writer on a loaded machine can then never
look finished too early, and a wrong second call has every chance to show up.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from skuferry.models import RunSummary
from skuferry.service.daemon import Daemon
from skuferry.service.watch import FileWatch
from tests.fakes import FakeClock
from tests.unit.service.test_daemon import FakeJob, make_settings, started

__all__ = ["started"]  # the daemon fixture, shared with test_daemon.py

QUIET_S = 0.4  # on the fake clock
HEADER = "sku,name,price\n"
LOOK_S = 0.3  # real time for the watcher to look at the file (a few of its steps)


def replace_atomically(path: Path, text: str) -> None:
    """What an ERP export does: write a temporary file beside it, then rename it over."""
    tmp = path.with_name(f".{path.name}.part")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def rows(n: int, version: int = 0) -> str:
    return HEADER + "".join(f"W-{i:03d},Wall plug {i},0.{i + version:02d}\n" for i in range(n))


class Calls:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.sizes: list[int] = []
        self.lock = threading.Lock()

    def __call__(self) -> None:
        with self.lock:
            self.sizes.append(self.path.stat().st_size)


@pytest.fixture(params=[False, True], ids=["inotify", "polling"])
def watch(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> Iterator[tuple[FileWatch, Calls]]:
    path = tmp_path / "products.csv"
    path.write_text(rows(3), encoding="utf-8")
    calls = Calls(path)
    watcher = FileWatch(
        path, calls, quiet_s=QUIET_S, poll_s=0.05, force_polling=request.param, clock=clock
    ).start()
    yield watcher, calls
    watcher.stop()


def let_time_pass(clock: FakeClock, until: Callable[[], bool], what: str) -> None:
    """Move the fake clock a quiet time at a go, looking in between, until ``until`` holds."""
    deadline = time.monotonic() + 15.0  # only a guard against a hang
    while not until():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        clock.now += QUIET_S
        time.sleep(0.05)


def nothing_more(clock: FakeClock, quiet_times: int = 3) -> None:
    """Give a wrong extra call every chance: several quiet times, each looked at."""
    for _ in range(quiet_times):
        clock.now += QUIET_S
        time.sleep(LOOK_S)


def test_an_atomic_replace_triggers_exactly_one_call(
    watch: tuple[FileWatch, Calls], clock: FakeClock
) -> None:
    watcher, calls = watch
    replace_atomically(watcher.path, rows(50, version=1))
    time.sleep(LOOK_S)
    assert calls.sizes == [], "no call before the file has gone quiet"
    let_time_pass(clock, lambda: len(calls.sizes) >= 1, "the call")
    nothing_more(clock)
    assert calls.sizes == [watcher.path.stat().st_size]


def test_a_slow_append_triggers_one_call_once_the_file_is_complete(
    watch: tuple[FileWatch, Calls], clock: FakeClock
) -> None:
    watcher, calls = watch
    with watcher.path.open("a", encoding="utf-8") as out:
        for i in range(5):  # a new chunk every half quiet time: never quiet in between
            out.write(f"X-{i:03d},Toggle bolt {i},1.{i:02d}\n")
            out.flush()
            time.sleep(LOOK_S)  # the watcher sees this chunk, and then sees it unchanged
            clock.now += QUIET_S / 2
    final = watcher.path.stat().st_size
    assert calls.sizes == [], "no call while the file keeps growing"
    let_time_pass(clock, lambda: len(calls.sizes) >= 1, "the call")
    nothing_more(clock)
    assert calls.sizes == [final], "one call, and only after the last chunk"


def test_an_unchanged_file_and_other_files_trigger_nothing(
    watch: tuple[FileWatch, Calls], clock: FakeClock
) -> None:
    watcher, calls = watch
    (watcher.path.parent / "state.db").write_bytes(b"x" * 100)  # the state beside the export
    os.utime(watcher.path.parent / "state.db")
    nothing_more(clock)
    assert calls.sizes == []


def test_a_file_that_appears_later_is_picked_up(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "later.csv"
    calls = Calls(path)
    watcher = FileWatch(path, calls, quiet_s=QUIET_S, poll_s=0.05, clock=clock).start()
    try:
        replace_atomically(path, rows(2))
        let_time_pass(clock, lambda: len(calls.sizes) == 1, "the call")
    finally:
        watcher.stop()


def append_slowly(path: Path, text: str, clock: FakeClock) -> None:
    """What a slow ERP export does: the file grows in chunks, closer than the quiet time apart."""
    with path.open("a", encoding="utf-8") as out:
        for line in text.splitlines(keepends=True):
            out.write(line)
            out.flush()
            time.sleep(0.02)
            clock.now += QUIET_S / 4


def replace_at_once(path: Path, text: str, _clock: FakeClock) -> None:
    replace_atomically(path, text)


@pytest.mark.parametrize("export_by", [replace_at_once, append_slowly])
def test_the_daemon_runs_once_per_new_export_besides_the_schedule(
    tmp_path: Path,
    clock: FakeClock,
    started: Callable[..., tuple[Daemon, Any, dict[str, int]]],
    export_by: Callable[[Path, str, FakeClock], None],
) -> None:
    export = tmp_path / "products.csv"
    export.write_text(rows(3), encoding="utf-8")
    settings = make_settings(
        tmp_path, schedule={"watch": True, "watch_settle_s": QUIET_S, "run_at_start": False}
    )
    lines_seen: list[int] = []

    def run(**_kw: Any) -> RunSummary:
        lines_seen.append(len(export.read_text(encoding="utf-8").splitlines()))
        return RunSummary()

    job = FakeJob(run)
    daemon, _, _ = started(settings, job, interval_s=3600, clock=clock)
    nothing_more(clock, quiet_times=1)
    assert job.calls == []
    export_by(
        export,
        rows(12, version=2)[len(HEADER) :] if export_by is append_slowly else rows(12),
        clock,
    )
    let_time_pass(
        clock, lambda: len(job.calls) == 1 and not daemon.run_in_flight, "the triggered run"
    )
    nothing_more(clock)
    assert len(job.calls) == 1
    assert lines_seen == [len(export.read_text(encoding="utf-8").splitlines())], "the whole file"
    assert daemon.next_run() is not None, "the schedule goes on"


def test_watch_needs_a_local_file_source(tmp_path: Path) -> None:
    from skuferry.config.load import settings_from_dict
    from skuferry.errors import ConfigError

    with pytest.raises(ConfigError, match=r"schedule\.watch"):
        settings_from_dict(
            {
                "api": {"base_url": "http://127.0.0.1:9", "api_key": "k"},
                "source": {"type": "http", "url": "http://127.0.0.1:9/products"},
                "schedule": {"watch": True},
                "state": {"path": str(tmp_path / "s.db")},
            }
        )


# -- join files, and watchfiles' own polling when inotify fails -----------------------------


@pytest.mark.parametrize("force_polling", [False, True], ids=["inotify", "polling"])
def test_a_new_join_export_in_another_folder_triggers_one_call(
    tmp_path: Path, clock: FakeClock, force_polling: bool
) -> None:
    export = tmp_path / "erp" / "products.csv"
    pim = tmp_path / "pim" / "texts.jsonl"
    export.parent.mkdir()
    pim.parent.mkdir()
    export.write_text(rows(3), encoding="utf-8")
    pim.write_text('{"sku": "W-000"}\n', encoding="utf-8")
    calls = Calls(pim)
    watcher = FileWatch(
        [export, pim],
        calls,
        quiet_s=QUIET_S,
        poll_s=0.05,
        force_polling=force_polling,
        clock=clock,
    ).start()
    try:
        replace_atomically(pim, '{"sku": "W-000", "name": "Wall plug"}\n')
        let_time_pass(clock, lambda: len(calls.sizes) >= 1, "the call for the join file")
        nothing_more(clock)
        assert calls.sizes == [pim.stat().st_size]
        # both exports land together: one call, for the quiet pair
        replace_atomically(export, rows(9, version=1))
        replace_atomically(pim, '{"sku": "W-000", "name": "Wall plug 6 mm"}\n')
        let_time_pass(clock, lambda: len(calls.sizes) >= 2, "the call for both")
        nothing_more(clock)
        assert len(calls.sizes) == 2
        assert watcher.mode == ("polling" if force_polling else "inotify")
    finally:
        watcher.stop()


def test_without_inotify_it_falls_back_to_watchfiles_own_polling(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    import watchfiles

    real = watchfiles.watch
    asked: list[bool] = []

    def no_inotify(*paths: Any, force_polling: bool | None = None, **kw: Any) -> Any:
        asked.append(bool(force_polling))
        if not force_polling:
            raise OSError("OS file watch limit reached")
        return real(*paths, force_polling=force_polling, **kw)

    monkeypatch.setattr(watchfiles, "watch", no_inotify)
    path = tmp_path / "products.csv"
    path.write_text(rows(3), encoding="utf-8")
    calls = Calls(path)
    watcher = FileWatch(path, calls, quiet_s=QUIET_S, poll_s=0.05, clock=clock).start()
    try:
        replace_atomically(path, rows(20, version=1))
        let_time_pass(clock, lambda: len(calls.sizes) >= 1, "the call")
        nothing_more(clock)
        assert calls.sizes == [path.stat().st_size]
        assert watcher.mode == "polling", "reported"
        assert asked == [False, True], "inotify tried, then watchfiles' force_polling"
    finally:
        watcher.stop()


def test_the_watched_files_are_the_source_and_the_local_join_files(tmp_path: Path) -> None:
    from skuferry.service.watch import watched_files

    settings = make_settings(
        tmp_path,
        join=[
            {"name": "pim", "type": "jsonl", "path": str(tmp_path / "pim.jsonl"), "key": "sku",
             "on": "sku"},
            {"name": "web", "type": "csv", "path": "https://127.0.0.1:9/texts.csv", "key": "sku",
             "on": "sku"},
            {"name": "again", "type": "csv", "path": str(tmp_path / "products.csv"),
             "key": "sku", "on": "sku"},
        ],
    )  # fmt: skip
    assert watched_files(settings) == [tmp_path / "products.csv", tmp_path / "pim.jsonl"]


def test_the_daemon_runs_on_a_new_join_export(
    tmp_path: Path,
    clock: FakeClock,
    started: Callable[..., tuple[Daemon, Any, dict[str, int]]],
) -> None:
    export, pim = tmp_path / "products.csv", tmp_path / "pim.jsonl"
    export.write_text(rows(3), encoding="utf-8")
    pim.write_text('{"sku": "W-000"}\n', encoding="utf-8")
    settings = make_settings(
        tmp_path,
        schedule={"watch": True, "watch_settle_s": QUIET_S, "run_at_start": False},
        join=[{"name": "pim", "type": "jsonl", "path": str(pim), "key": "sku", "on": "sku"}],
    )
    job = FakeJob(lambda **_kw: RunSummary())
    daemon, _, _ = started(settings, job, interval_s=3600, clock=clock)
    nothing_more(clock, quiet_times=1)
    assert job.calls == []
    replace_atomically(pim, '{"sku": "W-000", "name": "Wall plug"}\n')
    let_time_pass(
        clock, lambda: len(job.calls) == 1 and not daemon.run_in_flight, "the triggered run"
    )
    nothing_more(clock)
    assert len(job.calls) == 1
