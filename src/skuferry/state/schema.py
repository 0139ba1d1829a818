"""The state file's schema and its migrations.

One SQLite file holds the mirror (products, intents, runs) and the shared rate
budgets. Migrations are numbered and recorded in ``PRAGMA user_version``, so an
older state file is upgraded in place and a newer one is refused, never misread.
Add a migration by appending to ``MIGRATIONS``; never change what a released one
leaves behind (the tests keep state files as released versions
wrote them, and the tests check they upgrade to the shape of a fresh file).

The migrations are written with sqlite-utils (``Table.create``, ``add_column``,
``create_index``), each step checking what is there first (``table_names``,
``columns_dict``, ``IF NOT EXISTS``): a file whose ``user_version`` was lost
(restored from ``sqlite3 .dump``, which does not carry it) upgrades instead of
failing on a table that exists. Two steps stay SQL, each saying why. sqlite-utils
is imported only when a migration runs: opening an up-to-date file (every run
after the first, and the no-op run's whole cost) reads ``user_version`` and no
more. Connections, pragmas and the file mode are plain ``sqlite3`` (``connect``).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from skuferry import canonical, files, logs
from skuferry.errors import StateError
from skuferry.state.transaction import transaction

if TYPE_CHECKING:
    import sqlite_utils

log = logs.get(__name__)

Migration = Callable[[sqlite3.Connection], None]


def database(conn: sqlite3.Connection) -> sqlite_utils.Database:
    """sqlite-utils over one of our connections (imported here: ~50 ms, off the no-op path).

    It runs inside the caller's transaction (sqlite-utils nests its writes in a SAVEPOINT
    then), changes no pragma of the connection and loads no plugin into it.
    """
    import sqlite_utils

    return sqlite_utils.Database(conn, recursive_triggers=False, execute_plugins=False)


def _m1_initial(conn: sqlite3.Connection) -> None:
    db = database(conn)
    db.table("products").create(
        {
            "key": str,
            "state": str,
            "digest": str,
            "payload": str,  # renamed ``sent`` by migration 4
            "remote_id": str,
            "last_error": str,
            "attempts": int,
            "source_line": int,
            "first_seen": float,
            "updated_at": float,
            "synced_at": float,
        },
        pk="key",
        not_null={"state", "attempts", "first_seen", "updated_at"},
        defaults={"attempts": 0},
        if_not_exists=True,
    )
    db.table("products").create_index(["state"], index_name="products_state", if_not_exists=True)
    db.table("intents").create(
        {"key": str, "digest": str, "payload": str, "run_id": int, "started_at": float},
        pk="key",
        not_null={"digest", "payload", "started_at"},
        if_not_exists=True,
    )
    # AUTOINCREMENT (a run id is never reused) is not in sqlite-utils' public create().
    conn.execute(
        "CREATE TABLE IF NOT EXISTS runs ("
        "id INTEGER PRIMARY KEY AUTOINCREMENT, started_at REAL NOT NULL, finished_at REAL, "
        "status TEXT NOT NULL, exit_code INTEGER, summary TEXT)"
    )
    db.table("meta").create({"name": str, "value": str}, pk="name", if_not_exists=True)
    db.table("budget_bucket").create(
        {"tier": str, "tokens": float, "updated_at": float, "blocked_until": float},
        pk="tier",
        not_null={"tokens", "updated_at", "blocked_until"},
        defaults={"blocked_until": 0},
        if_not_exists=True,
    )
    db.table("budget_sends").create(
        {"tier": str, "ts": float}, not_null={"tier", "ts"}, if_not_exists=True
    )
    db.table("budget_sends").create_index(
        ["tier", "ts"], index_name="budget_sends_tier_ts", if_not_exists=True
    )


def _m2_rejected_digest(conn: sqlite3.Connection) -> None:
    # A REJECTED row must remember both the digest the API refused (not resent until the
    # data change) and the digest last confirmed on the remote (kept in ``digest``).
    products = database(conn).table("products")
    if "rejected_digest" not in products.columns_dict:
        products.add_column("rejected_digest", str)
    products.create_index(
        ["state", "updated_at"], index_name="products_state_updated", if_not_exists=True
    )


def _m3_source_fingerprint(conn: sqlite3.Connection) -> None:
    # A hash of the source values (and mapping) that produced ``digest``: an unchanged
    # row is then recognised without mapping it again (the no-op run's main cost).
    products = database(conn).table("products")
    if "source_fingerprint" not in products.columns_dict:
        products.add_column("source_fingerprint", str)


def _m4_last_sent(conn: sqlite3.Connection) -> None:
    # Updates carry only the fields that changed since skuferry last sent them
    # (field ownership): the payload last confirmed on the remote is exactly that.
    if "payload" in database(conn).table("products").columns_dict:
        # SQL: SQLite renames a column in place; transform(rename=) copies the whole table.
        conn.execute("ALTER TABLE products RENAME COLUMN payload TO sent")


def _m5_dead_letters(conn: sqlite3.Connection) -> None:
    # Products refused or failed, with the stage that refused them:
    # what `skuferry rejected` lists and `skuferry retry` sends again. One row per key, or
    # per source line for a record without a key ('#<line>').
    letters = database(conn).table("dead_letters")
    letters.create(
        {
            "slot": str,
            "key": str,
            "stage": str,
            "reason": str,
            "status": int,
            "message": str,
            "source": str,
            "line": int,
            "first_seen": float,
            "last_seen": float,
        },
        pk="slot",
        not_null={"stage", "reason", "first_seen", "last_seen"},
        if_not_exists=True,
    )
    letters.create_index(["key"], index_name="dead_letters_key", if_not_exists=True)
    letters.create_index(["stage"], index_name="dead_letters_stage", if_not_exists=True)


def _m6_source_line_digest(conn: sqlite3.Connection) -> None:
    # A hash of the raw source line the row was last recognised from, bound to the
    # record digest beside it (the line route): a byte-identical line is then recognised
    # without being parsed. NULL (existing rows, sources read record by record): the
    # row is recognised by its record digest as before, and gets its line digest then.
    products = database(conn).table("products")
    if "source_line_digest" not in products.columns_dict:
        products.add_column("source_line_digest", bytes)


# Text holding a character outside ASCII: only such a key can be in another Unicode form
# (GLOB's classes compare code points; a filter in C before any row reaches Python).
_NON_ASCII = "*[^\x01-\x7f]*"
# A row in these states may stand for a product on the remote that its row cannot point to.
_MAY_EXIST = ("pending", "duplicate", "remote_only")


def _m7_nfc_keys(conn: sqlite3.Connection) -> None:
    # Keys compare and are stored in Unicode NFC (canonical.key); older versions stored them
    # as the source spelled them. Data only, so plain SQL. A key whose rows collapse into one
    # keeps one row: see _merge_keys.
    if not _shaped(conn):
        return  # not a state file (found at version 0): the shape check refuses it
    rows = conn.execute("SELECT key FROM products WHERE key GLOB ?", (_NON_ASCII,)).fetchall()
    spellings: dict[str, list[str]] = {}
    for (key,) in rows:
        if (stored := canonical.key(key)) != key:
            spellings.setdefault(stored, []).append(key)
    merged = renamed = 0
    for stored, olds in spellings.items():
        held = conn.execute("SELECT 1 FROM products WHERE key = ?", (stored,)).fetchone()
        keys = [stored, *olds] if held else olds
        if len(keys) > 1:
            _merge_keys(conn, stored, keys)
            merged += 1
        else:
            _rename_key(conn, keys[0], stored)
            renamed += 1
    letters = conn.execute(  # refused before they had a row (read, map, check stages)
        "SELECT key FROM dead_letters WHERE key GLOB ?", (_NON_ASCII,)
    ).fetchall()
    for (key,) in letters:
        if (stored := canonical.key(key)) != key:
            _rename_letter(conn, key, stored)
            renamed += 1
    _nfc_lane_keys(conn)
    if merged or renamed:
        log.info("state.keys.normalised", renamed=renamed, merged=merged)


def _shaped(conn: sqlite3.Connection) -> bool:
    """Whether the tables that hold product keys have the columns migration 7 reads."""
    wanted = {
        "products": {
            *("key", "state", "remote_id", "updated_at", "last_error"),
            *("source_fingerprint", "source_line_digest"),
        },
        "intents": {"key"},
        "dead_letters": {"slot", "key", "last_seen"},
        "meta": {"name", "value"},
    }
    for table, columns in wanted.items():
        found = {row[1] for row in conn.execute(f"PRAGMA table_info('{table}')")}
        if not columns <= found:
            return False
    return True


def _rename_key(conn: sqlite3.Connection, old: str, new: str) -> None:
    """``old`` becomes ``new`` in every table that holds a product key (none holds ``new``).

    The row's record digest and line digest go: map() now makes another key of its source
    row, so the row is mapped once more (its key field is then sent in NFC) instead of
    being recognised unchanged.
    """
    conn.execute(
        "UPDATE products SET key = ?, source_fingerprint = NULL, source_line_digest = NULL "
        "WHERE key = ?",
        (new, old),
    )
    conn.execute("UPDATE intents SET key = ? WHERE key = ?", (new, old))
    _rename_letter(conn, old, new)


def _rename_letter(conn: sqlite3.Connection, old: str, new: str) -> None:
    """The dead letter of ``old`` becomes ``new``'s; of two, the one seen last is kept."""
    conn.execute(
        "DELETE FROM dead_letters WHERE slot IN (?, ?) AND slot != (SELECT slot FROM "
        "dead_letters WHERE slot IN (?, ?) ORDER BY last_seen DESC, slot = ? DESC LIMIT 1)",
        (old, new, old, new, new),
    )
    conn.execute("UPDATE dead_letters SET slot = ?, key = ? WHERE slot = ?", (new, new, old))


