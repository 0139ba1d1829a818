"""A run's plan, kept on disk so memory stays flat however large the catalog.

``plan()`` yields actions as it streams the source; the last action for a key
wins (a duplicate key found late supersedes what was planned for it). The
store keeps one row per key in a TEMP table of the mirror's connection: temp
tables never touch the state file, so a dry run stays read-only.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from typing import Any

from skuferry import canonical
from skuferry.models import Action, Kind, Product

_BATCH = 2000
_PAGE = 1000  # rows per keyset page when reading the plan back
_WRITES = f"('{Kind.CREATE.value}', '{Kind.UPDATE.value}')"


class PlanStore:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        conn.execute("DROP TABLE IF EXISTS temp.run_plan")
        conn.execute(
            """CREATE TEMP TABLE run_plan (
                slot TEXT PRIMARY KEY,      -- the key, or '#<line>' for a record without one
                key TEXT, kind TEXT NOT NULL, line INTEGER, reason TEXT,
                remote_id TEXT, lookup_first INTEGER NOT NULL DEFAULT 0,
                digest TEXT, payload TEXT
            )"""
        )
        # The writes are read back in source order by walking this index page by page
        # (see actions()); partial, so the bulk of a quiet run (unchanged rows) skips it.
        conn.execute(
            f"CREATE INDEX temp.run_plan_writes ON run_plan(line, slot) WHERE kind IN {_WRITES}"
        )
        self.records = 0  # source records seen, valid or not

    def fill(self, actions: Iterable[Action]) -> None:
        """Consume the planner's actions, batching inserts into few transactions."""
        rows: list[tuple[Any, ...]] = []
        for action in actions:
            if action.kind is not Kind.GONE:
                self.records += 1
            rows.append(_row(action))
            if len(rows) >= _BATCH:
                self._flush(rows)
                rows = []
        self._flush(rows)

    def _flush(self, rows: list[tuple[Any, ...]]) -> None:
        if not rows:
            return
        self._conn.execute("BEGIN")
        self._conn.executemany("INSERT OR REPLACE INTO run_plan VALUES (?,?,?,?,?,?,?,?,?)", rows)
        self._conn.execute("COMMIT")

    def counts(self) -> dict[Kind, int]:
        found = dict(self._conn.execute("SELECT kind, count(*) FROM run_plan GROUP BY kind"))
        return {kind: int(found.get(kind.value, 0)) for kind in Kind}

    def needs_lookup(self) -> bool:
        row = self._conn.execute(
            "SELECT 1 FROM run_plan WHERE kind = 'create' AND lookup_first LIMIT 1"
        ).fetchone()
        return row is not None

    def actions(self, *kinds: Kind) -> Iterator[Action]:
        """Stream the stored actions of ``kinds`` in source order.

        Read in keyset pages, each fetched whole: the writer commits to the state
        file between items, and a statement left open across those commits would
        pin this connection's read snapshot of the state file, so its next
        ``BEGIN IMMEDIATE`` fails with "database is locked" as soon as another
        connection (the budget) has written.
        """
        # Kinds inline (enum values, not input), so SQLite can match the partial index.
        wanted = "(" + ", ".join(f"'{Kind(k).value}'" for k in kinds) + ")"
        select = (
            "SELECT key, kind, line, reason, remote_id, lookup_first, digest, payload, slot "  # noqa: S608 - enum values only
            f"FROM run_plan WHERE kind IN {wanted}"
        )
        args: list[Any] = []
        batch = self._conn.execute(f"{select} ORDER BY line, slot LIMIT {_PAGE}", args).fetchall()
        while batch:
            for key, kind, line, reason, remote_id, lookup_first, digest, payload, _slot in batch:
                product = (
                    Product(key=key, payload=canonical.loads(payload), digest=digest, line=line)
                    if payload is not None
                    else None
                )
                yield Action(
                    kind=Kind(kind), key=key, product=product, remote_id=remote_id,
                    reason=reason, line=line, lookup_first=bool(lookup_first),
                )
            if len(batch) < _PAGE:
                return
            last = batch[-1]
            batch = self._conn.execute(
                f"{select} AND (line, slot) > (?, ?) ORDER BY line, slot LIMIT {_PAGE}",
                [*args, last[2], last[8]],
            ).fetchall()

    def keys(self, kind: Kind) -> Iterator[str]:
        """Keys of ``kind``, in keyset pages (no statement stays open; see ``actions``)."""
        sql = "SELECT slot, key FROM run_plan WHERE kind = ? AND slot > ? ORDER BY slot LIMIT ?"
        after = ""
        while batch := self._conn.execute(sql, [kind.value, after, _PAGE]).fetchall():
            yield from (k for _slot, k in batch)
            if len(batch) < _PAGE:
                return
            after = batch[-1][0]

    def close(self) -> None:
        self._conn.execute("DROP TABLE IF EXISTS temp.run_plan")


def _row(action: Action) -> tuple[Any, ...]:
    product = action.product
    write = action.kind in (Kind.CREATE, Kind.UPDATE)
    line = action.line if action.line is not None else (product.line if product else None)
    slot = action.key if action.key is not None else f"#{line}"
    return (
        slot,
        action.key,
        action.kind.value,
        line if line is not None else 0,
        action.reason,
        action.remote_id,
        int(action.lookup_first),
        product.digest if product and write else None,
        canonical.dumps(product.payload) if product and write else None,
    )
