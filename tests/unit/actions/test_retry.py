"""What ``skuferry retry`` says became of each key, read back from the mirror."""

from __future__ import annotations

from skuferry.actions.retry import Outcome, outcomes
from skuferry.models import MirrorRow, RunSummary, State
from skuferry.state.deadletters import DeadLetter


def letter(key: str, stage: str = "api", status: int | None = 422) -> DeadLetter:
    return DeadLetter(key, stage, "name is required", status, None, "catalog.csv", 3, 0.0, 0.0)


def test_each_key_gets_one_outcome_from_the_mirror_after_the_run() -> None:
    before = {
        "SAME": MirrorRow("SAME", State.SYNCED, digest="d1", remote_id="p1"),
        "NEW": MirrorRow("NEW", State.REJECTED, digest="d0"),
        "UPD": MirrorRow("UPD", State.SYNCED, digest="d1", remote_id="p3"),
    }
    after = {
        "SAME": MirrorRow("SAME", State.SYNCED, digest="d1", remote_id="p1"),
        "NEW": MirrorRow("NEW", State.SYNCED, digest="d2", remote_id="p2"),
        "UPD": MirrorRow("UPD", State.SYNCED, digest="d2", remote_id="p3"),
        "REF": MirrorRow("REF", State.REJECTED, digest="d9"),
        "FAIL": MirrorRow("FAIL", State.FAILED, last_error="HTTP 500"),
        "DOUBT": MirrorRow("DOUBT", State.PENDING, intent_digest="d5"),
        "ARCH": MirrorRow("ARCH", State.ARCHIVED, remote_id="p7"),
    }
    letters = [letter("REF"), letter("FAIL", status=500), letter("MAP", "map", None)]
    summary = RunSummary(problems=[{"key": "GONE", "reason": "not in the source"}])
    keys = ["SAME", "NEW", "UPD", "REF", "FAIL", "DOUBT", "ARCH", "MAP", "GONE", "NOWHERE", "NEW"]

    found = {o.key: o for o in outcomes(keys, before, after, letters, summary)}

    assert len(found) == 10, "a key named twice is told once"
    assert found["SAME"] == Outcome("SAME", "unchanged", "already in step on the CMS (id p1)")
    assert found["NEW"] == Outcome("NEW", "sent", "in step on the CMS (id p2; no remote id before)")
    assert found["UPD"] == Outcome("UPD", "sent", "in step on the CMS (id p3; updated)")
    assert found["REF"] == Outcome("REF", "refused", "api, HTTP 422: name is required")
    assert found["FAIL"] == Outcome("FAIL", "failed", "api, HTTP 500: name is required")
    assert found["DOUBT"].result == "unknown", "looked up, never re-sent blindly"
    assert found["ARCH"] == Outcome("ARCH", "archived", "archived")
    assert found["MAP"] == Outcome("MAP", "refused", "map: name is required")
    assert found["GONE"] == Outcome("GONE", "missing", "not in the source")
    assert found["NOWHERE"] == Outcome("NOWHERE", "missing", "not in the source")
