"""The daemon's schedule: APScheduler's ``BackgroundScheduler`` with the one sync job.

Runs execute on ``ThreadPerRunExecutor`` (each in a daemon thread); runs asked for
besides the schedule (a targeted run, a retry) are one-off jobs on the same scheduler,
so they wait for the run going as the scheduled ones do.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from apscheduler.events import (
    EVENT_JOB_MAX_INSTANCES,
    EVENT_JOB_MISSED,
    JobEvent,
    JobSubmissionEvent,
)
from apscheduler.schedulers.background import BackgroundScheduler

from skuferry import logs
from skuferry.service.run_threads import ThreadPerRunExecutor

# The daemon's logger: these events were always the daemon's, and tools match the logger.
log = logs.get("skuferry.service.daemon")

JOB_ID = "sync"


class SyncSchedule:
    """The scheduler and its sync job; ``grace_s`` reads the current misfire grace."""

    def __init__(
        self,
        executor: ThreadPerRunExecutor,
        grace_s: Callable[[], int],
        waiting: Callable[[], bool] = lambda: False,
    ) -> None:
        self._grace_s = grace_s
        self._waiting = waiting  # the run due waits for a slot of a fleet's pool
        self.scheduler = BackgroundScheduler(executors={"default": executor})
        # APScheduler's own warnings are plain stdlib text; say the same as structlog events.
        logging.getLogger("apscheduler").setLevel(logging.ERROR)
        self.scheduler.add_listener(self._on_event, EVENT_JOB_MAX_INSTANCES | EVENT_JOB_MISSED)

    def add(
        self, run: Callable[[], None], trigger: Any, *, grace_s: int, first_in_s: float | None
    ) -> None:
        """The sync job; ``first_in_s``: its first run that long from now, else the trigger's."""
        first: dict[str, Any] = {}
        if first_in_s is not None:
            first["next_run_time"] = datetime.now().astimezone() + timedelta(seconds=first_in_s)
        self.scheduler.add_job(
            run,
            trigger,
            id=JOB_ID,
            name="skuferry sync",
            max_instances=1,
            coalesce=True,
            misfire_grace_time=grace_s,
            **first,
        )

    def reschedule(self, trigger: Any, *, grace_s: int) -> None:
        self.scheduler.modify_job(JOB_ID, misfire_grace_time=grace_s)
        self.scheduler.reschedule_job(JOB_ID, trigger=trigger)

    def run_soon(self) -> None:
        """The sync job's next run now (after the run going, if any)."""
        self.scheduler.modify_job(JOB_ID, next_run_time=datetime.now().astimezone())

    def once(self, run: Callable[..., Any], name: str, *args: Any, **kwargs: Any) -> None:
        """A one-off job now, beside the sync job."""
        self.scheduler.add_job(
            run,
            "date",
            run_date=datetime.now().astimezone(),
            args=list(args),
            kwargs=kwargs,
            name=name,
            misfire_grace_time=None,
        )

    def next_run(self) -> str | None:
        """When the next run is due (ISO 8601), if one is scheduled."""
        job = self.scheduler.get_job(JOB_ID)
        when = getattr(job, "next_run_time", None)
        return when.isoformat(timespec="seconds") if when is not None else None

    def problem(self, *, run_in_flight: bool) -> str | None:
        """Why the schedule is not alive, or None."""
        if not self.scheduler.running:
            return "the scheduler is not running"
        job = self.scheduler.get_job(JOB_ID)
        when = getattr(job, "next_run_time", None)
        if when is None:
            return "no run is scheduled"
        late = datetime.now().astimezone() - when
        if late.total_seconds() > self._grace_s() and not run_in_flight:
            return f"the next run is {late.total_seconds():.0f} s overdue"
        return None

    def _on_event(self, event: JobEvent) -> None:
        # JobSubmissionEvent (max instances) has a list of times, JobExecutionEvent (missed) one.
        if isinstance(event, JobSubmissionEvent):
            times = event.scheduled_run_times
        else:
            times = [event.scheduled_run_time]
        due = times[-1].isoformat(timespec="seconds")
        if event.code == EVENT_JOB_MAX_INSTANCES and self._waiting():
            # one walk is still to come: the run waiting for a slot reads the source then
            log.info("daemon.run.late", due=due, reason="the run due is waiting for a slot")
        elif event.code == EVENT_JOB_MAX_INSTANCES:
            log.info("daemon.run.overlap_skipped", due=due, reason="the previous run is going")
        else:
            log.warning("daemon.run.missed", due=due, misfire_grace_s=self._grace_s())
