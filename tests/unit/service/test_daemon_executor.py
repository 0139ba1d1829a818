"""The daemon's executor against a real APScheduler 3: the behaviour its public base promises.

``ThreadPerRunExecutor`` is APScheduler's ``BasePoolExecutor`` on a pool of daemon
threads. It relies on APScheduler to submit ``run_job``, count instances for
``max_instances`` and dispatch the job's events; these tests fail if an upgrade
changes any of that (pyproject.toml pins ``apscheduler>=3.11,<4``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from apscheduler.events import (
    EVENT_JOB_ERROR,
    EVENT_JOB_EXECUTED,
    EVENT_JOB_MAX_INSTANCES,
    JobEvent,
    JobExecutionEvent,
)
from apscheduler.schedulers.background import BackgroundScheduler

from skuferry.service.run_threads import ThreadPerRunExecutor

WAIT_S = 30.0  # only a bound on a hang: every wait below ends on an event


@pytest.fixture
def scheduler() -> Iterator[tuple[BackgroundScheduler, ThreadPerRunExecutor, list[JobEvent]]]:
    executor = ThreadPerRunExecutor()
    sched = BackgroundScheduler(executors={"default": executor})
    events: list[JobEvent] = []
    seen = threading.Condition()

    def listen(event: JobEvent) -> None:
        with seen:
            events.append(event)
            seen.notify_all()

    sched.add_listener(listen, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR | EVENT_JOB_MAX_INSTANCES)
    sched.start()
    try:
        yield sched, executor, events
    finally:
        sched.shutdown(wait=False)
        assert executor.join(WAIT_S)


def _wait_for(events: list[JobEvent], code: int) -> JobEvent:
    done = threading.Event()
    for _ in range(int(WAIT_S * 100)):
        found = [e for e in events if e.code == code]
        if found:
            return found[0]
        done.wait(0.01)
    raise AssertionError(f"no event {code} in {events}")


def _now() -> datetime:
    return datetime.now().astimezone()


def test_a_job_runs_in_a_daemon_thread_and_its_result_is_an_event(scheduler: Any) -> None:
    sched, _executor, events = scheduler
    ran_in: list[threading.Thread] = []

    def job() -> str:
        ran_in.append(threading.current_thread())
        return "done"

    sched.add_job(job, id="run", next_run_time=_now())
    event = _wait_for(events, EVENT_JOB_EXECUTED)
    assert isinstance(event, JobExecutionEvent) and event.retval == "done"
    assert event.job_id == "run" and event.jobstore == "default"
    assert ran_in[0].daemon and ran_in[0].name == "skuferry-run"


def test_a_failing_job_is_an_error_event(scheduler: Any) -> None:
    sched, _executor, events = scheduler

    def job() -> None:
        raise RuntimeError("boom")

    sched.add_job(job, id="run", next_run_time=_now())
    event = _wait_for(events, EVENT_JOB_ERROR)
    assert isinstance(event, JobExecutionEvent) and isinstance(event.exception, RuntimeError)


def test_a_second_run_while_one_is_in_flight_is_refused_and_join_waits(scheduler: Any) -> None:
    sched, executor, events = scheduler
    started, release = threading.Event(), threading.Event()

    def job() -> None:
        started.set()
        release.wait(WAIT_S)

    sched.add_job(
        job, "interval", hours=1, id="run", next_run_time=_now(), max_instances=1, coalesce=True
    )
    assert started.wait(WAIT_S)
    try:
        assert executor.busy()
        assert not executor.join(0.0)  # still going at the deadline
        sched.modify_job("run", next_run_time=_now())  # fire again while it runs
        _wait_for(events, EVENT_JOB_MAX_INSTANCES)
    finally:
        release.set()
    assert executor.join(WAIT_S)
    assert not executor.busy()
    _wait_for(events, EVENT_JOB_EXECUTED)
