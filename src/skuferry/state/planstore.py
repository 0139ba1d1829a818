"""A run's plan, kept on disk so memory stays flat however large the catalog.

``plan()`` yields actions as it streams the source; the last action for a key
wins (a duplicate key found late supersedes what was planned for it). The
store keeps one row per key in a TEMP table of the mirror's connection: temp
tables never touch the state file, so a dry run stays read-only.

Products recognised unchanged by their record digest (the bulk of a quiet run) are
not actions at all: the planner marks their rows' slots in ``recognised``
(``plan(recognised=...)``), a bitmap of the mirror's rowids, and the store counts
them from it and reads their keys back from the mirror only when asked.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from typing import Any

from skuferry import canonical
from skuferry.models import Action, Kind, Product, was_mapped
from skuferry.state.scratch import keyset, slot_pages
from skuferry.state.transaction import transaction

_BATCH = 2000
_WRITE_KINDS = (Kind.CREATE, Kind.UPDATE, Kind.RESTORE, Kind.ARCHIVE)  # what the writer sends
_CARRY_PRODUCT = (Kind.CREATE, Kind.UPDATE, Kind.RESTORE)  # ... with the product's payload
_WRITES = "(" + ", ".join(f"'{k.value}'" for k in _WRITE_KINDS) + ")"


class PlanStore:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        conn.execute("DROP TABLE IF EXISTS temp.run_plan")
        conn.execute(
            """CREATE TEMP TABLE run_plan (
                slot TEXT PRIMARY KEY,      -- the key, or '#<line>' for a record without one
                key TEXT, kind TEXT NOT NULL, line INTEGER, reason TEXT,
                remote_id TEXT, lookup_first INTEGER NOT NULL DEFAULT 0,
                digest TEXT, payload TEXT,
                fingerprint TEXT,           -- writes, and unchanged rows mapped in full
                stage TEXT                  -- a reject's stage (models.STAGES)
            )"""
        )
        # The writes are read back in source order by walking this index page by page
        # (see actions()); partial, so the bulk of a quiet run (unchanged rows) skips it.
        conn.execute(
            f"CREATE INDEX temp.run_plan_writes ON run_plan(line, slot) WHERE kind IN {_WRITES}"
        )
        # Unchanged products, the bulk of a quiet run, go to a slim append-only table.
        # UNCHANGED is always the first action for its key, so a later action for that
        # key in run_plan (a duplicate found further down) supersedes the row here.
        conn.execute("DROP TABLE IF EXISTS temp.run_unchanged")
        conn.execute("CREATE TEMP TABLE run_unchanged (key TEXT, digest TEXT, fingerprint TEXT)")
        # Line digests learnt this run (the line route): what the mirror stores once the
        # run's writes are done (``Mirror.remember_line_digests``).
        conn.execute("DROP TABLE IF EXISTS temp.run_lines")
        conn.execute(
            "CREATE TEMP TABLE run_lines (slot INTEGER, fingerprint TEXT, line_digest BLOB)"
        )
        self._learnt: list[tuple[int, str, bytes]] = []
        self._records = 0  # source records planned as actions, valid or not
        # Slots (rowids) of products recognised unchanged, marked by the planner in place.
        self.recognised = bytearray()

    @property
    def records(self) -> int:
        """Source records seen, valid or not (recognised ones included)."""
        return self._records + self._recognised_count()

    def fill(self, actions: Iterable[Action]) -> None:
        """Consume the planner's actions, batching inserts into few transactions."""
        rows: list[tuple[Any, ...]] = []
        quiet: list[tuple[str | None, str | None, str | None]] = []
        unchanged = Kind.UNCHANGED
        for action in actions:
            if action.kind not in (Kind.GONE, Kind.ARCHIVE):  # those left the source
                self._records += 1
            if action.kind is unchanged:
                quiet.append(_quiet_row(action))
            else:
                rows.append(_row(action))
            if len(rows) + len(quiet) >= _BATCH:
                self._flush(rows, quiet)
                rows, quiet = [], []
        self._flush(rows, quiet)

    def _flush(
        self, rows: list[tuple[Any, ...]], quiet: list[tuple[str | None, str | None, str | None]]
    ) -> None:
        if not rows and not quiet:
            return
        with transaction(self._conn, begin="BEGIN") as conn:
            conn.executemany("INSERT OR REPLACE INTO run_plan VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)
            conn.executemany("INSERT INTO run_unchanged VALUES (?,?,?)", quiet)

    def learn(self, slot: int, record_digest: str, line_digest: bytes) -> None:
        """A row recognised from a raw line whose digest the mirror lacks (``plan(learn=)``);
        kept here in batches, so that a first run over a million rows stays flat."""
        self._learnt.append((slot, record_digest, line_digest))
        if len(self._learnt) >= _BATCH:
            self._flush_learnt()

    def _flush_learnt(self) -> None:
        if not self._learnt:
            return
        with transaction(self._conn, begin="BEGIN", join=True) as conn:
            conn.executemany("INSERT INTO run_lines VALUES (?,?,?)", self._learnt)
        self._learnt = []

    def line_digests(self) -> Iterator[tuple[int, str, bytes]]:
        """(slot, record digest, line digest) of each row learnt (see ``learn``); the last
        batch is stored right here, so that reading them back writes nothing."""
        self._flush_learnt()
        select = "SELECT rowid, slot, fingerprint, line_digest FROM run_lines"
        rows = keyset(self._conn, select, order=("rowid",))
        return ((slot, fp, line_digest) for _rowid, slot, fp, line_digest in rows)

    def counts(self) -> dict[Kind, int]:
        found = dict(self._conn.execute("SELECT kind, count(*) FROM run_plan GROUP BY kind"))
        (unchanged,) = self._conn.execute(
            "SELECT count(*) FROM run_unchanged WHERE key NOT IN (SELECT slot FROM run_plan)"
        ).fetchone()
        recognised = self._recognised_count()
        found[Kind.UNCHANGED.value] = unchanged + (recognised and recognised - self._overruled())
        return {kind: int(found.get(kind.value, 0)) for kind in Kind}

    def needs_lookup(self) -> bool:
        row = self._conn.execute(
            "SELECT 1 FROM run_plan WHERE kind = 'create' AND lookup_first LIMIT 1"
        ).fetchone()
        return row is not None

    def actions(self, *kinds: Kind) -> Iterator[Action]:
        """Stream the stored actions of ``kinds`` in source order (keyset pages: the
        writer commits between items, see the scratch tables)."""
        # Kinds inline (enum values, not input), so SQLite can match the partial index.
        wanted = "(" + ", ".join(f"'{Kind(k).value}'" for k in kinds) + ")"
        select = (
            "SELECT line, slot, key, kind, reason, remote_id, lookup_first, digest, payload, "
            "fingerprint, stage FROM run_plan"
        )
        for row in keyset(self._conn, select, order=("line", "slot"), where=f"kind IN {wanted}"):
            line, _slot, key, kind, reason, remote_id, lookup_first, digest, payload, fp, stage = (
                row
            )
            product = (
                Product(key, canonical.loads(payload), digest, line, fp)
                if payload is not None
                else None
            )
            yield Action(
                kind=Kind(kind),
                key=key,
                product=product,
                remote_id=remote_id,
                reason=reason,
                line=line,
                lookup_first=bool(lookup_first),
                stage=stage,
            )

    def keys(self, kind: Kind) -> Iterator[str]:
        """Keys of ``kind``, in keyset pages (no statement stays open; see ``actions``).

        UNCHANGED: those mapped in full in source order, then the recognised ones in
        the mirror's row order."""
        if kind is Kind.UNCHANGED:
            for key, _digest, _record_digest in self._unchanged(with_record_digest=False):
                yield key
            for page in slot_pages(self.recognised, marked=True):
                marks = ",".join("?" * len(page))
                yield from (
                    key
                    for (key,) in self._conn.execute(
                        f"SELECT key FROM products WHERE rowid IN ({marks}) "  # noqa: S608
                        "AND key NOT IN (SELECT slot FROM temp.run_plan) ORDER BY rowid",
                        page,
                    ).fetchall()
                )
            return
        select = "SELECT slot, key FROM run_plan"
        for _slot, key in keyset(
            self._conn, select, order=("slot",), where="kind = ?", args=[kind.value]
        ):
            yield key

    def _recognised_count(self) -> int:
        return int.from_bytes(self.recognised, "little").bit_count()

    def _overruled(self) -> int:
        """Recognised products a later action overrules (a duplicate of the key found
        further down the source is rejected: the last action for a key wins)."""
        bits = self.recognised
        rowids = self._conn.execute(
            "SELECT p.rowid FROM temp.run_plan r JOIN products p ON p.key = r.key"
        )  # read to the end right here: nothing is committed meanwhile
        size = len(bits) << 3
        return sum(
            1 for (rowid,) in rowids if rowid < size and bits[rowid >> 3] & (1 << (rowid & 7))
        )

    def record_digests(self) -> Iterator[tuple[str, str, str]]:
        """(key, digest, record digest) of unchanged products that had to be mapped in full."""
        return self._unchanged(with_record_digest=True)

    def _unchanged(self, *, with_record_digest: bool) -> Iterator[tuple[str, str, str]]:
        extra = "fingerprint IS NOT NULL AND " if with_record_digest else ""
        select = "SELECT rowid, key, digest, fingerprint FROM run_unchanged"
        where = f"{extra}key NOT IN (SELECT slot FROM run_plan)"  # noqa: S608 - constant
        for _rowid, key, digest, fp in keyset(self._conn, select, order=("rowid",), where=where):
            yield key, digest, fp

    def close(self) -> None:
        self._conn.execute("DROP TABLE IF EXISTS temp.run_plan")
        self._conn.execute("DROP TABLE IF EXISTS temp.run_unchanged")
        self._conn.execute("DROP TABLE IF EXISTS temp.run_lines")


def _quiet_row(action: Action) -> tuple[str | None, str | None, str | None]:
    """An unchanged product; digest and record digest only when it was mapped in full."""
    product = action.product
    if product is None or not was_mapped(product) or product.record_digest is None:
        return (action.key, None, None)
    return (action.key, product.digest, product.record_digest)


def _row(action: Action) -> tuple[Any, ...]:
    product = action.product
    write = action.kind in _CARRY_PRODUCT
    record_digest = product.record_digest if product and write else None  # stored on success
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
        record_digest,
        action.stage,
    )
