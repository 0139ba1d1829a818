"""A source's *signature*: a short text that changes whenever its data may have changed.

Used to skip re-reading a ``[[join]]`` source that did not change since the last
run (``sync/joins.py``). ``None`` means "cannot tell": the source is read every run.

- a local file: its size, modification time (ns) and inode (a file replaced by a
  rename gets a new inode even when size and time look the same);
- a file at an http(s) URL: the ``ETag`` and ``Last-Modified`` a HEAD request
  answers (None when the server sends neither);
- a SQL ``table`` with an ``updated_column``: its row count and the column's maximum.

SFTP files, paginated HTTP APIs and SQL queries have none: they are read every run.
"""

from __future__ import annotations

from pathlib import Path

from skuferry.config.schema import FileSourceSettings, SourceSettings, SqlSourceSettings


def source_signature(settings: SourceSettings) -> str | None:
    """The signature of the data ``settings`` points at, or None when it cannot be told."""
    if isinstance(settings, FileSourceSettings):
        scheme = settings.remote_scheme()
        if scheme in ("http", "https"):
            from skuferry.sources.fetch_http import head_signature  # httpx: only when needed

            return head_signature(settings)
        if scheme is not None:
            return None
        try:
            found = Path(settings.path).stat()
        except OSError:
            return None  # reading it will say what is wrong
        return f"file:{found.st_size}:{found.st_mtime_ns}:{found.st_ino}"
    if isinstance(settings, SqlSourceSettings):
        from skuferry.sources.sql import open_sql_source  # SQLAlchemy: only when needed

        return open_sql_source(settings).signature()
    return None
