"""The state file's schema and its migrations.

One SQLite file holds the mirror (products, intents, runs) and the shared rate
budgets. Migrations are numbered and recorded in ``PRAGMA user_version``, so an
older state file is upgraded in place and a newer one is refused, never misread.
Add a migration by appending to ``MIGRATIONS``; never edit a released one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from skuferry import files, logs
from skuferry.errors import StateError

log = logs.get(__name__)

Migration = Callable[[sqlite3.Connection], None]


def _run(conn: sqlite3.Connection, script: str) -> None:
    # executescript() would COMMIT the migration's transaction; run statements one by one.
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement)


def _m1_initial(conn: sqlite3.Connection) -> None:
    _run(
        conn,
        """
        CREATE TABLE products (
            key TEXT PRIMARY KEY,
            state TEXT NOT NULL,
            digest TEXT,
            payload TEXT,
            remote_id TEXT,
            last_error TEXT,
            attempts INTEGER NOT NULL DEFAULT 0,
            source_line INTEGER,
            first_seen REAL NOT NULL,
            updated_at REAL NOT NULL,
            synced_at REAL
        );
        CREATE INDEX products_state ON products(state);

        CREATE TABLE intents (
            key TEXT PRIMARY KEY,
            digest TEXT NOT NULL,
            payload TEXT NOT NULL,
            run_id INTEGER,
            started_at REAL NOT NULL
        );

        CREATE TABLE runs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            started_at REAL NOT NULL,
            finished_at REAL,
            status TEXT NOT NULL,
            exit_code INTEGER,
            summary TEXT
        );

        CREATE TABLE meta (
            name TEXT PRIMARY KEY,
            value TEXT
        );

        CREATE TABLE budget_bucket (
            tier TEXT PRIMARY KEY,
            tokens REAL NOT NULL,
            updated_at REAL NOT NULL,
            blocked_until REAL NOT NULL DEFAULT 0
        );

        CREATE TABLE budget_sends (
            tier TEXT NOT NULL,
            ts REAL NOT NULL
        );
        CREATE INDEX budget_sends_tier_ts ON budget_sends(tier, ts);
        """,
    )


def _m2_rejected_digest(conn: sqlite3.Connection) -> None:
    # A REJECTED row must remember both the digest the API refused (not resent until the
    # data change) and the digest last confirmed on the remote (kept in ``digest``).
    _run(
        conn,
        """
        ALTER TABLE products ADD COLUMN rejected_digest TEXT;
        CREATE INDEX products_state_updated ON products(state, updated_at)
        """,
    )


def _m3_source_fingerprint(conn: sqlite3.Connection) -> None:
    # A hash of the source values (and mapping) that produced ``digest``: an unchanged
    # row is then recognised without mapping it again (the no-op run's main cost).
    conn.execute("ALTER TABLE products ADD COLUMN source_fingerprint TEXT")


def _m4_last_sent(conn: sqlite3.Connection) -> None:
    # Updates carry only the fields that changed since skuferry last sent them
    # (sync/fields.py): the payload last confirmed on the remote is exactly that.
    conn.execute("ALTER TABLE products RENAME COLUMN payload TO sent")


def _m5_dead_letters(conn: sqlite3.Connection) -> None:
    # Products refused or failed, with the stage that refused them (state/deadletters.py):
    # what `skuferry rejected` lists and `skuferry retry` sends again. One row per key, or
    # per source line for a record without a key ('#<line>').
    _run(
        conn,
        """
        CREATE TABLE dead_letters (
            slot TEXT PRIMARY KEY,
            key TEXT,
            stage TEXT NOT NULL,
            reason TEXT NOT NULL,
            status INTEGER,
            message TEXT,
            source TEXT,
            line INTEGER,
            first_seen REAL NOT NULL,
            last_seen REAL NOT NULL
        );
        CREATE INDEX dead_letters_key ON dead_letters(key);
        CREATE INDEX dead_letters_stage ON dead_letters(stage)
        """,
    )


MIGRATIONS: list[Migration] = [
    _m1_initial,
    _m2_rejected_digest,
    _m3_source_fingerprint,
    _m4_last_sent,
    _m5_dead_letters,
]
SCHEMA_VERSION = len(MIGRATIONS)


def connect(path: Path | str, *, timeout_s: float = 30.0) -> sqlite3.Connection:
    """Open the state file (created if missing) with the pragmas every user needs.

    ``isolation_level=None``: callers manage transactions explicitly
    (``BEGIN IMMEDIATE`` for read-modify-write), so nothing commits by accident.
    """
    try:
        if str(path) != ":memory:":  # 0600 whatever the umask; SQLite gives -wal/-shm its mode
            files.create_private(Path(path))
        conn = sqlite3.connect(
            str(path), timeout=timeout_s, isolation_level=None, check_same_thread=False
        )
        conn.execute("PRAGMA journal_mode=WAL")
        # FULL: a committed write intent must survive power loss, not only kill -9.
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA temp_store=FILE")
    except (sqlite3.Error, OSError) as exc:
        raise StateError(f"cannot open state file {path}: {exc}") from exc
    return conn


def migrate(conn: sqlite3.Connection, *, path: Path | str = "state") -> int:
    """Bring the schema up to ``SCHEMA_VERSION``; return the version found before."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        found = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if found > SCHEMA_VERSION:
            conn.execute("ROLLBACK")
            raise StateError(
                f"state file {path} has schema version {found}, newer than this "
                f"skuferry understands ({SCHEMA_VERSION}); upgrade skuferry"
            )
        for number in range(found, SCHEMA_VERSION):
            MIGRATIONS[number](conn)
            conn.execute(f"PRAGMA user_version = {number + 1}")
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise StateError(f"cannot migrate state file {path}: {exc}") from exc
    return found


def open_state(path: Path | str) -> sqlite3.Connection:
    """Open and migrate the state file, creating its folder when missing."""
    p = Path(path)
    try:
        files.private_dir(p.parent)
    except OSError as exc:
        raise StateError(f"cannot create the state folder {p.parent}: {exc}") from exc
    loose = files.loose_mode_warning(p, what="state file")
    if loose:
        log.warning("state.file.readable", path=str(p), message=loose)
    conn = connect(p)
    migrate(conn, path=p)
    return conn
