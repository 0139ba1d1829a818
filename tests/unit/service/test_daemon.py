"""The daemon with an injected fake job and a sub-second schedule; one real-process signal test."""

from __future__ import annotations

import functools
import gc
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from skuferry.config.schedule import build_trigger, crontab_weekdays, describe_schedule
from skuferry.config.schema import ScheduleSettings, Settings
from skuferry.errors import AuthError, ConfigError, LockHeld, SourceError
from skuferry.models import RunOptions, RunSummary
from skuferry.service import daemon as daemon_module
from skuferry.service.daemon import STOP_TIMEOUT_S, Daemon
from skuferry.service.metrics import parse_samples
from skuferry.service.notify import Notifier
from skuferry.service.report import collect_status, print_status
from skuferry.state import lock, schema
from skuferry.state.mirror import Mirror
from skuferry.sync.context import Adapters
from skuferry.sync.write.lanes import UrgentInbox
from tests.fakes import wait_until

FAST = 0.05  # seconds between runs


def make_settings(tmp_path: Path, **extra: Any) -> Settings:
    data: dict[str, Any] = {
        "api": {"base_url": "http://127.0.0.1:9", "api_key": "test-key"},
        "source": {"type": "csv", "path": str(tmp_path / "products.csv")},
        "state": {"path": str(tmp_path / "state.db")},
    }
    data.update(extra)
    return Settings.model_validate(data)


class RecordingNotifier(Notifier):
    def __init__(self, watchdog_usec: int | None = None) -> None:
        super().__init__("@unused", watchdog_usec=watchdog_usec)
        self.sent: list[str] = []

    def send(self, *assignments: str) -> bool:
        self.sent.append("\n".join(assignments))
        return True


class FakeJob:
    """Plays a script of outcomes, one per run; the last one repeats."""

    def __init__(self, *script: RunSummary | Exception | Callable[..., RunSummary]) -> None:
        self.script = list(script) or [RunSummary()]
        self.calls: list[dict[str, Any]] = []

    def __call__(
        self,
        settings: Settings,
        options: RunOptions | None = None,
        *,
        stop: threading.Event | None = None,
        on_progress: Callable[[int, int], None] | None = None,
        adapters: Adapters | None = None,
    ) -> RunSummary:
        del adapters  # targeted runs and lanes have tests of their own
        verify = options is not None and options.verify
        step = self.script[min(len(self.calls), len(self.script) - 1)]
        self.calls.append({"settings": settings, "verify": verify, "stop": stop})
        if isinstance(step, Exception):
            raise step
        if callable(step):
            return step(stop=stop, on_progress=on_progress)
        return step


@pytest.fixture
def started() -> Iterator[Callable[..., tuple[Daemon, RecordingNotifier, dict[str, int]]]]:
    """Start a daemon serving in a thread; always stopped at the end."""
    running: list[tuple[Daemon, threading.Thread]] = []

    def start(
        settings: Settings | Callable[[Path | None], Settings], job: Any, **kw: Any
    ) -> tuple[Daemon, RecordingNotifier, dict[str, int]]:
        notifier = kw.pop("notifier", None) or RecordingNotifier()
        load = settings if callable(settings) else (lambda _path: settings)
        kw.setdefault("interval_s", FAST)
        daemon = Daemon(None, job=job, load=load, notifier=notifier, **kw)
        daemon.start()
        result: dict[str, int] = {}
        thread = threading.Thread(target=lambda: result.update(rc=daemon.serve_forever()))
        thread.start()
        running.append((daemon, thread))
        return daemon, notifier, result

    yield start
    for daemon, thread in running:
        if thread.is_alive():
            daemon.request_stop()
        thread.join(15)
        wait_until(functools.partial(_idle, daemon), "the last run to end")


def _idle(daemon: Daemon) -> bool:
    return not daemon.run_in_flight