def _merge_keys(conn: sqlite3.Connection, stored: str, keys: list[str]) -> None:
    """Rows of several spellings of one key: one row is kept, no remote id is lost.

    The row kept holds a remote id when any does (the latest updated of those). When
    another row may stand for a product on the remote (a remote id of its own, an open
    intent, or a state that may exist there), the kept row becomes DUPLICATE: the next
    run looks the key up on the remote before it sends anything (one product there:
    adopted; several: reported, never deleted), and the reason names every spelling and
    remote id, in the row and in a dead letter (``skuferry rejected``).
    """
    marks = ",".join("?" * len(keys))
    found = conn.execute(
        f"SELECT key, state, remote_id, updated_at, "  # noqa: S608 - placeholders only
        f"key IN (SELECT key FROM intents) FROM products WHERE key IN ({marks})",
        keys,
    ).fetchall()
    found.sort(key=lambda r: (r[2] is not None, r[1] != "remote_only", r[3]), reverse=True)
    kept, others = found[0], found[1:]
    ids = sorted({r[2] for r in found if r[2] is not None})
    doubt = any(
        (r[2] is not None and r[2] != kept[2]) or r[4] or r[1] in _MAY_EXIST for r in others
    )
    gone = [r[0] for r in others]
    conn.executemany("DELETE FROM products WHERE key = ?", ((k,) for k in gone))
    conn.executemany("DELETE FROM intents WHERE key = ?", ((k,) for k in gone))
    conn.executemany("DELETE FROM dead_letters WHERE slot = ?", ((k,) for k in gone))
    if kept[0] != stored:
        _rename_key(conn, kept[0], stored)
    shown = ", ".join(ascii(k) for k in sorted(keys))
    remote = f"remote id(s) {', '.join(ids)}" if ids else "no remote id"
    reason = (
        f"{len(keys)} spellings of this key ({shown}) are one key in Unicode NFC; "
        f"they held {remote}: the remote is looked up before anything is sent"
    )
    log.warning(
        "state.keys.merged", key=stored, spellings=sorted(keys), remote_ids=ids,
        kept=kept[2], duplicate=doubt,
    )  # fmt: skip
    if not doubt:
        return
    now = time.time()
    conn.execute("DELETE FROM intents WHERE key = ?", (stored,))  # looked up instead
    conn.execute(
        "UPDATE products SET state = 'duplicate', last_error = ?, updated_at = ? WHERE key = ?",
        (reason, now, stored),
    )
    conn.execute(
        "INSERT OR REPLACE INTO dead_letters (slot, key, stage, reason, first_seen, last_seen) "
        "VALUES (?, ?, 'check', ?, ?, ?)",
        (stored, stored, reason, now, now),
    )


