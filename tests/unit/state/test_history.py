"""Each write records its history row with its journal, and the history is pruned whole runs
at a time: the runs of the engine against the in-memory CMS, and the state file's rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from skuferry import errors
from skuferry.models import Product, State
from skuferry.state import history
from skuferry.state.history import Entry
from skuferry.state.mirror import Mirror
from tests.fakes import Crash, FakeRemote
from tests.faults import crash_before_transaction
from tests.unit.sync.test_engine import catalog, make_settings, sync


def entries(settings: Any, key: str | None = None) -> list[Entry]:
    mirror = Mirror(settings.state.path)
    try:
        if key is not None:
            return list(reversed(mirror.history_of(key, limit=1000)))
        rows = mirror._conn.execute("SELECT DISTINCT key FROM history ORDER BY key").fetchall()
        return [e for (k,) in rows for e in reversed(mirror.history_of(k, limit=1000))]
    finally:
        mirror.close()


def last_run(settings: Any) -> int:
    mirror = Mirror(settings.state.path)
    try:
        return int(mirror.last_runs(1)[0]["id"])
    finally:
        mirror.close()


def test_each_create_is_recorded_with_its_run_its_values_and_its_outcome(tmp_path: Path) -> None:
    settings, remote, rows = make_settings(tmp_path), FakeRemote(), catalog(3)
    sync(settings, remote, rows)
    run = last_run(settings)
    found = entries(settings)
    assert [(e.key, e.kind, e.outcome, e.run_id) for e in found] == [
        (f"SKU-{i:04d}", "create", "ok", run) for i in range(3)
    ]
    first = found[0]
    assert first.after == {"sku": "SKU-0000", "name": "Product 0", "price": "1.00"}
    assert first.before is None and first.prior is None
    assert first.remote_id == remote.by_key("SKU-0000")[0]["id"]


def test_an_update_records_each_field_before_and_after(tmp_path: Path) -> None:
    settings, remote = make_settings(tmp_path), FakeRemote()
    sync(settings, remote, catalog(3))
    sync(settings, remote, catalog(3, changed={"SKU-0001": "12.50"}))
    run = last_run(settings)
    story = entries(settings, "SKU-0001")
    assert [(e.kind, e.outcome) for e in story] == [("create", "ok"), ("update", "ok")]
    update = story[1]
    assert (update.before, update.after, update.run_id) == (
        {"price": "1.00"},
        {"price": "12.50"},
        run,
    )
    assert update.prior is not None and update.prior["state"] == "synced"
    assert update.prior["digest"] is not None
    # the others were not written: no row
    assert [e.kind for e in entries(settings, "SKU-0000")] == ["create"]


def test_a_refusal_is_recorded_with_the_cms_status_and_reason(tmp_path: Path) -> None:
    settings, remote = make_settings(tmp_path), FakeRemote()
    sync(settings, remote, catalog(2))
    rows = catalog(2)
    rows[1]["name"] = ""  # the CMS requires a name
    sync(settings, remote, rows)
    refused = entries(settings, "SKU-0001")[-1]
    assert (refused.kind, refused.outcome, refused.status) == ("update", "refused", 422)
    assert refused.error is not None and "name" in refused.error
    assert refused.landed is False


def test_archive_and_restore_are_recorded_with_the_gone_tables(tmp_path: Path) -> None:
    gone = {"action": "patch", "patch": {"status": "archived"}, "restore": {"status": "active"}}
    settings, remote = make_settings(tmp_path, gone=gone), FakeRemote()
    rows = catalog(12)
    sync(settings, remote, rows)
    sync(settings, remote, rows[1:])
    sync(settings, remote, rows)
    story = entries(settings, "SKU-0000")
    assert [(e.kind, e.outcome) for e in story] == [
        ("create", "ok"),
        ("archive", "ok"),
        ("restore", "ok"),
    ]
    assert story[1].after == {"status": "archived"}
    assert story[1].prior is not None and story[1].prior["state"] == "synced"
    assert story[2].after == {"status": "active"}
    assert story[2].prior is not None and story[2].prior["state"] == "archived"


def test_a_write_that_never_went_out_leaves_no_row(tmp_path: Path) -> None:
    settings, remote = make_settings(tmp_path), FakeRemote()

    def refuse_key(kind: str, payload: dict[str, Any]) -> None:
        raise errors.AuthError(401, "UNAUTHORIZED", "bad key")

    remote.pre = refuse_key
    with pytest.raises(errors.AuthError):
        sync(settings, remote, catalog(2))
    assert entries(settings) == []


def test_a_failure_not_applied_is_recorded_failed(tmp_path: Path) -> None:
    settings, remote = make_settings(tmp_path), FakeRemote(allowed={"write": 1})
    summary = sync(settings, remote, catalog(3))
    assert summary.failed == 2
    outcomes = sorted((e.outcome, e.status) for e in entries(settings))
    assert outcomes == [("failed", 429), ("failed", 429), ("ok", None)]


def test_a_create_killed_on_the_wire_stays_sent_then_the_lookup_closes_it(
    tmp_path: Path,
) -> None:
    settings, remote = make_settings(tmp_path, api={"max_in_flight": 1}), FakeRemote()
    calls = {"n": 0}

    def kill_after_second(kind: str, payload: dict[str, Any]) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise Crash  # the server committed, the process died before the answer

    remote.post = kill_after_second
    with pytest.raises(Crash):
        sync(settings, remote, catalog(3))
    # Group commit (issue 41): the three intents went in one batch; the first answer was
    # not recorded yet, the second create died on the wire, the third never left (the
    # writer sends nothing after a crash). Each is in doubt ('sent', its intent open).
    killed = [e for e in entries(settings) if e.outcome == "sent"]
    assert [(e.key, e.kind) for e in killed] == [
        ("SKU-0000", "create"),
        ("SKU-0001", "create"),
        ("SKU-0002", "create"),
    ]
    assert all(e.landed is None for e in killed)
    remote.post = None
    sync(settings, remote, catalog(3))
    for key in ("SKU-0000", "SKU-0001"):  # on the CMS: the lookup finds each, closes it
        story = entries(settings, key)
        assert [(e.kind, e.outcome) for e in story] == [("create", "ok")]
        assert story[0].remote_id == remote.by_key(key)[0]["id"]
        assert len(remote.by_key(key)) == 1
    # never sent: the lookup finds it absent (that create did not land), then it is made
    story = entries(settings, "SKU-0002")
    assert [(e.kind, e.outcome) for e in story] == [("create", "failed"), ("create", "ok")]
    assert len(remote.by_key("SKU-0002")) == 1


@pytest.mark.parametrize("n", range(1, 12))
def test_history_and_journal_commit_together_whatever_transaction_is_killed(
    tmp_path: Path, n: int
) -> None:
    """A kill before any transaction: every create row open in the history is an intent
    open in the journal, and every create applied is a product the mirror holds."""
    settings, remote = make_settings(tmp_path), FakeRemote()
    fired: list[str] = []
    with crash_before_transaction(n, fired), pytest.raises(Crash):
        sync(settings, remote, catalog(4))
    mirror = Mirror(settings.state.path)
    try:
        intents = {key for key, _ in mirror.open_intents()}
        rows = mirror._conn.execute("SELECT key, kind, outcome FROM history").fetchall()
        open_creates = {k for k, kind, outcome in rows if kind == "create" and outcome == "sent"}
        applied = {k for k, kind, outcome in rows if kind == "create" and outcome == "ok"}
        assert open_creates == intents
        synced = {k for k, row in mirror.known().items() if row.state is State.SYNCED}
        assert applied == synced
    finally:
        mirror.close()


def test_no_history_is_kept_with_history_days_zero(tmp_path: Path) -> None:
    state = {"path": str(tmp_path / "state.db"), "history_days": 0}
    settings, remote = make_settings(tmp_path, state=state), FakeRemote()
    sync(settings, remote, catalog(3))
    sync(settings, remote, catalog(3, changed={"SKU-0001": "2.00"}))
    assert entries(settings) == []


# -- the rows as the journal writes them -------------------------------------------------


def product(key: str, **payload: Any) -> Product:
    body = {"sku": key, **payload}
    return Product(key, body, f"d-{key}-{sorted(body.items())}", line=2)


def test_a_new_write_closes_the_keys_open_row_as_unknown(tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "state.db")
    try:
        mirror.start_run()
        mirror.open_intent(product("A", price="1"), run_id=mirror.run_id)
        mirror.open_intent(product("A", price="2"), run_id=mirror.run_id)  # a lost one
        story = mirror.history_of("A")
        assert [(e.after.get("price"), e.outcome) for e in story] == [
            ("2", "sent"),
            ("1", "unknown"),
        ]
        mirror.record_created(product("A", price="2"), "r1")
        assert [e.outcome for e in mirror.history_of("A")] == ["ok", "unknown"]
    finally:
        mirror.close()


def test_an_update_read_first_records_what_it_found_on_the_wire(tmp_path: Path) -> None:
    """A product linked by a walk (nothing known of what was last sent): the journal cannot
    say what was before, the write's read can."""
    settings, remote = make_settings(tmp_path), FakeRemote()
    remote.seed({"sku": "SKU-0000", "name": "Product 0", "price": "9.99"})
    sync(settings, remote, catalog(1))
    story = entries(settings, "SKU-0000")
    assert [(e.kind, e.outcome) for e in story] == [("update", "ok")]
    assert (story[0].before, story[0].after) == ({"price": "9.99"}, {"price": "1.00"})


