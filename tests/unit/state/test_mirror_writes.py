"""Every write of the mirror, whichever of its jobs holds it, is one ``Mirror._write``.

The mirror is made of several classes (the journal, the bulk marks, the run book); the
crash tests kill a run by replacing ``Mirror._write``, so a write that went around it
would escape them, and a crash just before a write must leave the file as it was.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from skuferry import canonical
from skuferry.models import Product, State
from skuferry.state.mirror import Mirror
from tests.fakes import Crash, FakeClock
from tests.faults import crash_before_transaction


def prod(key: str, line: int = 1, **fields: Any) -> Product:
    payload = {"sku": key, **fields}
    return Product(key=key, payload=payload, digest=canonical.digest(payload), line=line)


A, B, C, D = prod("A", name="x"), prod("B", name="y"), prod("C", name="z"), prod("D", name="w")

# (name, call, transactions): each mutating method of the mirror, on rows it changes
WRITES: list[tuple[str, Callable[[Mirror], object], int]] = [
    ("record_in_step", lambda m: m.record_in_step([(D, "rD")]), 1),
    ("open_intent", lambda m: m.open_intent(D, run_id=1), 1),
    ("record_created", lambda m: m.record_created(A, "rA"), 1),
    ("record_updated", lambda m: m.record_updated(B, "rB", sent={"name": "y"}), 1),
    ("record_adopted in step", lambda m: m.record_adopted(A, "rA", in_step=True), 1),
    ("record_adopted", lambda m: m.record_adopted(A, "rA", in_step=False, remote={}), 1),
    ("record_failed", lambda m: m.record_failed("B", "timeout", product=B), 1),
    ("record_rejected", lambda m: m.record_rejected(B, "bad name", status=422), 1),
    ("record_drift", lambda m: m.record_drift(B, "updates are off"), 1),
    ("record_duplicate", lambda m: m.record_duplicate("D", ["r1", "r2"]), 1),
    ("record_remote_missing", lambda m: m.record_remote_missing("B"), 1),
    ("close_intent", lambda m: m.close_intent("A"), 1),
    ("record_archived", lambda m: m.record_archived("B", {"status": "archived"}), 1),
    ("record_update_sent", lambda m: m.record_update_sent("B", ["name"], patch_digest="p"), 1),
    ("record_archive_sent", lambda m: m.record_archive_sent("B", patch_digest="p"), 1),
    ("record_restore_refused", lambda m: m.record_restore_refused(B, "no"), 1),
    ("record_unsent", lambda m: m.record_unsent("B", "off", state=State.DRIFT), 1),
    ("record_archive_refused", lambda m: m.record_archive_refused("B", "no", patch_digest="p"), 1),
    ("remember_remote", lambda m: m.remember_remote("B", {"name": "q"}), 1),
    ("mark_walked", lambda m: m.mark_walked(5.0, remote=[("E", "rE")]), 1),
    ("remember_fingerprints", lambda m: m.remember_record_digests([("B", B.digest, "f")]), 1),
    ("remember_line_digests", lambda m: m.remember_line_digests([(2, "fB", b"l")]), 1),
    ("mark_gone", lambda m: m.mark_gone(["B"]), 2),  # the letters, then the states
    ("mark_in_step", lambda m: m.mark_in_step(["C"]), 1),
    (
        "note_refusals",
        lambda m: m.note_refusals([("F", "map", "bad", 3)], source="s", whole=True),
        1,
    ),
    ("name_letters", lambda m: m.name_letters("s"), 1),
    ("start_run", lambda m: m.start_run(), 1),
    ("finish_run", lambda m: m.finish_run(1, status="ok", exit_code=0, summary={}), 1),
    ("set_metas", lambda m: m.set_metas({"x": "1", "y": None}), 1),
    ("record_api_contact", lambda m: m.record_api_contact(7.0), 1),
]


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[Mirror]:
    m = Mirror(tmp_path / "skuferry.db", clock=FakeClock(1000.0, tick=1.0))
    m.open_intent(A, run_id=None)  # a create in flight
    m.record_in_step([(B, "rB")])
    m.remember_record_digests([("B", B.digest, "fB")])
    m.record_in_step([(C, "rC")])
    m.mark_gone(["C"])  # gone: back in step when planned unchanged
    m.record_failed("D", "timeout", status=503)  # a dead letter to name
    m.start_run()
    yield m
    m.close()


def dump(path: Path) -> list[str]:
    with closing(sqlite3.connect(path)) as conn:
        return list(conn.iterdump())


@pytest.mark.parametrize(
    ("call", "transactions"), [(c, n) for _, c, n in WRITES], ids=[w[0] for w in WRITES]
)
def test_each_write_is_its_own_transactions_through_the_mirror(
    mirror: Mirror, call: Callable[[Mirror], object], transactions: int
) -> None:
    before = dump(mirror.path)
    opened: list[str] = []
    original = Mirror._write

    def counted(self: Mirror) -> Any:
        opened.append("write")
        return original(self)

    Mirror._write = counted  # type: ignore[method-assign, assignment]
    try:
        call(mirror)
    finally:
        Mirror._write = original  # type: ignore[method-assign]
    assert len(opened) == transactions
    assert not mirror._conn.in_transaction  # committed, not left open
    assert dump(mirror.path) != before  # the write changed the file, from another connection


@pytest.mark.parametrize("call", [c for _, c, _ in WRITES], ids=[w[0] for w in WRITES])
def test_a_crash_before_a_write_leaves_the_file_as_it_was(
    mirror: Mirror, call: Callable[[Mirror], object]
) -> None:
    before = dump(mirror.path)
    fired: list[str] = []
    with crash_before_transaction(1, fired), pytest.raises(Crash):
        call(mirror)
    assert fired == ["crash before mirror transaction 1"]
    assert dump(mirror.path) == before
