"""The request budget's ledger in the state file: buckets, the log of sends, learnt paces.

Every process that uses one state file (the daemon, a cron run, the writer threads
of a run) spends the same keys, so their budget lives here, not in memory. Each of
the budget's decisions is one short transaction (``transact``): ``BEGIN IMMEDIATE``
for a decision that charges, so two processes never both spend the last slot;
a deferred ``BEGIN`` for one that only reads. While another process holds the write
lock, SQLite waits ``busy_timeout`` per attempt and the book tries again with a
growing pause, honouring a stop request between attempts.

Tables (the state's schema creates them): ``budget_bucket`` (one row per scope:
``tier`` is the scope's name, ``tokens``/``updated_at`` for the token bucket,
``blocked_until`` after a 429), ``budget_sends`` (the sliding window's log, indexed
by ``(tier, ts)``), and ``meta`` rows for the learnt paces. What the rows mean is
the budget's; this module only keeps them.

How many sends a scope's log holds (``logged``) is kept beside it, so that a decision
with room to spare costs a few index look-ups, not a count of the whole window (at a
raised budget the window holds thousands of sends, and counting them was most of a
create's cost). Two ``budget_bucket`` rows no release before used: ``<scope>~logged``
(``tokens``: the scope's sends in the log) and ``~log`` (``tokens``: the log's highest
rowid when the counts were last kept). A send logged by anything that does not keep
them (an older release sharing the file) leaves the highest rowid unaccounted for, and
the counts are taken again; rows deleted by it only leave a count too high, which the
budget corrects when it counts exactly (``set_logged``), near its limit.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from skuferry.errors import Interrupted, StateError
from skuferry.state.transaction import transaction

T = TypeVar("T")
Bucket = tuple[float, float, float]  # (tokens, updated_at, blocked_until)
Wait = Callable[[float, threading.Event | None], None]

_LOG_MARK = "~log"  # budget_bucket row: tokens = the send log's highest rowid accounted for
_LOGGED = "~logged"  # suffix of a scope's budget_bucket row: tokens = its sends in the log
_BUSY_TIMEOUT_MS = 2000  # per attempt; between attempts a stop request is honoured
_LOCK_ATTEMPTS = 15


def _default_wait(seconds: float, stop: threading.Event | None) -> None:
    if stop is not None:
        stop.wait(seconds)
    else:
        time.sleep(seconds)


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


class BudgetRows:
    """The ledger's rows inside one transaction on the book's connection."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def bucket(self, scope: str) -> Bucket | None:
        row = self._conn.execute(
            "SELECT tokens, updated_at, blocked_until FROM budget_bucket WHERE tier = ?", (scope,)
        ).fetchone()
        return (float(row[0]), float(row[1]), float(row[2])) if row else None

    def put_tokens(self, scope: str, tokens: float, updated_at: float) -> None:
        self._conn.execute(
            "INSERT INTO budget_bucket (tier, tokens, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT (tier) DO UPDATE SET tokens = excluded.tokens, "
            "updated_at = excluded.updated_at",
            (scope, tokens, updated_at),
        )

    def put_bucket(self, scope: str, bucket: Bucket) -> None:
        self._conn.execute(
            "INSERT INTO budget_bucket (tier, tokens, updated_at, blocked_until) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (tier) DO UPDATE SET tokens = excluded.tokens, "
            "updated_at = excluded.updated_at, blocked_until = excluded.blocked_until",
            (scope, *bucket),
        )

    def add_send(self, scope: str, at: float) -> None:
        cursor = self._conn.execute(
            "INSERT INTO budget_sends (tier, ts) VALUES (?, ?)", (scope, at)
        )
        top = cursor.lastrowid
        if top is not None:  # the counts stay kept only if they were up to the row before
            self._conn.execute(
                "UPDATE budget_bucket SET tokens = ? WHERE tier = ? AND tokens = ?",
                (top, _LOG_MARK, top - 1),
            )
        self._conn.execute(
            "UPDATE budget_bucket SET tokens = tokens + 1 WHERE tier = ?", (scope + _LOGGED,)
        )

    def logged(self, scope: str) -> int:
        """The scope's sends in the log (never fewer; after ``forget_sends(until)``, those
        after ``until``), from the count kept beside the log, taken again when stale."""
        conn = self._conn
        top = int(conn.execute("SELECT max(rowid) FROM budget_sends").fetchone()[0] or 0)
        mark = conn.execute("SELECT tokens FROM budget_bucket WHERE tier = ?", (_LOG_MARK,))
        found = mark.fetchone()
        if found is not None and int(found[0]) == top:
            kept = conn.execute(
                "SELECT tokens FROM budget_bucket WHERE tier = ?", (scope + _LOGGED,)
            ).fetchone()
            if kept is not None:
                return int(kept[0])
        else:  # sends this book did not count: every scope's count is taken again
            conn.execute("DELETE FROM budget_bucket WHERE tier LIKE ?", ("%" + _LOGGED,))
            conn.execute(
                "INSERT INTO budget_bucket (tier, tokens, updated_at) VALUES (?, ?, 0) "
                "ON CONFLICT (tier) DO UPDATE SET tokens = excluded.tokens",
                (_LOG_MARK, top),
            )
        (count,) = conn.execute(
            "SELECT count(*) FROM budget_sends WHERE tier = ?", (scope,)
        ).fetchone()
        self.set_logged(scope, int(count))
        return int(count)

    def set_logged(self, scope: str, count: int) -> None:
        """The scope's sends in the log, counted exactly."""
        self._conn.execute(
            "INSERT INTO budget_bucket (tier, tokens, updated_at) VALUES (?, ?, 0) "
            "ON CONFLICT (tier) DO UPDATE SET tokens = excluded.tokens",
            (scope + _LOGGED, count),
        )

    def count_sends(self, scope: str, since: float) -> int:
        # A send at ts counts while now < ts + window; index range (tier, ts).
        count: int = self._conn.execute(
            "SELECT count(*) FROM budget_sends WHERE tier = ? AND ts > ?", (scope, since)
        ).fetchone()[0]
        return count

    def sends(self, scope: str, since: float) -> list[float]:
        return [
            float(ts)
            for (ts,) in self._conn.execute(
                "SELECT ts FROM budget_sends WHERE tier = ? AND ts > ?", (scope, since)
            )
        ]

    def send_at(self, scope: str, since: float, index: int) -> float:
        (ts,) = self._conn.execute(
            "SELECT ts FROM budget_sends WHERE tier = ? AND ts > ? ORDER BY ts LIMIT 1 OFFSET ?",
            (scope, since, index),
        ).fetchone()
        return float(ts)

    def forget_sends(self, scope: str, until: float) -> None:
        cursor = self._conn.execute(
            "DELETE FROM budget_sends WHERE tier = ? AND ts <= ?", (scope, until)
        )
        if cursor.rowcount > 0:
            self._conn.execute(
                "UPDATE budget_bucket SET tokens = max(0, tokens - ?) WHERE tier = ?",
                (cursor.rowcount, scope + _LOGGED),
            )

    def metas(self, prefix: str) -> list[tuple[str, str]]:
        # A range on the primary key's index: every name that starts with the prefix
        # sorts at or after it and before the prefix with its last character raised.
        above = prefix[:-1] + chr(ord(prefix[-1]) + 1) if prefix else chr(0x10FFFF)
        try:
            rows = self._conn.execute(
                "SELECT name, value FROM meta WHERE name >= ? AND name < ?", (prefix, above)
            ).fetchall()
        except sqlite3.Error:
            return []
        return [(str(name)[len(prefix) :], str(value)) for name, value in rows]

    def put_meta(self, name: str, value: str) -> None:
        self._conn.execute("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", (name, value))


