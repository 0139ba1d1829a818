"""Discontinued products: the planner's gone/archive/restore transitions (pure), the bodies,
and the guard."""

from __future__ import annotations

from typing import Any

import pytest

from skuferry import canonical
from skuferry.errors import GoneGuardTripped, SafetyStop
from skuferry.models import Kind, MirrorRow, Product, State
from skuferry.sync.plan.planner import leaving, plan
from skuferry.sync.write.gone import GonePolicy, guard, restore_body, sent_after_archive

PATCH = {"status": "archived", "stock": 0}
ARCHIVING = GonePolicy(action="patch", patch=PATCH).archiving


def product(key: str, price: str = "1.00") -> Product:
    payload = {"sku": key, "price": price}
    return Product(key, payload, canonical.digest(payload), line=2)


def row(key: str, state: State, **kw: Any) -> MirrorRow:
    fields = {"digest": product(key).digest, "remote_id": f"r-{key}", **kw}
    return MirrorRow(key, state, **fields)


def kinds(source: list[Product], mirror: dict[str, MirrorRow], **kw: Any) -> dict[str, Kind]:
    return {a.key: a.kind for a in plan(source, mirror, walked=True, **kw) if a.key}


def test_without_archiving_a_product_that_leaves_is_only_marked_gone() -> None:
    mirror = {"A": row("A", State.SYNCED), "B": row("B", State.SYNCED)}
    assert kinds([product("A")], mirror) == {"A": Kind.UNCHANGED, "B": Kind.GONE}
    assert GonePolicy().archiving is None


def test_with_archiving_a_product_that_leaves_is_archived_once() -> None:
    mirror = {"A": row("A", State.SYNCED), "B": row("B", State.SYNCED)}
    assert kinds([product("A")], mirror, archiving=ARCHIVING)["B"] is Kind.ARCHIVE
    archived = {**mirror, "B": row("B", State.ARCHIVED)}
    assert kinds([product("A")], archived, archiving=ARCHIVING) == {"A": Kind.UNCHANGED}


def test_an_archived_product_that_comes_back_is_restored_even_unchanged() -> None:
    mirror = {"B": row("B", State.ARCHIVED, digest=None)}  # archived for sure: no digest
    (action,) = plan([product("B")], mirror, walked=True, archiving=ARCHIVING)
    assert (action.kind, action.remote_id) == (Kind.RESTORE, "r-B")
    assert kinds([product("B", "2.00")], mirror, archiving=ARCHIVING) == {"B": Kind.RESTORE}


@pytest.mark.parametrize(
    ("state", "extra", "expected"),
    [
        (State.SYNCED, {}, Kind.ARCHIVE),
        (State.FAILED, {}, Kind.ARCHIVE),  # a failed archive is tried again
        (State.DRIFT, {}, Kind.ARCHIVE),  # ... and one that updates could not send
        (State.GONE, {}, Kind.ARCHIVE),  # left before archiving was turned on
        (State.REJECTED, {"digest": ARCHIVING}, None),  # the API refused this patch
        (State.REJECTED, {"digest": "other"}, Kind.ARCHIVE),
        (State.ARCHIVED, {}, None),
        (State.REMOTE_ONLY, {}, None),  # never ours
        (State.DUPLICATE, {}, Kind.GONE),  # which one would we archive?
        # its remote id answered 404: staff may make it again, so it stays PENDING and
        # its return is looked up before any POST
        (State.PENDING, {"remote_id": None}, None),
        (State.ARCHIVED, {"digest": ARCHIVING}, Kind.ARCHIVE),  # the archive is in doubt
        (State.ARCHIVED, {"digest": "refused restore"}, None),
        (State.PENDING, {"intent_digest": "d"}, Kind.GONE),  # a create in doubt
    ],
)
def test_leaving(state: State, extra: dict[str, object], expected: Kind | None) -> None:
    assert leaving(row("K", state, **extra), archiving=ARCHIVING) is expected


def test_leaving_without_archiving_never_archives() -> None:
    assert leaving(row("K", State.SYNCED), archiving=None) is Kind.GONE
    assert leaving(row("K", State.GONE), archiving=None) is None


def test_an_incremental_pull_decides_nothing_about_absent_products() -> None:
    mirror = {"A": row("A", State.SYNCED), "B": row("B", State.SYNCED)}
    assert kinds([product("A")], mirror, archiving=ARCHIVING, full=False) == {"A": Kind.UNCHANGED}


def test_archiving_records_the_patch_only_for_fields_the_source_gives() -> None:
    sent = {"sku": "B", "stock": 12}
    assert sent_after_archive(sent, PATCH) == {"sku": "B", "stock": 0}
    assert sent_after_archive(None, PATCH) == {}


def test_a_restore_carries_the_restore_table_under_the_sources_changes() -> None:
    assert restore_body({"stock": 12}, {"status": "active"}) == {"status": "active", "stock": 12}
    assert restore_body({"status": "draft"}, {"status": "active"}) == {"status": "draft"}


def test_the_guard_trips_above_the_ratio_and_names_the_count() -> None:
    guard(30, 300, max_ratio=0.1, force=False, archiving=True)  # exactly 10%: fine
    with pytest.raises(GoneGuardTripped, match=r"250 of 300 known products \(83%\)") as caught:
        guard(250, 300, max_ratio=0.1, force=False, archiving=True)
    assert isinstance(caught.value, SafetyStop) and caught.value.exit_code == 2
    assert "max_gone_ratio = 0.1" in str(caught.value) and "--force" in str(caught.value)


def test_the_guard_gives_way_to_force_and_ignores_a_handful() -> None:
    guard(250, 300, max_ratio=0.1, force=True, archiving=True)
    guard(
        10, 20, max_ratio=0.1, force=False, archiving=True
    )  # a small catalog losing a few is no alarm
    with pytest.raises(GoneGuardTripped):
        guard(11, 20, max_ratio=0.1, force=False, archiving=True)


def test_metrics_count_archived_and_restored_products_across_runs() -> None:
    from skuferry.models import RunSummary
    from skuferry.service.metrics import RunOutcome, parse_samples, render

    run = RunOutcome.from_summary(RunSummary(archived=3, restored=1), duration_s=1, finished_at=0)
    first = render({}, run, {"synced": 10, "archived": 3})
    second = parse_samples(render(parse_samples(first), run, {"synced": 11, "archived": 5}))
    assert second[("skuferry_archived_total", None)] == 6
    assert second[("skuferry_restored_total", None)] == 2
    assert second[("skuferry_products", "archived")] == 5


def test_a_refused_restore_is_still_rejected_until_its_data_change() -> None:
    mirror = {"B": row("B", State.ARCHIVED)}  # digest: the restore the API refused
    assert kinds([product("B")], mirror, archiving=ARCHIVING) == {"B": Kind.STILL_REJECTED}
    assert kinds([product("B", "2.00")], mirror, archiving=ARCHIVING) == {"B": Kind.RESTORE}


def test_a_key_whose_product_answered_404_is_looked_up_when_it_comes_back() -> None:
    mirror = {"B": row("B", State.PENDING, remote_id=None, digest=None)}
    assert kinds([], mirror, archiving=ARCHIVING) == {}  # stays PENDING while away
    (action,) = plan([product("B")], mirror, walked=True, archiving=ARCHIVING)
    assert (action.kind, action.lookup_first) == (Kind.CREATE, True)
