"""A source's *signature*: a short text that changes whenever its data may have changed.

Used to skip re-reading a ``[[join]]`` source that did not change since the last
run (``sync/joins.py``). ``None`` means "cannot tell": the source is read every run.

- a local file: its size, modification time (ns) and inode (a file replaced by a
  rename gets a new inode even when size and time look the same).

Remote files, HTTP APIs and SQL tables are read every run for now.
"""

from __future__ import annotations

from pathlib import Path

from skuferry.config.models import SourceSettings
from skuferry.config.sources import FileSourceSettings


def source_signature(settings: SourceSettings) -> str | None:
    """The signature of the data ``settings`` points at, or None when it cannot be told."""
    if isinstance(settings, FileSourceSettings) and not settings.remote_scheme():
        try:
            found = Path(settings.path).stat()
        except OSError:
            return None  # reading it will say what is wrong
        return f"file:{found.st_size}:{found.st_mtime_ns}:{found.st_ino}"
    return None
