"""The state file's schema, built with sqlite-utils, against files released versions wrote.

``tests/data/state-schema-N.sql`` are ``sqlite3 state.db .dump`` of state files at schema
version N (1: the first release; 4: before dead letters; 5: today's main before sqlite-utils
built the schema; 6: before keys were stored in Unicode NFC; 7: before the history of
writes; 9: before the runs' feed), each with a few rows. Opened by
this code, each keeps its rows and ends with the tables, columns and indexes of a fresh file,
which are those main created.
"""

from __future__ import annotations

import sqlite3
import sys
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from skuferry import canonical
from skuferry.errors import StateError
from skuferry.models import MirrorRow, Product, State
from skuferry.state import schema
from skuferry.state.mirror import Mirror
from tests.fakes import FakeClock

DATA = Path(__file__).parents[2] / "data"
RELEASED = (1, 4, 5, 6, 7, 9)


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
    # Migration 6 (after version 5) adds the line digest, migration 8 the history and the
    # runs' kind, undone run and token, migration 9 the shapes, migration 10 the runs' feed:
    # the rest is what main created.
    line_digest = ("source_line_digest", "BLOB", 0, None, 0)
    assert built["products"]["columns"][-1] == line_digest
    built["products"]["columns"].remove(line_digest)
    run_columns = [("kind", "TEXT", 0, None, 0), ("undoes", "INTEGER", 0, None, 0)]
    run_columns.append(("token", "TEXT", 0, None, 0))
    run_columns.append(("feed", "TEXT", 0, None, 0))
    assert built["runs"]["columns"][-4:] == run_columns
    del built["runs"]["columns"][-4:]
    assert [i[0] for i in built.pop("history")["indexes"]] == ["history_key", "history_run"]
    assert [c[0] for c in built.pop("shapes")["columns"]] == [
        "id", "run_id", "at", "status", "digest", "shape", "changes"
    ]  # fmt: skip
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
        assert pragma(path, "user_version") == schema.SCHEMA_VERSION == 10
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
        # no row has a line digest yet: each is recognised by its record digest once more
        assert conn.execute("SELECT DISTINCT source_line_digest FROM products").fetchall() == [
            (None,)
        ]
    finally:
        conn.close()


def test_a_file_from_before_the_history_keeps_its_journal_and_starts_a_history(
    tmp_path: Path,
) -> None:
    path = released(tmp_path, 7)
    m = Mirror(path, readonly=False)
    try:
        assert m.open_intents() == [("SKU-2", "d2")]
        assert m.history_of("SKU-1") == []
        assert [(r["id"], r["status"]) for r in m.last_runs()] == [(1, "ok")]
        run = m.start_run()
        assert run == 2
        m.record_created(Product("SKU-2", {"sku": "SKU-2"}, "d2", line=3), "102")
        m.open_intent(Product("SKU-3", {"sku": "SKU-3"}, "d3", line=4), run_id=run)
        assert [(e.kind, e.outcome, e.run_id) for e in m.history_of("SKU-3")] == [
            ("create", "sent", 2)
        ]
        assert m.history_of("SKU-2") == []  # journalled before the history: no row to close
    finally:
        m.close()


def test_a_file_from_before_the_runs_feed_keeps_its_tokens_and_its_undone_mark(
    tmp_path: Path,
) -> None:
    """Schema 9: a bad feed forced through (run 2) and undone (run 3), its mark as that
    version wrote it (the skip token alone): still read as the refusal of that token."""
    from skuferry.sync.read import undone

    path = released(tmp_path, 9)
    m = Mirror(path, readonly=False)
    try:
        bad = m.run_row(2)
        assert bad is not None and bad["token"] and bad["feed"] is None
        [mark] = undone.marks(m)
        assert (mark.run, mark.undo, mark.tokens, mark.feed) == (2, 3, (bad["token"],), None)
        assert undone.found(m, bad["token"]) == mark
        assert [(e.run_id, e.kind) for e in m.history_of("SKU-0001")] == [
            (3, "update"), (2, "update"), (1, "create")
        ]  # fmt: skip
        run = m.start_run()
        m.note_run_feed("feed:1:abc")
        row = m.run_row(run)
        assert row is not None and row["feed"] == "feed:1:abc"
    finally:
        m.close()


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


