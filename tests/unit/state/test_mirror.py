"""The mirror against real SQLite files: migrations, the write journal, read-only mode."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from skuferry import canonical
from skuferry.errors import StateError
from skuferry.models import MirrorRow, Product, State
from skuferry.state import reads as mirror_module
from skuferry.state import schema
from skuferry.state.mirror import Mirror
from skuferry.state.reads import SeenTable
from tests.fakes import FakeClock


def prod(key: str, line: int = 1, **fields: Any) -> Product:
    payload = {"sku": key, **fields}
    return Product(key=key, payload=payload, digest=canonical.digest(payload), line=line)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "skuferry.db"


@pytest.fixture
def mirror(path: Path) -> Iterator[Mirror]:
    m = Mirror(path, clock=FakeClock(1000.0, tick=1.0))
    yield m
    m.close()


def user_version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def old_file(path: Path) -> None:
    """A state file as skuferry with only migration 1 left it, holding one product."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    schema.MIGRATIONS[0](conn)
    conn.execute("PRAGMA user_version = 1")
    conn.execute(
        "INSERT INTO products (key, state, digest, remote_id, first_seen, updated_at) "
        "VALUES ('A', 'synced', 'd1', 'r1', 1, 1)"
    )
    conn.execute("COMMIT")
    conn.close()


# -- migrations ------------------------------------------------------------------------


def test_a_new_file_is_created_at_the_current_schema(path: Path) -> None:
    Mirror(path).close()
    assert user_version(path) == schema.SCHEMA_VERSION


def test_an_old_file_is_migrated_in_place_keeping_its_rows(path: Path) -> None:
    old_file(path)
    m = Mirror(path)
    try:
        assert m.known()["A"] == MirrorRow("A", State.SYNCED, digest="d1", remote_id="r1")
    finally:
        m.close()
    assert user_version(path) == schema.SCHEMA_VERSION


@pytest.mark.parametrize("readonly", [False, True])
def test_a_newer_file_is_refused_naming_it(path: Path, readonly: bool) -> None:
    Mirror(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StateError, match=str(path)):
        Mirror(path, readonly=readonly)


# -- the write journal -----------------------------------------------------------------


def test_a_crash_between_intent_and_outcome_leaves_pending_with_the_intent(path: Path) -> None:
    p = prod("A", price=Decimal("19.90"))
    m = Mirror(path)
    m.open_intent(p, run_id=7)
    m.close()  # the process dies here: the POST's outcome is unknown

    m = Mirror(path)
    try:
        assert m.known()["A"] == MirrorRow("A", State.PENDING, intent_digest=p.digest)
        assert m.open_intents() == [("A", p.digest)]
        m.record_created(p, "r1")
        assert m.known()["A"] == MirrorRow("A", State.SYNCED, digest=p.digest, remote_id="r1")
        assert m.open_intents() == []
        assert m.payload("A") == {"sku": "A", "price": Decimal("19.90")}
    finally:
        m.close()


def test_every_write_is_committed_before_it_returns(mirror: Mirror, path: Path) -> None:
    mirror.open_intent(prod("A"), run_id=None)
    other = sqlite3.connect(path)
    try:
        assert other.execute("SELECT key FROM intents").fetchall() == [("A",)]
    finally:
        other.close()


def test_open_intent_keeps_a_known_remote_id_and_digest(mirror: Mirror) -> None:
    old = prod("A", price=1)
    mirror.record_created(old, "r1")
    new = prod("A", price=2)
    mirror.open_intent(new, run_id=1)
    assert mirror.known()["A"] == MirrorRow(
        "A", State.PENDING, digest=old.digest, remote_id="r1", intent_digest=new.digest
    )


def test_a_failed_create_keeps_its_intent_and_counts_attempts(mirror: Mirror) -> None:
    p = prod("A")
    mirror.open_intent(p, run_id=1)
    mirror.record_failed("A", "outcome unknown: timeout", product=p)
    mirror.record_failed("A", "outcome unknown: reset", product=p)
    assert mirror.known()["A"] == MirrorRow(
        "A", State.FAILED, intent_digest=p.digest, last_error="outcome unknown: reset"
    )
    attempts = mirror.db.conn.execute("SELECT attempts FROM products").fetchone()[0]
    assert attempts == 2


