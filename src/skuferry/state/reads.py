"""Reading the mirror fast: rows in batches, key scans, and the run's seen-keys table.

A no-op run reads every key of the catalog once, so these are the mirror's hot
paths: rows are fetched ``_IN_CHUNK`` keys per query, keys are scanned in keyset
pages (no cursor stays open across the engine's commits), and the seen-keys
table stays in memory until it is large.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import Any

from skuferry.lifecycle import (
    RECOGNISABLE_NO_INTENT_SQL,
    RECOGNISABLE_SQL,
    ROW_DIGEST_FROM_REFUSED,
)
from skuferry.models import MirrorRow, State
from skuferry.state.scratch import keyset, slot_pages
from skuferry.state.transaction import transaction

_IN_CHUNK = 500  # keys per IN (...) lookup: well below SQLite's variable limit
_SLOT_CHUNK = 2000  # keys per lookup of the planner's fast path (SQLite allows 32766)
_SCAN_CHUNK = 1000  # keys per keyset page: no cursor stays open across commits
_ROW_SQL = (
    "SELECT p.key, p.state, p.digest, p.rejected_digest, p.remote_id, i.digest, p.last_error, "
    "p.source_fingerprint "
    "FROM products p LEFT JOIN intents i ON i.key = p.key"
)

# A row the planner may recognise by record digest alone (``lifecycle.recognisable``). The
# rowid is the key's slot; the line digest (NULL until learnt) lets a raw line be
# recognised unparsed (the planner's line route). Without any open intent (the usual case)
# the intents are not asked per row.
_QUICK_SQL = (
    "SELECT p.key, p.rowid, p.digest, p.source_fingerprint, p.source_line_digest "  # noqa: S608 - constants
    f"FROM products p WHERE {RECOGNISABLE_SQL} AND p.key IN "
)
_QUICK_INTENTS = f"AND {RECOGNISABLE_NO_INTENT_SQL}"
# Keys that come in key order (many exports are sorted by SKU) are read as one range of
# the key index, a walk instead of a search per key (measured at 1M rows: 1.7 s against
# 2.7 s of CPU), as long as the range holds few other rows (``_RANGE_SLACK``).
_QUICK_RANGE = (
    "SELECT p.key, p.rowid, p.digest, p.source_fingerprint, p.source_line_digest "  # noqa: S608 - constants
    f"FROM products p WHERE p.key >= ? AND p.key <= ? AND {RECOGNISABLE_SQL}"
)
_RANGE_SLACK = 2  # rows read per key wanted, at most, before a range gives way to IN (...)
_SLOTTED_SQL = (
    "SELECT p.key, p.state, p.digest, p.rejected_digest, p.remote_id, i.digest, p.last_error, "
    "p.source_fingerprint, p.rowid "
    "FROM products p LEFT JOIN intents i ON i.key = p.key"
)

RowTuple = tuple[str, str, str | None, str | None, str | None, str | None, str | None, str | None]


_STATES = {s.value: s for s in State}  # a dict lookup: State(value) is slow per row


def _to_row(r: RowTuple) -> MirrorRow:
    key, state, digest, rejected_digest, remote_id, intent_digest, last_error, record_digest = r
    st = _STATES.get(state) or State(state)
    return MirrorRow(
        key=key,
        state=st,
        # ARCHIVED: what is in doubt or refused, if anything (see Mirror.record_archive_sent)
        digest=rejected_digest if st in ROW_DIGEST_FROM_REFUSED else digest,
        remote_id=remote_id,
        intent_digest=intent_digest,
        last_error=last_error,
        record_digest=record_digest,
    )


def scan(
    conn: sqlite3.Connection, select: str, where: str, args: Sequence[Any] = ()
) -> Iterator[Any]:
    """Stream ``select`` (whose first column is ``key``) in key order, in keyset pages."""
    return keyset(conn, select, where=where, args=args, page=_SCAN_CHUNK)


def rows(conn: sqlite3.Connection, keys: Sequence[str]) -> dict[str, MirrorRow]:
    found: dict[str, MirrorRow] = {}
    for start in range(0, len(keys), _IN_CHUNK):
        chunk = list(keys[start : start + _IN_CHUNK])
        marks = ",".join("?" * len(chunk))
        sql = f"{_ROW_SQL} WHERE p.key IN ({marks})"
        for r in conn.execute(sql, chunk).fetchall():
            found[r[0]] = _to_row(r)
    return found


class MirrorLookup(Mapping[str, MirrorRow]):
    """The mirror as a read-only Mapping: point lookups, keys streamed in order."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def get(self, key: str, default: Any = None) -> Any:
        found = self._conn.execute(f"{_ROW_SQL} WHERE p.key = ?", (key,)).fetchone()
        return _to_row(found) if found is not None else default

    def get_many(self, keys: Sequence[str]) -> dict[str, MirrorRow]:
        """The rows of ``keys`` that exist, in few queries (the planner's batched lookup)."""
        return rows(self._conn, keys)

    # -- the planner's pairing: rows by slot, the key's rowid ------------------------------

    def slots(self) -> int:
        """One more than the largest slot: the size of a bitmap of slots (rowids)."""
        (top,) = self._conn.execute("SELECT max(rowid) FROM products").fetchone()
        return int(top or 0) + 1

    def recognisable(
        self, keys: Sequence[str]
    ) -> dict[str, tuple[str, int, str, str, bytes | None]]:
        """key -> (key, slot, digest, record digest, line digest) of the ``keys`` whose row a
        source row with an equal record digest leaves unchanged (SYNCED, no open intent); one
        query per 2,000. The rows as read: no tuple is built per row (a million a run).

        Keys in ascending order are read as the range they span, so the answer may hold
        other keys of that range too."""
        found: dict[str, tuple[str, int, str, str, bytes | None]] = {}
        intents = self._conn.execute("SELECT 1 FROM intents LIMIT 1").fetchone() is not None
        extra = _QUICK_INTENTS if intents else ""
        if 1 < len(keys) <= _SLOT_CHUNK and keys == sorted(keys):
            limit = _RANGE_SLACK * len(keys) + 64
            sql = f"{_QUICK_RANGE} {extra} LIMIT {limit}"
            ranged = self._conn.execute(sql, (keys[0], keys[-1])).fetchall()
            if len(ranged) < limit:  # the whole range, read in few more rows than keys asked
                return {row[0]: row for row in ranged}
        for start in range(0, len(keys), _SLOT_CHUNK):
            chunk = keys[start : start + _SLOT_CHUNK]
            sql = f"{_QUICK_SQL}({','.join('?' * len(chunk))}) {extra}"
            found.update({row[0]: row for row in self._conn.execute(sql, chunk)})
        return found

    def slotted(self, keys: Sequence[str]) -> dict[str, tuple[int, MirrorRow]]:
        """key -> (slot, row) of the ``keys`` that exist."""
        found: dict[str, tuple[int, MirrorRow]] = {}
        for start in range(0, len(keys), _IN_CHUNK):
            chunk = list(keys[start : start + _IN_CHUNK])
            sql = f"{_SLOTTED_SQL} WHERE p.key IN ({','.join('?' * len(chunk))})"
            for r in self._conn.execute(sql, chunk).fetchall():
                found[r[0]] = (r[8], _to_row(r[:8]))
        return found

    def unseen(self, seen: bytes | bytearray) -> Iterator[MirrorRow]:
        """The rows whose slot's bit is clear in ``seen`` (see ``scratch.slots``), in slot
        order; slots past the bitmap's end are not asked for."""
        for wanted in slot_pages(seen, marked=False, page=_IN_CHUNK):
            sql = f"{_ROW_SQL} WHERE p.rowid IN ({','.join('?' * len(wanted))}) ORDER BY p.rowid"
            yield from (_to_row(r) for r in self._conn.execute(sql, wanted).fetchall())

    def __getitem__(self, key: str) -> MirrorRow:
        row: MirrorRow | None = self.get(key)
        if row is None:
            raise KeyError(key)
        return row

    def __contains__(self, key: object) -> bool:
        found = self._conn.execute("SELECT 1 FROM products WHERE key = ?", (key,)).fetchone()
        return found is not None

    def __iter__(self) -> Iterator[str]:
        return (k for (k,) in scan(self._conn, "SELECT key FROM products", ""))

    def __len__(self) -> int:
        return int(self._conn.execute("SELECT count(*) FROM products").fetchone()[0])