def _nfc_lane_keys(conn: sqlite3.Connection) -> None:
    """Keys handed to a running run (meta rows ``lane.<key>``) in NFC too."""
    found = conn.execute(
        "SELECT name, value FROM meta WHERE name GLOB 'lane.*' AND name GLOB ?", (_NON_ASCII,)
    ).fetchall()
    for name, value in found:
        new = "lane." + canonical.key(name.removeprefix("lane."))
        if new != name:
            conn.execute("DELETE FROM meta WHERE name = ?", (name,))
            conn.execute("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", (new, value))


def _m8_history(conn: sqlite3.Connection) -> None:
    # A product's history: one row per write that reached the CMS, was refused or stayed
    # unknown, recorded in the journal's own transactions (``state.history``); and what a
    # run is (a sync, or the undo of another run) with the skip token it read, so that an
    # undone feed is not written again.
    db = database(conn)
    history = db.table("history")
    history.create(
        {
            "id": int,
            "run_id": int,
            "key": str,
            "kind": str,  # create | update | restore | archive
            "at": float,  # when it was journalled, before it went out
            "outcome": str,  # sent (no answer yet) | ok | refused | failed | unknown
            "status": int,  # the HTTP status of a refusal or failure
            "error": str,
            "remote_id": str,
            "before": str,  # JSON: each field's value before, as skuferry last sent or read it
            "after": str,  # JSON: each field's value sent
            "prior": str,  # JSON: the mirror's row before (state, digest, record digest)
        },
        pk="id",
        not_null={"key", "kind", "at", "outcome"},
        if_not_exists=True,
    )
    history.create_index(["key", "id"], index_name="history_key", if_not_exists=True)
    history.create_index(["run_id", "key"], index_name="history_run", if_not_exists=True)
    runs = db.table("runs")
    if "kind" not in runs.columns_dict:
        runs.add_column("kind", str)  # NULL: a sync; "undo": the undo of run ``undoes``
    if "undoes" not in runs.columns_dict:
        runs.add_column("undoes", int)
    if "token" not in runs.columns_dict:
        runs.add_column("token", str)  # the skip token of the source this run read


