"""The one keyset pager, and the scratch tables the mirror hands out."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from skuferry.models import Action, Kind, Product
from skuferry.state.mirror import Mirror
from skuferry.state.scratch import keyset
from tests.fakes import FakeRemote


@pytest.fixture
def conn() -> sqlite3.Connection:
    db = sqlite3.connect(":memory:", isolation_level=None)
    db.execute("CREATE TABLE t (line INTEGER, slot TEXT, kind TEXT, PRIMARY KEY (line, slot))")
    rows = [(line, slot, "w" if line % 2 else "q") for line in range(1, 6) for slot in "ba"]
    db.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
    return db


@pytest.mark.parametrize("page", [1, 2, 3, 10, 100])
def test_pages_walk_every_row_once_in_order(conn: sqlite3.Connection, page: int) -> None:
    rows = list(keyset(conn, "SELECT line, slot FROM t", order=("line", "slot"), page=page))
    assert rows == sorted(rows) and len(rows) == 10


def test_where_and_args_hold_on_every_page(conn: sqlite3.Connection) -> None:
    select = "SELECT slot, line FROM t"
    rows = list(keyset(conn, select, order=("slot", "line"), where="kind = ?", args=["w"], page=2))
    assert rows == [("a", 1), ("a", 3), ("a", 5), ("b", 1), ("b", 3), ("b", 5)]


def test_writes_between_rows_do_not_trip_the_reader(tmp_path: Path) -> None:
    """No statement stays open across a page, so the reader's connection may commit."""
    path = tmp_path / "s.db"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE k (key TEXT PRIMARY KEY)")
    db.executemany("INSERT INTO k VALUES (?)", [(f"k{i:02d}",) for i in range(7)])
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    seen = []
    for (key,) in keyset(db, "SELECT key FROM k", page=3):
        seen.append(key)
        other.execute("BEGIN IMMEDIATE")  # another writer (the budget) between pages
        other.execute("COMMIT")
        db.execute("BEGIN IMMEDIATE")  # and this connection's own durable write
        db.execute("COMMIT")
    assert seen == [f"k{i:02d}" for i in range(7)]
    db.close()
    other.close()


def test_the_mirror_hands_out_its_scratch_tables(tmp_path: Path) -> None:
    with_rows = [Product(f"K{i}", {"sku": f"K{i}", "name": "n"}, f"d{i}", i + 2) for i in range(3)]
    mirror = Mirror(tmp_path / "state.db", readonly=True)  # scratch space works read-only
    try:
        store = mirror.plan_store()
        store.fill(Action(Kind.CREATE, p.key, p, line=p.line) for p in with_rows)
        assert [a.key for a in store.actions(Kind.CREATE)] == ["K0", "K1", "K2"]
        store.close()
        remote = FakeRemote()
        remote.seed({"sku": "K1", "name": "n"}, {"sku": "K1", "name": "m"}, {"name": "x"})
        index = mirror.remote_index("sku")
        index.load(remote, page_size=2)
        assert sorted(index.pairs()) == [("K1", "p000001"), ("K1", "p000002")]
        assert index.keyless == 1
        index.close()
    finally:
        mirror.close()
