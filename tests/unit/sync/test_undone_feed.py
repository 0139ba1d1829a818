"""An undone feed is recognised by its content, not only by its change token (issue 38,
item 4): an export synced in the seconds after it was written (no change token: the racy
window), an API without validators, a join, a named run, the daemon between runs."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from skuferry import errors
from skuferry.models import RunSummary
from skuferry.sources import change_token
from skuferry.state.mirror import Mirror
from skuferry.sync.read import undone
from tests.json_api import JsonApi
from tests.unit.service.test_daemon_undo import daemon_of
from tests.unit.sync.test_undo import Shop, catalog, writes


@pytest.fixture(autouse=True)
def racy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every export was written just before the run (an export job, then cron or a watch):
    no file has a change token."""
    monkeypatch.setattr(change_token, "RACY_S", 3600.0)


def run_row(shop: Shop, run: int | None) -> dict[str, Any]:
    assert run is not None
    mirror = Mirror(shop.settings.state.path, readonly=True)
    try:
        found = mirror.run_row(run)
    finally:
        mirror.close()
    assert found is not None
    return found


def bad_feed(shop: Shop, n: int = 3) -> int:
    """A synced catalog of ``n``, then the prices in cents synced at once (n <= 10: under
    the change guard's floor, as the README's three products)."""
    shop.export(catalog(n))
    shop.sync()
    shop.export(catalog(n, factor=100))
    bad = shop.sync()
    assert bad.updated == n and bad.run_id is not None
    return bad.run_id


def test_an_export_synced_in_its_first_seconds_is_refused_after_its_undo(tmp_path: Path) -> None:
    """The README: ``sed -i`` on the export, ``skuferry sync`` at once, ``undo RUN``, then
    ``sync``: refused (exit 2), nothing written, until the export changes."""
    shop = Shop(tmp_path)
    bad = bad_feed(shop)
    row = run_row(shop, bad)
    assert row["token"] is None, "the racy window: no change token"
    assert row["feed"] is not None and row["feed"].startswith(undone.FEED)
    report = shop.undo(bad)
    assert report.count("put_back") == 3
    assert any("is refused from now on" in n for n in report.notes), report.notes
    before = writes(shop.remote)

    with pytest.raises(errors.UndoneFeedRefused, match=rf"skuferry undo {bad}\b") as refused:
        shop.sync()

    assert refused.value.exit_code == errors.EXIT_USAGE == 2
    assert writes(shop.remote) == before, "nothing written"
    assert shop.prices()["SKU-0002"] == Decimal("2.25")
    rows = catalog(3)
    rows[1]["price"] = "2.95"  # the export changes: a corrected one, with one real change
    shop.export(rows)
    fixed = shop.sync()
    assert (fixed.updated, fixed.unchanged) == (1, 2)


