"""The state file's schema, built with sqlite-utils, against files released versions wrote.

``tests/data/state-schema-N.sql`` are ``sqlite3 state.db .dump`` of state files at schema
version N (1: the first release; 4: before dead letters; 5: today's main before sqlite-utils
built the schema), each with a few rows. Opened by this code, each keeps its rows and ends
with the tables, columns and indexes of a fresh file, which are those main created.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from skuferry.errors import StateError
from skuferry.models import MirrorRow, Product, State
from skuferry.state import schema
from skuferry.state.mirror import Mirror
from tests.fakes import FakeClock

DATA = Path(__file__).parent.parent / "data"
RELEASED = (1, 4, 5)


def fixture_sql(version: int, *, with_version: bool = True) -> str:
    text = (DATA / f"state-schema-{version}.sql").read_text(encoding="utf-8")
    if not with_version:  # as ``.dump`` restores it: user_version lost
        text = "\n".join(x for x in text.splitlines() if not x.startswith("PRAGMA user_version"))
    return text


def load(path: Path, sql: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    try:
        conn.executescript(sql)
    finally:
        conn.close()
    path.chmod(0o600)
    return path


def released(tmp_path: Path, version: int, name: str = "skuferry.db") -> Path:
    return load(tmp_path / "state" / name, fixture_sql(version))


def pragma(path: Path, name: str) -> Any:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(f"PRAGMA {name}").fetchone()[0]
    finally:
        conn.close()


def shape(path: Path) -> dict[str, Any]:
    """Tables with their columns (name, type, not null, default, pk), indexes with their
    columns, and whether run ids autoincrement: what "the same schema" means here."""
    conn = sqlite3.connect(path)
    try:
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        ]
        out: dict[str, Any] = {}
        for table in tables:
            columns = [tuple(c[1:6]) for c in conn.execute(f"PRAGMA table_xinfo('{table}')")]
            indexes = sorted(
                (
                    name,
                    unique,
                    partial,
                    [c[2] for c in conn.execute(f"PRAGMA index_info('{name}')")],
                )
                for _, name, unique, _origin, partial in conn.execute(
                    f"PRAGMA index_list('{table}')"
                )
            )
            out[table] = {"columns": columns, "indexes": indexes}
        runs_sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'runs'").fetchone()[0]
        out["runs autoincrement"] = "AUTOINCREMENT" in runs_sql.upper()
        return out
    finally:
        conn.close()


def test_a_fresh_file_has_the_schema_main_created(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh" / "skuferry.db"
    schema.open_state(fresh).close()
    main = load(tmp_path / "main.db", fixture_sql(5))  # not opened by this code
    built = shape(fresh)
    # Migration 6 (after version 5) adds the line digest: the rest is what main created.
    line_digest = ("source_line_digest", "BLOB", 0, None, 0)
    assert built["products"]["columns"][-1] == line_digest
    built["products"]["columns"].remove(line_digest)
    assert built == shape(main)
    assert shape(fresh)["runs autoincrement"] is True
    assert set(shape(fresh)) >= {"products", "intents", "runs", "meta", "dead_letters"}


@pytest.mark.parametrize("version", RELEASED)
def test_a_released_file_upgrades_to_the_fresh_schema(tmp_path: Path, version: int) -> None:
    path = released(tmp_path, version)
    assert pragma(path, "user_version") == version
    schema.open_state(path).close()
    fresh = tmp_path / "fresh" / "skuferry.db"
    schema.open_state(fresh).close()
    assert pragma(path, "user_version") == schema.SCHEMA_VERSION
    assert shape(path) == shape(fresh)
    assert pragma(path, "journal_mode") == "wal"
    assert (path.stat().st_mode & 0o777) == 0o600


def test_main_s_file_keeps_its_rows_and_gets_the_line_digest(tmp_path: Path) -> None:
    path = released(tmp_path, 5)
    m = Mirror(path, readonly=False)
    try:
        assert pragma(path, "user_version") == schema.SCHEMA_VERSION == 6
        assert m.known()["SKU-1"] == MirrorRow("SKU-1", State.SYNCED, digest="d1", remote_id="101")
        assert m.payload("SKU-1") == {"name": "Kettle", "price": "19.90", "sku": "SKU-1"}
        assert m.open_intents() == [("SKU-3", "d3")]
        assert [(r["id"], r["status"], r["summary"]) for r in m.last_runs()] == [
            (1, "ok", {"created": 1, "rejected": 1})
        ]
        assert m.rejected() == [
            {"key": "SKU-2", "reason": "price: must be >= 0", "at": 1790000007.0, "line": 3}
        ]
        letters = [(d.key, d.stage, d.status, d.line) for d in m.dead_letters()]
        assert letters == [(None, "read", None, 5), ("SKU-2", "api", 422, 3)]
        assert m.dead_letter_counts() == {"read": 1, "map": 0, "check": 0, "api": 1}
        assert m.get_meta("walked_at") == "1790000000.0"
        assert m.counts_by_state() == {"pending": 1, "rejected": 1, "synced": 1}
    finally:
        m.close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT * FROM budget_bucket").fetchall() == [
            ("write", 12.5, 1790000010.0, 0.0)
        ]
        assert conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'runs'").fetchone() == (
            1,
        )
        # no row has a line digest yet: each is recognised by its fingerprint once more
        assert conn.execute("SELECT DISTINCT source_line_digest FROM products").fetchall() == [
            (None,)
        ]
    finally:
        conn.close()


def test_a_file_from_before_dead_letters_upgrades_and_records_them(tmp_path: Path) -> None:
    path = released(tmp_path, 4)
    m = Mirror(path, clock=FakeClock(1_800_000_000.0, tick=1.0))
    try:
        assert m.dead_letters() == []
        assert m.payload("SKU-1") == {"name": "Kettle", "sku": "SKU-1"}
        assert m.intent_product("SKU-3") is not None
        product = Product(key="SKU-4", payload={"sku": "SKU-4"}, digest="d4", line=9)
        m.record_rejected(product, "name: required", status=422)
        assert [(d.key, d.stage, d.status) for d in m.dead_letters()] == [("SKU-4", "api", 422)]
        run = m.start_run()
        assert run == 2  # after the run the old file holds: ids go on
    finally:
        m.close()
    assert pragma(path, "user_version") == schema.SCHEMA_VERSION


def test_the_first_release_s_payload_column_becomes_sent(tmp_path: Path) -> None:
    path = released(tmp_path, 1)
    m = Mirror(path)
    try:
        assert m.payload("SKU-1") == {"name": "Kettle", "sku": "SKU-1"}
        assert m.known()["SKU-2"].state is State.REJECTED
    finally:
        m.close()


def test_a_dump_restored_without_its_version_upgrades_in_place(tmp_path: Path) -> None:
    """``sqlite3 .dump`` leaves out ``user_version``: a restored backup reads as version 0."""
    path = load(tmp_path / "state" / "skuferry.db", fixture_sql(5, with_version=False))
    assert pragma(path, "user_version") == 0
    m = Mirror(path)
    try:
        assert m.known()["SKU-1"].remote_id == "101"
        assert len(m.dead_letters()) == 2
    finally:
        m.close()
    assert pragma(path, "user_version") == schema.SCHEMA_VERSION


def test_a_file_that_is_not_a_state_file_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = load(
        tmp_path / "shop.db",
        "CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT); "
        "INSERT INTO products VALUES (1, 'Kettle');",
    )
    with pytest.raises(StateError, match=r"shop\.db.*not a skuferry state file.*products"):
        schema.open_state(path).close()
    conn = sqlite3.connect(path)
    try:
        tables = [n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        assert tables == ["products"]
        assert conn.execute("PRAGMA user_version").fetchone() == (0,)
    finally:
        conn.close()


def test_a_failing_migration_leaves_the_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sqlite-utils writes in a SAVEPOINT of our transaction: nothing commits halfway."""
    path = released(tmp_path, 4)
    before = shape(path)
    real = schema.MIGRATIONS[4]

    def fails_after_creating(conn: sqlite3.Connection) -> None:
        real(conn)
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS[:4], fails_after_creating])
    with pytest.raises(StateError, match="cannot migrate"):
        schema.open_state(path).close()
    assert pragma(path, "user_version") == 4
    assert shape(path) == before  # no dead_letters table, no index


def test_an_up_to_date_file_opens_without_sqlite_utils(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The no-op run's path: user_version is current, so no schema step, no ~50 ms import."""
    path = tmp_path / "state" / "skuferry.db"
    schema.open_state(path).close()
    monkeypatch.setitem(sys.modules, "sqlite_utils", None)  # any import of it now fails
    conn = schema.open_state(path)
    conn.close()
    m = Mirror(path)
    try:
        assert m.count() == 0
        assert m.counts_by_state() == {}
        assert m.dead_letter_counts()["api"] == 0
    finally:
        m.close()
    old = released(tmp_path, 4, name="old.db")
    with pytest.raises(ImportError):  # an old file does need it
        schema.open_state(old)
