"""``undo RUN`` against the in-memory CMS: a forced bad feed taken back, field by field."""

from __future__ import annotations

import csv
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from skuferry import errors
from skuferry.config.load import settings_from_dict
from skuferry.config.schema import Settings
from skuferry.models import RunOptions, RunSummary, State
from skuferry.sources import change_token
from skuferry.state.mirror import Mirror
from skuferry.sync.engine import Adapters, run_once
from skuferry.sync.undo import UndoReport, undo_run
from tests.fakes import Crash, FakeRemote

GONE = {"action": "patch", "patch": {"status": "archived"}, "restore": {"status": "active"}}
FIELDS = ["sku", "name", "price"]


@pytest.fixture(autouse=True)
def no_racy_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """A file just written has a change token at once (as an export written minutes ago)."""
    monkeypatch.setattr(change_token, "RACY_S", 0.0)


class Shop:
    """A CSV export, its state file and the CMS in memory."""

    def __init__(self, tmp_path: Path, **over: Any) -> None:
        self.path = tmp_path / "catalog.csv"
        self.remote = FakeRemote()
        mapping = over.pop("mapping", None) or {
            "key": "sku",
            "fields": {
                "sku": "sku",
                "name": "name",
                "price": {"column": "price", "type": "decimal"},
            },
        }
        self.settings: Settings = settings_from_dict(
            {
                "api": {"base_url": "http://127.0.0.1:9", "api_key": "k", "max_in_flight": 3},
                "source": {"type": "csv", "path": str(self.path)},
                "mapping": mapping,
                "state": {"path": str(tmp_path / "state.db")},
                **over,
            }
        )

    def export(self, rows: list[dict[str, Any]], columns: list[str] = FIELDS) -> None:
        with self.path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, columns)
            writer.writeheader()
            writer.writerows(rows)

    def sync(self, **flags: Any) -> RunSummary:
        return run_once(self.settings, RunOptions(**flags), adapters=Adapters(client=self.remote))

    def undo(self, run: int | None, **kw: Any) -> UndoReport:
        assert run is not None
        return undo_run(self.settings, run, adapters=Adapters(client=self.remote), **kw)

    def prices(self) -> dict[str, Any]:
        return {str(p["sku"]): p.get("price") for p in self.remote.products.values()}

    def product(self, key: str) -> dict[str, Any]:
        [found] = self.remote.by_key(key)
        return found

    def row(self, key: str) -> Any:
        mirror = Mirror(self.settings.state.path, readonly=True)
        try:
            return mirror.rows([key])[key]
        finally:
            mirror.close()


def catalog(n: int, *, factor: int = 1) -> list[dict[str, Any]]:
    return [
        {"sku": f"SKU-{i:04d}", "name": f"Product {i}", "price": str(Decimal(f"{i}.25") * factor)}
        for i in range(n)
    ]


def writes(remote: FakeRemote) -> int:
    return remote.requests["write"]


def test_a_forced_bad_feed_is_undone_price_by_price_and_not_applied_again(tmp_path: Path) -> None:
    shop = Shop(tmp_path)
    good = catalog(300)
    shop.export(good)
    shop.sync()
    before = shop.prices()
    shop.export(catalog(300, factor=100))  # an ERP job that exported prices in cents
    with pytest.raises(errors.ChangeGuardTripped):
        shop.sync()
    bad = shop.sync(force=True)
    assert bad.updated == 300 and bad.run_id is not None
    edited = shop.product("SKU-0007")
    edited["price"] = "9.99"  # staff mended one by hand meanwhile
    writes_before = writes(shop.remote)

    undone = shop.undo(bad.run_id)

    assert undone.exit_code == errors.EXIT_PARTIAL  # one left, and listed
    assert (undone.count("put_back"), undone.count("left")) == (299, 1)  # SKU-0007 left
    assert writes(shop.remote) - writes_before == 299, "0 other writes"
    assert Counter(shop.remote.keys()) == Counter(r["sku"] for r in good), "0 duplicates"
    prices = shop.prices()
    assert prices.pop("SKU-0007") == "9.99"  # left alone
    expected = dict(before)
    expected.pop("SKU-0007")
    assert prices == expected, "every price exactly as before"
    [left] = [s for s in undone.steps if s.left]
    assert left.key == "SKU-0007" and "changed on the CMS since run" in left.left[0].reason
    # the next scheduled run does not write the same export again
    with pytest.raises(errors.UndoneFeedRefused, match=rf"skuferry undo {bad.run_id}"):
        shop.sync()
    assert shop.prices()["SKU-0001"] == Decimal("1.25")
    # a corrected export syncs as a normal change: only the product left differs
    shop.export(good)
    fixed = shop.sync()
    assert (fixed.updated, fixed.unchanged, fixed.created) == (1, 299, 0)
    assert shop.prices()["SKU-0007"] == Decimal("7.25")


