"""The mirror's reads made for a person and for the metrics: ``status``, ``rejected``.

The listings go through sqlite-utils (rows as dicts by column name, ``StateFile.db``);
the counts the metrics take after every run, the no-op's too, stay plain ``sqlite3``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from skuferry import canonical
from skuferry.lifecycle import state_sql
from skuferry.models import State
from skuferry.state import deadletters
from skuferry.state.deadletters import DeadLetter
from skuferry.state.scratch import keyset
from skuferry.state.statefile import StateFile


class StatusReads(StateFile):
    """What the mirror shows: counts by state, the archived, the refused, the dead letters."""

    def product(self, key: str) -> dict[str, Any] | None:
        """What the mirror holds of one key, by column (``explain``): its state, remote id,
        values last sent (parsed), times, last error; ``intent``: an open create's start."""
        found = self._conn.execute(
            "SELECT p.key, p.state, p.digest, p.sent, p.remote_id, p.last_error, p.attempts, "
            "p.source_line, p.first_seen, p.updated_at, p.synced_at, p.rejected_digest, "
            "p.source_fingerprint, i.started_at FROM products p "
            "LEFT JOIN intents i ON i.key = p.key WHERE p.key = ?",
            (key,),
        ).fetchone()
        if found is None:
            return None
        names = (
            "key", "state", "digest", "sent", "remote_id", "last_error", "attempts",
            "source_line", "first_seen", "updated_at", "synced_at", "rejected_digest",
            "record_digest", "intent",
        )  # fmt: skip
        row = dict(zip(names, found, strict=True))
        row["sent"] = canonical.loads(row["sent"]) if row["sent"] is not None else None
        return row

    def keys_like(self, folded: Callable[[str], str], wanted: str, *, limit: int = 10) -> list[str]:
        """Known keys that ``folded`` makes ``wanted`` (case, Unicode forms, spaces): a key
        asked that differs from one known only so (read page by page, never slurped)."""
        found: list[str] = []
        for (key,) in keyset(self._conn, "SELECT key FROM products"):
            if folded(key) == wanted:
                found.append(key)
                if len(found) >= limit:
                    break
        return found

    def counts_by_state(self) -> dict[str, int]:
        sql = "SELECT state, count(*) FROM products GROUP BY state ORDER BY state"
        return {state: int(n) for state, n in self._conn.execute(sql)}

    def archived(self, limit: int = 20) -> list[dict[str, Any]]:
        """Archived products, most recent first (for ``status``)."""
        return self._latest(State.ARCHIVED, "key, remote_id, updated_at AS at", limit)

    def rejected(self, limit: int = 20) -> list[dict[str, Any]]:
        """Products the API refused, most recent first (for ``status``)."""
        columns = "key, last_error AS reason, updated_at AS at, source_line AS line"
        return self._latest(State.REJECTED, columns, limit)

    def _latest(self, state: State, columns: str, limit: int) -> list[dict[str, Any]]:
        products = self.db.table("products")
        where = state_sql([state])
        order = "updated_at DESC, key"
        return list(products.rows_where(where, select=columns, order_by=order, limit=limit))

    # -- dead letters (``deadletters``) ----------------------------------------

    def dead_letters(self, keys: Sequence[str] | None = None) -> list[DeadLetter]:
        """The products refused or failed, with stage and reason (``skuferry rejected``)."""
        return deadletters.listing(self.db, keys)

    def dead_letter_counts(self) -> dict[str, int]:
        # sqlite3: the metrics read this after every run, the no-op's too
        return deadletters.counts_by_stage(self._conn)

    def oldest_dead_letter(self) -> tuple[int, DeadLetter | None]:
        return deadletters.oldest(self._conn)
