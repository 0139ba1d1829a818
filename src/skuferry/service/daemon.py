"""``skuferry run``: sync on a schedule until SIGTERM/SIGINT.

Shape: APScheduler's ``BackgroundScheduler`` fires the runs; the main thread
does nothing but wait for commands (stop, reload) and feed the systemd
watchdog while idle. Signal handlers only put a command on a
``queue.SimpleQueue`` (whose ``put`` is safe to call from a signal handler),
so reloading and shutting down happen in ordinary code, never inside a
handler that interrupted a lock holder; with ``BlockingScheduler`` the main
thread would be inside the scheduler loop and the handler would have to stop
the scheduler from there.

Each run goes through ``Daemon.run_now``: every failure is logged and the
schedule goes on. Stopping sets the ``stop`` event the engine polls, so the
request in flight finishes and its result is committed; runs execute in
daemon threads, so a run that overstays the stop deadline cannot keep the
process alive (its open write intent is resolved by lookup on the next start).

Besides the schedule: ``[schedule] watch`` starts a run when the source file (or a join file)
goes quiet after a change, and ``[daemon] listen`` serves /metrics and /healthz (the
daemon's listeners). Both only ask the main loop for a run (``request_run``), which
starts it once no run is going.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from skuferry import logs
from skuferry.config.load import load_settings
from skuferry.config.schedule import build_trigger, describe_schedule
from skuferry.config.schema import Settings
from skuferry.errors import ConfigError, SkuferryError
from skuferry.models import Progress, ProgressPoints, RunOptions, RunSummary
from skuferry.service import hooks_http
from skuferry.service.handed_keys import HandedKeys
from skuferry.service.http_endpoint import Board
from skuferry.service.listeners import Listeners
from skuferry.service.memory import release_memory
from skuferry.service.metrics import RunOutcome
from skuferry.service.notify import Notifier
from skuferry.service.run_events import log_failure, log_finished
from skuferry.service.run_threads import ThreadPerRunExecutor
from skuferry.service.runner import run_watched
from skuferry.service.scheduler import SyncSchedule
from skuferry.service.signals import stop_and_reload_on_signals
from skuferry.service.watch import watched_files
from skuferry.state.lock import Held, hold
from skuferry.state.mirror import Mirror
from skuferry.sync.context import Adapters
from skuferry.sync.write.lanes import UrgentInbox

if TYPE_CHECKING:
    from skuferry.sync.undo import UndoReport

log = logs.get(__name__)

STOP_TIMEOUT_S = 8.0  # systemd's TimeoutStopSec and the contract allow 10 s
STATUS_EVERY_S = 5.0  # how often progress updates systemd's STATUS= during a run
_STOP, _RELOAD, _RUN, _KEYS = "stop", "reload", "run", "keys"


class Job(Protocol):
    """What the daemon runs: ``engine.run_once`` or a test's fake.

    Runs get their ``options`` (``verify``, a targeted run's ``only``) and, with hooks
    on, ``adapters`` carrying the inbox their lane takes pushed keys from.
    """

    def __call__(
        self,
        settings: Settings,
        options: RunOptions | None = ...,
        *,
        stop: threading.Event | None = ...,
        on_progress: Progress | None = ...,
        adapters: Adapters | None = ...,
    ) -> RunSummary: ...


Loader = Callable[[Path | None], Settings]


class UndoJob(Protocol):
    """What the daemon runs to undo a run: ``sync.undo.undo_run`` or a test's wrapper."""

    def __call__(self, settings: Settings, run: int, *, stop: threading.Event) -> UndoReport: ...


def _undo_run(settings: Settings, run: int, *, stop: threading.Event) -> UndoReport:
    from skuferry.sync.undo import undo_run

    return undo_run(settings, run, stop=stop)


# --- the daemon ------------------------------------------------------------------------


class Daemon:
    """The scheduler, the current settings, and what happens around each run."""

    def __init__(
        self,
        config_path: Path | None,
        *,
        job: Job,
        load: Loader,
        notifier: Notifier | None = None,
        interval_s: float | None = None,
        stop_timeout_s: float = STOP_TIMEOUT_S,
        idle_tick_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        lanes: bool = True,
        http: bool = True,
        first_run_delay_s: float = 0.0,
        undo: UndoJob = _undo_run,
    ) -> None:
        self._config_path = config_path
        self._job = job
        self._undo = undo
        # the page's undos that could not start (no such run, pruned...): run -> why
        self.undo_problems: dict[int, str] = {}
        self._load = load
        self._notify = notifier if notifier is not None else Notifier.from_env()
        self._interval_s = interval_s
        self._stop_timeout_s = stop_timeout_s
        self._idle_tick_s = idle_tick_s
        self._clock = clock
        self._wall_clock = wall_clock
        self._commands: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.stop_event = threading.Event()  # the engine's ``stop``
        self._executor = ThreadPerRunExecutor()
        self._schedule = SyncSchedule(
            self._executor, lambda: self.settings.schedule.misfire_grace_s
        )
        self._settings: Settings | None = None
        self._runs = 0
        self._last_status = float("-inf")
        self.last_outcome: RunOutcome | None = None
        self._run_asked = False  # a watched file changed: run as soon as no run is going
        self._run_reason = ""
        # Keys pushed by POST /hooks/sync: taken by the urgent lane of the run going, or
        # by a targeted run started at once (``UrgentInbox``). ``lanes=False`` (benchmarks):
        # the run going does not see them; they wait for a targeted run after it.
        self.inbox = UrgentInbox()
        self._lanes = lanes
        self._hooks = False
        self._gate = threading.Lock()  # one run at a time: scheduled, asked or targeted
        self._targeted = 0
        self._listeners = Listeners(clock)  # the file watch and the HTTP side
        self._http = http  # False: the process serves HTTP for many daemons (the fleet)
        self._held: Held | None = None  # the state's lock, from start to shutdown
        self._first_run_delay_s = first_run_delay_s  # a fleet staggers its first runs
        self._handed = HandedKeys(clock)
        self.board = Board(lambda: self.settings, self.schedule_problem, wall_clock=wall_clock)

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            raise RuntimeError("the daemon has not been started")
        return self._settings

    @property
    def run_in_flight(self) -> bool:
        return self._executor.busy()

    # commands: safe from signal handlers and other threads
    def request_stop(self) -> None:
        self._commands.put(_STOP)

    def request_reload(self) -> None:
        self._commands.put(_RELOAD)

    def request_run(self, reason: str = "the source file changed") -> None:
        """Run now, besides the schedule (after the run in flight, if any)."""
        self._run_reason = reason
        self._run_asked = True
        self._commands.put(_RUN)

    def push_keys(self, keys: list[str]) -> int:
        """Keys to sync now (POST /hooks/sync); how many are waiting. Thread-safe."""
        waiting = self.inbox.put(keys)
        self._commands.put(_KEYS)
        return waiting

    def start(self) -> None:
        """Load the config, open the state, schedule, tell systemd READY=1. Raises SkuferryError."""
        settings = self._load(self._config_path)
        trigger = build_trigger(settings.schedule, interval_s=self._interval_s)
        # one writer, between runs too: a second process on this state exits 75
        self._held = hold(settings.state.path)
        try:
            Mirror(settings.state.path).close()  # create/migrate now: fail before READY
        except BaseException:
            self.release_lock()
            raise
        self._settings = settings
        self._schedule.add(
            self._run_scheduled,
            trigger,
            grace_s=settings.schedule.misfire_grace_s,
            first_in_s=self._first_run_delay_s if settings.schedule.run_at_start else None,
        )
        self._start_watchers(settings)  # a port already taken fails the start, before READY
        self._schedule.scheduler.start(paused=True)  # READY=1 goes out before the first run starts
        schedule = describe_schedule(settings.schedule, interval_s=self._interval_s)
        self._publish(settings, schedule=schedule, pid=str(os.getpid()), stopped_at=None)
        log.info(
            "daemon.started",
            schedule=schedule,
            next_run=self.next_run(),
            config=str(self._config_path or settings.config_path or ""),
        )
        self._notify.ready(f"scheduled {schedule}; next run {self.next_run() or 'unknown'}")
        self._schedule.scheduler.resume()

    def serve_forever(self) -> int:
        """Wait for commands until a stop; feed the watchdog while no run is going."""
        while True:
            try:
                command = self._commands.get(timeout=self._idle_tick_s)
            except queue.Empty:
                if not self._executor.busy():
                    self._notify.keepalive()  # during a run, progress points do it
                    self._run_if_asked()
                    self._take_handed_keys()
                    self._run_keys_if_waiting()
                continue
            if command == _STOP:
                return self.shutdown()
            if command == _RUN:
                self._run_if_asked()
                continue
            if command == _KEYS:
                self._run_keys_if_waiting()
                continue
            self.reload()

    def shutdown(self) -> int:
        self._notify.stopping()
        log.info("daemon.stopping", run_in_flight=self._executor.busy())
        self.stop_event.set()
        self._schedule.scheduler.shutdown(wait=False)
        self._listeners.stop()
        if not self._executor.join(self._stop_timeout_s, self._clock):
            log.warning(
                "daemon.stop.timeout",
                waited_s=self._stop_timeout_s,
                hint="the open write is resolved by lookup on the next start",
            )
            # the run still going keeps the lock until it ends, then lets it go: a process
            # that serves on (the fleet) can start this workspace again
            threading.Thread(
                target=self._release_after_run, name="skuferry-release", daemon=True
            ).start()
        else:
            self.release_lock()
        if self._settings is not None:
            # ``status`` then says "not running": no next run is promised by a stopped daemon
            self._publish(
                self._settings, next_run=None, pid=None, stopped_at=repr(self._wall_clock())
            )
        log.info("daemon.stopped", runs=self._runs)
        return 0

    def reload(self) -> bool:
        """Re-read the config; keep the old one (and say why) if the new one is bad."""
        self._notify.send("RELOADING=1", f"MONOTONIC_USEC={time.monotonic_ns() // 1000}")
        old = self.settings
        try:
            new = self._load(self._config_path)
            trigger = build_trigger(new.schedule, interval_s=self._interval_s)
            moved = new.state.path != old.state.path
            held = hold(new.state.path) if moved else self._held
            try:
                Mirror(new.state.path).close()
            except BaseException:
                if moved and held is not None:
                    held.release()
                raise
        except ConfigError as exc:
            log.error("daemon.reload.failed", problems=exc.problems, kept="old config")
            self._notify.ready("config reload failed; running with the old config")
            return False
        except SkuferryError as exc:
            log.error("daemon.reload.failed", problems=[str(exc)], kept="old config")
            self._notify.ready("config reload failed; running with the old config")
            return False
        self._settings = new
        if held is not self._held:
            with self._gate:  # the run going on the old state ends first
                self.release_lock()
                self._held = held
        self._listeners.reloaded(old, new, self._source_changed)
        rescheduled = new.schedule != old.schedule
        if rescheduled:
            self._schedule.reschedule(trigger, grace_s=new.schedule.misfire_grace_s)
        schedule = describe_schedule(new.schedule, interval_s=self._interval_s)
        self._publish(new, schedule=schedule, pid=str(os.getpid()))
        log.info(
            "daemon.reload.done",
            rescheduled=rescheduled,
            schedule=schedule,
            next_run=self.next_run(),
        )
        self._notify.ready(f"config reloaded; next run {self.next_run() or 'unknown'}")
        return True

    def _run_scheduled(self) -> None:
        self.run_now()

    def run_now(self, keys: list[str] | None = None, *, resend: bool = False) -> RunOutcome:
        """One run with everything around it; never raises. ``keys`` None: the scheduled
        run of the whole source (every ``verify_every``-th one verifies); else a targeted
        run of ``keys`` only (pushed by a hook; ``resend``: refused data sent again, as
        ``skuferry retry`` does)."""
        settings = self.settings
        progress = ProgressPoints(self._progress)
        if keys is None:
            self._runs += 1
            number, fields = self._runs, {"run": self._runs}
            every = settings.schedule.verify_every
            verify = every > 0 and number % every == 0
            log.info("daemon.run.started", run=number, verify=verify)
            self._notify.status(f"run {number} started")
            # the inbox: keys pushed by hooks, and word of a watched file that changed mid-run
            heard = self._hooks or (settings.schedule.watch and bool(watched_files(settings)))
            lane = Adapters(urgent=self.inbox) if heard and self._lanes else None
            options = RunOptions(verify=verify)

            def job() -> RunSummary:
                return self._job(
                    settings, options, stop=self.stop_event, on_progress=progress, adapters=lane
                )

        else:
            self._targeted += 1
            number, fields = self._targeted, {"targeted": self._targeted}
            log.info("daemon.targeted.started", targeted=number, keys=len(keys))
            only = RunOptions(only=tuple(keys), resend=frozenset(keys) if resend else frozenset())

            def job() -> RunSummary:
                # more keys pushed meanwhile join this run's lane
                inbox = Adapters(urgent=self.inbox)
                return self._job(
                    settings, only, stop=self.stop_event, on_progress=progress, adapters=inbox
                )

        # hooks, timing and the outcome (run_watched); a failed run never ends the
        # schedule: run_watched hands back what the job raised instead of raising it
        with self._gate:
            if keys is None:
                self.inbox.take_changed()  # word for an earlier run: this one reads the source
            outcome = run_watched(
                settings,
                job,
                stopping=self.stop_event.is_set,
                clock=self._clock,
                wall_clock=self._wall_clock,
            )
        if outcome.exception is not None:
            log_failure(number, outcome.exception, outcome)
        elif outcome.summary is not None:
            log_finished(outcome, outcome.summary, fields, scheduled=keys is None)
        self._after_run(settings, outcome)
        return outcome

    def _after_run(self, settings: Settings, outcome: RunOutcome) -> None:
        release_memory()
        if len(self.inbox):
            self._commands.put(_KEYS)  # pushed while it ran, not taken: a targeted run next
        self.last_outcome = outcome
        self.board.record(outcome)
        # a run that ends after the stop (it overstayed the deadline) promises no next run
        next_run = None if self.stop_event.is_set() else self.next_run()
        self._publish(settings, next_run=next_run)
        self._notify.status(f"last run {outcome.one_line()}; next run {next_run or 'none'}")

    def _progress(self, done: int, total: int) -> None:
        self._notify.keepalive()
        now = self._clock()
        if now - self._last_status >= STATUS_EVERY_S:
            self._last_status = now
            self._notify.status(f"run {self._runs}: {done}/{total} products")

    # --- watch and listen ----------------------------------------------------------------

    def _start_watchers(self, settings: Settings) -> None:
        if settings.daemon.listen and self._http:
            self.board.seed(settings.metrics.textfile)
            secret = hooks_http.load_secret(settings.daemon)
            desk = self.hook_desk(secret) if secret is not None else None
            self._listeners.listen(
                settings.daemon.listen, settings, self.board, desk, self._console()
            )
        self._listeners.watch(settings, self._source_changed)

    def _console(self) -> Callable[[Any], object]:
        """The operator's page over this daemon's one workspace."""
        from skuferry.service.console.app import Console
        from skuferry.service.console.workspace import DaemonWorkspace

        path = self._config_path or self.settings.config_path
        workspace = DaemonWorkspace(self, Path(path).stem if path else "default")
        return Console.of(self.settings.daemon, lambda: [workspace]).mount

    def waiting(self) -> int:
        """Keys pushed (hooks, the page) and not yet taken by a run."""
        return len(self.inbox)

    def request_retry(self, keys: list[str]) -> None:
        """Send ``keys`` again as ``skuferry retry`` does (refused data resent), in a
        targeted run after the run going, if any. Thread-safe; returns at once."""
        log.info("daemon.retry.queued", keys=len(keys))
        self._schedule.once(self.run_now, "skuferry retry", keys, resend=True)

    def request_undo(self, run: int) -> None:
        """Undo run ``run`` (the page's "Undo this run") after the run going, if any, as a
        run of its own in the daemon's thread (the daemon holds the state). Thread-safe;
        returns at once."""
        log.info("daemon.undo.queued", undoes=run)
        self._schedule.once(self.undo_now, "skuferry undo", run)

    def undo_now(self, run: int) -> UndoReport | None:
        """Undo run ``run`` now, one run at a time; never raises (None: it could not)."""
        settings = self.settings
        with self._gate:
            try:
                report = self._undo(settings, run, stop=self.stop_event)
            except SkuferryError as exc:
                self.undo_problems[run] = str(exc)
                log.error("daemon.undo.failed", undoes=run, error=str(exc))
                return None
        self.undo_problems.pop(run, None)
        log.info("daemon.undo.finished", undoes=run, run=report.run_id, status=report.status)
        release_memory()
        return report

    def _source_changed(self) -> None:
        """A watched file went quiet in a new version: a run after the one going (if any),
        and the run going reads it again for its urgent fields."""
        if self._lanes and self._executor.busy():
            self.inbox.source_changed()
        self.request_run()

    @property
    def endpoint_url(self) -> str | None:
        return self._listeners.url

    def _run_if_asked(self) -> None:
        if self._run_asked and not self._executor.busy() and not self.stop_event.is_set():
            self._run_asked = False
            log.info("daemon.run.triggered", reason=self._run_reason)
            self._schedule.run_soon()

    def _run_keys_if_waiting(self) -> None:
        """Pushed keys and no run going: a targeted run of them, now."""
        if not len(self.inbox) or self._executor.busy() or self.stop_event.is_set():
            return
        keys = self.inbox.take()
        log.info("daemon.run.targeted", keys=len(keys))
        self._schedule.once(self.run_now, "skuferry targeted sync", keys)

    def hook_desk(self, secret: bytes) -> hooks_http.Desk:
        """The hooks' desk for this daemon: pushed keys join its runs' urgent lane."""
        self._hooks = True
        return hooks_http.Desk(
            secret,
            on_keys=self.push_keys,
            on_run=lambda: self.request_run("POST /hooks/run"),
        )

    def _release_after_run(self) -> None:
        with self._gate:  # the run going holds the gate until it ends
            self.release_lock()

    def release_lock(self) -> None:
        """Let another process write the state (the daemon stopped serving it)."""
        if self._held is not None:
            self._held.release()
            self._held = None

    def _take_handed_keys(self) -> None:
        """Keys a ``sync --only`` of another process left for this idle daemon: run them.

        While a run goes, its urgent lane takes them; between runs the daemon still holds
        the lock, so nobody else would.
        """
        if self._settings is None:
            return
        handed = self._handed.take(self._settings.state.path)
        if handed:
            log.info("daemon.handed.keys", keys=len(handed))
            self.push_keys(handed)

    def schedule_problem(self) -> str | None:
        """Why the schedule is not alive (for /healthz), or None."""
        if self.stop_event.is_set():
            return "the daemon is stopping"
        return self._schedule.problem(run_in_flight=self.run_in_flight)

    def next_run(self) -> str | None:
        """When the next run is due (ISO 8601), if one is scheduled."""
        return self._schedule.next_run()

    def _publish(self, settings: Settings, **meta: str | None) -> None:
        """Tell ``skuferry status`` (which reads the state's meta table) about the daemon."""
        try:
            mirror = Mirror(settings.state.path)
            try:
                mirror.set_metas({f"daemon.{name}": value for name, value in meta.items()})
            finally:
                mirror.close()
        except Exception as exc:  # noqa: BLE001 - sqlite3.Error or StateError; status is best effort
            log.warning("daemon.state.publish_failed", error=str(exc))


def serve(
    config_path: Path | None,
    *,
    job: Job | None = None,
    load: Loader | None = None,
    notifier: Notifier | None = None,
    interval_s: float | None = None,
    install_signals: bool = True,
) -> int:
    """Run the daemon until SIGTERM/SIGINT; 0 on a clean stop. Raises SkuferryError at start."""
    if job is None:
        # Imported here: the engine pulls in the whole sync stack, tests inject a fake job.
        from skuferry.sync.engine import run_once

        job = run_once
    daemon = Daemon(
        config_path, job=job, load=load or load_settings, notifier=notifier, interval_s=interval_s
    )
    with stop_and_reload_on_signals(
        daemon.request_stop, daemon.request_reload, install=install_signals
    ):
        daemon.start()
        return daemon.serve_forever()