class BudgetBook:
    """The budget's ledger on one connection to the state file, shared by threads.

    ``connect`` opens the state file, migrated (the state schema's ``open_state``
    bound to its path); the book owns that connection and closes it. ``wait`` pauses
    between attempts while another process holds the lock.
    """

    def __init__(
        self, connect: Callable[[], sqlite3.Connection], *, wait: Wait | None = None
    ) -> None:
        self._wait = wait if wait is not None else _default_wait
        self._lock = threading.Lock()  # one connection, one transaction at a time
        self._closed = False
        self._conn = connect()
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            # Budget rows need no fsync per commit (up to ~20/s): losing the last ones
            # to a power cut costs at most a slightly early send after reboot.
            self._conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as exc:
            self._conn.close()
            raise StateError(f"cannot prepare the budget state: {exc}") from exc

    def transact(
        self,
        body: Callable[[BudgetRows], T],
        *,
        write: bool = True,
        stop: threading.Event | None = None,
    ) -> T:
        """Run ``body`` in one transaction; retry while another process holds the lock."""
        last: sqlite3.OperationalError | None = None
        for attempt in range(_LOCK_ATTEMPTS):
            with self._lock:
                try:
                    with transaction(self._conn, begin="BEGIN IMMEDIATE" if write else "BEGIN"):
                        return body(BudgetRows(self._conn))
                except sqlite3.OperationalError as exc:
                    if not _is_busy(exc):
                        raise StateError(f"budget state failed: {exc}") from exc
                    last = exc
                except sqlite3.Error as exc:
                    raise StateError(f"budget state failed: {exc}") from exc
            if stop is not None and stop.is_set():
                raise Interrupted("stopped while the budget state was locked")
            self._wait(min(0.05 * 2**attempt, 1.0), stop)
        raise StateError(f"budget state stayed locked by another process: {last}")

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()
