"""One run as a verb runs it: the stop signals, the progress bar, the monitoring hooks.

``sync``, ``plan`` and ``retry`` run the engine through ``one_run``; the daemon has its
own schedule and signals, and shares only the hooks (the runner's ``run_watched``).
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the engine's imports wait until a run is asked for
    from skuferry.config.schema import Settings
    from skuferry.models import RunOptions, RunSummary

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGTERM (systemctl stop, a timeout) or Ctrl-C, while inside.

    A run that sees it stops sending, lets the requests in flight finish and be
    committed, and reports itself interrupted (exit 130). The handlers of before are
    put back on the way out.
    """
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in STOP_SIGNALS}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def one_run(settings: Settings, options: RunOptions, *, quiet: bool, watched: bool) -> RunSummary:
    """One run of the engine between the hooks; what it raised is raised again here.

    ``watched=False`` (a dry run) pings no monitor and writes no metrics; the progress
    bar shows on a terminal unless ``quiet``, and off one a ``sync.progress`` event is
    logged every 30 s instead.
    """
    from skuferry.service import report
    from skuferry.service.runner import run_watched
    from skuferry.sync import engine

    with (
        stop_on_signals() as stop,
        report.progress(enabled=not quiet and sys.stderr.isatty(), quiet=quiet) as on_progress,
    ):
        outcome = run_watched(
            settings,
            lambda: engine.run_once(settings, options, stop=stop, on_progress=on_progress),
            watched=watched,
        )
    if outcome.exception is not None:
        raise outcome.exception  # the hooks have seen it; the command line's edge words it
    if outcome.summary is None:  # pragma: no cover - an outcome holds one or the other
        raise RuntimeError("a run ended with neither a summary nor an error")
    return outcome.summary
