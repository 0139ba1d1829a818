"""Files that hold catalog data or secrets: created owner-only, whatever the umask.

The state file (every payload ever sent, remote ids), its WAL/SHM side files
and its lock are created ``0600`` in folders created ``0700``. SQLite gives the
side files the mode of the database file, so creating the database file first
(here) is what makes them private too. Existing files are never chmod-ed behind
the operator's back: ``loose_mode_warning`` says which ``chmod`` to run.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700


def private_dir(path: Path) -> Path:
    """Create ``path`` and its missing parents ``0700``; leave existing folders as they are."""
    missing: list[Path] = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    for created in missing:  # mkdir's mode is masked by the umask; chmod is not
        with contextlib.suppress(FileNotFoundError):
            created.chmod(PRIVATE_DIR)
    return path


def create_private(path: Path) -> bool:
    """Create ``path`` empty and ``0600`` if it does not exist; True when it was created.

    ``O_EXCL`` so that a file made meanwhile by someone else is left alone, and
    ``fchmod`` because the mode given to ``open`` is masked by the umask.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, PRIVATE_FILE)
    except FileExistsError:
        return False
    try:
        os.fchmod(fd, PRIVATE_FILE)
    finally:
        os.close(fd)
    return True


def others_can_read(path: Path) -> bool:
    """True when the group or others may read ``path`` (False when it does not exist)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return bool(mode & (stat.S_IRGRP | stat.S_IROTH))


def world_readable(path: Path) -> bool:
    """True when every user of the box may read ``path``."""
    try:
        return bool(path.stat().st_mode & stat.S_IROTH)
    except OSError:
        return False


def mode_text(path: Path) -> str:
    return f"{stat.S_IMODE(path.stat().st_mode):04o}"


def loose_mode_warning(path: Path, *, what: str) -> str | None:
    """A sentence naming ``path`` and the ``chmod`` to run when others may read it, else None."""
    if not others_can_read(path):
        return None
    return (
        f"{what} {path} is readable by other users (mode {mode_text(path)}); run: chmod 600 {path}"
    )


def write_private(path: Path, text: str, *, overwrite: bool = False) -> None:
    """Write ``text`` to ``path`` as a file only its owner may read (``0600``).

    Without ``overwrite`` an existing file is left alone (``FileExistsError``); with it,
    the new content replaces the old at once (a private temporary file renamed over it),
    so a reader never sees half a file.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    target = path.with_name(f".{path.name}.{os.getpid()}.tmp") if overwrite else path
    fd = os.open(target, flags, PRIVATE_FILE)
    try:
        os.fchmod(fd, PRIVATE_FILE)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        if overwrite:
            target.unlink(missing_ok=True)
        raise
    if overwrite:
        target.replace(path)
