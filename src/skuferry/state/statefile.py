"""The state file opened: its one connection, read-only opening, and the one write.

A run opens the file read-write (``schema.open_state``: created and migrated as
needed); a dry run opens it read-only and unmigrated, so nothing it does can
change what the mirror says was sent. Every write of the mirror goes through
``StateFile._write``: one durable ``BEGIN IMMEDIATE`` transaction, its SQLite
errors translated into a ``StateError`` naming the file.

sqlite-utils serves the reads made for a person (``db``); its import (50-100 ms)
would land on the no-op run, so it is made on first use.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite_utils

from skuferry.errors import StateError
from skuferry.state import schema
from skuferry.state.transaction import transaction


def open_readonly(path: Path) -> sqlite3.Connection:
    """The state file, read-only and unmigrated; an empty in-memory schema when it is missing.

    An older file is copied into memory and migrated there, so a dry run after an
    upgrade still works and the file stays untouched. (SQLite may create the WAL's
    empty ``-wal``/``-shm`` side files to read a WAL database; the file itself is
    never written.)
    """
    memory = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    if not path.exists():
        schema.migrate(memory, path=path)
        return memory
    conn: sqlite3.Connection | None = None
    try:
        conn = sqlite3.connect(
            f"{path.resolve().as_uri()}?mode=ro",
            uri=True,
            isolation_level=None,
            check_same_thread=False,
        )
        found = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if found > schema.SCHEMA_VERSION:
            raise StateError(
                f"state file {path} has schema version {found}, newer than this skuferry "
                f"understands ({schema.SCHEMA_VERSION}); upgrade skuferry"
            )
        if found == schema.SCHEMA_VERSION:
            memory.close()
            return conn
        conn.backup(memory)
    except sqlite3.Error as exc:
        memory.close()
        if conn is not None:
            conn.close()
        raise StateError(f"cannot read state file {path}: {exc}") from exc
    except StateError:
        memory.close()
        if conn is not None:
            conn.close()
        raise
    conn.close()
    schema.migrate(memory, path=path)
    return memory


class StateFile:
    """The open state file every part of the mirror reads and writes through."""

    def __init__(
        self, path: Path, *, readonly: bool = False, clock: Callable[[], float] = time.time
    ) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self._clock = clock
        self._conn = open_readonly(self.path) if readonly else schema.open_state(self.path)
        self._db: sqlite_utils.Database | None = None  # made on first use (an import ~50 ms)
        # The run this connection records for (``RunBook.start_run``): the history's rows
        # carry it. ``keep_history``: False when ``[state] history_days = 0``.
        self.run_id: int | None = None
        self.keep_history = True
        self._batched = False  # inside ``batch``: each write joins its transaction

    @property
    def db(self) -> sqlite_utils.Database:
        """sqlite-utils over this connection, for the reads made for a person (not a run's)."""
        if self._db is None:
            self._db = schema.database(self._conn)
        return self._db

    def close(self) -> None:
        self._conn.close()

    # plain sqlite3: a run's hot path (bench statelib: sqlite-utils ~half the commits/s)
    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One durable transaction; a state file that fails a write is a StateError.
        Inside ``batch`` it is part of the batch's transaction."""
        if self.readonly:
            raise RuntimeError("the mirror was opened read-only (dry run); nothing may be written")
        try:
            with transaction(self._conn, join=self._batched) as conn:
                yield conn
        except sqlite3.Error as exc:
            raise StateError(f"cannot write state file {self.path}: {exc}") from exc

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Group commit: every write of the block joins one durable transaction, committed
        when the block ends (rolled back whole when it raises). The writer journals the
        writes that are ready together this way, and records their outcomes, so a batch
        costs one commit (one fsync) instead of one per write; nothing of it is durable,
        and so no request that depends on it may leave, before the block has ended."""
        if self._batched:
            yield
            return
        with self._write():
            self._batched = True
            try:
                yield
            finally:
                self._batched = False
