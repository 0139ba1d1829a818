"""A join over a SQL table is read again only when its row count or newest
``updated_column`` moved. (A join file at a URL: tests/integration/test_change_tokens.py.)"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from skuferry.config.schema import JoinSettings
from skuferry.sync.read.joins import open_joins

pytestmark = pytest.mark.integration


def _names(scratch: Path, spec: JoinSettings) -> tuple[bool, dict[str, str]]:
    (join,) = open_joins([spec], scratch)
    try:
        return join.read, join.index.get_many(["A", "B"])
    finally:
        join.close()


def test_a_join_sql_table_is_read_again_only_when_count_or_newest_update_moves(
    tmp_path: Path,
) -> None:
    db = tmp_path / "pim.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE texts (sku TEXT, name TEXT, updated_at TEXT)")
        conn.execute("INSERT INTO texts VALUES ('A', 'Drill', '2026-11-01 10:00:00')")
    spec = JoinSettings.model_validate(
        {
            "name": "pim",
            "type": "sql",
            "url": f"sqlite:///{db}",
            "table": "texts",
            "updated_column": "updated_at",
            "key": "sku",
            "on": "SKU",
        }
    )
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    assert _names(scratch, spec)[0] is True
    assert _names(scratch, spec)[0] is False, "nothing changed: not read"
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE texts SET name = 'Drill 18V', updated_at = '2026-11-02 08:00:00'")
    read, found = _names(scratch, spec)
    assert (
        read is True
        and found["A"] == '{"name":"Drill 18V","sku":"A","updated_at":"2026-11-02 08:00:00"}'
    )
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO texts VALUES ('B', 'Saw', '2026-11-02 08:00:00')")
    read, found = _names(scratch, spec)
    assert read is True and set(found) == {"A", "B"}, "a new row: the count moved"
