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
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import structlog

from skuferry import logs
from skuferry.config.load import load_settings
from skuferry.config.schedule import build_trigger, describe_schedule
from skuferry.config.schema import Settings
from skuferry.errors import ConfigError, SkuferryError
from skuferry.models import Progress, RunOptions, RunSummary
from skuferry.service import hooks_http, progress_log
from skuferry.service.degraded import Degraded, of_failure
from skuferry.service.handed_keys import HandedKeys
from skuferry.service.http_endpoint import Board, daemon_hooks
from skuferry.service.listeners import Listeners
from skuferry.service.memory import forget_frames, release_memory
from skuferry.service.metrics import RunOutcome
from skuferry.service.notify import Notifier
from skuferry.service.run_events import log_failure, log_finished
from skuferry.service.run_slots import RunSlots
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
PROGRESS_EVERY_S = progress_log.EVERY_S  # how often a run logs sync.progress
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
        undo: UndoJob = _undo_run,
        name: str | None = None,
        slots: RunSlots | None = None,
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
            self._executor,
            lambda: self.settings.schedule.misfire_grace_s,
            waiting=lambda: self._waiting_since is not None,
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
        self._name = name  # a fleet's workspace: on every event of its runs
        self._slots = slots  # a fleet's pool: a full run waits for a slot
        self._waiting_since: float | None = None  # the full run due, waiting for a slot
        self.degraded: Degraded | None = None  # the last reload failed: the old config runs
        self._handed = HandedKeys(clock)
        self.board = Board(
            lambda: self.settings,
            self.schedule_problem,
            wall_clock=wall_clock,
            waiting_s=self.waiting_for_slot_s if slots is not None else None,
            degraded=lambda: self.degraded,
        )

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            raise RuntimeError("the daemon has not been started")
        return self._settings

    @property
    def run_in_flight(self) -> bool:
        """A run's thread is alive: running, or waiting for the gate or a slot."""
        return self._executor.busy()

    def _going(self) -> bool:
        """A run is going (or about to): not merely waiting for a slot of the fleet's pool.
        Pushed keys and handed keys then wait for its urgent lane; else a targeted run,
        which takes no slot, sends them now."""
        return self._gate.locked() or (self._executor.busy() and self._waiting_since is None)

    def waiting_for_slot_s(self) -> float | None:
        """How long the full run due has waited for a slot (None: it does not wait)."""
        since = self._waiting_since
        return None if since is None else max(0.0, self._clock() - since)

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
            first_in_s=0.0 if settings.schedule.run_at_start else None,
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
                if not self._going():
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
        if self._slots is not None:  # a run waiting for a slot gives up now
            self._slots.wake(self._name or "")
        self._schedule.scheduler.shutdown(wait=False)
        self._listeners.stop()
        if not self._executor.join(self._stop_timeout_s, self._clock):
            log.warning(
                "daemon.stop.timeout",
                waited_s=self._stop_timeout_s,
                hint="the open write is resolved by lookup on the next start",
            )
        # a run still going keeps the lock until it ends, then lets it go: a process that
        # serves on (the fleet) can start this workspace again
        held, self._held = self._held, None
        if held is not None:
            self._release_after_run(held)
        if self._settings is not None:
            # ``status`` then says "not running": no next run is promised by a stopped daemon
            self._publish(
                self._settings, next_run=None, pid=None, stopped_at=repr(self._wall_clock())
            )
        log.info("daemon.stopped", runs=self._runs)
        return 0

    def reload(self) -> bool:
        """Re-read the config; keep the old one (and say why: the log, ``/healthz``'s
        ``degraded``, the page, a metric) if the new one is bad.

        A new state path is locked at once; the old one's lock is let go when the run going
        on it ends, without waiting here: a stop asked meanwhile is served at once.
        """
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
        except SkuferryError as exc:
            self.degraded = of_failure(self._config_file(old), exc, self._wall_clock())
            problems = exc.problems if isinstance(exc, ConfigError) else [str(exc)]
            log.error(
                "daemon.reload.failed",
                problems=problems,
                file=self.degraded.file,
                line=self.degraded.line,
                kept="old config",
            )
            self._notify.ready("config reload failed; running with the old config")
            return False
        self.degraded = None
        self._settings = new  # a run started from now on reads it (under the gate)
        if held is not self._held:
            previous, self._held = self._held, held
            if previous is not None:  # the run going on the old state ends first
                self._release_after_run(previous)
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

    def _config_file(self, settings: Settings) -> Path | None:
        found = self._config_path or settings.config_path
        return Path(found) if found else None

    def _run_scheduled(self) -> None:
        """The sync job (the schedule, or a run asked for): a full run, after a slot of the
        fleet's pool if there is one; a stop while it waits means no run at all."""
        with self._named(), self._slot() as waited:
            if waited is None:
                log.info("daemon.run.not_started", reason="the daemon stopped while it waited")
                return
            self.run_now(waited_s=waited if self._slots is not None else None)

    def run_now(
        self,
        keys: list[str] | None = None,
        *,
        resend: bool = False,
        waited_s: float | None = None,
    ) -> RunOutcome:
        """One run with everything around it; never raises. ``keys`` None: the scheduled
        run of the whole source (every ``verify_every``-th one verifies; ``waited_s``: how
        long it waited for a slot); else a targeted run of ``keys`` only (pushed by a hook;
        ``resend``: refused data sent again, as ``skuferry retry`` does), which takes no
        slot."""
        with self._named(), self._gate:  # one run at a time: scheduled, asked or targeted
            return self._run(keys, resend=resend, waited_s=waited_s)

    def _named(self) -> AbstractContextManager[object]:
        """A fleet's workspace on every event of its runs (their threads are their own)."""
        if self._name is None:
            return nullcontext()
        return structlog.contextvars.bound_contextvars(workspace=self._name)

    @contextmanager
    def _slot(self) -> Iterator[float | None]:
        """A slot of the fleet's pool for a full run (the seconds waited, None if the daemon
        stopped first); 0.0 at once when there is no pool."""
        if self._slots is None:
            yield 0.0
            return
        self._waiting_since = self._clock()
        try:
            with self._slots.slot(
                self._name or "", stop=self.stop_event, urgent=self._urgent
            ) as waited:
                self._waiting_since = None
                yield waited
        finally:
            self._waiting_since = None

    def _urgent(self) -> bool:
        """A run was asked for (a hook, the page, a watched file) or keys were pushed:
        this workspace's run goes first when a slot frees."""
        return self._run_asked or bool(len(self.inbox))

    def _run(self, keys: list[str] | None, *, resend: bool, waited_s: float | None) -> RunOutcome:
        """The run itself, the gate held: the settings read now are the ones it uses."""
        settings = self.settings
        # systemd's watchdog and STATUS= at every point, and sync.progress in the log
        progress = progress_log.ProgressLog(
            every_s=PROGRESS_EVERY_S, clock=self._clock, also=self._progress
        )
        if keys is None:
            self._runs += 1
            number, fields = self._runs, {"run": self._runs}
            every = settings.schedule.verify_every
            verify = every > 0 and number % every == 0
            self._run_asked = False  # asked before it started: this run reads the source
            late = {"waited_for_slot_s": round(waited_s, 1)} if waited_s is not None else {}
            log.info("daemon.run.started", run=number, verify=verify, **late)
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
        if outcome.exception is not None:  # logged: the run's frames need not outlive it
            forget_frames(outcome.exception)
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
            path = self._config_file(settings)
            name = path.stem if path else "default"
            from skuferry.service.console.app import page  # jinja2: when a page is served

            self._listeners.listen(
                settings.daemon.listen,
                settings,
                self.board,
                daemon_hooks(desk),
                page(settings.daemon, lambda: {name: self}),
            )
        self._listeners.watch(settings, self._source_changed)

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
        """Undo run ``run`` now, one run at a time; never raises (None: it could not). It
        takes no slot of a fleet's pool: an operator asked for it."""
        with self._gate:  # the settings read under the gate, as a run's (a reload may move
            settings = self.settings  # the state while a run holds the gate)
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
        if self._lanes and self._going():
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
        """Pushed keys and no run going (one waiting for a slot is not): a targeted run of
        them, now."""
        if not len(self.inbox) or self._going() or self.stop_event.is_set():
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

    def _release_after_run(self, held: Held) -> None:
        """Let ``held`` go once no run is going: now if none is, else when it ends (the
        run going holds the gate until then), without waiting here."""
        if self._gate.acquire(blocking=False):
            try:
                held.release()
            finally:
                self._gate.release()
            return

        def later() -> None:
            with self._gate:
                held.release()

        threading.Thread(target=later, name="skuferry-release", daemon=True).start()

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
