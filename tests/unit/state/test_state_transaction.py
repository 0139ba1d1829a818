"""The state's one transaction: committed when the block ends, rolled back when it raises."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from skuferry.state.transaction import transaction


@pytest.fixture
def path(tmp_path: Path) -> Iterator[Path]:
    file = tmp_path / "t.db"
    conn = sqlite3.connect(file, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (v INTEGER)")
    conn.close()
    yield file


def _open(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None, timeout=0.01)


def test_a_block_that_ends_is_committed(path: Path):
    conn = _open(path)
    with transaction(conn) as same:
        same.execute("INSERT INTO t VALUES (1)")
    assert not conn.in_transaction
    other = _open(path)
    assert other.execute("SELECT v FROM t").fetchall() == [(1,)]
    conn.close()
    other.close()


@pytest.mark.parametrize("error", [sqlite3.IntegrityError("x"), KeyboardInterrupt()])
def test_a_block_that_raises_is_rolled_back_and_the_error_goes_on(path: Path, error: BaseException):
    conn = _open(path)
    with pytest.raises(type(error)), transaction(conn):
        conn.execute("INSERT INTO t VALUES (1)")
        raise error
    assert not conn.in_transaction  # the connection is usable again at once
    assert conn.execute("SELECT count(*) FROM t").fetchone() == (0,)
    conn.close()


def test_immediate_takes_the_write_lock_up_front_and_deferred_does_not(path: Path):
    conn, other = _open(path), _open(path)
    with transaction(conn, begin="BEGIN"):
        conn.execute("SELECT count(*) FROM t").fetchone()
        with transaction(other):  # a deferred reader holds no write lock
            other.execute("INSERT INTO t VALUES (1)")
    with transaction(conn), pytest.raises(sqlite3.OperationalError, match="locked"):
        other.execute("BEGIN IMMEDIATE")  # the write lock is taken before any write
    conn.close()
    other.close()


def test_a_joining_block_is_part_of_the_caller_s_transaction_else_its_own(path: Path):
    conn = _open(path)
    with pytest.raises(KeyError), transaction(conn):
        with transaction(conn, begin="BEGIN", join=True):  # a buffer flushed mid-write
            conn.execute("INSERT INTO t VALUES (1)")
        assert conn.in_transaction  # the caller's is still open: the join did not commit it
        raise KeyError("the caller's write fails")
    assert conn.execute("SELECT count(*) FROM t").fetchone() == (0,)  # gone with it
    with transaction(conn, begin="BEGIN", join=True):  # nobody else's: its own
        conn.execute("INSERT INTO t VALUES (2)")
    assert not conn.in_transaction
    assert conn.execute("SELECT v FROM t").fetchall() == [(2,)]
    conn.close()