# -- retention ---------------------------------------------------------------------------


def run_with_writes(mirror: Mirror, keys: list[str]) -> int:
    run = mirror.start_run()
    for key in keys:
        p = product(key, run=str(run))
        mirror.open_intent(p, run_id=run)
        mirror.record_created(p, f"r-{key}")
    mirror.finish_run(run, status="ok", exit_code=0, summary={})
    return run


def rows_by_run(mirror: Mirror) -> dict[int, int]:
    found = mirror._conn.execute("SELECT run_id, count(*) FROM history GROUP BY run_id")
    return {int(r): int(n) for r, n in found}


def test_pruning_drops_whole_runs_older_than_the_window(tmp_path: Path) -> None:
    now = [1_000_000.0]
    mirror = Mirror(tmp_path / "state.db", clock=lambda: now[0])
    try:
        runs = []
        for day in range(5):
            now[0] = 1_000_000.0 + day * 86400
            runs.append(run_with_writes(mirror, [f"K{day}-{i}" for i in range(3)]))
        deleted = mirror.prune_history(now=now[0], days=2, max_rows=1_000_000)
        # runs started more than 2 days before the last one are gone, the rest kept whole
        assert deleted == 6
        assert rows_by_run(mirror) == {runs[2]: 3, runs[3]: 3, runs[4]: 3}
        assert mirror.history_pruned_through() == runs[1]
        assert mirror.prune_history(now=now[0], days=2, max_rows=1_000_000) == 0
    finally:
        mirror.close()


