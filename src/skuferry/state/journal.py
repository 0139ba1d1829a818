"""The journal of writes: each outcome of a remote call, committed before the next.

Per key the mirror holds the digest last confirmed on the remote, the fields last sent
(``sent``: what an update is diffed against), the remote id, the state (see
``lifecycle.State``) and, for every create in flight, an *intent*: committed before
the POST and closed only once the outcome is known, so a crash or a lost response is
resolved by lookup, never by re-POST. An update, an archive or a restore is journalled
the same way (``record_update_sent``, ``record_archive_sent``) before it goes out.

Every method here is one ``BEGIN IMMEDIATE`` ... ``COMMIT`` transaction
(``StateFile._write``), durable (``synchronous=FULL``) before it returns, or a step of
the one transaction of a ``Mirror.batch`` (group commit: the writer journals the writes
that are ready together, and records their answers, in one): the writer makes the
remote call that depends on it only after the transaction that holds it committed.
Only the engine's main thread writes. A product's dead letter is written in the same
transaction as its row, so the two never disagree after a crash; so is its history
(``state.history``): the write's row is recorded with its journal (``open_intent``,
``record_update_sent``, ``record_archive_sent``) and its outcome set with the outcome's,
in the batch's transaction when they are batched.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from skuferry import canonical
from skuferry.lifecycle import REMOTE_ID_GONE
from skuferry.models import Product, State
from skuferry.state import deadletters, history
from skuferry.state.statefile import StateFile

# The key's row as a write's history takes it: what it held before the write.
_BEFORE_SQL = (
    "SELECT state, digest, source_fingerprint, sent, remote_id FROM products WHERE key = ?"
)


class WriteJournal(StateFile):
    """The writer's journal: intents opened and closed, and every outcome it learns."""

    def _story(
        self,
        conn: sqlite3.Connection,
        key: str,
        kind: str,
        after: Mapping[str, Any],
        *,
        run_id: int | None = None,
        row: tuple[Any, ...] | None = None,
        before: Mapping[str, Any] | None = None,
    ) -> None:
        """The write's history row, in the journal's transaction (``row``: the key's row
        before, when the caller read it already; ``before``: values read on the CMS)."""
        if not self.keep_history:
            return
        if row is None:
            row = conn.execute(_BEFORE_SQL, (key,)).fetchone()
        history.record(
            conn,
            key=key,
            run_id=self.run_id if run_id is None else run_id,
            kind=kind,
            at=self._clock(),
            after=after,
            row=row,
            before=before,
        )

    def _outcome(
        self, conn: sqlite3.Connection, key: str, outcome: str | None, **details: Any
    ) -> None:
        """The outcome of the key's open history row, in the outcome's transaction
        (``history.SENT``: it stays open; None: it never went out)."""
        if self.keep_history and outcome != history.SENT:
            history.close(conn, key, outcome, **details)

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
        self,
        product: Product,
        remote_id: str,
        sent: Mapping[str, Any] | None = None,
        *,
        wrote: bool = True,
        change: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None,
    ) -> None:
        self.record_in_step([(product, remote_id)], sent=sent, wrote=wrote, change=change)

    def record_in_step(
        self,
        items: Sequence[tuple[Product, str]],
        *,
        sent: Mapping[str, Any] | None = None,
        wrote: bool = True,
        change: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None,
    ) -> None:
        """Products the remote holds exactly, under these ids: SYNCED, in one transaction.

        Used one at a time after a write, and in batches for products found already in
        step on the remote (an adoption is no intent: if it is lost, the next walk finds
        the product again). ``sent``: the fields last sent, when not the whole payload
        (one item only: an update carries only what changed). A write's history row is
        applied (``wrote`` False: it only read, and leaves no row; ``change``: the fields
        it changed, when it read the product first).
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
                        "source_fingerprint": product.record_digest,
                        "remote_id": remote_id,
                        "synced_at": self._clock(),
                        "last_error": None,
                        "attempts": 0,
                        "rejected_digest": None,
                        "source_line": product.line,
                    },
                )
                conn.execute("DELETE FROM intents WHERE key = ?", (product.key,))
                self._outcome(
                    conn,
                    product.key,
                    history.OK if wrote else None,
                    remote_id=remote_id,
                    change=change,
                )
            deadletters.clear(conn, (product.key for product, _ in items))

    def open_intent(self, product: Product, *, run_id: int | None) -> None:
        with self._write() as conn:
            self._story(conn, product.key, "create", product.payload, run_id=run_id)
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
        self,
        product: Product,
        remote_id: str,
        *,
        sent: Mapping[str, Any] | None = None,
        wrote: bool = True,
        change: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None,
    ) -> None:
        """In step after an update (or with nothing to send); ``sent``: the fields now last
        sent (default: the whole payload). Also how a RESTOREd product is back to SYNCED.
        ``wrote`` and ``change``: see ``record_in_step``."""
        self._confirmed(product, remote_id, sent, wrote=wrote, change=change)

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
            # a lost create the lookup found: it landed
            self._outcome(conn, product.key, history.OK, remote_id=remote_id)

    def record_failed(
        self,
        key: str,
        error: str,
        *,
        product: Product | None = None,
        status: int | None = None,
        outcome: str = history.FAILED,
    ) -> None:
        """A transient failure: retried next run. An open intent stays open. ``outcome``:
        the write's in the history (``history.SENT``: still open, to be looked up;
        ``history.UNKNOWN``: its answer was lost and nothing settled it)."""
        fields: dict[str, Any] = {"last_error": error}
        if product is not None:
            fields["source_line"] = product.line
        with self._write() as conn:
            self._upsert(conn, key, State.FAILED, fields)
            self._outcome(conn, key, outcome, status=status, error=error)
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
        """The product's dead letter (``deadletters.put``), in the caller's transaction."""
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
            self._outcome(conn, product.key, history.REFUSED, status=status, error=reason)
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
            self._outcome(conn, product.key, history.FAILED, error=reason)  # a 405'd update
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
            self._outcome(conn, key, history.UNKNOWN, error=reason)  # a lost create among them?
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
            self._outcome(
                conn, key, history.FAILED, status=404, error="the remote id no longer exists"
            )
            # the 404's time and error: a walk proves it absent only once the list could show
            # a product staff made again before it (``unseen_since``)
            conn.execute(
                "UPDATE products SET state = ?, last_error = ? || remote_id || ?, "
                "remote_id = NULL, digest = NULL, sent = NULL, source_fingerprint = NULL, "
                "updated_at = ? WHERE key = ? AND remote_id IS NOT NULL",
                (State.PENDING.value, *REMOTE_ID_GONE, self._clock(), key),
            )

    def close_intent(
        self,
        key: str,
        *,
        outcome: str | None = history.SENT,
        status: int | None = None,
        error: str | None = None,
    ) -> None:
        """The create's intent closed; ``outcome``: the create's in the history (None: it
        never went out; ``history.SENT``: the caller records it)."""
        with self._write() as conn:
            conn.execute("DELETE FROM intents WHERE key = ?", (key,))
            self._outcome(conn, key, outcome, status=status, error=error)

    def record_archived(self, key: str, sent: Mapping[str, Any]) -> None:
        """The [gone] patch went out: ARCHIVED, not sent again while the product stays away."""
        with self._write() as conn:
            deadletters.clear(conn, [key])
            self._outcome(conn, key, history.OK)
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
        self,
        key: str,
        in_flight: Iterable[str],
        *,
        patch_digest: str | None = None,
        kind: str = "update",
        sending: Mapping[str, Any] | None = None,
        before: Mapping[str, Any] | None = None,
    ) -> None:
        """The journal of an update (or restore), committed before its PATCH/PUT.

        Until the answer comes, the remote may hold either value of the fields ``in_flight``:
        they leave ``sent`` and the digest is unknown. An answer lost, or a crash, then leaves
        a product the next plan updates, carrying those fields again, even if the source went
        back to the old values meanwhile. ``record_updated`` commits the outcome.

        A restore passes the ``[gone]`` patch's digest: until its answer comes the product
        may be live again, so it stays ARCHIVED *in doubt*, as after ``record_archive_sent``:
        back in the source it is restored again, away it is archived again.

        ``sending``: the fields and values going out, for the history (``kind``: "update",
        "restore"...); none given, the write leaves no history row. ``before``: their values
        as read on the CMS just before (an undo's), over what was last sent.
        """
        with self._write() as conn:
            found = conn.execute(_BEFORE_SQL, (key,)).fetchone()
            if sending is not None:
                self._story(conn, key, kind, sending, row=found, before=before)
            sent: dict[str, Any] | None = (
                canonical.loads(found[3]) if found is not None and found[3] is not None else None
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

    def record_archive_sent(
        self, key: str, *, patch_digest: str, patch: Mapping[str, Any] | None = None
    ) -> None:
        """The journal of an archive, committed before its PATCH: ARCHIVED, in doubt.

        ``rejected_digest`` holds the patch's digest until the answer comes
        (``record_archived`` clears it): an answer lost, or a crash, leaves a product that
        may be archived, so while it stays away the patch is sent again, and if it comes
        back the restore table goes with its update. ``patch``: the fields going out, for
        the history (none given: no history row).
        """
        with self._write() as conn:
            if patch is not None:
                self._story(conn, key, "archive", patch)
            self._upsert(conn, key, State.ARCHIVED, {"rejected_digest": patch_digest})

    def record_restore_refused(
        self, product: Product, reason: str, *, status: int | None = None
    ) -> None:
        """The API refused a restore: still ARCHIVED (the remote holds the [gone] patch), with
        the refused digest, so it is not resent until the data change (then restored)."""
        with self._write() as conn:
            self._letter(conn, product.key, reason, line=product.line)
            self._outcome(conn, product.key, history.REFUSED, status=status, error=reason)
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

    def record_unsent(
        self, key: str, reason: str, *, state: State, outcome: str = history.FAILED
    ) -> None:
        """An archive or restore that could not go out (updates off): retried next run.

        An archive becomes DRIFT (still "in the source" to the planner, so it is planned
        again); a restore stays ARCHIVED, so the planner restores it again. ``outcome``:
        the write's in the history, when one went out (``history.UNKNOWN``: its answer was
        lost and nothing settled it).
        """
        with self._write() as conn:
            self._outcome(conn, key, outcome, error=reason)
            self._upsert(conn, key, state, {"last_error": reason})

    def record_archive_refused(
        self, key: str, reason: str, *, patch_digest: str, status: int | None = None
    ) -> None:
        """The API refused the [gone] patch: REJECTED under the patch's digest, so it is not
        resent until the patch changes (the digest the remote holds stays as it was)."""
        with self._write() as conn:
            self._letter(conn, key, reason)
            self._outcome(conn, key, history.REFUSED, status=status, error=reason)
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

    def record_put_back(
        self,
        key: str,
        remote_id: str,
        *,
        state: State,
        digest: str | None,
        record_digest: str | None,
        sent: Mapping[str, Any] | None,
    ) -> None:
        """An undo's write landed: the row as the CMS now holds it (``state`` SYNCED or
        ARCHIVED, in step with ``digest``, None: not known), ``sent`` as last sent."""
        with self._write() as conn:
            conn.execute("DELETE FROM intents WHERE key = ?", (key,))
            deadletters.clear(conn, [key])
            self._outcome(conn, key, history.OK, remote_id=remote_id)
            self._upsert(
                conn,
                key,
                state,
                {
                    "remote_id": remote_id,
                    "digest": digest,
                    "source_fingerprint": record_digest,
                    "sent": None if sent is None else canonical.dumps(dict(sent)),
                    "rejected_digest": None,
                    "last_error": None,
                    "attempts": 0,
                    "synced_at": self._clock(),
                },
            )

    def remember_remote(self, key: str, values: Mapping[str, Any]) -> None:
        """What the remote was found to hold (``--verify``): the next update is diffed
        against it, so it carries exactly the fields edited there. A write of the key whose
        answer was lost is then known not applied (the read showed other values)."""
        with self._write() as conn:
            self._outcome(conn, key, history.FAILED, error="read back: not applied")
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
