"""One SQLite transaction, begun, committed, or rolled back: the state's one way to write.

Every connection to the state file is opened with ``isolation_level=None``, so nothing
commits by accident and each writer says where its transaction starts and ends. This
is that start and end: ``BEGIN IMMEDIATE`` (the default) takes the write lock up front,
so a read-modify-write never finds at its first write that another process got there
first; ``BEGIN`` is a deferred one, for reads that must see one consistent snapshot.
Whatever leaves the block early (an SQLite error, a programming error, a stop) rolls
the transaction back, so the connection is never left inside one. Translating SQLite's
errors into ``StateError`` is each caller's: only it can name what failed.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

Begin = Literal["BEGIN IMMEDIATE", "BEGIN"]


@contextmanager
def transaction(
    conn: sqlite3.Connection, *, begin: Begin = "BEGIN IMMEDIATE", join: bool = False
) -> Iterator[sqlite3.Connection]:
    """Run the block in one transaction on ``conn``: committed when it ends, rolled back
    when it raises (the exception goes on).

    ``join``: when ``conn`` is inside a transaction already (its caller's), the block is
    part of that one, which its owner commits or rolls back; a buffer flushed in the
    middle of a larger write then lands with it.
    """
    if join and conn.in_transaction:
        yield conn
        return
    conn.execute(begin)
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
