"""A source's *signature*: a short text that changes whenever its data may have changed.

Used to skip re-reading a ``[[join]]`` source that did not change since the last
run (``sync/joins.py``). ``None`` means "cannot tell": the source is read every run.

- a local file: its ``stat()`` as the source's own fingerprint takes it
  (``sources/fingerprint.py``): size, mtime and ctime (ns), inode and device. An edit
  that keeps the size and puts the old mtime back still moves the ctime; a file
  changed within the last ``RACY_S`` has none (read again until it settles);
- a file at an http(s) URL: the ``ETag`` and ``Last-Modified`` a HEAD request
  answers (None when the server sends neither);
- a SQL ``table`` with an ``updated_column``: its row count and the column's maximum.

SFTP files, paginated HTTP APIs and SQL queries have none: they are read every run.
"""

from __future__ import annotations

from pathlib import Path

from skuferry.config.schema import FileSourceSettings, SourceSettings, SqlSourceSettings
from skuferry.sources.fingerprint import file_fingerprint


def source_signature(settings: SourceSettings) -> str | None:
    """The signature of the data ``settings`` points at, or None when it cannot be told."""
    if isinstance(settings, FileSourceSettings):
        scheme = settings.remote_scheme()
        if scheme in ("http", "https"):
            from skuferry.sources.fetch_http import head_signature  # httpx: only when needed

            return head_signature(settings)
        if scheme is not None:
            return None
        return file_fingerprint(Path(settings.path))  # None when missing: the read says why
    if isinstance(settings, SqlSourceSettings):
        from skuferry.sources.sql import open_sql_source  # SQLAlchemy: only when needed

        return open_sql_source(settings).signature()
    return None
