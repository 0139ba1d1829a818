"""The mirror's reads made for a person and for the metrics: ``status``, ``rejected``.

The listings go through sqlite-utils (rows as dicts by column name, ``StateFile.db``);
the counts the metrics take after every run, the no-op's too, stay plain ``sqlite3``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from skuferry.lifecycle import state_sql
from skuferry.models import State
from skuferry.state import deadletters
from skuferry.state.deadletters import DeadLetter
from skuferry.state.statefile import StateFile


class StatusReads(StateFile):
    """What the mirror shows: counts by state, the archived, the refused, the dead letters."""

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