def test_a_rejected_row_shows_the_refused_digest_and_keeps_the_confirmed_one(
    mirror: Mirror,
) -> None:
    good, bad = prod("A", price=1), prod("A", price=-1)
    mirror.record_created(good, "r1")
    mirror.open_intent(bad, run_id=1)
    mirror.record_rejected(bad, "price must be positive")
    assert mirror.known()["A"] == MirrorRow(
        "A", State.REJECTED, digest=bad.digest, remote_id="r1", last_error="price must be positive"
    )
    assert not mirror.has_intent("A")
    mirror.mark_gone(["A"])
    assert mirror.known()["A"].digest == good.digest  # GONE: what the remote holds


def test_adoption_links_the_remote_id(mirror: Mirror) -> None:
    a, b = prod("A"), prod("B")
    mirror.open_intent(a, run_id=1)
    mirror.record_adopted(a, "r1", in_step=True)
    mirror.record_adopted(b, "r2", in_step=False)
    assert mirror.known()["A"] == MirrorRow("A", State.SYNCED, digest=a.digest, remote_id="r1")
    assert mirror.known()["B"] == MirrorRow("B", State.PENDING, remote_id="r2")  # update follows
    assert mirror.open_intents() == []


def test_drift_keeps_the_confirmed_digest(mirror: Mirror) -> None:
    old = prod("A", price=1)
    mirror.record_created(old, "r1")
    mirror.record_drift(prod("A", price=2), "updates are off")
    assert mirror.known()["A"] == MirrorRow(
        "A", State.DRIFT, digest=old.digest, remote_id="r1", last_error="updates are off"
    )
    assert mirror.mark_in_step(["A"]) == 1
    assert mirror.known()["A"].state is State.SYNCED


def test_duplicate_and_remote_missing(mirror: Mirror) -> None:
    mirror.open_intent(prod("A"), run_id=1)
    mirror.record_duplicate("A", ["r1", "r2"])
    row = mirror.known()["A"]
    assert (row.state, row.intent_digest) == (State.DUPLICATE, None)
    assert "r1, r2" in (row.last_error or "")
    mirror.record_created(prod("B"), "r3")
    mirror.record_remote_missing("B")
    assert mirror.known()["B"] == MirrorRow(
        "B", State.PENDING, last_error="remote id r3 no longer exists"
    )
    assert mirror.payload("B") is None


def test_an_archive_is_journalled_in_doubt_before_its_patch(mirror: Mirror) -> None:
    a = prod("A", price=1)
    mirror.record_created(a, "r1")
    mirror.record_archive_sent("A", patch_digest="patch")  # committed before the PATCH
    assert mirror.known()["A"] == MirrorRow("A", State.ARCHIVED, digest="patch", remote_id="r1")
    mirror.record_archived("A", {"sku": "A", "price": 1})  # the answer came: archived for sure
    assert mirror.known()["A"] == MirrorRow("A", State.ARCHIVED, remote_id="r1")
    back = prod("A", price=0)
    mirror.record_restore_refused(back, "price must be positive")
    assert mirror.known()["A"] == MirrorRow(
        "A", State.ARCHIVED, digest=back.digest, remote_id="r1", last_error="price must be positive"
    )


def test_mark_gone_counts_only_changes(mirror: Mirror) -> None:
    for key in "ABC":
        mirror.record_created(prod(key), f"r{key}")
    assert mirror.mark_gone(iter(["A", "B", "Z"])) == 2
    assert mirror.mark_gone(["A"]) == 0
    assert mirror.count() == 1
    assert mirror.counts_by_state() == {"gone": 2, "synced": 1}
    assert list(mirror.keys()) == ["C"]
    assert list(mirror.keys(exclude_gone=False)) == ["A", "B", "C"]
    assert list(mirror.synced_items()) == [("C", "rC", prod("C").digest)]


