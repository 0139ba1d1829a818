"""The mirror's reads a run makes: rows for the planner, keys, intents, what is pending.

Plain ``sqlite3``, indexed reads: a no-op run makes them over the whole catalog, and
the skip decision asks ``has_pending`` before anything else, so each stops at the
first row it needs. The states they select by are the lifecycle's own SQL, never
written here again.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from skuferry import canonical
from skuferry.lifecycle import (
    ARCHIVE_IN_DOUBT_SQL,
    IN_SOURCE_SQL,
    ON_REMOTE_SQL,
    REMOTE_ID_LOST_SQL,
    state_sql,
)
from skuferry.models import MirrorRow, Product, State
from skuferry.state.reads import MirrorLookup, rows, scan
from skuferry.state.statefile import StateFile

# One indexed read per key: the open intent (and whether a killed run left it), else the
# time of the 404 that made the row lose its remote id. ``q.k``: the key asked.
_UNSEEN_SINCE_SQL = (
    "SELECT max(i.started_at, coalesce(p.updated_at, 0)), "  # noqa: S608 - the lifecycle's SQL
    "i.run_id IS NOT NULL AND r.id IS NOT NULL AND r.finished_at IS NULL "
    "AND i.run_id IS NOT ?, "
    f"(SELECT l.updated_at FROM products l WHERE l.key = q.k AND {REMOTE_ID_LOST_SQL}) "
    "FROM (SELECT ? AS k) q LEFT JOIN intents i ON i.key = q.k "
    "LEFT JOIN products p ON p.key = q.k LEFT JOIN runs r ON r.id = i.run_id"
)


class RunReads(StateFile):
    """What a run asks the mirror, product by product or all at once."""

    _known: MirrorLookup  # the rows as a Mapping, made when the mirror opens

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

        Indexed reads that stop at the first row found: the skip decision asks this first."""
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

    def unseen_since(
        self, key: str, *, now: float | None = None, run_id: int | None = None
    ) -> float | None:
        """Since when a product of ``key`` may be on the CMS unknown to the mirror, so that
        only a walk the list could show it in proves it absent; None: nothing in doubt.

        - A create in doubt (an open intent): since its intent was opened or its answer
          found lost, whichever is later. With ``now``: an intent left by a run that never
          finished (killed), other than ``run_id``, is as recent as ``now``. Its POST may
          have left long after the intent was committed (journalled in a batch, then
          waiting for a worker and for budget), and when the run died is not known.
        - A product whose remote id answered 404 (``lifecycle.remote_id_lost``): since
          that 404. Staff may have deleted it and made it again on the CMS just before; the
          new one shows on the list only once the list caught up."""
        row = self._conn.execute(_UNSEEN_SINCE_SQL, (run_id, key)).fetchone()
        if row[0] is None:  # no create in doubt: a 404's time, if any
            return None if row[2] is None else float(row[2])
        lost = float(row[0])
        return max(lost, now) if now is not None and row[1] else lost

    def intent_product(self, key: str) -> Product | None:
        """The product an open intent was about to create, as it was sent."""
        row = self._conn.execute(
            "SELECT digest, payload FROM intents WHERE key = ?", (key,)
        ).fetchone()
        if row is None:
            return None
        return Product(key=key, payload=canonical.loads(row[1]), digest=row[0], line=0)