def test_a_refusal_by_content_teaches_the_mark_the_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the export is older than the racy window, its token is known: the run refused by
    content leaves it on the mark, and the next run stops before reading anything."""
    shop = Shop(tmp_path)
    shop.undo(bad_feed(shop))
    monkeypatch.setattr(change_token, "RACY_S", 0.0)  # minutes later: the file has a token
    with capture_logs() as first, pytest.raises(errors.UndoneFeedRefused):
        shop.sync()
    with capture_logs() as second, pytest.raises(errors.UndoneFeedRefused):
        shop.sync()
    refusals = [e["by"] for e in first + second if e["event"] == "sync.undone_feed.refused"]
    assert refusals == ["content", "token"]
    assert not [e for e in second if e["event"] == "sync.plan.started"], "nothing read"


def test_force_writes_the_undone_feed_and_lifts_its_mark(tmp_path: Path) -> None:
    shop = Shop(tmp_path)
    shop.undo(bad_feed(shop))
    forced = shop.sync(force=True)
    assert forced.updated == 3 and any("written anyway (--force)" in n for n in forced.notes)
    assert shop.prices()["SKU-0002"] == Decimal("225.00")
    again = shop.sync()  # not refused any more: in step
    assert (again.updated, again.unchanged) == (0, 3)


def test_a_dry_run_of_the_undone_feed_says_a_run_would_be_refused(tmp_path: Path) -> None:
    shop = Shop(tmp_path)
    shop.undo(bad_feed(shop))
    state = shop.settings.state.path.read_bytes()
    before = writes(shop.remote)
    preview = shop.sync(dry_run=True)
    notes = [n for n in preview.notes if "a run would be refused" in n]
    assert len(notes) == 1 and "`skuferry undo 2`" in notes[0]
    assert writes(shop.remote) == before
    assert shop.settings.state.path.read_bytes() == state


def test_the_undo_of_the_undo_lifts_the_refusal(tmp_path: Path) -> None:
    shop = Shop(tmp_path)
    first = shop.undo(bad_feed(shop))
    again = shop.undo(first.run_id)
    assert any("no longer refused" in n for n in again.notes), again.notes
    follow = shop.sync()
    assert (follow.updated, follow.unchanged) == (0, 3)


def test_a_named_run_over_the_undone_feed_is_refused(tmp_path: Path) -> None:
    shop = Shop(tmp_path)
    shop.undo(bad_feed(shop))
    with pytest.raises(errors.UndoneFeedRefused):
        shop.sync(only=("SKU-0001",))
    assert shop.prices()["SKU-0001"] == Decimal("1.25")


def test_the_daemon_refuses_the_undone_feed_between_runs(tmp_path: Path) -> None:
    shop = Shop(tmp_path)
    bad = bad_feed(shop, 5)
    daemon = daemon_of(shop)
    daemon.start()
    try:
        report = daemon.undo_now(bad)
        assert report is not None and report.count("put_back") == 5
        before = writes(shop.remote)
        for _ in range(2):  # every run, until the export changes
            outcome = daemon.run_now()
            assert isinstance(outcome.exception, errors.UndoneFeedRefused)
            assert f"skuferry undo {bad}" in str(outcome.exception)
        assert writes(shop.remote) == before
        rows = catalog(5)
        rows[0]["price"] = "0.99"
        shop.export(rows)
        changed = daemon.run_now()
        assert changed.exception is None and changed.summary is not None
        assert (changed.summary.updated, changed.summary.unchanged) == (1, 4)
    finally:
        assert daemon.shutdown() == 0


JOINED: dict[str, Any] = {
    "mapping": {
        "key": "sku",
        "fields": {
            "sku": "sku",
            "name": "name",
            "price": {"column": "price", "type": "decimal"},
            "stock": {"path": "erp.stock", "type": "integer"},
        },
    }
}


def test_a_join_is_part_of_the_feed(tmp_path: Path) -> None:
    """The same export with the join's index reused is the same feed (refused); with the
    join's content changed it is another (written)."""
    stock = tmp_path / "stock.csv"
    stock.write_text("sku,stock\n" + "".join(f"SKU-{i:04d},{i}\n" for i in range(3)))
    join = {"name": "erp", "type": "csv", "path": str(stock), "key": "sku", "on": "sku"}
    shop = Shop(tmp_path, join=[join], **JOINED)
    bad = bad_feed(shop)
    assert run_row(shop, bad)["feed"] is not None
    shop.undo(bad)
    with pytest.raises(errors.UndoneFeedRefused):
        shop.sync()
    stock.write_text("sku,stock\n" + "".join(f"SKU-{i:04d},{i + 10}\n" for i in range(3)))
    written = shop.sync()
    assert written.updated == 3, "another join: another feed"


def test_a_table_file_is_part_of_the_feed(tmp_path: Path) -> None:
    names = tmp_path / "names.csv"
    names.write_text("code,label\nA,Anvil\n")
    mapping = {
        "key": "sku",
        "tables": {"names": {"file": str(names), "key": "code", "value": "label"}},
        "fields": {"sku": "sku", "name": "name", "price": {"column": "price", "type": "decimal"}},
    }
    shop = Shop(tmp_path, mapping=mapping)
    shop.undo(bad_feed(shop))
    with pytest.raises(errors.UndoneFeedRefused):
        shop.sync()
    names.write_text("code,label\nA,Anvil (new)\n")
    assert shop.sync().updated == 3, "another table: another feed"


def items(n: int, *, factor: int = 1) -> list[dict[str, Any]]:
    return [{**row, "price": float(row["price"])} for row in catalog(n, factor=factor)]


def api_shop(tmp_path: Path, json_api: JsonApi, **options: Any) -> Shop:
    """The shop's catalog served by an API that sends no validators (one page)."""
    source = {"type": "http", "url": json_api.url, "items_path": "items", "pagination": "none"}
    return Shop(tmp_path, source={**source, **options})


