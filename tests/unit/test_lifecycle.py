"""The product's lifecycle: each predicate and the SQL that selects its rows agree.

Rows of every shape are written into a real state file; each predicate, asked of the
rows as the planner reads them (``MirrorRow``), picks exactly the keys its SQL fragment
selects there, and the mirror's selections that use the fragments follow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skuferry import lifecycle
from skuferry.lifecycle import State
from skuferry.models import MirrorRow, Product
from skuferry.state.mirror import Mirror
from skuferry.sync import skip

PATCH = "patch-digest"
_VALUES = st.sampled_from([None, "d1", PATCH])

_row = st.fixed_dictionaries(
    {
        "state": st.sampled_from(list(State)),
        "digest": _VALUES,
        "rejected_digest": _VALUES,
        "remote_id": st.sampled_from([None, "r1"]),
        "fingerprint": st.sampled_from([None, "f1"]),
        "intent": st.booleans(),
        "last_error": st.sampled_from(
            [None, "HTTP 500", "remote id r1 no longer exists", "outcome unknown: reset"]
        ),
    }
)


def _fill(mirror: Mirror, rows: dict[str, dict[str, Any]]) -> dict[str, MirrorRow]:
    conn = mirror.db.conn
    for key, r in rows.items():
        conn.execute(
            "INSERT INTO products (key, state, digest, rejected_digest, remote_id, "
            "source_fingerprint, last_error, first_seen, updated_at, synced_at) "
            "VALUES (?,?,?,?,?,?,?,1,1,1)",
            (key, r["state"].value, r["digest"], r["rejected_digest"], r["remote_id"],
             r["fingerprint"], r["last_error"]),
        )  # fmt: skip
        if r["intent"]:
            conn.execute(
                "INSERT INTO intents (key, digest, payload, started_at) VALUES (?, 'd2', '{}', 1)",
                (key,),
            )
    conn.commit()
    return mirror.rows(list(rows))


def _selected(mirror: Mirror, where: str, args: tuple[Any, ...] = ()) -> set[str]:
    sql = f"SELECT p.key FROM products p WHERE {where}"  # noqa: S608 - the fragments under test
    return {key for (key,) in mirror.db.conn.execute(sql, args)}


def _picked(rows: dict[str, MirrorRow], predicate: Callable[[MirrorRow], bool]) -> set[str]:
    return {key for key, row in rows.items() if predicate(row)}


@pytest.fixture
def state_file(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "state.db"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.dictionaries(st.sampled_from([f"K{i}" for i in range(12)]), _row, max_size=12),
    states=st.sets(st.sampled_from(list(State))),
)
def test_every_predicate_selects_what_its_sql_selects(
    tmp_path_factory: pytest.TempPathFactory,
    rows: dict[str, dict[str, Any]],
    states: set[State],
) -> None:
    mirror = Mirror(tmp_path_factory.mktemp("lifecycle") / "state.db")
    try:
        known = _fill(mirror, rows)
        in_source = _picked(known, lambda row: row.state.in_source)
        assert _selected(mirror, lifecycle.IN_SOURCE_SQL) == in_source
        assert set(mirror.keys()) == in_source and mirror.count() == len(in_source)
        assert _selected(
            mirror, f"{lifecycle.RECOGNISABLE_SQL} AND {lifecycle.RECOGNISABLE_NO_INTENT_SQL}"
        ) == _picked(known, lifecycle.recognisable)
        assert _selected(mirror, lifecycle.ARCHIVE_IN_DOUBT_SQL, (PATCH,)) == _picked(
            known, lambda row: lifecycle.archive_in_doubt(row, PATCH)
        )
        assert _selected(mirror, lifecycle.REMOTE_ID_LOST_SQL) == _picked(
            known, lifecycle.remote_id_lost
        )
        assert _selected(mirror, lifecycle.BACK_IN_STEP_SQL) == _picked(
            known, lambda row: row.state in lifecycle.BACK_IN_STEP and row.digest is not None
        )
        assert _selected(mirror, lifecycle.ON_REMOTE_SQL) == _picked(
            known, lambda row: row.state is State.SYNCED and row.remote_id is not None
        )
        assert _selected(mirror, lifecycle.state_sql(states)) == _picked(
            known, lambda row: row.state in states
        )
        # What a run works on again with the same source (the skip decision asks this).
        pending = _picked(
            known,
            lambda row: row.state in states or lifecycle.archive_in_doubt(row, PATCH),
        )
        has_intent = any(r["intent"] for r in rows.values())
        assert mirror.has_pending(states, archiving=PATCH) == bool(pending or has_intent)
    finally:
        mirror.close()


def test_a_run_has_work_while_an_archive_is_in_doubt(state_file: Path) -> None:
    """An archive whose answer never came is sent again by the next run even when the
    source did not change: the skip decision does not skip it."""
    mirror = Mirror(state_file)
    try:
        mirror.record_in_step([(Product("A", {"sku": "A"}, "dA", 1), "r1")])
        assert not skip.has_pending_work(mirror, (), PATCH)
        mirror.record_archive_sent("A", patch_digest=PATCH)
        assert skip.has_pending_work(mirror, (), PATCH)
        assert not skip.has_pending_work(mirror, (), "another patch"), "in doubt of that patch"
        assert not skip.has_pending_work(mirror, (), None), "archiving is off"
        mirror.record_archived("A", {"sku": "A"})
        assert not skip.has_pending_work(mirror, (), PATCH), "archived for sure"
    finally:
        mirror.close()


@pytest.mark.parametrize(
    ("state", "digest", "archiving", "in_doubt", "refused"),
    [
        (State.ARCHIVED, PATCH, PATCH, True, False),
        (State.ARCHIVED, None, PATCH, False, False),  # archived for sure
        (State.ARCHIVED, "d1", PATCH, False, False),  # a refused restore's data
        (State.ARCHIVED, PATCH, None, False, False),  # archiving is off
        (State.REJECTED, PATCH, PATCH, False, True),
        (State.REJECTED, "d1", PATCH, False, False),  # refused data, not the patch
        (State.SYNCED, PATCH, PATCH, False, False),
    ],
)
def test_an_archive_in_doubt_and_a_refused_one(
    state: State, digest: str | None, archiving: str | None, in_doubt: bool, refused: bool
) -> None:
    row = MirrorRow("K", state, digest=digest, remote_id="r1")
    assert lifecycle.archive_in_doubt(row, archiving) is in_doubt
    assert lifecycle.archive_refused(row, archiving) is refused


def test_the_states_out_of_the_source() -> None:
    assert {s for s in State if not s.in_source} == {
        State.GONE,
        State.REMOTE_ONLY,
        State.ARCHIVED,
    }
    assert lifecycle.state_sql([]) == "0", "no state: no row"