def test_the_mirror_knows_what_the_cms_holds_after_the_undo(tmp_path: Path) -> None:
    shop = Shop(tmp_path)
    shop.export(catalog(5))
    shop.sync()
    digest = shop.row("SKU-0001").digest
    shop.export(catalog(5, factor=100))
    bad = shop.sync(force=True)
    shop.undo(bad.run_id)
    row = shop.row("SKU-0001")
    assert (row.state, row.digest) == (State.SYNCED, digest)  # in step with the good data


def test_creates_are_archived_and_archives_restored_with_a_renamed_column(tmp_path: Path) -> None:
    """A mapping reading a column the export renamed, accepted as gone on purpose (a run
    with --force alone is refused: issue 37) with send_nulls: every price sent null, two
    products archived (gone from the export), two created."""
    shop = Shop(tmp_path, gone=GONE, mapping=None)
    settings = shop.settings.model_copy(
        update={"mapping": shop.settings.mapping.model_copy(update={"send_nulls": True})}
    )
    shop.settings = settings
    good = catalog(20)
    shop.export(good)
    shop.sync()
    before = {k: (p, shop.product(k).get("status")) for k, p in shop.prices().items()}
    renamed = [{"sku": r["sku"], "name": r["name"], "Preis": r["price"]} for r in good[2:]]
    renamed += [{"sku": f"NEW-{i}", "name": "new", "Preis": "1"} for i in range(2)]
    shop.export(renamed, columns=["sku", "name", "Preis"])
    bad = shop.sync(force=True, accept_shape=True)
    assert (bad.updated, bad.created, bad.archived) == (18, 2, 2)
    assert shop.prices()["SKU-0005"] is None

    undone = shop.undo(bad.run_id)

    assert undone.exit_code == errors.EXIT_OK, undone.as_json()["problems"]
    assert (undone.count("put_back"), undone.count("archived")) == (20, 2)
    restored = {"SKU-0000", "SKU-0001"}  # their archive undone: the [gone] restore table
    for key, (price, status) in before.items():
        want = (price, "active" if key in restored else status)
        assert (shop.prices()[key], shop.product(key).get("status")) == want, key
    assert [shop.product(f"NEW-{i}")["status"] for i in range(2)] == ["archived", "archived"]
    assert len(shop.remote.keys()) == 22  # nothing deleted, nothing duplicated
    # the undo of the undo sends the nulls again (what the CMS held, read before the undo)
    again = shop.undo(undone.run_id)
    assert again.exit_code == errors.EXIT_OK, again.as_json()["changes"][:2]
    assert shop.prices()["SKU-0005"] is None and shop.product("NEW-1")["status"] == "active"


def test_without_a_gone_patch_the_created_products_are_listed_with_their_ids(
    tmp_path: Path,
) -> None:
    shop = Shop(tmp_path)
    shop.export(catalog(3))
    shop.sync()
    shop.export([*catalog(3), {"sku": "NEW", "name": "new", "price": "1"}])
    run = shop.sync().run_id
    undone = shop.undo(run)
    [listed] = [s for s in undone.steps if s.action == "list"]
    assert listed.key == "NEW" and shop.product("NEW")["id"] in listed.reason
    assert undone.exit_code == errors.EXIT_PARTIAL
    assert "no DELETE" in listed.reason


def test_an_undo_killed_halfway_goes_on_under_its_run_and_writes_nothing_twice(
    tmp_path: Path,
) -> None:
    shop = Shop(
        tmp_path, api={"base_url": "http://127.0.0.1:9", "api_key": "k", "max_in_flight": 1}
    )
    shop.export(catalog(40))
    shop.sync()
    before = shop.prices()
    shop.export(catalog(40, factor=100))
    bad = shop.sync(force=True)
    sent: Counter[str] = Counter()
    calls = {"n": 0}

    def kill(kind: str, payload: dict[str, Any]) -> None:
        calls["n"] += 1
        if calls["n"] == 15:
            raise Crash  # kill -9 after the CMS committed the 15th put-back

    shop.remote.post = kill
    original = shop.remote.update_product

    def counted(product_id: str, payload: dict[str, Any], **kw: Any) -> dict[str, Any]:
        sent[product_id] += 1
        return original(product_id, payload, **kw)

    shop.remote.update_product = counted  # type: ignore[method-assign]
    with pytest.raises(Crash):
        shop.undo(bad.run_id)
    shop.remote.post = None
    again = shop.undo(bad.run_id)
    assert again.resumed and again.exit_code == errors.EXIT_OK
    first = again.run_id
    assert shop.prices() == before
    assert max(sent.values()) == 1, "nothing written twice"
    assert sum(sent.values()) == 40
    assert again.count("already") == 15 and again.count("put_back") == 25
    mirror = Mirror(shop.settings.state.path, readonly=True)
    try:
        undos = mirror.undos_of(bad.run_id or 0)
    finally:
        mirror.close()
    assert undos == [{"id": first, "status": "ok"}], "one undo run, finished"


