"""The mirror's marks over many rows at once, made between a run's stages.

What a complete walk of the remote found, the keys that left the source or came back
in step, the record digests and line digests learnt for the next run's recognition, and
the plan's refusals. Each is one ``BEGIN IMMEDIATE`` transaction (``StateFile._write``),
committed before the run goes on to the writes that rely on it: after ``mark_walked``
a key the mirror does not know is taken as absent remotely, and is created.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from skuferry import canonical
from skuferry.lifecycle import BACK_IN_STEP_SQL, IN_SOURCE_SQL
from skuferry.models import State
from skuferry.state import deadletters
from skuferry.state.statefile import StateFile


def _stored_keys(pairs: Iterable[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    """(key, remote id) pairs with each key as the mirror stores it (``canonical.key``)."""
    key = canonical.key
    return ((key(k), rid) for k, rid in pairs)


class BulkMarks(StateFile):
    """Marks set on many rows in one transaction: the walk, the gone, the back in step."""

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

    def remember_record_digests(self, items: Iterable[tuple[str, str, str]]) -> int:
        """(key, digest, record digest) of unchanged products mapped in full this run: the next
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
        """(slot, record digest, line digest) of products recognised from a raw line this run
        (the planner's line route): the next run recognises that line unparsed. Only rows still
        SYNCED with that very record digest change (the digest is bound to it anyway)."""
        with self._write() as conn:
            done = conn.executemany(
                "UPDATE products SET source_line_digest = ? "
                "WHERE rowid = ? AND source_fingerprint = ? AND state = 'synced'",
                ((line_digest, slot, fp) for slot, fp, line_digest in items),
            )
            return max(0, done.rowcount)

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