def test_an_api_without_validators_is_recognised_by_its_items(
    tmp_path: Path, json_api: JsonApi
) -> None:
    """No ETag, no Last-Modified: no change token, ever. The items, in any order and under
    another envelope, are the feed."""
    shop = api_shop(tmp_path, json_api)
    json_api.serve({"at": "10:00", "items": items(4)})
    shop.sync()
    json_api.serve({"at": "10:15", "items": items(4, factor=100)})
    bad = shop.sync()
    assert bad.updated == 4 and run_row(shop, bad.run_id)["token"] is None
    shop.undo(bad.run_id)
    json_api.serve({"at": "10:30", "items": items(4, factor=100)[::-1]})  # the same feed
    before = writes(shop.remote)
    with pytest.raises(errors.UndoneFeedRefused):
        shop.sync()
    assert writes(shop.remote) == before
    fixed = items(4)
    fixed[2]["price"] = 9.5
    json_api.serve({"at": "10:45", "items": fixed})
    assert shop.sync().updated == 1


def test_a_join_reused_keeps_its_content(
    tmp_path: Path, json_api: JsonApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The join's source unchanged (its index reused, not read): the run knows the join's
    content from its index, and the feed is recognised."""
    monkeypatch.setattr(change_token, "RACY_S", 0.0)  # the join's file has a token
    stock = tmp_path / "stock.csv"
    stock.write_text("sku,stock\n" + "".join(f"SKU-{i:04d},{i}\n" for i in range(3)))
    join = {"name": "erp", "type": "csv", "path": str(stock), "key": "sku", "on": "sku"}
    source = {"type": "http", "url": json_api.url, "items_path": "items", "pagination": "none"}
    shop = Shop(tmp_path, source=source, join=[join], **JOINED)
    json_api.serve({"items": items(3)})
    assert shop.sync().joins == {"erp": "read"}
    json_api.serve({"items": items(3, factor=100)})
    bad = shop.sync()
    assert bad.joins == {"erp": "reused"} and bad.updated == 3
    assert run_row(shop, bad.run_id)["feed"] is not None
    shop.undo(bad.run_id)
    with pytest.raises(errors.UndoneFeedRefused):
        shop.sync()


def test_an_incremental_window_cannot_be_recognised_and_the_undo_says_so(
    tmp_path: Path, json_api: JsonApi
) -> None:
    shop = api_shop(tmp_path, json_api, since_param="updated_since")
    json_api.serve({"items": items(3)})
    assert shop.sync().pull == "full"
    json_api.serve({"items": items(3, factor=100)})
    bad = shop.sync()
    assert bad.pull == "incremental" and bad.updated == 3
    assert run_row(shop, bad.run_id)["feed"] is None
    report = shop.undo(bad.run_id)
    assert any("cannot be recognised" in n for n in report.notes), report.notes


def test_a_mark_from_before_feeds_were_known_still_refuses_by_its_token() -> None:
    """A state file's mark written by the first version (``{"token", "undo"}``)."""

    class Metas:
        def __init__(self) -> None:
            self.rows = {"undone.4": '{"token": "T", "undo": 5}', "undone.x": "not json"}

        def metas(self, prefix: str) -> list[tuple[str, str]]:
            return [(k.removeprefix(prefix), v) for k, v in self.rows.items()]

        def set_metas(self, values: Mapping[str, str | None]) -> None:
            for k, v in values.items():
                if v is None:
                    self.rows.pop(k, None)
                else:
                    self.rows[k] = v

    metas = Metas()
    with pytest.raises(errors.UndoneFeedRefused, match="skuferry undo 4"):
        undone.check(metas, "T", feed=None, force=False, dry_run=False, summary=RunSummary())
    assert undone.found(metas, "other", feed="F") is None
    assert not undone.mark(metas, None, feed=None, run=6, undo=7), "nothing to know it by"


def test_the_runs_feed_column_is_the_migrations(tmp_path: Path) -> None:
    shop = Shop(tmp_path)
    bad_feed(shop)
    conn = sqlite3.connect(shop.settings.state.path)
    try:
        feeds = [f for (f,) in conn.execute("SELECT feed FROM runs ORDER BY id")]
    finally:
        conn.close()
    assert len(feeds) == 2 and all(f and f.startswith(undone.FEED) for f in feeds)
    assert feeds[0] != feeds[1]