class SeenTable(MutableMapping[str, tuple[str, int]]):
    """key -> (digest, line) in a TEMP table, for ``plan(seen=...)`` on huge catalogs.

    Nearly every key is new, so a bit filter answers "never seen" without a
    query, and writes are buffered and flushed in batches. ``in`` reads ahead
    in key order, because the planner's GONE pass asks for every mirror key in
    ascending order. The write buffer holds up to ``_FLUSH`` entries (about
    30 MiB): a catalog of up to that size never touches the table (measured:
    flushing every 5,000 cost a 100k no-op run ~0.4 s of its 3 s), a larger one
    spills in batches, so memory stays bounded (2 MiB of filter, one write
    buffer, one read-ahead window).
    """

    _BITS = 1 << 24
    _FLUSH = 150_000
    _SQL = {  # {t}: this instance's table name
        "create": "CREATE TEMP TABLE {t} (key TEXT PRIMARY KEY, digest TEXT NOT NULL, "
        "line INTEGER NOT NULL) WITHOUT ROWID",
        "get": "SELECT digest, line FROM {t} WHERE key = ?",
        "ahead": "SELECT key FROM {t} WHERE key >= ? ORDER BY key LIMIT ?",
        "put": "INSERT OR REPLACE INTO {t} VALUES (?, ?, ?)",
        "delete": "DELETE FROM {t} WHERE key = ?",
        "keys": "SELECT key FROM {t}",
        "count": "SELECT count(*) FROM {t}",
        "drop": "DROP TABLE IF EXISTS {t}",
    }
    _made = itertools.count(1)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        table = f"temp.seen_{next(self._made)}"  # one table per instance: never shared
        self._sql = {name: sql.format(t=table) for name, sql in self._SQL.items()}
        conn.execute(self._sql["create"])
        self._filter = bytearray(self._BITS // 8)
        self._buffer: dict[str, tuple[str, int]] = {}
        # Read-ahead of the table's keys: every stored key in [first, last] (last None: to the end).
        self._window: tuple[str, str | None, frozenset[str]] | None = None

    def _maybe(self, key: str) -> bool:
        h = hash(key) & (self._BITS - 1)
        return bool(self._filter[h >> 3] & (1 << (h & 7)))

    def get(self, key: str, default: Any = None) -> Any:
        if key in self._buffer:
            return self._buffer[key]
        if not self._maybe(key):
            return default
        found = self._conn.execute(self._sql["get"], (key,)).fetchone()
        return (found[0], int(found[1])) if found is not None else default

    def __getitem__(self, key: str) -> tuple[str, int]:
        value: tuple[str, int] | None = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        if key in self._buffer:
            return True
        if not self._maybe(key):
            return False
        window = self._window
        if window is None or not (window[0] <= key and (window[1] is None or key <= window[1])):
            ahead = [k for (k,) in self._conn.execute(self._sql["ahead"], (key, _SCAN_CHUNK))]
            last = ahead[-1] if len(ahead) == _SCAN_CHUNK else None  # a full page: more may follow
            window = self._window = (key, last, frozenset(ahead))
        return key in window[2]

    def __setitem__(self, key: str, value: tuple[str, int]) -> None:
        h = hash(key) & (self._BITS - 1)
        self._filter[h >> 3] |= 1 << (h & 7)
        self._buffer[key] = value
        self._window = None
        if len(self._buffer) >= self._FLUSH:
            self.flush()

    def __delitem__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)
        self._buffer.pop(key, None)
        self._window = None
        # Its filter bit stays set: a false "maybe" only costs one query.
        self._conn.execute(self._sql["delete"], (key,))

    def __iter__(self) -> Iterator[str]:
        self.flush()
        return (k for (k,) in scan(self._conn, self._sql["keys"], ""))

    def __len__(self) -> int:
        self.flush()
        return int(self._conn.execute(self._sql["count"]).fetchone()[0])

    def flush(self) -> None:
        """Write the buffered entries (one transaction unless the caller holds one)."""
        if not self._buffer:
            return
        rows = [(k, d, line) for k, (d, line) in self._buffer.items()]
        with transaction(self._conn, begin="BEGIN", join=True) as conn:
            conn.executemany(self._sql["put"], rows)
        self._buffer.clear()
        self._window = None

    def close(self) -> None:
        """Drop the table (closing the mirror's connection drops it too)."""
        self._buffer.clear()
        self._window = None
        self._conn.execute(self._sql["drop"])
