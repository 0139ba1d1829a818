"""The run's one accumulator (``models.RunSummary``): each outcome counted once, where it
happens, and the problems and notes listed in a fixed order whatever the order they came in.

The first tests drive the accumulator itself; the last ones run the engine against the
in-memory fakes, where the engine, the writer and check-then-create fill one summary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from skuferry import errors
from skuferry.models import MAX_LISTED_PROBLEMS, RunSummary
from tests.fakes import FakeRemote
from tests.unit.sync.test_engine import catalog, make_settings, sync

COUNTS = (
    "created",
    "updated",
    "adopted",
    "unchanged",
    "rejected",
    "failed",
    "drift",
    "archived",
    "restored",
    "duplicates",
)


def counts(summary: RunSummary) -> dict[str, int]:
    data = summary.as_json()
    return {name: data[name] for name in COUNTS if data[name]}


def listed(summary: RunSummary) -> list[tuple[str | None, str]]:
    return [(p["key"], p["reason"]) for p in summary.as_json()["problems"]]


# --- the accumulator ------------------------------------------------------------------


def test_each_outcome_counts_once_where_it_is_reported() -> None:
    summary = RunSummary()
    summary.refused("A", 3, "HTTP 422: no name")
    summary.duplicate("B", 4, "the remote holds 2 products with this key")
    summary.fail("C", "HTTP 429")
    summary.unchanged = 5
    summary.repair(planned_unchanged=True)  # counted by its write instead
    summary.repair(planned_unchanged=False)  # an update: never counted unchanged
    summary.close()
    assert counts(summary) == {"rejected": 1, "duplicates": 1, "failed": 1, "unchanged": 4}
    assert summary.repaired == 2
    assert summary.exit_code == errors.EXIT_PARTIAL


def test_a_key_that_fails_twice_is_one_failure_listed_with_its_last_reason() -> None:
    summary = RunSummary()
    summary.fail("A", "HTTP 503")
    summary.fail("B", "HTTP 429")
    summary.fail("A", "the answer was lost")
    summary.fail("B", "outcome unknown", replace=False)  # a reason it already has stays
    summary.close()
    assert summary.failed == 2
    assert listed(summary) == [("A", "the answer was lost"), ("B", "HTTP 429")]


def test_the_writes_problems_are_listed_after_the_plans_in_a_fixed_order() -> None:
    summary = RunSummary()
    summary.add_problem(None, 5, "line 5: not a decimal")  # the plan's
    summary.fail("F", "HTTP 429")  # the writes', in any order
    summary.refused("R", 7, "HTTP 422")
    summary.duplicate("D", 8, "the remote holds 2 products")
    summary.write_note("updates are off")
    summary.add_problem("N", None, "not in the source")  # a key read mid-run: as it comes
    summary.notes.append("1 named key(s) are not in the source: N")
    summary.unchanged = 1
    summary.repair(planned_unchanged=True)
    assert [p["key"] for p in summary.problems] == [None, "N"], "listed once the writes end"
    summary.close()
    assert [key for key, _ in listed(summary)] == [None, "N", "D", "R", "F"]
    assert summary.notes == [
        "1 named key(s) are not in the source: N",
        "verify: 1 product(s) deleted or edited on the remote were put right",
        "updates are off",
    ]


def test_closing_twice_lists_nothing_twice() -> None:
    summary = RunSummary()
    summary.refused("R", 1, "HTTP 422")
    summary.fail("F", "HTTP 429")
    summary.write_note("updates are off")
    summary.unchanged = 1
    summary.repair(planned_unchanged=True)
    summary.close()
    summary.close()
    assert len(summary.problems) == 2
    assert len(summary.notes) == 2
    assert (summary.rejected, summary.failed, summary.unchanged) == (1, 1, 0)


def test_the_listing_is_capped_the_counts_are_not() -> None:
    summary = RunSummary()
    for i in range(MAX_LISTED_PROBLEMS):
        summary.add_problem(f"P{i}", i, "refused at the source")
    summary.refused("R", 1, "HTTP 422")
    for i in range(3):
        summary.fail(f"F{i}", "HTTP 429")
    summary.close()
    assert len(summary.problems) == MAX_LISTED_PROBLEMS
    assert (summary.rejected, summary.failed) == (1, 3)


def test_a_summary_built_whole_is_as_given() -> None:
    """The daemon's and the metrics' tests build summaries directly: no hidden state."""
    summary = RunSummary(created=2, failed=1, problems=[{"key": "A", "line": 1, "reason": "x"}])
    summary.close()
    assert (summary.created, summary.failed, len(summary.problems)) == (2, 1, 1)


# --- filled by the engine, the writer and check-then-create ----------------------------


def _raising(table: dict[tuple[str, str], Exception]) -> Any:
    """A FakeRemote hook raising the given error once for (kind, sku)."""

    def hook(kind: str, payload: dict[str, Any]) -> None:
        exc = table.pop((kind, str(payload.get("sku"))), None)
        if exc is not None:
            raise exc

    return hook


def test_a_run_with_every_outcome_counts_each_product_once(tmp_path: Path) -> None:
    settings, remote = make_settings(tmp_path, api={"max_in_flight": 1}), FakeRemote()
    remote.seed({"sku": "SKU-0003", "name": "a"}, {"sku": "SKU-0003", "name": "b"})
    remote.seed({"sku": "SKU-0004", "name": "Product 4", "price": "1.00"})  # in step
    remote.seed({"sku": "SKU-0009", "name": "Product 9", "price": "0.50"})  # differs
    rows: list[Any] = catalog(10)
    rows.insert(2, "column 'price': '1,5' is not a decimal number")
    rows.append({"sku": "SKU-0001", "name": "Product 1", "price": "3.00"})  # key twice
    remote.pre = _raising(
        {
            ("create", "SKU-0005"): errors.Rejected(422, "VALIDATION_ERROR", "no"),
            ("create", "SKU-0006"): errors.OutcomeUnknown("reset before it landed"),
            ("create", "SKU-0007"): errors.RateLimited(429, "RATE_LIMITED", "slow", retry_after=1),
        }
    )
    remote.post = _raising({("create", "SKU-0008"): errors.OutcomeUnknown("500 after commit")})
    summary = sync(settings, remote, rows)
    assert counts(summary) == {
        "created": 4,  # 0000 and 0002; 0006 (not found by the second look: sent again), 0008
        "updated": 1,  # 0009, adopted and put right
        "adopted": 2,  # 0004 (in step) and 0009
        "rejected": 3,  # the unreadable row, 0001 (twice in the source), 0005 (by the API)
        "failed": 1,  # 0007
        "duplicates": 1,  # 0003
    }
    assert summary.rows_rejected == 2  # of them refused at the source, not by the API
    assert [key for key, _ in listed(summary)] == [
        None,
        "SKU-0001",
        "SKU-0003",
        "SKU-0005",
        "SKU-0007",
    ]
    assert len(remote.by_key("SKU-0008")) == 1, "a lost create is looked up, never sent again"


def test_updates_off_verify_repairs_and_their_notes_are_counted_once(tmp_path: Path) -> None:
    gone = {"action": "patch", "patch": {"status": "archived"}, "restore": {"status": "active"}}
    settings, remote = make_settings(tmp_path, gone=gone), FakeRemote()
    sync(settings, remote, catalog(12))
    remote.updates = "none"  # the API takes neither PATCH nor PUT
    summary = sync(settings, remote, catalog(11, changed={"SKU-0000": "5.00"}))
    assert counts(summary) == {"unchanged": 10, "drift": 2}  # the update, the archive
    assert summary.notes[-1].startswith("the API does not accept PATCH"), summary.notes
    remote.updates = "both"
    edited = remote.by_key("SKU-0004")[0]["id"]
    remote.products[edited]["price"] = "77"
    deleted = remote.by_key("SKU-0005")[0]["id"]
    del remote.products[deleted]
    verified = sync(settings, remote, catalog(11, changed={"SKU-0000": "5.00"}), verify=True)
    assert counts(verified) == {"created": 1, "updated": 2, "unchanged": 8, "archived": 1}
    assert verified.notes[-1] == (
        "verify: 2 product(s) deleted or edited on the remote were put right"
    )


def test_verify_counts_a_changed_product_found_edited_or_deleted_once(tmp_path: Path) -> None:
    """--verify puts right a product the source changed too: it is counted as what its
    write did, and not taken off the products planned unchanged as well."""
    settings, remote = make_settings(tmp_path), FakeRemote()
    sync(settings, remote, catalog(6))
    del remote.products[remote.by_key("SKU-0001")[0]["id"]]
    remote.products[remote.by_key("SKU-0002")[0]["id"]]["name"] = "edited on the CMS"
    changed = catalog(6, changed={"SKU-0001": "4.00", "SKU-0002": "5.00"})
    summary = sync(settings, remote, changed, verify=True)
    assert counts(summary) == {"created": 1, "updated": 1, "unchanged": 4}
    assert summary.notes == ["verify: 2 product(s) deleted or edited on the remote were put right"]
    assert remote.by_key("SKU-0002")[0]["name"] == "Product 2"
