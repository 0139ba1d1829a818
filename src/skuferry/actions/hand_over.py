"""A named run while another run holds the lock: the keys go to that run's urgent lane.

``sync --only KEY ...`` while a run is writing: the keys wait in the state file until
the running run's urgent lane takes them; when that run ends first, this process runs
them itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from skuferry import errors
from skuferry.config.schema import Settings
from skuferry.models import RunSummary
from skuferry.state.lock import run_lock
from skuferry.state.mirror import Mirror

HAND_OVER_WAIT_S = 120.0


def hand_over(
    settings: Settings,
    keys: Sequence[str],
    run_here: Callable[[], RunSummary],
    *,
    wait_s: float = HAND_OVER_WAIT_S,
    poll_s: float = 0.25,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> RunSummary | None:
    """Give ``keys`` to the run holding the lock (None once it took them), or run them here.

    The keys wait in the state file (meta rows ``lane.<key>``) until the running run's
    urgent lane takes them. If that run ends first, ``run_here()`` runs them in this
    process. Raises ``LockHeld`` when neither happened within ``wait_s``: the keys stay
    queued, for the running run or the next one.
    """
    mirror = Mirror(settings.state.path)
    try:
        mirror.hand_keys(keys)
        deadline = clock() + wait_s
        while True:
            waiting = set(mirror.handed_keys()) & set(keys)
            if not waiting:
                return None  # the running run took them all
            try:
                with run_lock(settings.state.path):
                    pass
            except errors.LockHeld:
                if clock() >= deadline:
                    raise errors.LockHeld(
                        f"another skuferry run holds the lock and did not take the "
                        f"{len(waiting)} key(s) within {wait_s:.0f} s (it may still be reading "
                        "its source); they stay queued for its urgent lane or the next run"
                    ) from None
                sleep(poll_s)
                continue
            # the other run ended: run them here (the lock is free; the run takes it)
            mirror.withdraw_handed_keys(keys)
            return run_here()
    finally:
        mirror.close()
