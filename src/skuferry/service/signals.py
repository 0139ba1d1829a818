"""The daemon's signals: SIGTERM and SIGINT ask for a stop, SIGHUP for a reload.

The handlers only ask (the daemon puts a command on a queue whose ``put`` is safe in
a signal handler); stopping and reloading happen in the main loop's ordinary code.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any


@contextmanager
def stop_and_reload_on_signals(
    stop: Callable[[], None], reload: Callable[[], None], *, install: bool = True
) -> Iterator[None]:
    """Within the block, the signals call ``stop`` or ``reload``; the old handlers after it."""
    previous: dict[signal.Signals, Any] = {}
    if install:

        def on_stop(_signum: int, _frame: FrameType | None) -> None:
            stop()

        def on_hup(_signum: int, _frame: FrameType | None) -> None:
            reload()

        for signum, handler in (
            (signal.SIGTERM, on_stop),
            (signal.SIGINT, on_stop),
            (signal.SIGHUP, on_hup),
        ):
            previous[signum] = signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
