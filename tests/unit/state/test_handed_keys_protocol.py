"""The handed-keys protocol: ``sync --only`` beside a run leaves keys in the state file,
the run holding the lock takes them. Its one home is ``RunBook`` (hand, look, take,
withdraw); every reader and writer (hand_over, the urgent lane, the idle daemon, the
skip decision, the page) goes through it.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

import skuferry
from skuferry.state.mirror import Mirror


def test_keys_handed_are_seen_then_taken_once(tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "state.db")
    try:
        mirror.hand_keys(["B-2", "A-1"])
        assert mirror.handed_keys() == ["A-1", "B-2"]
        assert mirror.take_handed_keys() == ["A-1", "B-2"]
        assert mirror.handed_keys() == []
        assert mirror.take_handed_keys() == [], "taken once"
    finally:
        mirror.close()


def test_looking_for_handed_keys_when_there_are_none_writes_nothing(tmp_path: Path) -> None:
    """A run waiting for its budget looks for handed keys twice a second and almost never
    finds one (issue 41): a read of the meta table's index, no write transaction."""
    mirror = Mirror(tmp_path / "state.db")
    try:
        begun: list[str] = []
        mirror._conn.set_trace_callback(
            lambda sql: begun.append(sql) if sql.lstrip().upper().startswith("BEGIN") else None
        )
        for _ in range(3):
            assert mirror.take_handed_keys() == []
        assert begun == [], "no transaction while nothing is handed"
        mirror.hand_keys(["A-1"])
        begun.clear()
        assert mirror.take_handed_keys() == ["A-1"]
        assert len(begun) == 1, "one transaction to take what was handed"
    finally:
        mirror._conn.set_trace_callback(None)
        mirror.close()


def test_keys_withdrawn_leave_the_others(tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "state.db")
    try:
        mirror.hand_keys(["A-1", "B-2", "C-3"])
        mirror.withdraw_handed_keys(["A-1", "C-3"])
        assert mirror.handed_keys() == ["B-2"]
    finally:
        mirror.close()


def test_two_takers_never_both_take_a_key(tmp_path: Path) -> None:
    """The idle daemon and a lane may look at once: the take is one transaction."""
    state = tmp_path / "state.db"
    Mirror(state).close()
    keys = [f"K-{i:03d}" for i in range(200)]
    taken: list[list[str]] = [[], []]
    start = threading.Barrier(3)

    def take(into: list[str]) -> None:
        mirror = Mirror(state)
        try:
            start.wait()
            for _ in range(50):
                into.extend(mirror.take_handed_keys())
        finally:
            mirror.close()

    threads = [threading.Thread(target=take, args=(t,)) for t in taken]
    for thread in threads:
        thread.start()
    giver = Mirror(state)
    try:
        start.wait()
        for i in range(0, len(keys), 20):
            giver.hand_keys(keys[i : i + 20])
    finally:
        giver.close()
    for thread in threads:
        thread.join()
    leftover = Mirror(state)
    try:
        rest = leftover.take_handed_keys()
    finally:
        leftover.close()
    assert sorted(taken[0] + taken[1] + rest) == keys, "each key taken exactly once"


def test_the_protocol_has_one_home() -> None:
    """The meta rows that carry handed keys are named in ``state/runbook.py`` alone (and
    in the released migration that put their keys in NFC, which must not change)."""
    package = Path(skuferry.__file__).parent
    naming = re.compile(r"LANE_META|[\"']lane\.[\"']")
    found = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if naming.search(path.read_text(encoding="utf-8"))
    )
    assert found == ["state/runbook.py", "state/schema.py"]