def test_the_size_cap_prunes_the_oldest_runs_whole_and_keeps_the_newest(tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "state.db")
    try:
        runs = [run_with_writes(mirror, [f"K{r}-{i}" for i in range(4)]) for r in range(4)]
        mirror.prune_history(now=0.0, days=30, max_rows=6)
        # 16 rows, at most 6: the run holding the first row kept (the 11th) stays whole
        assert rows_by_run(mirror) == {runs[2]: 4, runs[3]: 4}
        big = run_with_writes(mirror, [f"B-{i}" for i in range(10)])
        mirror.prune_history(now=0.0, days=30, max_rows=6)
        assert rows_by_run(mirror) == {big: 10}  # larger than the cap, still whole
    finally:
        mirror.close()


def test_pruning_reuses_the_pages_so_a_long_soak_does_not_grow_the_file(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    now = [1_000_000.0]
    mirror = Mirror(path, clock=lambda: now[0])
    sizes = []
    try:
        for day in range(60):
            now[0] = 1_000_000.0 + day * 86400
            run = mirror.start_run()
            with mirror._write() as conn:  # a run's rows, as its writes leave them, at once
                for i in range(300):
                    after = {"sku": f"K-{i}", "price": f"{day}.00", "name": "x" * 80}
                    history.record(
                        conn, key=f"K-{i}", run_id=run, kind="update", at=now[0], after=after,
                        row=("synced", "d", "r", '{"price":"1.00"}', "r1"),
                    )  # fmt: skip
                    history.close(conn, f"K-{i}", history.OK)
            mirror.finish_run(run, status="ok", exit_code=0, summary={})
            mirror.prune_history(now=now[0], days=7, max_rows=1_000_000)
            mirror._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            sizes.append(path.stat().st_size)
        assert max(rows_by_run(mirror).values()) == 300
        assert len(rows_by_run(mirror)) == 8
    finally:
        mirror.close()
    assert sizes[-1] <= max(sizes[:20]) * 1.1, sizes  # after the first weeks it stays put


def test_pruning_deletes_in_small_transactions(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(history, "PRUNE_BATCH", 7)
    mirror = Mirror(tmp_path / "state.db")
    try:
        run_with_writes(mirror, [f"A-{i}" for i in range(20)])
        keep = run_with_writes(mirror, ["B"])
        writes: list[int] = []
        original = Mirror._write

        def counted(self: Mirror) -> Any:
            writes.append(self._conn.execute("SELECT count(*) FROM history").fetchone()[0])
            return original(self)

        monkeypatch.setattr(Mirror, "_write", counted)
        assert mirror.prune_history(now=0.0, days=30, max_rows=1) == 20
        # 21 rows (ids 1..21), at most 7 ids a commit, then the marks of the runs pruned
        assert writes == [21, 15, 8, 1]
        assert rows_by_run(mirror) == {keep: 1}
    finally:
        mirror.close()


def test_a_write_still_in_doubt_outlives_the_pruning_of_its_run(tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "state.db")
    try:
        old = mirror.start_run()
        mirror.open_intent(product("LOST", price="1"), run_id=old)  # its answer never came
        mirror.finish_run(old, status="partial", exit_code=1, summary={})
        run_with_writes(mirror, ["A"])
        new = run_with_writes(mirror, ["B"])
        mirror.prune_history(now=0.0, days=30, max_rows=1)
        assert rows_by_run(mirror) == {old: 1, new: 1}
        assert [e.outcome for e in mirror.history_of("LOST")] == ["sent"]
        mirror.record_created(product("LOST", price="1"), "r9")  # a later lookup found it
        assert [e.outcome for e in mirror.history_of("LOST")] == ["ok"]
    finally:
        mirror.close()