def test_a_walk_makes_every_remote_key_known(mirror: Mirror) -> None:
    assert not mirror.walked()
    mirror.record_failed("B", "429")  # known, no remote id yet
    mirror.open_intent(prod("C"), run_id=1)  # an open intent is resolved by lookup, not here
    mirror.mark_walked(123.0, remote=[("A", "r1"), ("B", "r2"), ("C", "r3")])
    assert mirror.walked()
    assert mirror.known()["A"] == MirrorRow("A", State.REMOTE_ONLY, remote_id="r1")
    assert mirror.known()["B"].remote_id == "r2"
    assert mirror.known()["C"].remote_id is None
    assert "A" not in set(mirror.keys()), "a remote-only product is not in the source"
    assert mirror.count() == 2
    assert mirror.mark_gone(["A"]) == 0, "it never left the source, it was never in it"


def test_rejected_lists_most_recent_first(mirror: Mirror) -> None:
    mirror.record_rejected(prod("A", 3), "first")
    mirror.record_rejected(prod("B", 4), "second")
    mirror.record_created(prod("C"), "r1")
    assert [(r["key"], r["reason"], r["line"]) for r in mirror.rejected()] == [
        ("B", "second", 4),
        ("A", "first", 3),
    ]
    assert mirror.rejected()[0]["at"] > mirror.rejected()[1]["at"]
    assert len(mirror.rejected(limit=1)) == 1


def test_runs_and_meta(mirror: Mirror) -> None:
    first = mirror.start_run()
    mirror.finish_run(first, status="ok", exit_code=0, summary={"created": 2})
    second = mirror.start_run()
    runs = mirror.last_runs()
    assert [(r["id"], r["status"]) for r in runs] == [(second, "running"), (first, "ok")]
    assert runs[1]["summary"] == {"created": 2} and runs[1]["exit_code"] == 0
    assert mirror.get_meta("x") is None
    mirror.set_meta("x", "1")
    mirror.set_meta("x", "2")
    assert mirror.get_meta("x") == "2"
    mirror.set_metas({"x": None, "y": "3"})
    assert (mirror.get_meta("x"), mirror.get_meta("y")) == (None, "3")


# -- reading ----------------------------------------------------------------------------


def test_lookup_is_a_mapping_streaming_keys_in_pages(
    mirror: Mirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mirror_module, "_SCAN_CHUNK", 3)
    keys = [f"K{i:02d}" for i in range(10)]
    for key in reversed(keys):
        mirror.record_created(prod(key), "r" + key)
    lookup = mirror.known()
    assert list(lookup) == keys
    assert len(lookup) == 10
    assert "K03" in lookup and "nope" not in lookup
    assert lookup.get("nope") is None
    with pytest.raises(KeyError):
        lookup["nope"]
    assert lookup["K03"].remote_id == "rK03"
    mirror.mark_gone(["K05"])  # a commit between pages does not disturb the stream
    assert list(mirror.keys()) == [k for k in keys if k != "K05"]


def test_rows_looks_up_in_batches(mirror: Mirror, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mirror_module, "_IN_CHUNK", 4)
    for i in range(10):
        mirror.record_created(prod(f"K{i}"), f"r{i}")
    found = mirror.rows([f"K{i}" for i in range(12)])
    assert sorted(found) == [f"K{i}" for i in range(10)]
    assert found["K7"].remote_id == "r7"


# -- scratch space ----------------------------------------------------------------------


def test_seen_table_is_a_mutable_mapping(mirror: Mirror, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SeenTable, "_FLUSH", 3)  # crosses the write buffer's flushes
    seen = mirror.seen_table()
    for i in range(10):
        seen[f"K{i}"] = (f"d{i}", i)
    assert len(seen) == 10
    assert seen["K4"] == ("d4", 4) and seen.get("K9") == ("d9", 9)
    assert "K4" in seen and "K10" not in seen and seen.get("K10") is None
    seen["K4"] = ("new", 40)
    assert seen["K4"] == ("new", 40)
    del seen["K4"]
    assert "K4" not in seen
    with pytest.raises(KeyError):
        del seen["K4"]
    assert sorted(seen) == sorted(f"K{i}" for i in range(10) if i != 4)
    other = mirror.seen_table()
    assert len(other) == 0 and "K1" not in other
    seen.close()
    other.close()


