"""The mirror: the SQLite state file, skuferry's truth about what it sent.

Per key it holds the digest last confirmed on the remote, the fields last
sent (``sent``: what an update is diffed against, see ``sync/write/fields.py``), the
remote id, the state (see ``lifecycle.State``) and, for every create in flight,
an *intent*: committed before the POST and closed only once the outcome is
known, so a crash or a lost response is resolved by lookup, never by re-POST.

Every mutating method is one ``BEGIN IMMEDIATE`` ... ``COMMIT`` transaction,
durable (``synchronous=FULL``) before it returns. Only the engine's main
thread writes. ``readonly=True`` (dry run) opens the file with ``mode=ro`` and
never creates or migrates it; TEMP tables (the run's scratch space) still work
there, because they live outside the state file.

Column meaning, kept so the planner can trust ``MirrorRow.digest``:
``digest`` is the source product the remote is in step with and ``sent`` the
values skuferry last sent or found there (NULL when unknown);
``rejected_digest`` is what the API refused, read as ``MirrorRow.digest`` while
the row is REJECTED; while it is ARCHIVED, it is the [gone] patch's digest when
the archive is in doubt (an archive or a restore sent, its outcome not committed:
``record_archive_sent``, ``record_update_sent``), or a refused restore's digest.

sqlite-utils builds the schema (state/schema.py) and serves the reads made for a
person (``status``, ``rejected``: ``rows_where``, rows as dicts by column name).
Plain ``sqlite3`` keeps every write and every read a run makes. Each write is one
``BEGIN IMMEDIATE`` transaction committed before the next remote call (sqlite-utils
would nest in it as a SAVEPOINT, but its ``upsert_all`` overwrites ``first_seen``),
and sqlite-utils' dict rows and per-call table introspection cost about half the
rows per second (``python -m bench --only statelib``); its import (50-100 ms) would
land on the no-op run. Scratch tables are TEMP tables, which sqlite-utils does not
create.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlite_utils

from skuferry import canonical, logs
from skuferry.errors import StateError
from skuferry.lifecycle import (
    ARCHIVE_IN_DOUBT_SQL,
    BACK_IN_STEP_SQL,
    IN_SOURCE_SQL,
    ON_REMOTE_SQL,
    state_sql,
)
from skuferry.models import MirrorRow, Product, State
from skuferry.state import deadletters, schema
from skuferry.state.deadletters import DeadLetter
from skuferry.state.planstore import PlanStore
from skuferry.state.reads import MirrorLookup, SeenTable, rows, scan
from skuferry.state.remoteindex import RemoteIndex
from skuferry.state.transaction import transaction

log = logs.get(__name__)

API_CONTACT_META = "api.last_contact"  # unix time of the last run the API answered
LANE_META = "lane."  # meta rows "lane.<key>": keys another process handed to the running run


def _stored_keys(pairs: Iterable[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    """(key, remote id) pairs with each key as the mirror stores it (``canonical.key``)."""
    key = canonical.key
    return ((key(k), rid) for k, rid in pairs)


def _open_readonly(path: Path) -> sqlite3.Connection:
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


class Mirror:
    """The state file. See the module docstring for the contract of every write."""

    def __init__(
        self, path: Path, *, readonly: bool = False, clock: Callable[[], float] = time.time
    ) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self._clock = clock
        self._conn = _open_readonly(self.path) if readonly else schema.open_state(self.path)
        self._db: sqlite_utils.Database | None = None  # made on first use (an import ~50 ms)
        self._known = MirrorLookup(self._conn)
        log.debug("mirror.opened", path=str(self.path), readonly=readonly)

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
        """One durable transaction; a state file that fails a write is a StateError."""
        if self.readonly:
            raise RuntimeError("the mirror was opened read-only (dry run); nothing may be written")
        try:
            with transaction(self._conn) as conn:
                yield conn
        except sqlite3.Error as exc:
            raise StateError(f"cannot write state file {self.path}: {exc}") from exc

    # -- reading --------------------------------------------------------------

    def rows(self, keys: Sequence[str]) -> dict[str, MirrorRow]:
        return rows(self._conn, keys)

    def known(self) -> Mapping[str, MirrorRow]:
        """Every product the mirror knows, by key (read lazily; for the planner)."""
        return self._known

    def keys(self, *, exclude_gone: bool = True) -> Iterator[str]:
        where = IN_SOURCE_SQL if exclude_gone else ""
        return (k for (k,) in scan(self._conn, "SELECT key FROM products", where))

    def count(self) -> int:
        sql = f"SELECT count(*) FROM products WHERE {IN_SOURCE_SQL}"  # noqa: S608 - a constant
        return int(self._conn.execute(sql).fetchone()[0])

    def counts_by_state(self) -> dict[str, int]:
        sql = "SELECT state, count(*) FROM products GROUP BY state ORDER BY state"
        return {state: int(n) for state, n in self._conn.execute(sql)}

    def walked(self) -> bool:
        return self.get_meta("walked_at") is not None

    def mark_walked(self, at: float, remote: Iterable[tuple[str, str]] = ()) -> None:
        """Record a complete remote walk, with the (key, remote_id) pairs it found.

        After this, a key the mirror does not know is taken as absent remotely, so
        every walked key must be known: keys the mirror lacks become REMOTE_ONLY rows with
        their remote id (a later source product of that key is then an UPDATE, not
        a duplicate POST), and known rows without a remote id, and no open intent,
        are linked to it (digest unknown, so the next plan updates them).
        """
        now = self._clock()
        with self._write() as conn:
            conn.execute("DROP TABLE IF EXISTS temp.walked")
            conn.execute("CREATE TEMP TABLE walked (key TEXT NOT NULL, remote_id TEXT NOT NULL)")
            # keys as the mirror stores them (NFC), whoever walked
            conn.executemany("INSERT INTO walked VALUES (?, ?)", _stored_keys(remote))
            conn.execute(
                "INSERT INTO products (key, state, remote_id, first_seen, updated_at) "
                "SELECT key, 'remote_only', min(remote_id), ?, ? FROM walked "
                "WHERE key NOT IN (SELECT key FROM products) GROUP BY key",
                (now, now),
            )
            conn.execute(
                "UPDATE products SET remote_id = (SELECT min(w.remote_id) FROM walked w "
                "WHERE w.key = products.key), digest = NULL, sent = NULL, "
                "source_fingerprint = NULL, updated_at = ? "
                "WHERE remote_id IS NULL AND key IN (SELECT key FROM walked) "
                "AND key NOT IN (SELECT key FROM intents)",
                (now,),
            )
            conn.execute("DROP TABLE temp.walked")
            conn.execute(
                "INSERT OR REPLACE INTO meta (name, value) VALUES ('walked_at', ?)", (repr(at),)
            )

    def payload(self, key: str) -> dict[str, Any] | None:
        """The fields last sent for ``key`` (or found on the remote); None when not known."""
        found = self._conn.execute("SELECT sent FROM products WHERE key = ?", (key,)).fetchone()
        if found is None or found[0] is None:
            return None
        value: dict[str, Any] = canonical.loads(found[0])
        return value

    def synced_items(self) -> Iterator[tuple[str, str, str]]:
        select = "SELECT key, remote_id, digest FROM products"
        where = f"{ON_REMOTE_SQL} AND digest IS NOT NULL"
        return ((k, r, d) for k, r, d in scan(self._conn, select, where))

    def synced_before(self, when: float) -> tuple[str, str] | None:
        """(key, remote id) of one product in step on the CMS since before ``when``."""
        sql = (
            f"SELECT key, remote_id FROM products WHERE {ON_REMOTE_SQL} "  # noqa: S608 - a constant
            "AND synced_at < ? LIMIT 1"
        )
        row = self._conn.execute(sql, (when,)).fetchone()
        return None if row is None else (str(row[0]), str(row[1]))

    def has_intent(self, key: str) -> bool:
        sql = "SELECT 1 FROM intents WHERE key = ?"
        return self._conn.execute(sql, (key,)).fetchone() is not None

    def has_pending(self, states: Iterable[State], *, archiving: str | None = None) -> bool:
        """Whether a run has work even if the source did not change: an open intent, a
        product in one of ``states``, or one whose [gone] patch ``archiving`` is in doubt.

        Indexed reads that stop at the first row found (sync/skip.py)."""
        if self._conn.execute("SELECT 1 FROM intents LIMIT 1").fetchone() is not None:
            return True
        where = state_sql(State(s) for s in states)
        params: list[str] = []
        if archiving is not None:
            where += f" OR {ARCHIVE_IN_DOUBT_SQL}"
            params.append(archiving)
        sql = f"SELECT 1 FROM products WHERE {where} LIMIT 1"  # noqa: S608 - our states, placeholders
        return self._conn.execute(sql, params).fetchone() is not None

    def open_intents(self) -> list[tuple[str, str]]:
        sql = "SELECT key, digest FROM intents ORDER BY started_at, key"
        return [(k, d) for k, d in self._conn.execute(sql)]

    def intent_lost_at(self, key: str) -> float | None:
        """When the create in doubt for ``key`` was last heard of: its intent was opened or
        its answer found lost, whichever is later; None without an open intent."""
        row = self._conn.execute(
            "SELECT max(i.started_at, coalesce(p.updated_at, 0)) FROM intents i "
            "LEFT JOIN products p ON p.key = i.key WHERE i.key = ?",
            (key,),
        ).fetchone()
        return None if row is None else float(row[0])

    def intent_product(self, key: str) -> Product | None:
        """The product an open intent was about to create, as it was sent."""
        row = self._conn.execute(
            "SELECT digest, payload FROM intents WHERE key = ?", (key,)
        ).fetchone()
        if row is None:
            return None
        return Product(key=key, payload=canonical.loads(row[1]), digest=row[0], line=0)

    # -- the write journal ----------------------------------------------------

    def _upsert(
        self,
        conn: sqlite3.Connection,
        key: str,
        state: State | None,
        fields: dict[str, Any],
        *,
        insert_state: State = State.PENDING,
    ) -> None:
        """Insert or update one products row; ``state=None`` keeps an existing row's state."""
        now = self._clock()
        values = {"updated_at": now, **fields}
        if state is not None:
            values["state"] = state.value
        cols = ["key", "first_seen", "state", *[c for c in values if c != "state"]]
        args = [
            key,
            now,
            values.get("state", insert_state.value),
            *[v for c, v in values.items() if c != "state"],
        ]
        sets = ", ".join(f"{c} = excluded.{c}" for c in values)
        conn.execute(
            f"INSERT INTO products ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "  # noqa: S608 - column names are ours
            f"ON CONFLICT(key) DO UPDATE SET {sets}",
            args,
        )

    def _confirmed(
        self, product: Product, remote_id: str, sent: Mapping[str, Any] | None = None
    ) -> None:
        self.record_in_step([(product, remote_id)], sent=sent)

    def record_in_step(
        self, items: Sequence[tuple[Product, str]], *, sent: Mapping[str, Any] | None = None
    ) -> None:
        """Products the remote holds exactly, under these ids: SYNCED, in one transaction.

        Used one at a time after a write, and in batches for products found already in
        step on the remote (an adoption is no intent: if it is lost, the next walk finds
        the product again). ``sent``: the fields last sent, when not the whole payload
        (one item only: an update carries only what changed).
        """
        if not items:
            return
        with self._write() as conn:
            for product, remote_id in items:
                self._upsert(
                    conn,
                    product.key,
                    State.SYNCED,
                    {
                        "digest": product.digest,
                        "sent": canonical.dumps(product.payload if sent is None else sent),
                        "source_fingerprint": product.fingerprint,
                        "remote_id": remote_id,
                        "synced_at": self._clock(),
                        "last_error": None,
                        "attempts": 0,
                        "rejected_digest": None,
                        "source_line": product.line,
                    },
                )
                conn.execute("DELETE FROM intents WHERE key = ?", (product.key,))
            deadletters.clear(conn, (product.key for product, _ in items))

    def open_intent(self, product: Product, *, run_id: int | None) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO intents (key, digest, payload, run_id, started_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (
                    product.key,
                    product.digest,
                    canonical.dumps(product.payload),
                    run_id,
                    self._clock(),
                ),
            )
            self._upsert(conn, product.key, State.PENDING, {"source_line": product.line})

    def record_created(self, product: Product, remote_id: str) -> None:
        self._confirmed(product, remote_id)

    def record_updated(
        self, product: Product, remote_id: str, *, sent: Mapping[str, Any] | None = None
    ) -> None:
        """In step after an update (or with nothing to send); ``sent``: the fields now last
        sent (default: the whole payload). Also how a RESTOREd product is back to SYNCED."""
        self._confirmed(product, remote_id, sent)

    def record_adopted(
        self,
        product: Product,
        remote_id: str,
        *,
        in_step: bool,
        remote: Mapping[str, Any] | None = None,
    ) -> None:
        """Link a product found on the remote; ``in_step``: it already holds this digest.

        ``remote``: the values found there, recorded as "last sent" so that the update
        that follows carries only the fields that differ.
        """
        if in_step:
            self._confirmed(product, remote_id)
            return
        found = (
            None
            if remote is None
            else canonical.dumps({k: remote[k] for k in product.payload if k in remote})
        )
        with self._write() as conn:
            self._upsert(
                conn,
                product.key,
                None,
                {
                    "remote_id": remote_id,
                    "digest": None,
                    "sent": found,
                    "source_fingerprint": None,
                    "source_line": product.line,
                },
            )
            conn.execute("DELETE FROM intents WHERE key = ?", (product.key,))

    def record_failed(
        self,
        key: str,
        error: str,
        *,
        product: Product | None = None,
        status: int | None = None,
    ) -> None:
        """A transient failure: retried next run. An open intent stays open."""
        fields: dict[str, Any] = {"last_error": error}
        if product is not None:
            fields["source_line"] = product.line
        with self._write() as conn:
            self._upsert(conn, key, State.FAILED, fields)
            conn.execute("UPDATE products SET attempts = attempts + 1 WHERE key = ?", (key,))
            line = product.line if product is not None else None
            self._letter(conn, key, error, status=status, line=line)

    def _letter(
        self,
        conn: sqlite3.Connection,
        key: str,
        reason: str,
        *,
        stage: str = "api",
        status: int | None = None,
        line: int | None = None,
    ) -> None:
        """The product's dead letter (state/deadletters.py), in the caller's transaction."""
        message = reason if status is not None else None  # the API's own words
        deadletters.put(
            conn,
            key=key,
            stage=stage,
            reason=reason,
            status=status,
            message=message,
            line=line,
            now=self._clock(),
        )

    def record_rejected(self, product: Product, reason: str, *, status: int | None = None) -> None:
        """The API refused this digest: not resent until the data change."""
        with self._write() as conn:
            self._letter(conn, product.key, reason, status=status, line=product.line)
            self._upsert(
                conn,
                product.key,
                State.REJECTED,
                {
                    "rejected_digest": product.digest,
                    "last_error": reason,
                    "source_line": product.line,
                },
            )
            conn.execute(
                "UPDATE products SET attempts = attempts + 1 WHERE key = ?", (product.key,)
            )
            conn.execute("DELETE FROM intents WHERE key = ?", (product.key,))

    def record_drift(self, product: Product, reason: str) -> None:
        """The source changed but could not be sent; ``digest`` stays the remote's."""
        with self._write() as conn:
            deadletters.clear(conn, [product.key])  # reported as drift, not refused
            self._upsert(
                conn,
                product.key,
                State.DRIFT,
                {
                    "last_error": reason,
                    "source_line": product.line,
                },
            )

    def record_duplicate(self, key: str, remote_ids: list[str]) -> None:
        shown = ", ".join(remote_ids[:10]) + (", ..." if len(remote_ids) > 10 else "")
        with self._write() as conn:
            reason = f"the remote holds {len(remote_ids)} products with this key: {shown}"
            self._letter(conn, key, reason, stage="check")
            self._upsert(
                conn,
                key,
                State.DUPLICATE,
                {
                    "last_error": (
                        f"the remote holds {len(remote_ids)} products with this key: {shown}"
                    ),
                },
            )
            conn.execute("DELETE FROM intents WHERE key = ?", (key,))

    def record_remote_missing(self, key: str) -> None:
        """The remote id answered 404: forget it, so the next plan looks up, then creates."""
        with self._write() as conn:
            conn.execute(
                "UPDATE products SET state = ?, last_error = 'remote id ' || remote_id || "
                "' no longer exists', remote_id = NULL, digest = NULL, sent = NULL, "
                "source_fingerprint = NULL, "
                "updated_at = ? WHERE key = ? AND remote_id IS NOT NULL",
                (State.PENDING.value, self._clock(), key),
            )

    def remember_fingerprints(self, items: Iterable[tuple[str, str, str]]) -> int:
        """(key, digest, fingerprint) of unchanged products mapped in full this run: the next
        run recognises them without mapping. Only rows still holding that digest change."""
        with self._write() as conn:
            before = conn.total_changes
            conn.executemany(
                "UPDATE products SET source_fingerprint = ? "
                "WHERE key = ? AND digest = ? AND state = 'synced'",
                ((fp, key, digest) for key, digest, fp in items),
            )
            return conn.total_changes - before

    def remember_line_digests(self, items: Iterable[tuple[int, str, bytes]]) -> int:
        """(slot, fingerprint, line digest) of products recognised from a raw line this run
        (sync/plan/lines.py): the next run recognises that line unparsed. Only rows still
        SYNCED with that very fingerprint change (the digest is bound to it anyway)."""
        with self._write() as conn:
            done = conn.executemany(
                "UPDATE products SET source_line_digest = ? "
                "WHERE rowid = ? AND source_fingerprint = ? AND state = 'synced'",
                ((line_digest, slot, fp) for slot, fp, line_digest in items),
            )
            return max(0, done.rowcount)

    def close_intent(self, key: str) -> None:
        with self._write() as conn:
            conn.execute("DELETE FROM intents WHERE key = ?", (key,))

    def record_archived(self, key: str, sent: Mapping[str, Any]) -> None:
        """The [gone] patch went out: ARCHIVED, not sent again while the product stays away."""
        with self._write() as conn:
            deadletters.clear(conn, [key])
            self._upsert(
                conn,
                key,
                State.ARCHIVED,
                {
                    "sent": canonical.dumps(sent),
                    "last_error": None,
                    "rejected_digest": None,
                    "synced_at": self._clock(),
                },
            )

    def record_update_sent(
        self, key: str, in_flight: Iterable[str], *, patch_digest: str | None = None
    ) -> None:
        """The journal of an update (or restore), committed before its PATCH/PUT.

        Until the answer comes, the remote may hold either value of the fields ``in_flight``:
        they leave ``sent`` and the digest is unknown. An answer lost, or a crash, then leaves
        a product the next plan updates, carrying those fields again, even if the source went
        back to the old values meanwhile. ``record_updated`` commits the outcome.

        A restore passes the ``[gone]`` patch's digest: until its answer comes the product
        may be live again, so it stays ARCHIVED *in doubt*, as after ``record_archive_sent``:
        back in the source it is restored again, away it is archived again.
        """
        with self._write() as conn:
            found = conn.execute("SELECT sent FROM products WHERE key = ?", (key,)).fetchone()
            sent: dict[str, Any] | None = (
                canonical.loads(found[0]) if found is not None and found[0] is not None else None
            )
            if sent is not None:
                for name in in_flight:
                    sent.pop(name, None)
            fields: dict[str, Any] = {
                "digest": None,
                "source_fingerprint": None,
                "sent": None if sent is None else canonical.dumps(sent),
            }
            if patch_digest is not None:
                fields["rejected_digest"] = patch_digest
            self._upsert(conn, key, None, fields)

    def record_archive_sent(self, key: str, *, patch_digest: str) -> None:
        """The journal of an archive, committed before its PATCH: ARCHIVED, in doubt.

        ``rejected_digest`` holds the patch's digest until the answer comes
        (``record_archived`` clears it): an answer lost, or a crash, leaves a product that
        may be archived, so while it stays away the patch is sent again, and if it comes
        back the restore table goes with its update.
        """
        with self._write() as conn:
            self._upsert(conn, key, State.ARCHIVED, {"rejected_digest": patch_digest})

    def record_restore_refused(self, product: Product, reason: str) -> None:
        """The API refused a restore: still ARCHIVED (the remote holds the [gone] patch), with
        the refused digest, so it is not resent until the data change (then restored)."""
        with self._write() as conn:
            self._letter(conn, product.key, reason, line=product.line)
            self._upsert(
                conn,
                product.key,
                State.ARCHIVED,
                {
                    "rejected_digest": product.digest,
                    "last_error": reason,
                    "source_line": product.line,
                },
            )
            conn.execute(
                "UPDATE products SET attempts = attempts + 1 WHERE key = ?", (product.key,)
            )

    def record_unsent(self, key: str, reason: str, *, state: State) -> None:
        """An archive or restore that could not go out (updates off): retried next run.

        An archive becomes DRIFT (still "in the source" to the planner, so it is planned
        again); a restore stays ARCHIVED, so the planner restores it again.
        """
        with self._write() as conn:
            self._upsert(conn, key, state, {"last_error": reason})

    def record_archive_refused(self, key: str, reason: str, *, patch_digest: str) -> None:
        """The API refused the [gone] patch: REJECTED under the patch's digest, so it is not
        resent until the patch changes (the digest the remote holds stays as it was)."""
        with self._write() as conn:
            self._letter(conn, key, reason)
            self._upsert(
                conn,
                key,
                State.REJECTED,
                {
                    "rejected_digest": patch_digest,
                    "last_error": reason,
                },
            )
            conn.execute("UPDATE products SET attempts = attempts + 1 WHERE key = ?", (key,))

    def remember_remote(self, key: str, values: Mapping[str, Any]) -> None:
        """What the remote was found to hold (``--verify``): the next update is diffed
        against it, so it carries exactly the fields edited there."""
        with self._write() as conn:
            # The remote no longer holds ``digest``: unknown until the update lands, so a run
            # cut short before it plans the update again instead of taking it as unchanged.
            self._upsert(
                conn,
                key,
                None,
                {
                    "sent": canonical.dumps(dict(values)),
                    "digest": None,
                    "source_fingerprint": None,
                },
            )

    def archived(self, limit: int = 20) -> list[dict[str, Any]]:
        """Archived products, most recent first (for ``status``)."""
        return list(
            self.db.table("products").rows_where(
                state_sql([State.ARCHIVED]),
                select="key, remote_id, updated_at AS at",
                order_by="updated_at DESC, key",
                limit=limit,
            )
        )

    def mark_gone(self, keys: Iterable[str]) -> int:
        """Mark keys that left the source; they stay on the remote (no DELETE). Returns how many."""
        keys = list(keys)
        if keys:
            with self._write() as conn:
                deadletters.clear(conn, keys)  # a product that left is no longer refused
        return self._set_state(keys, State.GONE, IN_SOURCE_SQL)

    def mark_in_step(self, keys: Iterable[str]) -> int:
        """GONE/DRIFT rows planned UNCHANGED (the remote holds their data again) become SYNCED."""
        probe = f"SELECT 1 FROM products WHERE {BACK_IN_STEP_SQL} LIMIT 1"  # noqa: S608 - a constant
        any_row = self._conn.execute(probe).fetchone()
        if any_row is None:
            return 0  # the usual no-op run: nothing to revive, no 100k-statement transaction
        return self._set_state(keys, State.SYNCED, BACK_IN_STEP_SQL)

    def _set_state(self, keys: Iterable[str], state: State, when: str) -> int:
        with self._write() as conn:
            before = conn.total_changes
            conn.executemany(
                f"UPDATE products SET state = ?, last_error = NULL, updated_at = ? "  # noqa: S608 - our condition
                f"WHERE key = ? AND {when}",
                ((state.value, self._clock(), k) for k in keys),
            )
            return conn.total_changes - before

    # -- runs and meta --------------------------------------------------------

    def start_run(self) -> int:
        with self._write() as conn:
            cur = conn.execute(
                "INSERT INTO runs (started_at, status) VALUES (?, 'running')", (self._clock(),)
            )
            return int(cur.lastrowid or 0)

    def finish_run(
        self, run_id: int, *, status: str, exit_code: int, summary: dict[str, Any]
    ) -> None:
        with self._write() as conn:
            conn.execute(
                "UPDATE runs SET finished_at = ?, status = ?, exit_code = ?, summary = ? "
                "WHERE id = ?",
                (self._clock(), status, exit_code, json.dumps(summary, default=str), run_id),
            )

    def last_runs(self, n: int = 5) -> list[dict[str, Any]]:
        """The last ``n`` runs, newest first, their summary parsed (for ``status``)."""
        runs = list(
            self.db.table("runs").rows_where(
                select="id, started_at, finished_at, status, exit_code, summary",
                order_by="id DESC",
                limit=n,
            )
        )
        for run in runs:
            run["summary"] = json.loads(run["summary"]) if run["summary"] else None
        return runs

    def rejected(self, limit: int = 20) -> list[dict[str, Any]]:
        """Products the API refused, most recent first (for ``status``)."""
        return list(
            self.db.table("products").rows_where(
                state_sql([State.REJECTED]),
                select="key, last_error AS reason, updated_at AS at, source_line AS line",
                order_by="updated_at DESC, key",
                limit=limit,
            )
        )

    # -- dead letters (state/deadletters.py) -----------------------------------

    def dead_letters(self, keys: Sequence[str] | None = None) -> list[DeadLetter]:
        """The products refused or failed, with stage and reason (``skuferry rejected``)."""
        return deadletters.listing(self.db, keys)

    def dead_letter_counts(self) -> dict[str, int]:
        # sqlite3: the metrics read this after every run, the no-op's too
        return deadletters.counts_by_stage(self._conn)

    def oldest_dead_letter(self) -> tuple[int, DeadLetter | None]:
        return deadletters.oldest(self._conn)

    def note_refusals(
        self,
        refused: Iterable[tuple[str | None, str, str, int | None]],
        *,
        valid: Iterable[str] = (),
        source: str,
        whole: bool,
    ) -> None:
        """The plan's refusals, (key, stage, reason, line) each, in one transaction.

        ``whole``: the pull read the whole source, so read, map and check letters it did
        not refuse again are over. Otherwise the ``valid`` keys (planned as products) lose
        theirs. The API's letters, written by the journal, get ``source``.
        """
        with self._write() as conn:
            started = self._clock()
            for key, stage, reason, line in refused:
                deadletters.put(
                    conn, key=key, stage=stage, reason=reason, line=line, source=source, now=started
                )
            if whole:
                deadletters.expire_plan_stages(conn, before=started)
            elif deadletters.any_plan_stage(conn):
                deadletters.clear_plan_stages(conn, valid)
            deadletters.name_source(conn, source)

    def name_letters(self, source: str) -> None:
        """Letters the journal wrote this run get the source's name."""
        with self._write() as conn:
            deadletters.name_source(conn, source)

    def set_meta(self, name: str, value: str | None) -> None:
        self.set_metas({name: value})

    def set_metas(self, values: Mapping[str, str | None]) -> None:
        """Set several names in one transaction; ``None`` removes a name (absent = unknown)."""
        with self._write() as conn:
            for name, value in values.items():
                if value is None:
                    conn.execute("DELETE FROM meta WHERE name = ?", (name,))
                else:
                    conn.execute(
                        "INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", (name, value)
                    )

    def last_api_contact(self) -> float | None:
        """When a run last talked to the API successfully (unix time), if ever."""
        value = self.get_meta(API_CONTACT_META)
        try:
            return float(value) if value is not None else None
        except ValueError:
            return None

    def record_api_contact(self, at: float | None = None) -> None:
        """The API answered this run's requests (the auth check counts from here)."""
        self.set_meta(API_CONTACT_META, repr(self._clock() if at is None else at))

    def get_meta(self, name: str) -> str | None:
        found = self._conn.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return None if found is None else str(found[0])

    def metas(self, prefix: str) -> list[tuple[str, str]]:
        """``(rest of name, value)`` of every meta row whose name starts with ``prefix``."""
        rows = self._conn.execute(
            "SELECT name, value FROM meta WHERE substr(name, 1, ?) = ? ORDER BY name",
            (len(prefix), prefix),
        ).fetchall()
        return [(str(name)[len(prefix) :], str(value)) for name, value in rows]

    # -- scratch space for one run -------------------------------------------

    # The scratch tables (state/scratch.py): TEMP tables of this connection, so they
    # work in readonly mode and never touch the state file.

    def seen_table(self) -> SeenTable:
        """A fresh disk-backed (TEMP) mapping for ``plan(seen=...)``; fine in readonly mode."""
        return SeenTable(self._conn)

    def plan_store(self) -> PlanStore:
        """A fresh store for this run's plan; ``close()`` it when the run ends."""
        return PlanStore(self._conn)

    def remote_index(self, key_field: str) -> RemoteIndex:
        """A fresh, empty index of the remote catalog by ``key_field``; ``load()`` fills it."""
        return RemoteIndex(self._conn, key_field)
