"""One summary, each stage filling its own part: the read stage its pull's, the plan its
counts', the writes their requests', a skipped run the carried standing counts."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from skuferry.completeness import Ledger
from skuferry.config.schema import MappingSettings
from skuferry.models import Action, Kind, RunSummary
from skuferry.state.mirror import Mirror
from skuferry.sync import skip
from skuferry.sync.map.mapper import Mapper
from skuferry.sync.plan import stage as plan_stage
from skuferry.sync.plan.planner import Tally
from skuferry.sync.read import incremental
from skuferry.sync.read import stage as read_stage
from skuferry.sync.read.named import NamedPull
from skuferry.sync.read.shape import ShapeWatch
from skuferry.sync.write import stage as write_stage
from tests.fakes import FakeRemote, ListSource

# Which fields of the JSON summary each stage fills (problems and notes are everyone's).
PLAN = {"unchanged", "rejected", "rows_rejected", "gone", "rows_without_key", "gone_skipped"}
READ = {"pull", "skipped", "joins"}
REQUESTS = {"requests", "requests_by_key", "rate_limited"}
CARRIED = {"pull", "unchanged", "rejected", "rows_rejected", "drift"}
SHARED = {"problems", "notes", "status"}


def changed(before: dict[str, Any], after: dict[str, Any]) -> set[str]:
    return {name for name in after if after[name] != before[name]}


class Store:
    """The plan store as the plan's report reads it: the refused actions."""

    def __init__(self, *actions: Action) -> None:
        self.list = list(actions)

    def actions(self, *kinds: Kind) -> list[Action]:
        return [a for a in self.list if a.kind in kinds]


def test_the_plan_fills_its_own_part() -> None:
    summary = RunSummary()
    before = summary.as_json()
    counts = dict.fromkeys(Kind, 0) | {
        Kind.UNCHANGED: 5,
        Kind.REJECT: 2,
        Kind.STILL_REJECTED: 1,
        Kind.GONE: 3,
        Kind.ARCHIVE: 4,
    }
    store = Store(Action(Kind.REJECT, "A-1", reason="line 2: bad price", line=2))
    plan_stage.report(summary, store, counts, Tally(unsure=2, gone_skipped=True))  # type: ignore[arg-type]
    after = summary.as_json()
    assert changed(before, after) - SHARED == PLAN
    picked = {name: after[name] for name in PLAN}
    assert picked == {
        "unchanged": 5,
        "rejected": 3,
        "rows_rejected": 2,
        "gone": 7,
        "rows_without_key": 2,
        "gone_skipped": True,
    }
    assert after["problems"] == [{"key": "A-1", "line": 2, "reason": "line 2: bad price"}]
    assert [note.split(" ")[0] for note in after["notes"]] == ["3", "4", "gone"]


def test_the_read_stage_fills_its_own_part() -> None:
    base = ListSource([{"sku": "A-1"}])
    named = NamedPull(["A-1", "B-2"], _Keys())
    list(named.records(base))  # the plan reads them; B-2 is not there
    summary = RunSummary(pull="named")
    before = summary.as_json()
    shape = ShapeWatch(base, Mapper(MappingSettings(key="sku")), None, Ledger())
    opened = read_stage.Opened(base, base, None, named, skip.Decision(None), shape)
    read_stage.report(summary, opened)
    after = summary.as_json()
    assert changed(before, after) - SHARED <= READ
    assert summary.missing == 1 and summary.status == "partial", "a named key not found: exit 1"
    assert after["problems"] == [{"key": "B-2", "line": None, "reason": "not in the source"}]
    assert after["notes"] == ["1 named key(s) are not in the source: B-2"]

    pull = incremental.choose(base, {}, identity="i", force_full=False, now=datetime.now(UTC))
    full = RunSummary()
    read_stage.report(full, read_stage.Opened(base, base, pull, None, skip.Decision(None), shape))
    assert (full.missing, full.problems, full.skipped, full.joins) == (0, [], 0, {})


def test_the_writes_fill_their_requests() -> None:
    remote = FakeRemote()
    remote.requests["write"] = 3
    remote.requests_by_key["k1"] = 3
    remote.rate_limited = 1
    summary = RunSummary()
    before = summary.as_json()
    write_stage.count_requests(remote, summary)
    after = summary.as_json()
    assert changed(before, after) == REQUESTS
    assert (after["requests"]["write"], after["requests_by_key"], after["rate_limited"]) == (
        3,
        {"k1": 3},
        1,
    )


def test_a_skipped_run_carries_the_last_commit_and_says_so(tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "state.db")
    try:
        mirror.set_metas(
            {
                skip.CARRIED: json.dumps(
                    {
                        "rejected": 2,
                        "rows_rejected": 1,
                        "drift": 1,
                        "problems": [{"key": "A-1", "line": 3, "reason": "bad"}],
                    }
                )
            }
        )
        summary = RunSummary()
        before = summary.as_json()
        with capture_logs() as events:
            skip.skipped_run(summary, mirror)
            run_id = mirror.start_run()
            skip.record(mirror, run_id, summary)
            data = skip.finished(summary)
        after = summary.as_json()
        assert changed(before, after) - SHARED == CARRIED - {"unchanged"}  # none in step yet
        assert (after["pull"], after["rejected"], after["drift"]) == ("unchanged", 2, 1)
        assert after["notes"] == [skip.NOTE] and summary.exit_code == 1
        assert [e["event"] for e in events] == ["sync.source.checked", "sync.finished"]
        assert events[0]["skip"] is True and events[0]["why"] == "source unchanged"
        assert "problems" not in events[1] and events[1]["rejected"] == 2
        assert data == after
        row = mirror.last_runs(1)[0]
        assert (row["status"], row["exit_code"], row["summary"]) == ("partial", 1, after)
    finally:
        mirror.close()


class _Keys:
    def key_of(self, record: Any) -> str | None:
        key = record.fields.get("sku")
        return key if isinstance(key, str) else None