def test_seen_table_membership_reads_ahead_correctly(
    mirror: Mirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mirror_module, "_SCAN_CHUNK", 4)
    monkeypatch.setattr(SeenTable, "_FLUSH", 1)
    seen = mirror.seen_table()
    stored = {f"K{i:02d}" for i in range(0, 40, 3)}
    for key in stored:
        seen[key] = ("d", 1)
    probes = [f"K{i:02d}" for i in range(45)]
    assert [k in seen for k in probes] == [k in stored for k in probes]
    assert [k in seen for k in reversed(probes)] == [k in stored for k in reversed(probes)]
    seen["K01"] = ("d", 2)  # a write after a read-ahead is seen at once
    assert "K01" in seen


# -- read-only (dry run) ----------------------------------------------------------------


def test_readonly_without_a_file_creates_nothing(path: Path) -> None:
    m = Mirror(path, readonly=True)
    try:
        assert len(m.known()) == 0 and not m.walked()
        seen = m.seen_table()
        seen["A"] = ("d", 1)
        assert "A" in seen
    finally:
        m.close()
    assert not path.exists() and not path.parent.exists()


def test_readonly_reads_without_touching_the_file(path: Path) -> None:
    writer = Mirror(path)
    writer.record_created(prod("A"), "r1")
    writer.close()
    before, mtime = path.read_bytes(), path.stat().st_mtime_ns

    m = Mirror(path, readonly=True)
    try:
        assert m.known()["A"].remote_id == "r1"
        assert m.count() == 1
        seen = m.seen_table()
        seen["A"] = ("d", 1)
        assert len(seen) == 1
        with pytest.raises(RuntimeError, match="read-only"):
            m.record_created(prod("B"), "r2")
        with pytest.raises(RuntimeError, match="read-only"):
            m.start_run()
    finally:
        m.close()
    assert path.read_bytes() == before and path.stat().st_mtime_ns == mtime


def test_readonly_reads_an_old_file_without_migrating_it(path: Path) -> None:
    old_file(path)
    before = path.read_bytes()
    m = Mirror(path, readonly=True)
    try:
        assert m.known()["A"].remote_id == "r1"
    finally:
        m.close()
    assert path.read_bytes() == before and user_version(path) == 1


# -- dead letters ---------------------------------------------------------------------------


def test_dead_letters_follow_the_journal_and_keep_their_first_sighting(mirror: Mirror) -> None:
    a, b = prod("A", line=2), prod("B", line=3)
    mirror.record_rejected(a, "name is required", status=422)
    mirror.record_failed("B", "HTTP 503: busy", product=b, status=503)
    mirror.note_refusals([("C", "map", "line 4: bad price", 4)], source="cat.csv", whole=True)
    letters = {x.key: x for x in mirror.dead_letters()}
    assert [x.key for x in mirror.dead_letters()] == ["C", "A", "B"], "by stage, then key"
    assert (letters["A"].stage, letters["A"].status, letters["A"].message) == (
        "api",
        422,
        "name is required",
    )
    assert letters["A"].source == "cat.csv" and letters["A"].line == 2
    assert mirror.dead_letter_counts() == {"read": 0, "map": 1, "check": 0, "api": 2}
    first = letters["A"].first_seen
    mirror.note_refusals([("A", "api", "still refused", 2)], source="cat.csv", whole=True)
    again = mirror.dead_letters(["A"])[0]
    assert (again.first_seen, again.status) == (first, 422), "same stage: details kept"
    assert [x.key for x in mirror.dead_letters()] == ["A", "B"], "a whole pull: C is over"
    mirror.record_created(a, "r1")
    mirror.mark_gone(["B"])
    assert mirror.dead_letters() == []


def test_a_partial_pull_clears_plan_letters_of_the_keys_it_found_valid(mirror: Mirror) -> None:
    mirror.note_refusals(
        [("A", "map", "bad", 1), ("B", "read", "bad", 2), (None, "read", "no key", 3)],
        source="s",
        whole=True,
    )
    mirror.note_refusals([], valid=["A"], source="s", whole=False)
    assert [(x.key, x.line) for x in mirror.dead_letters()] == [(None, 3), ("B", 2)]
