"""One run at a time per state file: an advisory lock beside it.

``flock`` is released by the kernel when the process dies (kill -9
included), so a crashed run never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from skuferry import files
from skuferry.errors import LockHeld, StateError


def lock_path(state_path: Path) -> Path:
    return state_path.with_name(state_path.name + ".lock")


@contextmanager
def run_lock(state_path: Path) -> Iterator[None]:
    """Hold the state's lock for the duration, or raise ``LockHeld`` at once."""
    path = lock_path(state_path)
    try:
        files.private_dir(path.parent)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise StateError(f"cannot open the lock file {path}: {exc.strerror}") from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "another process"
            raise LockHeld(
                f"another skuferry run (pid {holder}) holds {path}; nothing was done"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)