def stop(daemon: Daemon, result: dict[str, int]) -> int:
    daemon.request_stop()
    wait_until(lambda: "rc" in result, "the daemon to stop")
    return result["rc"]


# --- the schedule -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "names"),
    [
        ("*", "*"),
        ("1-5", "mon,tue,wed,thu,fri"),
        ("0", "sun"),
        ("7", "sun"),
        ("0,7", "sun"),
        ("sat,0", "sat,sun"),
        ("fri-sun", "fri,sat,sun"),
        ("5-7", "fri,sat,sun"),
        ("*/2", "sun,tue,thu,sat"),
        ("1/3", "mon,thu"),
        ("MON-wed", "mon,tue,wed"),
    ],
)
def test_crontab_weekdays_count_from_sunday(field: str, names: str) -> None:
    assert crontab_weekdays(field) == names


@pytest.mark.parametrize("field", ["8", "5-1", "x", "*/0"])
def test_bad_weekdays_are_refused(field: str) -> None:
    with pytest.raises(ValueError, match=r"."):
        crontab_weekdays(field)


def test_cron_trigger_fires_on_crontab_monday() -> None:
    trigger = build_trigger(ScheduleSettings(cron="30 9 * * 1"))
    sunday = datetime(2024, 6, 2, 12, 0, tzinfo=UTC)  # a Sunday
    fire = trigger.get_next_fire_time(None, sunday)
    assert fire.weekday() == 0  # Monday in Python's numbering
    assert (fire.hour, fire.minute) == (9, 30)


