"""One run with everything around it, the same for ``skuferry sync`` and the daemon.

``run_watched(settings, job)``: the monitor's start ping, the job, its timing,
then the metrics textfile and the finish ping (the run hooks), and the
``RunOutcome`` that says how it went. A run that returned a summary has one duration,
the summary's (the engine's); the wrapper's clock times only a run that raised. It
never raises what the job raised: the outcome carries it (``outcome.exception``), so
the daemon logs it and keeps its schedule, while ``sync`` re-raises it for the CLI
edge to word and map to an exit code. A ``BaseException`` (KeyboardInterrupt, a crash)
is not a run's outcome and passes through untouched.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from skuferry.config.schema import Settings
from skuferry.models import RunSummary
from skuferry.service import hooks
from skuferry.service.metrics import RunOutcome


def _never() -> bool:
    return False


def run_watched(
    settings: Settings,
    job: Callable[[], RunSummary],
    *,
    watched: bool = True,
    stopping: Callable[[], bool] = _never,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
) -> RunOutcome:
    """Run ``job`` (one sync) between the hooks; ``watched=False`` (a dry run) skips them.

    ``stopping()`` true at the end (SIGTERM) keeps the finish ping inside the stop deadline.
    """
    if watched:
        hooks.before_run(settings)
    started = clock()
    try:
        summary = job()
    except Exception as exc:  # noqa: BLE001 - the outcome carries it; callers decide
        outcome = RunOutcome.from_error(exc, duration_s=clock() - started, finished_at=wall_clock())
    else:  # the run's one duration: the one its JSON summary reports
        outcome = RunOutcome.from_summary(
            summary, duration_s=summary.duration_s, finished_at=wall_clock()
        )
    if watched:
        hooks.after_run(settings, outcome, stopping=stopping())
    return outcome