# -- migration 7: keys in Unicode NFC -----------------------------------------------------


def nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def nfd(text: str) -> str:
    return unicodedata.normalize("NFD", text)


def keys_in(path: Path) -> dict[str, list[str]]:
    """Every product key the file holds, by table (lane meta rows without their prefix)."""
    conn = sqlite3.connect(path)
    try:
        return {
            "products": [k for (k,) in conn.execute("SELECT key FROM products ORDER BY key")],
            "intents": [k for (k,) in conn.execute("SELECT key FROM intents ORDER BY key")],
            "dead_letters": [
                k for (k,) in conn.execute("SELECT slot FROM dead_letters ORDER BY slot")
            ],
            "lanes": [
                n.removeprefix("lane.")
                for (n,) in conn.execute("SELECT name FROM meta WHERE name GLOB 'lane.*'")
            ],
        }
    finally:
        conn.close()


def remote_ids(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {r for (r,) in conn.execute("SELECT remote_id FROM products") if r is not None}
    finally:
        conn.close()


def test_version_6_keys_become_nfc_and_spellings_of_one_key_collapse_safely(
    tmp_path: Path,
) -> None:
    path = released(tmp_path, 6)
    before = keys_in(path)
    # the fixture holds NFD keys (a tool that normalised it would make this test moot)
    assert nfd("CAFÉ-001") in before["products"]
    spellings = [k for k in before["products"] if nfc(k) == nfc("CRÈME-002")]
    assert sorted(spellings) == sorted([nfc("CRÈME-002"), nfd("CRÈME-002")])
    ids_before = remote_ids(path)
    with capture_logs() as events:
        m = Mirror(path)
    try:
        after = keys_in(path)
        for table, keys in after.items():
            assert all(unicodedata.is_normalized("NFC", k) for k in keys), (table, keys)
        assert after["products"] == sorted(
            nfc(k) for k in ("SKU-1", "CAFÉ-001", "CRÈME-002", "ÅNGSTRÖM-003", "NOËL-004")
        )
        known = m.known()
        # one spelling: renamed, nothing else changes (what was sent stays as it was sent)
        assert known[nfc("CAFÉ-001")] == MirrorRow(
            nfc("CAFÉ-001"), State.SYNCED, digest=known[nfc("CAFÉ-001")].digest, remote_id="101"
        )
        assert m.payload(nfc("CAFÉ-001")) == {"name": "Coffee", "sku": nfd("CAFÉ-001")}
        assert m.open_intents() == [(nfc("NOËL-004"), m.intent_product(nfc("NOËL-004")).digest)]  # type: ignore[union-attr]
        assert known[nfc("NOËL-004")].state is State.PENDING
        # two spellings that cannot both be on the CMS (the other never had a remote id):
        # the synced row is kept as it is
        assert known[nfc("ÅNGSTRÖM-003")].state is State.SYNCED
        assert known[nfc("ÅNGSTRÖM-003")].remote_id == "103"
        # two spellings each with its product on the CMS: DUPLICATE, looked up before any
        # write; no remote id lost: the row keeps one, the reason names both
        creme = known[nfc("CRÈME-002")]
        assert (creme.state, creme.remote_id) == (State.DUPLICATE, "102")
        assert "102" in (creme.last_error or "") and "202" in (creme.last_error or "")
        letters = {d.key: d for d in m.dead_letters()}
        assert letters[nfc("CRÈME-002")].stage == "check"
        assert "202" in letters[nfc("CRÈME-002")].reason
        assert letters[nfc("ÉTÉ-005")].stage == "map"  # a refusal without a row: renamed
        assert after["lanes"] == [nfc("CAFÉ-001")]
    finally:
        m.close()
    kept = remote_ids(path)
    assert kept | {"202"} == ids_before
    merged = [e for e in events if e["event"] == "state.keys.merged"]
    assert sorted((e["key"], e["duplicate"], e["remote_ids"]) for e in merged) == [
        (nfc("CRÈME-002"), True, ["102", "202"]),
        (nfc("ÅNGSTRÖM-003"), False, ["103"]),
    ]


_LETTERS = st.sampled_from(["É", nfd("É"), "Ö", nfd("Ö"), "A"])
_STATES = st.sampled_from([s.value for s in State])


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.lists(_LETTERS, min_size=1, max_size=2).map("".join),
            _STATES,
            st.one_of(st.none(), st.sampled_from(["1", "2", "3"])),
            st.booleans(),  # an open intent
        ),
        max_size=8,
        unique_by=lambda r: r[0],
    )
)
def test_migration_7_keeps_every_remote_id_and_leaves_only_nfc_keys(
    rows: list[tuple[str, str, str | None, bool]],
) -> None:
    """Whatever rows older versions left: afterwards every key is NFC, one row per key,
    and each remote id is on the key's row or, for a DUPLICATE, named in its reason."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        for migration in schema.MIGRATIONS[:6]:
            migration(conn)
        for i, (key, state, rid, intent) in enumerate(rows):
            conn.execute(
                "INSERT INTO products (key, state, remote_id, first_seen, updated_at) "
                "VALUES (?, ?, ?, 0, ?)",
                (key, state, rid, float(i)),
            )
            if intent:
                conn.execute(
                    "INSERT INTO intents (key, digest, payload, started_at) "
                    "VALUES (?, 'd', '{}', 0)",
                    (key,),
                )
        schema.MIGRATIONS[6](conn)
        found = conn.execute("SELECT key, state, remote_id, last_error FROM products").fetchall()
    finally:
        conn.close()
    assert all(unicodedata.is_normalized("NFC", k) for k, *_ in found)
    assert sorted(k for k, *_ in found) == sorted({canonical.key(k) for k, *_ in rows})
    by_key = {k: (state, rid, error or "") for k, state, rid, error in found}
    for key, _state, rid, _intent in rows:
        if rid is None:
            continue
        state, kept, error = by_key[canonical.key(key)]
        assert rid == kept or (state == "duplicate" and rid in error), (key, rid, by_key)
    for stored in by_key:
        ids = {r for k, _s, r, _i in rows if canonical.key(k) == stored and r is not None}
        if len(ids) > 1:
            assert by_key[stored][0] == "duplicate"


def test_a_renamed_key_is_mapped_again_and_an_ascii_key_keeps_its_fingerprint() -> None:
    """A row whose key became NFC loses its record digest and line digest: the next run maps
    its source row again (and sends its key field in NFC) instead of recognising it."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        for migration in schema.MIGRATIONS[:6]:
            migration(conn)
        for key in (nfd("CAFÉ-001"), "SKU-1", nfc("CRÈME-002")):
            conn.execute(
                "INSERT INTO products (key, state, remote_id, first_seen, updated_at, "
                "source_fingerprint, source_line_digest) VALUES (?, 'synced', ?, 0, 0, 'f', x'01')",
                (key, key),
            )
        schema.MIGRATIONS[6](conn)
        found = conn.execute(
            "SELECT key, source_fingerprint, source_line_digest FROM products ORDER BY key"
        ).fetchall()
    finally:
        conn.close()
    assert sorted(found) == sorted(
        [(nfc("CAFÉ-001"), None, None), ("SKU-1", "f", b"\x01"), (nfc("CRÈME-002"), "f", b"\x01")]
    )