@pytest.mark.parametrize(
    ("schedule", "problem"),
    [
        (ScheduleSettings(cron="* * * *"), "expected 5 fields"),
        (ScheduleSettings(cron="61 * * * *"), "schedule.cron"),
        (ScheduleSettings(cron="* * * * 9"), "schedule.cron"),
        (ScheduleSettings(cron="* * * * *", interval_minutes=5), "not both"),
    ],
)
def test_bad_schedules_are_config_errors(schedule: ScheduleSettings, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        build_trigger(schedule)


def test_interval_default_and_jitter() -> None:
    trigger = build_trigger(ScheduleSettings(jitter_s=30))
    assert trigger.interval == timedelta(minutes=15)
    assert trigger.jitter == 30
    assert describe_schedule(ScheduleSettings(interval_minutes=5)) == "every 5 min"
    assert describe_schedule(ScheduleSettings(cron="0 * * * *")) == "cron 0 * * * *"


# --- running ----------------------------------------------------------------------------


def test_runs_on_schedule_and_stop_lets_the_run_in_flight_finish(
    tmp_path: Path, started: Any
) -> None:
    second_started = threading.Event()
    finished: list[str] = []

    def second_run(*, stop: threading.Event, on_progress: Any) -> RunSummary:
        second_started.set()
        stop.wait(15)  # the engine polls ``stop`` between requests
        finished.append("second run committed its last request")
        return RunSummary(interrupted=True)

    job = FakeJob(RunSummary(created=1), second_run)
    daemon, notifier, result = started(make_settings(tmp_path), job)
    assert notifier.sent[0].startswith("READY=1")
    assert second_started.wait(15)
    assert stop(daemon, result) == 0
    assert finished == ["second run committed its last request"]
    assert len(job.calls) == 2  # nothing scheduled after the stop
    assert "STOPPING=1" in notifier.sent
    assert job.calls[1]["stop"] is daemon.stop_event


def test_failed_runs_keep_the_schedule_and_are_logged(tmp_path: Path, started: Any) -> None:
    job = FakeJob(
        SourceError("export missing"),
        AuthError(401, "UNAUTHORIZED", "bad key"),
        AuthError(401, "UNAUTHORIZED", "bad key"),
        ValueError("a bug"),
        LockHeld("held by 42"),
        RunSummary(),
    )
    with capture_logs() as logs:
        daemon, _notifier, result = started(make_settings(tmp_path), job)
        wait_until(lambda: daemon.last_outcome is not None and len(job.calls) >= 6, "six runs")
        stop(daemon, result)
    failed = [e for e in logs if e["event"] == "daemon.run.failed"]
    assert [(e["exit_code"], e["error_type"]) for e in failed] == [
        (3, "SourceError"),
        (3, "AuthError"),
        (3, "AuthError"),
        (70, "ValueError"),
    ]
    assert all(e["log_level"] == "error" for e in failed)
    assert all("hint" in e for e in failed if e["error_type"] == "AuthError")  # every run
    skipped = [e for e in logs if e["event"] == "daemon.run.skipped"]
    assert skipped[0]["exit_code"] == 75
    assert any(e["event"] == "daemon.run.finished" and e["exit_code"] == 0 for e in logs)


def test_every_nth_run_verifies(tmp_path: Path, started: Any) -> None:
    job = FakeJob()
    daemon, _n, result = started(make_settings(tmp_path, schedule={"verify_every": 2}), job)
    wait_until(lambda: len(job.calls) >= 4, "four runs")
    stop(daemon, result)
    assert [c["verify"] for c in job.calls[:4]] == [False, True, False, True]


def test_no_run_at_start_waits_for_the_trigger(tmp_path: Path, started: Any) -> None:
    job = FakeJob()
    settings = make_settings(tmp_path, schedule={"run_at_start": False, "interval_minutes": 60})
    daemon, _n, result = started(settings, job, interval_s=None, idle_tick_s=0.01)
    next_run = daemon.next_run()
    assert next_run is not None
    assert datetime.fromisoformat(next_run) > datetime.now().astimezone() + timedelta(minutes=59)
    stop(daemon, result)
    assert job.calls == []


def test_after_a_run_metrics_status_and_state_meta_are_written(
    tmp_path: Path, started: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    textfile = tmp_path / "skuferry.prom"
    settings = make_settings(tmp_path, metrics={"textfile": str(textfile)})
    conn = schema.open_state(settings.state.path)
    with conn:
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO products(key, state, first_seen, updated_at) VALUES (?, ?, 0, 0)",
            [("a", "synced"), ("b", "synced"), ("c", "rejected")],
        )
    conn.close()
    job = FakeJob(RunSummary(created=2, requests={"read": 1, "write": 2}))
    daemon, notifier, result = started(settings, job, interval_s=3600.0)
    wait_until(lambda: daemon.last_outcome is not None, "the first run")
    wait_until(lambda: any(s.startswith("STATUS=last run") for s in notifier.sent), "STATUS")

    samples = parse_samples(textfile.read_text())
    assert samples[("skuferry_runs_total", "success")] == 1
    assert samples[("skuferry_products", "synced")] == 2
    assert samples[("skuferry_products", "rejected")] == 1
    assert samples[("skuferry_requests_total", "write")] == 2
    status = next(s for s in notifier.sent if s.startswith("STATUS=last run"))
    assert "success (exit 0): 2 created" in status

    def meta() -> dict[str, str | None]:
        c = schema.connect(settings.state.path)
        try:
            return dict(c.execute("SELECT name, value FROM meta WHERE name LIKE 'daemon.%'"))
        finally:
            c.close()

    published = meta()
    assert published["daemon.pid"] == str(os.getpid())
    assert published["daemon.schedule"] == "every 3600 s"
    assert published["daemon.next_run"] is not None
    assert collect_status(settings)["daemon"]["running"] is True
    assert stop(daemon, result) == 0
    assert "daemon.pid" not in meta()  # status must not show a daemon that is gone
    assert "daemon.next_run" not in meta()
    after = collect_status(settings)["daemon"]
    assert (after["running"], after["next_run"]) == (False, None)
    assert after["stopped_at"] is not None
    print_status(collect_status(settings))
    shown = capsys.readouterr().out
    assert "daemon: not running since" in shown and "next run" not in shown


@pytest.mark.integration  # starts a process to get a pid nobody holds
def test_status_does_not_trust_the_pid_of_a_daemon_killed_without_stopping(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path)
    mirror = Mirror(settings.state.path)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    mirror.set_metas(
        {"daemon.schedule": "every 60 s", "daemon.pid": str(gone.pid), "daemon.next_run": "x"}
    )
    mirror.close()
    assert collect_status(settings)["daemon"]["running"] is False
    assert collect_status(settings)["daemon"]["next_run"] is None


def test_progress_feeds_the_watchdog_and_idle_timer_too(tmp_path: Path, started: Any) -> None:
    def run(*, stop: threading.Event, on_progress: Callable[[int, int], None]) -> RunSummary:
        on_progress(1, 10)
        return RunSummary()

    notifier = RecordingNotifier(watchdog_usec=1)  # a tiny interval: every call may ping
    daemon, _n, result = started(
        make_settings(tmp_path),
        FakeJob(run),
        notifier=notifier,
        interval_s=3600.0,
        idle_tick_s=0.01,
    )
    wait_until(lambda: daemon.last_outcome is not None, "the first run")
    assert "STATUS=run 1: 1/10 products" in notifier.sent
    during_run = notifier.sent.index("STATUS=run 1: 1/10 products")
    assert notifier.sent[during_run - 1] == "WATCHDOG=1"  # from the progress point
    count = notifier.sent.count("WATCHDOG=1")
    wait_until(lambda: notifier.sent.count("WATCHDOG=1") > count + 1, "idle pings")
    stop(daemon, result)


def test_a_run_of_the_daemon_logs_its_progress_at_a_steady_interval(
    tmp_path: Path, started: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 40 item 21: a service's journal is never a terminal, so each run of the
    daemon logs sync.progress as a one-shot sync off a terminal does."""
    monkeypatch.setattr(daemon_module, "PROGRESS_EVERY_S", 0.0)

    def run(*, stop: threading.Event, on_progress: Callable[[int, int], None]) -> RunSummary:
        on_progress(0, 250)  # the first point starts the clock
        on_progress(40, 250)
        return RunSummary()

    with capture_logs() as logged:
        daemon, _n, result = started(make_settings(tmp_path), FakeJob(run), interval_s=3600.0)
        wait_until(lambda: daemon.last_outcome is not None, "the first run")
        stop(daemon, result)
    events = [e for e in logged if e["event"] == "sync.progress"]
    assert [(e["done"], e["total"]) for e in events] == [(40, 250)]


def test_stop_gives_up_on_a_stuck_run_at_the_deadline(tmp_path: Path, started: Any) -> None:
    release = threading.Event()
    running = threading.Event()

    def stuck(*, stop: threading.Event, on_progress: Any) -> RunSummary:
        running.set()
        release.wait(15)  # ignores ``stop``: a request hanging past the deadline
        return RunSummary()

    daemon, _n, result = started(make_settings(tmp_path), FakeJob(stuck), stop_timeout_s=0.05)
    assert running.wait(15)
    with capture_logs() as logs:
        assert stop(daemon, result) == 0
    release.set()
    assert "daemon.stop.timeout" in [e["event"] for e in logs]


# --- reload -----------------------------------------------------------------------------


def test_reload_with_a_broken_config_keeps_the_old_one(tmp_path: Path) -> None:
    good = make_settings(tmp_path, schedule={"interval_minutes": 60, "run_at_start": False})
    configs: list[Settings | Exception] = [good, ConfigError(["config.toml: at 'api': missing"])]
    notifier = RecordingNotifier()

    def load(_path: Path | None) -> Settings:
        item = configs.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    daemon = Daemon(None, job=FakeJob(), load=load, notifier=notifier)
    daemon.start()
    try:
        with capture_logs() as logs:
            assert not daemon.reload()
        assert daemon.settings is good
        (event,) = [e for e in logs if e["event"] == "daemon.reload.failed"]
        assert event["problems"] == ["config.toml: at 'api': missing"]
        assert notifier.sent[-1].startswith("READY=1")  # RELOADING=1 is always closed

        before = datetime.fromisoformat(daemon.next_run() or "")
        faster = make_settings(tmp_path, schedule={"interval_minutes": 1})
        configs.append(faster)
        assert daemon.reload()
        assert daemon.settings is faster
        after = datetime.fromisoformat(daemon.next_run() or "")
        assert after < before - timedelta(minutes=30)  # rescheduled on the new interval
    finally:
        assert daemon.shutdown() == 0


def test_reload_with_a_bad_cron_keeps_the_old_one(tmp_path: Path) -> None:
    good = make_settings(tmp_path, schedule={"run_at_start": False})
    bad = make_settings(tmp_path, schedule={"cron": "not a cron at all"})
    configs = [good, bad]
    daemon = Daemon(
        None, job=FakeJob(), load=lambda _p: configs.pop(0), notifier=RecordingNotifier()
    )
    daemon.start()
    try:
        assert not daemon.reload()
        assert daemon.settings is good
    finally:
        daemon.shutdown()


def test_bad_config_at_start_raises(tmp_path: Path) -> None:
    def load(_path: Path | None) -> Settings:
        raise ConfigError(["config.toml: at 'state': missing"])

    notifier = RecordingNotifier()
    with pytest.raises(ConfigError):
        Daemon(None, job=FakeJob(), load=load, notifier=notifier).start()
    assert notifier.sent == []  # never READY


# --- as a real process ------------------------------------------------------------------

SCRIPT = r"""
import sys, tomllib
from pathlib import Path
import pydantic
from skuferry import logs
from skuferry.service import daemon
from skuferry.errors import ConfigError
from skuferry.models import RunSummary
from skuferry.config.schema import Settings

def load(path):
    try:
        return Settings.model_validate(tomllib.loads(path.read_text()))
    except (tomllib.TOMLDecodeError, pydantic.ValidationError) as exc:
        raise ConfigError([f"{path}: {str(exc).splitlines()[0]}"]) from None

def job(settings, options=None, *, stop=None, on_progress=None, adapters=None):
    with open(sys.argv[2], "a") as f:
        f.write(settings.api.base_url + "\n")
    return RunSummary()

logs.configure(json=True)
sys.exit(daemon.serve(Path(sys.argv[1]), job=job, load=load, interval_s=0.1))
"""


def config_text(tmp_path: Path, base_url: str) -> str:
    return (
        f'[api]\nbase_url = "{base_url}"\napi_key = "k"\n'
        f'[source]\ntype = "csv"\npath = "{tmp_path / "p.csv"}"\n'
        f'[state]\npath = "{tmp_path / "state.db"}"\n'
    )


@pytest.mark.integration
def test_real_process_signals_and_notify(tmp_path: Path) -> None:
    config, runs, err = tmp_path / "config.toml", tmp_path / "runs.txt", tmp_path / "stderr"
    config.write_text(config_text(tmp_path, "http://127.0.0.1:9/a"))
    runs.touch()

    def seen() -> list[str]:
        return runs.read_text().splitlines()

    with (
        tempfile.TemporaryDirectory(prefix="sdn") as short,
        socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock,
        err.open("wb") as err_f,
    ):
        sock.bind(str(Path(short) / "notify"))
        sock.settimeout(0.05)
        messages: list[str] = []
        done = threading.Event()

        def drain() -> None:  # as systemd does: a full queue would stall the daemon's sends
            while not done.is_set():
                try:
                    messages.append(sock.recv(4096).decode())
                except TimeoutError:
                    continue

        reader = threading.Thread(target=drain)
        reader.start()
        env = {**os.environ, "NOTIFY_SOCKET": str(Path(short) / "notify")}
        proc = subprocess.Popen(
            [sys.executable, "-c", SCRIPT, str(config), str(runs)], env=env, stderr=err_f
        )
        try:
            wait_until(lambda: len(seen()) >= 2, "two runs")
            assert messages[0].startswith("READY=1")  # before the first run

            config.write_text("[api\nbroken")
            proc.send_signal(signal.SIGHUP)
            wait_until(lambda: b"daemon.reload.failed" in err.read_bytes(), "the reload error")
            count = len(seen())
            wait_until(lambda: len(seen()) > count, "a run after the failed reload")
            assert set(seen()) == {"http://127.0.0.1:9/a"}  # the old config goes on

            config.write_text(config_text(tmp_path, "http://127.0.0.1:9/b"))
            proc.send_signal(signal.SIGHUP)
            wait_until(lambda: seen()[-1] == "http://127.0.0.1:9/b", "a run on the new config")

            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=10) == 0
            wait_until(lambda: "STOPPING=1" in messages, "STOPPING=1")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            done.set()
            reader.join()
    assert any(m.startswith("STATUS=last run success") for m in messages)


LONG_RUN = r"""
import sys, time, tomllib
from pathlib import Path
from skuferry import logs
from skuferry.service import daemon
from skuferry.models import RunSummary
from skuferry.config.schema import Settings

def load(path):
    return Settings.model_validate(tomllib.loads(path.read_text()))

def job(settings, options=None, *, stop=None, on_progress=None, adapters=None):
    with open(sys.argv[2], "a") as f:
        f.write(str(settings.state.path) + "\n")
    until = time.monotonic() + 60  # a long run: it ends when stopped
    while time.monotonic() < until and not stop.is_set():
        time.sleep(0.05)
    return RunSummary()

logs.configure(json=True)
sys.exit(daemon.serve(Path(sys.argv[1]), job=job, load=load, interval_s=3600))
"""


@pytest.mark.integration
def test_a_sigterm_while_a_reload_moves_the_state_stops_within_the_grace_period(
    tmp_path: Path,
) -> None:
    """The reload locks the new state at once and lets the old one go when the run on it
    ends, without waiting for it: a SIGTERM meanwhile stops the run and the process."""
    config, runs, err = tmp_path / "config.toml", tmp_path / "runs.txt", tmp_path / "stderr"
    text = config_text(tmp_path, "http://127.0.0.1:9/a")
    config.write_text(text)
    runs.touch()
    with err.open("wb") as err_f:
        proc = subprocess.Popen(
            [sys.executable, "-c", LONG_RUN, str(config), str(runs)], stderr=err_f
        )
        try:
            wait_until(lambda: runs.read_text() != "", "the first run, in flight")
            moved = tmp_path / "moved.db"
            config.write_text(text.replace(str(tmp_path / "state.db"), str(moved)))
            proc.send_signal(signal.SIGHUP)
            wait_until(lambda: b"daemon.reload.done" in err.read_bytes(), "the reload, at once")
            with pytest.raises(LockHeld), lock.run_lock(moved):  # the daemon's already
                pass
            asked = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=10) == 0
            assert time.monotonic() - asked < STOP_TIMEOUT_S + 1
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert runs.read_text().splitlines() == [str(tmp_path / "state.db")], "one run, the old state"


def test_overlapping_fire_times_are_logged_as_skipped(tmp_path: Path, started: Any) -> None:
    release = threading.Event()

    def slow(*, stop: threading.Event, on_progress: Any) -> RunSummary:
        release.wait(15)
        return RunSummary()

    with capture_logs() as logs:
        daemon, _n, result = started(make_settings(tmp_path), FakeJob(slow))
        wait_until(
            lambda: any(e["event"] == "daemon.run.overlap_skipped" for e in logs),
            "a skipped fire time",
        )
        release.set()
        stop(daemon, result)


# --- memory between runs (issue 23: density) ---------------------------------------------


def test_after_every_run_the_daemon_hands_freed_memory_back(
    tmp_path: Path, started: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from skuferry.service import daemon as daemon_module
    from skuferry.service.memory import release_memory as real

    released: list[int] = []

    def counting() -> bool:
        released.append(1)
        return real()

    monkeypatch.setattr(daemon_module, "release_memory", counting)  # where the daemon calls it
    job = FakeJob(RunSummary(created=1), SourceError("the export is gone"))
    started(make_settings(tmp_path), job)
    wait_until(lambda: len(job.calls) >= 2 and len(released) >= 2, "two runs")
    assert len(released) >= 2  # after a success and after a failure alike


def test_a_failed_run_s_rows_do_not_outlive_it(tmp_path: Path, started: Any) -> None:
    """The outcome the daemon keeps (health, the page) holds the error's class and words,
    not the frames it unwound: what the run held is freed when it ends, not next run."""

    class Rows(list[int]):
        pass

    held: list[weakref.ref[Rows]] = []

    def failing(*, stop: Any, on_progress: Any) -> RunSummary:
        rows = Rows(range(1000))  # what a run holds: its rows, its plan
        held.append(weakref.ref(rows))
        raise SourceError(f"the export broke after {len(rows)} rows")

    daemon, _n, result = started(
        make_settings(tmp_path, schedule={"interval_minutes": 600}), FakeJob(failing)
    )
    wait_until(lambda: daemon.last_outcome is not None, "the failed run")
    outcome = daemon.last_outcome
    assert outcome is not None and outcome.error_type == "SourceError"
    assert outcome.exception is not None and outcome.exception.__traceback__ is None
    gc.collect()
    assert held[0]() is None, "the run's rows were freed"
    assert daemon.board.health()[1]["problems"] == ["the last run failed (exit 3, SourceError)"]
    stop(daemon, result)


@pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc",
    reason="malloc_trim is glibc's",
)
def test_release_memory_trims_glibc_s_heap() -> None:
    from skuferry.service.memory import release_memory

    assert release_memory() is True


# --- a run that hears the source (sync/write/reread.py) --------------------------------------


def test_a_watched_file_changing_mid_run_reaches_the_run_going(
    tmp_path: Path, started: Any
) -> None:
    """The run going gets the inbox (watch on, no hooks) and word of the new export; the
    run after it still comes, for the changes that are not urgent."""
    source = tmp_path / "products.csv"
    source.write_text("sku,name\nA,first\n", encoding="utf-8")
    settings = make_settings(
        tmp_path, schedule={"watch": True, "watch_settle_s": 0.05, "interval_minutes": 600}
    )
    inside, heard = threading.Event(), threading.Event()
    inboxes: list[UrgentInbox | None] = []

    def job(
        settings: Settings,
        options: RunOptions | None = None,
        *,
        adapters: Adapters | None = None,
        **_kw: Any,
    ) -> RunSummary:
        urgent = None if adapters is None else adapters.urgent
        inboxes.append(urgent)
        if len(inboxes) == 1 and urgent is not None:
            inside.set()
            deadline = time.monotonic() + 15  # guards a hang only
            while time.monotonic() < deadline:
                if urgent.take_changed():
                    heard.set()
                    break
                time.sleep(0.01)
        return RunSummary()

    daemon, _notifier, _result = started(settings, job, interval_s=3600)
    assert inside.wait(15)
    replacement = tmp_path / "products.csv.tmp"
    replacement.write_text("sku,name\nA,second\n", encoding="utf-8")
    replacement.replace(source)  # as an ERP drops its export
    assert heard.wait(15), "the run going was told"
    inbox: UrgentInbox = daemon.inbox
    assert inboxes[0] is inbox
    wait_until(lambda: len(inboxes) >= 2, "the run after it")
    assert not inbox.take_changed(), "word for the run going only"
