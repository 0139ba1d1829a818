"""The engine against in-memory fakes: journal, adoption, fallbacks, guards, dry run, lock."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any

import pytest

from skuferry import errors
from skuferry.config.load import settings_from_dict
from skuferry.config.schema import Settings
from skuferry.models import RunOptions, RunSummary, State
from skuferry.state.lock import run_lock
from skuferry.state.mirror import Mirror
from skuferry.sync.engine import Adapters, run_once
from tests.fakes import Crash, FakeRemote, ListSource


def make_settings(tmp_path: Path, **over: Any) -> Settings:
    data: dict[str, Any] = {
        "api": {
            "base_url": "http://127.0.0.1:9",
            "api_key": "k-test",
            "max_in_flight": 3,
            **over.pop("api", {}),
        },
        "source": {"type": "csv", "path": str(tmp_path / "unused.csv")},
        "mapping": {"key": "sku"},
        "state": {"path": str(tmp_path / "state.db")},
        **over,
    }
    return settings_from_dict(data)


def catalog(
    n: int, *, price: str = "1.00", changed: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    rows = []
    for i in range(n):
        sku = f"SKU-{i:04d}"
        rows.append({"sku": sku, "name": f"Product {i}", "price": (changed or {}).get(sku, price)})
    return rows


def sync(
    settings: Settings,
    remote: FakeRemote,
    rows: list[Any],
    *,
    stop: threading.Event | None = None,
    **flags: Any,
) -> RunSummary:
    adapters = Adapters(source=ListSource(rows), client=remote)
    return run_once(settings, RunOptions(**flags), stop=stop, adapters=adapters)


def assert_exactly_once(remote: FakeRemote, rows: list[dict[str, Any]]) -> None:
    keys = remote.keys()
    assert len(keys) == len(set(keys)), f"duplicates on the remote: {len(keys) - len(set(keys))}"
    assert set(keys) == {r["sku"] for r in rows}, "a product is missing on the remote"


def test_first_sync_creates_all_and_second_run_writes_nothing(tmp_path: Path) -> None:
    settings, remote, rows = make_settings(tmp_path), FakeRemote(), catalog(25)
    first = sync(settings, remote, rows)
    assert (first.created, first.failed, first.rejected) == (25, 0, 0)
    assert_exactly_once(remote, rows)
    # empty remote: the walk asked for page 1, which answered 0 pages (as the API does)
    assert remote.requests == {"read": 1, "write": 25}
    before = dict(remote.requests)
    second = sync(settings, remote, rows)
    assert (second.created, second.updated, second.unchanged) == (0, 0, 25)
    assert remote.requests == before, "a no-op run makes no request at all"
    assert second.exit_code == errors.EXIT_OK


def test_only_changed_products_go_out(tmp_path: Path) -> None:
    settings, remote = make_settings(tmp_path), FakeRemote()
    sync(settings, remote, catalog(20))
    rows = catalog(20, changed={"SKU-0003": "9.99", "SKU-0011": "2.50"})
    writes = remote.requests["write"]
    summary = sync(settings, remote, rows)
    assert (summary.updated, summary.created, summary.unchanged) == (2, 0, 18)
    assert remote.requests["write"] - writes == 2
    assert remote.by_key("SKU-0003")[0]["price"] == "9.99"


def test_bad_rows_are_listed_and_the_good_ones_all_arrive(tmp_path: Path) -> None:
    settings, remote = make_settings(tmp_path), FakeRemote()
    rows: list[Any] = catalog(10)
    rows.insert(4, "column 'price': '1,5' is not a decimal number")
    rows.append({"sku": "", "name": "no key"})
    summary = sync(settings, remote, rows)
    assert summary.created == 10
    assert summary.rejected == 2
    assert any("1,5" in p["reason"] and p["line"] == 6 for p in summary.problems)
    assert summary.exit_code == errors.EXIT_PARTIAL


def test_duplicate_key_with_different_data_is_rejected_not_sent(tmp_path: Path) -> None:
    settings, remote = make_settings(tmp_path), FakeRemote()
    rows = catalog(5)
    rows.append({"sku": "SKU-0002", "name": "Product 2", "price": "7.00"})
    summary = sync(settings, remote, rows)
    assert remote.by_key("SKU-0002") == []
    assert summary.created == 4 and summary.rejected == 1
    assert any(p["key"] == "SKU-0002" and "duplicate" in p["reason"] for p in summary.problems)


def test_api_rejection_is_not_resent_until_the_data_change(tmp_path: Path) -> None:
    settings, remote = make_settings(tmp_path), FakeRemote()
    rows = [*catalog(3), {"sku": "BAD-1", "name": "", "price": "1.00"}]
    first = sync(settings, remote, rows)
    assert first.rejected == 1 and first.created == 3
    writes = remote.requests["write"]
    second = sync(settings, remote, rows)
    assert remote.requests["write"] == writes, "a rejected product is not resent unchanged"
    assert second.rejected == 1
    rows[-1] = {"sku": "BAD-1", "name": "Fixed now", "price": "1.00"}
    third = sync(settings, remote, rows)
    assert third.created == 1 and len(remote.by_key("BAD-1")) == 1


def test_existing_remote_products_are_adopted_not_recreated(tmp_path: Path) -> None:
    settings, remote, rows = make_settings(tmp_path), FakeRemote(), catalog(30)
    remote.seed(*rows[:20])
    remote.seed({**rows[20], "price": "5.00"})  # on the remote, but with other data
    summary = sync(settings, remote, rows)
    assert summary.adopted == 21
    assert summary.created == 9
    assert summary.updated == 1
    assert_exactly_once(remote, rows)
    assert remote.by_key("SKU-0020")[0]["price"] == "1.00"


def test_remote_duplicates_are_reported_not_tripled(tmp_path: Path) -> None:
    settings, remote, rows = make_settings(tmp_path), FakeRemote(), catalog(3)
    remote.seed(rows[1], rows[1])
    summary = sync(settings, remote, rows)
    assert len(remote.by_key("SKU-0001")) == 2
    assert summary.duplicates == 1
    assert summary.exit_code == errors.EXIT_PARTIAL
    assert Mirror(settings.state.path).rows(["SKU-0001"])["SKU-0001"].state is State.DUPLICATE


def _crash_once(when: str, target: str) -> Any:
    fired = {"done": False}

    def hook(kind: str, payload: dict[str, Any]) -> None:
        if kind == "create" and payload["sku"] == target and not fired["done"]:
            fired["done"] = True
            raise Crash(when)

    return hook


@pytest.mark.parametrize(
    "point", ["intent_committed", "post_sent_response_lost", "before_id_committed"]
)
def test_a_crash_at_any_step_of_the_journal_creates_nothing_twice(
    tmp_path: Path, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The in-memory list shows every write at once: no wait for it to show a create in doubt.
    settings = make_settings(tmp_path, api={"list_lag_s": 0})
    remote, rows = FakeRemote(), catalog(12)
    sync(settings, remote, rows[:4])  # a mirror that has walked before: new keys are created blind
    if point == "intent_committed":
        remote.pre = _crash_once(point, "SKU-0007")
    elif point == "post_sent_response_lost":
        remote.post = _crash_once(point, "SKU-0007")
    else:
        original = Mirror.record_created

        def crash_on_record(self: Mirror, product: Any, remote_id: str) -> None:
            if product.key == "SKU-0007":
                raise Crash(point)
            original(self, product, remote_id)

        monkeypatch.setattr(Mirror, "record_created", crash_on_record)
    with pytest.raises(Crash):
        sync(settings, remote, rows)
    monkeypatch.undo()
    remote.pre = remote.post = None
    mirror = Mirror(settings.state.path)
    assert "SKU-0007" in dict(mirror.open_intents()), "the intent was committed before the POST"
    mirror.close()
    summary = sync(settings, remote, rows)
    assert_exactly_once(remote, rows)
    assert summary.failed == 0
    mirror = Mirror(settings.state.path)
    assert mirror.open_intents() == []
    assert mirror.counts_by_state().get("synced") == 12
    mirror.close()


def test_lost_responses_are_resolved_by_lookup_in_the_same_run(tmp_path: Path) -> None:
    settings, remote, rows = make_settings(tmp_path), FakeRemote(), catalog(40)
    lost = {f"SKU-{i:04d}" for i in range(0, 40, 5)}

    def lose(kind: str, payload: dict[str, Any]) -> None:
        if kind == "create" and payload["sku"] in lost:
            lost.discard(payload["sku"])
            raise errors.OutcomeUnknown("read timeout after the request was sent")

    remote.post = lose
    summary = sync(settings, remote, rows)
    assert_exactly_once(remote, rows)
    assert summary.created == 40 and summary.failed == 0
    assert remote.posts == 40, "no lost create was POSTed twice"


def test_unknown_outcome_before_commit_is_created_after_lookup(tmp_path: Path) -> None:
    settings, remote, rows = make_settings(tmp_path), FakeRemote(), catalog(10)
    dropped = {"SKU-0004"}

    def fail_before(kind: str, payload: dict[str, Any]) -> None:
        if kind == "create" and payload["sku"] in dropped:
            dropped.discard(payload["sku"])
            raise errors.OutcomeUnknown("HTTP 500 (may or may not have been applied)")

    remote.pre = fail_before
    summary = sync(settings, remote, rows)
    assert_exactly_once(remote, rows)
    assert summary.created == 10


def test_update_method_refused_turns_updates_off_and_reports_drift(tmp_path: Path) -> None:
    settings, remote = make_settings(tmp_path), FakeRemote(updates="none")
    sync(settings, remote, catalog(15))
    writes = remote.requests["write"]
    summary = sync(settings, remote, catalog(15, price="2.00"), force=True)
    assert summary.drift == 15 and summary.updated == 0
    assert remote.requests["write"] - writes == 1, "after the first 405 no more updates are sent"
    assert len([n for n in summary.notes if "PATCH" in n]) == 1, "said once"
    assert summary.exit_code == errors.EXIT_PARTIAL


def test_update_method_put_is_used_when_configured(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, api={"update_method": "put"})
    remote = FakeRemote(updates="put")
    sync(settings, remote, catalog(3))
    summary = sync(settings, remote, catalog(3, changed={"SKU-0001": "3.00"}))
    assert summary.updated == 1 and summary.drift == 0


def test_update_method_none_sends_no_updates(tmp_path: Path) -> None:
    settings, remote = make_settings(tmp_path, api={"update_method": "none"}), FakeRemote()
    sync(settings, remote, catalog(3))
    writes = remote.requests["write"]
    summary = sync(settings, remote, catalog(3, changed={"SKU-0001": "3.00"}))
    assert remote.requests["write"] == writes
    assert summary.drift == 1


def test_product_deleted_on_the_remote_is_recreated(tmp_path: Path) -> None:
    # The in-memory list shows every write at once: no wait for a product made again.
    settings, remote = make_settings(tmp_path, api={"list_lag_s": 0}), FakeRemote()
    sync(settings, remote, catalog(5))
    gone_id = remote.by_key("SKU-0002")[0]["id"]
    del remote.products[gone_id]
    summary = sync(settings, remote, catalog(5, changed={"SKU-0002": "8.00"}))
    assert_exactly_once(remote, catalog(5))
    assert remote.by_key("SKU-0002")[0]["price"] == "8.00"
    assert summary.failed == 0


def test_verify_repairs_remote_edits_and_deletions(tmp_path: Path) -> None:
    # The in-memory list shows every write at once: no wait for a product made again.
    settings = make_settings(tmp_path, api={"list_lag_s": 0})
    remote, rows = FakeRemote(), catalog(6)
    sync(settings, remote, rows)
    del remote.products[remote.by_key("SKU-0001")[0]["id"]]
    edited = remote.by_key("SKU-0002")[0]["id"]
    remote.products[edited]["price"] = "0.01"
    plain = sync(settings, remote, rows)
    assert plain.unchanged == 6, "without --verify the remote is not read"
    summary = sync(settings, remote, rows, verify=True)
    assert_exactly_once(remote, rows)
    assert remote.products[edited]["price"] == "1.00"
    assert summary.created == 1 and summary.updated == 1


def test_change_guard_stops_before_writing_unless_forced(tmp_path: Path) -> None:
    settings, remote = make_settings(tmp_path), FakeRemote()
    sync(settings, remote, catalog(40))
    writes = remote.requests["write"]
    with pytest.raises(errors.ChangeGuardTripped, match="max_change_ratio"):
        sync(settings, remote, catalog(40, price="0.00"))
    assert remote.requests["write"] == writes
    forced = sync(settings, remote, catalog(40, price="0.00"), force=True)
    assert forced.updated == 40


def test_empty_source_is_refused_while_the_mirror_holds_products(tmp_path: Path) -> None:
    settings, remote = make_settings(tmp_path), FakeRemote()
    sync(settings, remote, catalog(3))
    with pytest.raises(errors.EmptySourceRefused, match="--allow-empty-source"):
        sync(settings, remote, [])
    summary = sync(settings, remote, [], allow_empty_source=True)
    assert summary.gone == 3
    assert len(remote.products) == 3, "gone products are never deleted remotely"


def test_dry_run_changes_nothing_remote_or_local(tmp_path: Path) -> None:
    settings, remote = make_settings(tmp_path), FakeRemote()
    summary = sync(settings, remote, catalog(5), dry_run=True)
    assert summary.created == 5 and summary.dry_run
    assert not settings.state.path.exists(), "a dry run never creates the state file"
    assert remote.requests == {"read": 0, "write": 0}
    sync(settings, remote, catalog(5))
    digest = hashlib.sha256(settings.state.path.read_bytes()).hexdigest()
    requests = dict(remote.requests)
    plan = sync(settings, remote, catalog(5, price="3.00"), dry_run=True)
    assert plan.updated == 5
    assert hashlib.sha256(settings.state.path.read_bytes()).hexdigest() == digest
    assert remote.requests == requests
    assert any("≈" in n for n in plan.notes), "the dry run gives an ETA"


def test_a_second_run_is_refused_while_the_lock_is_held(tmp_path: Path) -> None:
    settings, remote = make_settings(tmp_path), FakeRemote()
    with run_lock(settings.state.path), pytest.raises(errors.LockHeld):
        sync(settings, remote, catalog(2))
    assert remote.requests == {"read": 0, "write": 0}


def test_auth_failure_ends_the_run_without_marking_products(tmp_path: Path) -> None:
    settings, remote, rows = make_settings(tmp_path), FakeRemote(), catalog(4)
    sync(settings, remote, rows[:1])

    def refuse(kind: str, payload: dict[str, Any]) -> None:
        raise errors.AuthError(401, "UNAUTHORIZED", "invalid API key")

    remote.pre = refuse
    with pytest.raises(errors.AuthError):
        sync(settings, remote, rows)
    mirror = Mirror(settings.state.path)
    assert mirror.counts_by_state().get("rejected", 0) == 0
    assert mirror.open_intents() == []
    mirror.close()
    remote.pre = None
    summary = sync(settings, remote, rows)
    assert summary.created == 3
    assert_exactly_once(remote, rows)


@pytest.mark.parametrize("landed", [True, False])
def test_a_lost_create_of_a_product_then_dropped_from_the_source_is_settled(
    tmp_path: Path, landed: bool
) -> None:
    # The in-memory list shows every write at once: the run right after the crash may settle.
    settings = make_settings(tmp_path, api={"list_lag_s": 0})
    remote, rows = FakeRemote(), catalog(4)
    sync(settings, remote, rows[:2])
    crash = _crash_once("lost", "SKU-0003")
    if landed:
        remote.post = crash
    else:
        remote.pre = crash
    with pytest.raises(Crash):
        sync(settings, remote, rows)
    remote.pre = remote.post = None
    summary = sync(settings, remote, rows[:3], allow_empty_source=True)
    mirror = Mirror(settings.state.path)
    try:
        assert mirror.open_intents() == [], "the orphaned intent was looked up and settled"
        row = mirror.rows(["SKU-0003"])["SKU-0003"]
        assert row.state is State.GONE
        assert (row.remote_id is not None) is landed, "a create that landed is linked"
    finally:
        mirror.close()
    assert summary.gone == 1
    assert len(remote.by_key("SKU-0003")) == (1 if landed else 0)


def test_a_source_with_no_valid_record_is_refused_like_an_empty_one(tmp_path: Path) -> None:
    settings, remote = make_settings(tmp_path), FakeRemote()
    sync(settings, remote, catalog(3))
    invalid = [{"sku": "", "name": r["name"], "price": r["price"]} for r in catalog(3)]
    with pytest.raises(errors.EmptySourceRefused, match="none of the source's 3 records"):
        sync(settings, remote, invalid)
    mirror = Mirror(settings.state.path)
    assert mirror.counts_by_state() == {"synced": 3}, "nothing was marked gone"
    mirror.close()


def test_a_renamed_key_column_is_one_shape_error(tmp_path: Path) -> None:
    """The key's column renamed: one error naming it (issue 37, item 7), not a row error
    per record, and nothing marked gone."""
    settings, remote = make_settings(tmp_path), FakeRemote()
    sync(settings, remote, catalog(3))
    renamed_key_column = [{"SKU": r["sku"], "name": r["name"]} for r in catalog(3)]
    with pytest.raises(errors.ShapeChanged, match=r"the key 'sku' reads path 'sku'.*SKU"):
        sync(settings, remote, renamed_key_column)
    mirror = Mirror(settings.state.path)
    assert mirror.counts_by_state() == {"synced": 3}, "nothing was marked gone"
    mirror.close()


def test_adoptions_are_recorded_in_batches_and_all_land(tmp_path: Path) -> None:
    settings, remote, rows = make_settings(tmp_path), FakeRemote(), catalog(1_203)
    remote.seed(*rows[:1_200])
    summary = sync(settings, remote, rows)
    assert (summary.adopted, summary.created) == (1_200, 3)
    assert remote.requests["write"] == 3
    mirror = Mirror(settings.state.path)
    try:
        assert mirror.counts_by_state() == {"synced": 1_203}
    finally:
        mirror.close()
    again = sync(settings, remote, rows)
    assert again.unchanged == 1_203 and remote.requests["write"] == 3


def test_products_only_on_the_remote_are_remembered_as_such_never_as_gone(tmp_path: Path) -> None:
    settings, remote, rows = make_settings(tmp_path), FakeRemote(), catalog(3)
    remote.seed(*({"sku": f"OTHER-{i}", "name": "not ours"} for i in range(5)))
    first = sync(settings, remote, rows)
    second = sync(settings, remote, rows)
    assert (first.gone, second.gone) == (0, 0)
    mirror = Mirror(settings.state.path)
    try:
        assert mirror.counts_by_state() == {"remote_only": 5, "synced": 3}
    finally:
        mirror.close()
    # When the source adds one of them, it is updated in place, never POSTed again.
    third = sync(settings, remote, [*rows, {"sku": "OTHER-1", "name": "ours now"}])
    assert third.created == 0 and third.updated == 1
    assert [p["name"] for p in remote.by_key("OTHER-1")] == ["ours now"]
