"""One writer per state file: an advisory lock beside it.

``flock`` is released by the kernel when the process dies (kill -9
included), so a crashed run never leaves a stale lock behind.

``run_lock`` holds it for one run. A daemon ``hold``s it for as long as it serves
the state, between runs too, so a second process on the same state (a ``sync`` from
a shell, a second daemon) exits 75 even while the daemon is idle. The holder's own
runs still take ``run_lock``: inside the process that holds the state, it lets them
through (the holder runs one at a time), so the engine needs no token.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from skuferry import files
from skuferry.errors import LockHeld, StateError

_held: dict[str, Held] = {}  # the lock files this process holds, by real path
_held_guard = threading.Lock()


def lock_path(state_path: Path) -> Path:
    return state_path.with_name(state_path.name + ".lock")


def _take(path: Path) -> int:
    """An open descriptor of ``path`` holding its exclusive lock; LockHeld at once if taken."""
    try:
        files.private_dir(path.parent)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise StateError(f"cannot open the lock file {path}: {exc.strerror}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise LockHeld(
            f"another skuferry run (pid {holder}) holds {path}; nothing was done"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


class Held:
    """The state's lock, held until ``release``: what a daemon keeps while it serves a state."""

    def __init__(self, state_path: Path) -> None:
        path = lock_path(state_path)
        self.key = os.path.realpath(path)
        with _held_guard:
            if self.key in _held:  # two workspaces of one process on one state
                raise LockHeld(f"this process already serves the state of {path}")
            self._fd: int | None = _take(path)
            _held[self.key] = self

    def release(self) -> None:
        with _held_guard:
            if self._fd is None:
                return
            _held.pop(self.key, None)
            os.close(self._fd)
            self._fd = None


def hold(state_path: Path) -> Held:
    """Hold the state's lock until ``release()``, or raise ``LockHeld`` at once."""
    return Held(state_path)


def held_here(state_path: Path) -> bool:
    """Whether this process holds the state's lock with ``hold``."""
    with _held_guard:
        return os.path.realpath(lock_path(state_path)) in _held


@contextmanager
def run_lock(state_path: Path) -> Iterator[None]:
    """Hold the state's lock for the duration, or raise ``LockHeld`` at once.

    Free at once when this process ``hold``s it already: the holder runs its own runs.
    """
    if held_here(state_path):
        yield
        return
    fd = _take(lock_path(state_path))
    try:
        yield
    finally:
        os.close(fd)