def _m9_shapes(conn: sqlite3.Connection) -> None:
    # The source's shape (skuferry.shape): what each whole pull relied on ('learned'), a
    # shape accepted on purpose ('accepted'), a pull refused for its shape ('refused', with
    # the changes that broke the contract). The newest learned or accepted row is the
    # contract the next pull is judged by.
    database(conn).table("shapes").create(
        {
            "id": int,
            "run_id": int,
            "at": float,
            "status": str,
            "digest": str,
            "shape": str,
            "changes": str,
        },
        pk="id",
        not_null={"at", "status", "shape"},
        if_not_exists=True,
    )


def _m10_run_feed(conn: sqlite3.Connection) -> None:
    # The feed a run read, by its content (``sync.read.undone``: the config's identity, the
    # source's feed digest, each join's and table file's), so that an undo refuses that
    # feed again even when the run had no change token (a file written in the last two
    # seconds, an API without validators).
    runs = database(conn).table("runs")
    if "feed" not in runs.columns_dict:
        runs.add_column("feed", str)


MIGRATIONS: list[Migration] = [
    _m1_initial,
    _m2_rejected_digest,
    _m3_source_fingerprint,
    _m4_last_sent,
    _m5_dead_letters,
    _m6_source_line_digest,
    _m7_nfc_keys,
    _m8_history,
    _m9_shapes,
    _m10_run_feed,
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


def _version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _newer(found: int, path: Path | str) -> StateError:
    return StateError(
        f"state file {path} has schema version {found}, newer than this "
        f"skuferry understands ({SCHEMA_VERSION}); upgrade skuferry"
    )


def migrate(conn: sqlite3.Connection, *, path: Path | str = "state") -> int:
    """Bring the schema up to ``SCHEMA_VERSION``; return the version found before.

    All the steps run in one ``BEGIN IMMEDIATE`` transaction: a crash or an error leaves
    the file as it was. An up-to-date file takes no write lock (``user_version`` only grows).
    """
    try:
        found = _version(conn)
        if found == SCHEMA_VERSION:
            return found
        with transaction(conn):
            found = _version(conn)  # another process may have migrated it meanwhile
            if found > SCHEMA_VERSION:
                raise _newer(found, path)
            for number in range(found, SCHEMA_VERSION):
                MIGRATIONS[number](conn)
                conn.execute(f"PRAGMA user_version = {number + 1}")
            if found == 0:
                _check_shape(conn, path)
    except sqlite3.Error as exc:
        raise StateError(f"cannot migrate state file {path}: {exc}") from exc
    return found


def _columns(conn: sqlite3.Connection) -> dict[str, dict[str, type]]:
    db = database(conn)
    return {name: db[name].columns_dict for name in db.table_names()}


def _check_shape(conn: sqlite3.Connection, path: Path | str) -> None:
    """A file found at version 0 that held tables already (a ``.dump`` restored, or not
    a state file at all) must now have the tables and columns of a fresh one."""
    fresh = sqlite3.connect(":memory:", isolation_level=None)
    try:
        for migration in MIGRATIONS:
            migration(fresh)
        want = _columns(fresh)
    finally:
        fresh.close()
    found = _columns(conn)
    wrong = sorted(name for name, columns in want.items() if found.get(name) != columns)
    if wrong:
        raise StateError(
            f"state file {path} is not a skuferry state file, or a damaged one: "
            f"table(s) {', '.join(wrong)} differ from the schema; move it aside or fix the path"
        )


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
