"""Has a source changed since the token stored for it? One answer for every user.

A source's change token is its ``Source.change_token(previous)``; ``source_signature``
asks it from the settings alone, for a ``[[join]]`` (is its index current?) and for the
run's skip decision, which asks the primary source's own ``change_token`` the same
way. ``None`` means "cannot tell": the source is read every run.

- a local file: its ``stat()`` (``file_change_token``): size, mtime and ctime (ns),
  inode and device; none within ``RACY_S`` of a change;
- a file at an http(s) URL: its ``ETag`` (else ``Last-Modified``) by a conditional GET
  that sends the stored token back (``probe_http``): a ``304`` keeps it and no body is
  sent; a server that sends neither header gives none;
- a SQL ``table`` with an ``updated_column``: its row count and the column's maximum.

SFTP files, paginated HTTP APIs and SQL queries have none: they are read every run.
"""

from __future__ import annotations

import threading
from pathlib import Path

from skuferry.config.schema import FileSourceSettings, SourceSettings
from skuferry.sources.change_token import file_change_token
from skuferry.sources.dispatch import open_source


def source_signature(
    settings: SourceSettings, previous: str | None = None, *, stop: threading.Event | None = None
) -> str | None:
    """The change token of the data ``settings`` points at, or None when it cannot be told.

    ``previous`` is the token stored for it (a remote file sends it back as a
    conditional request); nothing is read. ``stop`` is handed to the source as it opens.
    """
    if isinstance(settings, FileSourceSettings) and settings.remote_scheme() is None:
        # what each local file source's change token is, without importing its reader
        # (openpyxl for xlsx): a no-op run stays a stat()
        return file_change_token(Path(settings.path))
    return open_source(settings, stop=stop).change_token(previous)
