"""Keys a ``sync --only`` of another process left in the state for an idle daemon.

While a run goes, its urgent lane takes them; between runs the daemon still holds the
state's lock, so nobody else would: the daemon looks for them now and then.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from skuferry import logs
from skuferry.state.mirror import Mirror

# The daemon's logger: these events were always the daemon's, and tools match the logger.
log = logs.get("skuferry.service.daemon")

HANDED_POLL_S = 2.0  # how often an idle daemon looks for keys another process handed it
HANDED_LOOK_S = 30.0  # ... and reads the state for them even when its file looks unwritten


class HandedKeys:
    """Takes the handed keys out of the state, reading it only when it may hold new ones."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._polled = float("-inf")
        self._stamp: tuple[int, ...] = ()
        self._looked = float("-inf")

    def take(self, state_path: Path) -> list[str]:
        """The keys handed since the last look (taken out of the state); [] between polls."""
        now = self._clock()
        if now - self._polled < HANDED_POLL_S:
            return []
        self._polled = now
        # Nothing written since the last look: no new keys. A coarse file clock can hide a
        # write in the same tick, so every HANDED_LOOK_S the daemon looks all the same.
        stamp = _written(state_path)
        if stamp == self._stamp and now - self._looked < HANDED_LOOK_S:
            return []
        self._stamp, self._looked = stamp, now
        try:
            mirror = Mirror(state_path)
            try:
                handed = mirror.take_handed_keys()
            finally:
                mirror.close()
        except Exception as exc:  # noqa: BLE001 - sqlite3.Error or StateError; next tick again
            log.warning("daemon.handed.read_failed", error=str(exc))
            return []
        return handed


def _written(state_path: Path) -> tuple[int, ...]:
    """When the state file (or its write-ahead log) was last written: a cheap change test."""
    stamp: list[int] = []
    for path in (state_path, state_path.with_name(state_path.name + "-wal")):
        try:
            found = path.stat()
        except OSError:
            stamp += [0, 0]
        else:
            stamp += [found.st_mtime_ns, found.st_size]
    return tuple(stamp)