def test_the_undo_of_an_undo_gives_the_bad_values_back(tmp_path: Path) -> None:
    shop = Shop(tmp_path)
    shop.export(catalog(12))
    shop.sync()
    shop.export(catalog(12, factor=100))
    bad = shop.sync(force=True)
    worse = shop.prices()
    undone = shop.undo(bad.run_id)
    again = shop.undo(undone.run_id)
    assert again.exit_code == errors.EXIT_OK and again.count("put_back") == 12
    assert shop.prices() == worse
    # the operator put that feed back on purpose: it is no longer refused (and in step)
    follow = shop.sync()
    assert (follow.updated, follow.unchanged) == (0, 12)


def test_an_undo_whose_products_all_changed_since_writes_nothing_and_says_why(
    tmp_path: Path,
) -> None:
    shop = Shop(tmp_path)
    shop.export(catalog(4))
    shop.sync()
    shop.export(catalog(4, factor=100))
    bad = shop.sync(force=True)
    shop.export(catalog(4, factor=10))  # a later run changed them all again
    shop.sync(force=True)
    writes_before = writes(shop.remote)
    undone = shop.undo(bad.run_id)
    assert writes(shop.remote) == writes_before
    assert undone.count("left") == 4 and undone.exit_code == errors.EXIT_PARTIAL
    reasons = {s.left[0].reason for s in undone.steps}
    assert all(f"changed on the CMS since run {bad.run_id}" in r for r in reasons), reasons


def test_a_dry_run_says_exactly_what_would_go_and_changes_nothing(tmp_path: Path) -> None:
    shop = Shop(tmp_path)
    shop.export(catalog(3))
    shop.sync()
    shop.export(catalog(3, factor=100))
    bad = shop.sync(force=True)
    state = shop.settings.state.path.read_bytes()
    writes_before = writes(shop.remote)
    preview = shop.undo(bad.run_id, dry_run=True)
    assert preview.run_id is None and writes(shop.remote) == writes_before
    assert shop.settings.state.path.read_bytes() == state
    step = next(s for s in preview.steps if s.key == "SKU-0002")
    assert step.body == {"price": Decimal("2.25")}
    change = preview.as_json()["changes"][2]
    assert change["fields"][0] == {
        "field": "price",
        "sent": Decimal("225.00"),
        "back": Decimal("2.25"),
        "known": True,
        "now": Decimal("225.00"),
        "result": "put_back",
        "reason": "",
    }
    done = shop.undo(bad.run_id)
    assert done.count("put_back") == preview.count("put_back") == 3


def test_only_the_named_keys_are_undone(tmp_path: Path) -> None:
    shop = Shop(tmp_path)
    shop.export(catalog(3))
    shop.sync()
    shop.export(catalog(3, factor=100))
    bad = shop.sync(force=True)
    undone = shop.undo(bad.run_id, only=("SKU-0001", "NOPE"))
    assert [s.key for s in undone.steps] == ["SKU-0001"]
    assert undone.missing == ["NOPE"] and undone.exit_code == errors.EXIT_PARTIAL
    assert shop.prices()["SKU-0001"] == Decimal("1.25")
    assert shop.prices()["SKU-0002"] == Decimal("225.00")


def test_force_writes_an_undone_feed_and_forgets_the_refusal(tmp_path: Path) -> None:
    shop = Shop(tmp_path)
    shop.export(catalog(3))
    shop.sync()
    shop.export(catalog(3, factor=100))
    bad = shop.sync(force=True)
    shop.undo(bad.run_id)
    forced = shop.sync(force=True)
    assert forced.updated == 3 and any("written anyway" in n for n in forced.notes)
    assert shop.sync().updated == 0  # no longer refused


def test_a_run_that_cannot_be_undone_says_why(tmp_path: Path) -> None:
    shop = Shop(tmp_path)
    shop.export(catalog(2))
    shop.sync()
    with pytest.raises(errors.UsageError, match="holds no run 42"):
        shop.undo(42)
    mirror = Mirror(shop.settings.state.path)
    try:
        mirror.prune_history(days=0, max_rows=1000)
    finally:
        mirror.close()
    with pytest.raises(errors.UsageError, match="was pruned"):
        shop.undo(1)
