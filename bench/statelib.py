"""Issue 19 §5: the mirror's hot paths in plain sqlite3 against sqlite-utils, rows per second.

Three shapes, each on a fresh state file (``schema.open_state``: WAL, synchronous=FULL):

- a batch write: ``n`` products upserted in one transaction (``executemany`` of the
  mirror's upsert against ``Table.upsert_all``);
- a batch read: every product's planning columns (tuples from ``execute`` against dicts
  from ``Table.rows_where``);
- per-write transitions: one ``BEGIN IMMEDIATE`` ... ``COMMIT`` per product, as the
  journal commits each state change before the next request (``execute`` against
  ``Table.update`` inside ``Database.atomic``).

Informational: the figures say why those paths stay plain sqlite3 (the mirror's journal
and a run's reads).
"""

from __future__ import annotations

import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import Result
from skuferry.state import schema

_UPSERT = (
    "INSERT INTO products (key, state, digest, sent, remote_id, first_seen, updated_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(key) DO UPDATE SET state = excluded.state, "
    "digest = excluded.digest, sent = excluded.sent, remote_id = excluded.remote_id, "
    "updated_at = excluded.updated_at"
)
_COLUMNS = "key, state, digest, remote_id, rejected_digest"


def _row(i: int) -> dict[str, Any]:
    return {
        "key": f"SKU-{i:07d}",
        "state": "synced",
        "digest": f"{i:064x}",
        "sent": f'{{"name":"Product {i}","price":"{i % 900}.99","sku":"SKU-{i:07d}"}}',
        "remote_id": str(100000 + i),
        "first_seen": 1_790_000_000.0,
        "updated_at": 1_790_000_000.0 + i,
    }


def _timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _write_raw(conn: sqlite3.Connection, n: int) -> None:
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(_UPSERT, (tuple(_row(i).values()) for i in range(n)))
    conn.execute("COMMIT")


def _write_lib(conn: sqlite3.Connection, n: int) -> None:
    db = schema.database(conn)
    conn.execute("BEGIN IMMEDIATE")
    db.table("products").upsert_all((_row(i) for i in range(n)), pk="key")
    conn.execute("COMMIT")


def _read_raw(conn: sqlite3.Connection) -> int:
    return sum(1 for _ in conn.execute(f"SELECT {_COLUMNS} FROM products"))  # noqa: S608


def _read_lib(conn: sqlite3.Connection) -> int:
    return sum(1 for _ in schema.database(conn).table("products").rows_where(select=_COLUMNS))


def _step_raw(conn: sqlite3.Connection, n: int) -> None:
    for i in range(n):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "UPDATE products SET state = 'failed', last_error = ?, updated_at = ? WHERE key = ?",
            ("HTTP 503", 1_800_000_000.0 + i, f"SKU-{i:07d}"),
        )
        conn.execute("COMMIT")


def _step_lib(conn: sqlite3.Connection, n: int) -> None:
    products = schema.database(conn).table("products")
    for i in range(n):
        conn.execute("BEGIN IMMEDIATE")
        products.update(
            f"SKU-{i:07d}",
            {"state": "failed", "last_error": "HTTP 503", "updated_at": 1_800_000_000.0 + i},
        )
        conn.execute("COMMIT")


_WAYS: dict[str, tuple[Callable[..., None], Callable[..., int], Callable[..., None]]] = {
    "sqlite3": (_write_raw, _read_raw, _step_raw),
    "sqlite-utils": (_write_lib, _read_lib, _step_lib),
}


def figure(quick: bool) -> Result:
    n = 20_000 if quick else 200_000
    steps = 200 if quick else 1_000
    rounds = 3  # the two ways take turns, each on a fresh file; medians of the rounds
    samples: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for turn in range(rounds):
            for name, (write, read, step) in _WAYS.items():
                conn = schema.open_state(Path(tmp) / f"{name}-{turn}.db")
                try:
                    for shape, count, fn in (
                        ("write", n, lambda c=conn, w=write: w(c, n)),
                        ("read", n, lambda c=conn, r=read: r(c)),
                        ("commit", steps, lambda c=conn, s=step: s(c, steps)),
                    ):
                        samples.setdefault(f"{shape} {name}", []).append(count / _timed(fn))
                finally:
                    conn.close()
    rates = {k: statistics.median(v) for k, v in samples.items()}
    shown = "; ".join(
        f"{shape} {rates[shape + ' sqlite3']:,.0f} vs {rates[shape + ' sqlite-utils']:,.0f}/s"
        for shape in ("write", "read", "commit")
    )
    return Result(
        "statelib",
        f"{n:,} rows, {steps:,} commits, sqlite3 vs sqlite-utils: {shown}",
        "informational",
        None,
        [
            "batch upsert (executemany vs upsert_all), full-table read (tuples vs "
            "rows_where dicts), one BEGIN IMMEDIATE..COMMIT per state change (UPDATE vs "
            f"Table.update); medians of {rounds} alternating rounds"
        ],
    )


if __name__ == "__main__":
    print(figure(quick=False).measured)
