"""``explain KEY``: every state a product can be in says the right reason.

One test per reason: each fails when that reason is wrong (the verdict, and the words a
merchandiser reads)."""

from __future__ import annotations

import io
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from skuferry import errors
from skuferry.config.load import settings_from_dict
from skuferry.service import story
from skuferry.service.story import Story, tell
from skuferry.sources import change_token
from skuferry.sync.engine import Adapters, run_once
from tests.fakes import Crash, FakeRemote
from tests.unit.sync.test_undo import GONE, Shop, catalog


@pytest.fixture(autouse=True)
def no_racy_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(change_token, "RACY_S", 0.0)


def explain(shop: Shop, key: str) -> Story:
    return tell(shop.settings, key)


def told(found: Story) -> str:
    out = io.StringIO()
    story.print_story(found, out)
    return out.getvalue()


def synced(tmp_path: Path, n: int = 3, **over: Any) -> Shop:
    shop = Shop(tmp_path, **over)
    shop.export(catalog(n))
    shop.sync()
    return shop


def test_in_step_says_so_with_the_source_line_the_cms_values_and_the_history(
    tmp_path: Path,
) -> None:
    shop = synced(tmp_path)
    found = explain(shop, "SKU-0001")
    assert found.verdict == story.IN_STEP and "in step" in found.why
    assert found.source is not None and found.source["line"] == 3
    assert found.source["payload"] == {
        "sku": "SKU-0001",
        "name": "Product 1",
        "price": Decimal("1.25"),
    }
    assert found.cms is not None and found.cms["remote_id"] == shop.product("SKU-0001")["id"]
    assert [(e.kind, e.outcome) for e in found.history] == [("create", "ok")]
    assert found.next["action"] == "unchanged"
    text = told(found)
    assert "SKU-0001 — in step" in text and "catalog.csv line 3" in text
    assert "created (name 'Product 1', price 1.25, sku 'SKU-0001'), run 1" in text


def test_waiting_names_the_fields_the_next_run_sends(tmp_path: Path) -> None:
    shop = synced(tmp_path)
    shop.export(catalog(3, factor=10))
    found = explain(shop, "SKU-0002")
    assert found.verdict == story.WAITING
    assert "the source changed since it was last sent (last written in run 1)" in found.why
    assert found.next["action"] == "update"
    assert found.next["changes"] == [
        {"field": "price", "from": Decimal("2.25"), "to": Decimal("22.50")}
    ]
    assert "price 2.25 → 22.50" in told(found)


def test_waiting_after_a_failure_names_it_and_the_pending_retry(tmp_path: Path) -> None:
    shop = synced(tmp_path)
    shop.export(catalog(3, factor=10))
    shop.remote.allowed = {"write": shop.remote.requests["write"]}  # the next write: 429
    shop.sync()
    found = explain(shop, "SKU-0000")
    assert found.verdict == story.WAITING
    assert "its last write failed" in found.why and "Rate limit" in found.why
    assert "pending work: the next run reads the source even if it did not change" in found.why


def test_held_by_its_row_names_the_line_and_the_column(tmp_path: Path) -> None:
    shop = synced(tmp_path)
    rows = catalog(3)
    rows[1]["price"] = "12,50,0"
    shop.export(rows)
    found = explain(shop, "SKU-0001")
    assert found.verdict == story.HELD
    assert found.why.startswith("held by its row: ") and "price" in found.why
    assert "keeps its last state" in found.again
    assert found.next["action"] == "reject"


def test_held_by_a_join_read_incompletely_names_the_join(tmp_path: Path) -> None:
    (tmp_path / "erp.jsonl").write_text('{"SKU": "A"}\n{"SKU": "B"}\n', encoding="utf-8")
    (tmp_path / "pim.jsonl").write_text('{"sku": "A", "name": "Drill"}\n{not json\n')
    settings = settings_from_dict(
        {
            "api": {"base_url": "http://127.0.0.1:9", "api_key": "k-test"},
            "source": {"type": "jsonl", "path": "erp.jsonl"},
            "join": [{"name": "pim", "type": "jsonl", "path": "pim.jsonl", "key": "sku",
                      "on": "SKU"}],
            "mapping": {"key": "sku", "fields": {"sku": "SKU", "name": {"path": "pim.name",
                        "default": "Artikel"}}},
            "state": {"path": "state.db"},
        },
        base_dir=tmp_path,
    )  # fmt: skip
    run_once(settings, adapters=Adapters(client=FakeRemote()))
    found = tell(settings, "B")
    assert found.verdict == story.HELD
    assert found.why.startswith("held by a join: ") and "join 'pim'" in found.why


def test_held_by_a_torn_export_names_the_torn_end(tmp_path: Path) -> None:
    shop = synced(tmp_path, source={"type": "csv", "path": str(tmp_path / "catalog.csv"),
                                    "final_newline": "required"})  # fmt: skip
    text = shop.path.read_text(encoding="utf-8")
    shop.path.write_text(text.rstrip("\r\n")[:-2], encoding="utf-8")  # cut mid-line
    found = explain(shop, "SKU-0001")
    assert found.verdict == story.HELD
    assert found.why.startswith("held: the export is not whole (")
    assert "line" in found.why
    assert found.next["words"] == "nothing until the export is whole"


def test_held_by_a_shape_change_names_the_change_and_the_way_on(tmp_path: Path) -> None:
    shop = synced(tmp_path)
    renamed = [{"sku": r["sku"], "name": r["name"], "Preis": r["price"]} for r in catalog(3)]
    shop.export(renamed, columns=["sku", "name", "Preis"])
    with pytest.raises(errors.ShapeChanged):
        shop.sync()
    found = explain(shop, "SKU-0001")
    assert found.verdict == story.HELD
    assert found.why.startswith("held by a shape change (run 2): ") and "price" in found.why
    assert "skuferry accept-shape" in found.again
    assert found.next["action"] == "refused"


def test_refused_gives_the_cms_reason_the_run_and_what_makes_it_go_again(
    tmp_path: Path,
) -> None:
    shop = synced(tmp_path)
    rows = catalog(3)
    rows[2]["name"] = ""  # the CMS requires a name
    shop.export(rows)
    run = shop.sync().run_id
    found = explain(shop, "SKU-0002")
    assert found.verdict == story.REFUSED
    assert found.why.startswith(f"refused by the CMS in run {run}: HTTP 422: ")
    assert "name" in found.why
    assert found.since is not None and found.since["run"] == run
    assert "skuferry retry KEY" in found.again and "data change" in found.again
    assert found.next["action"] == "still_rejected"


def test_gone_says_it_stays_on_the_cms_and_since_when(tmp_path: Path) -> None:
    shop = synced(tmp_path)
    shop.export(catalog(2))
    shop.sync()
    found = explain(shop, "SKU-0002")
    assert found.verdict == story.GONE
    assert "it stays on the CMS" in found.why and "no DELETE" in found.why
    assert found.since is not None and found.source is None


def test_archived_says_since_which_run(tmp_path: Path) -> None:
    shop = synced(tmp_path, 12, gone=GONE)
    shop.export(catalog(11))
    run = shop.sync().run_id
    found = explain(shop, "SKU-0011")
    assert found.verdict == story.ARCHIVED and "got the [gone] patch" in found.why
    assert found.since is not None and found.since["run"] == run
    assert [e.kind for e in found.history] == ["archive", "create"]
    assert "archive: status ? → 'archived', run" in told(found)


def test_a_create_in_doubt_says_the_next_run_looks_it_up(tmp_path: Path) -> None:
    shop = synced(tmp_path, api={"base_url": "http://127.0.0.1:9", "api_key": "k",
                                 "max_in_flight": 1})  # fmt: skip
    shop.export([*catalog(3), {"sku": "NEW", "name": "new", "price": "1"}])

    def kill(kind: str, payload: dict[str, Any]) -> None:
        raise Crash  # the CMS committed the POST; the answer never came

    shop.remote.post = kill
    with pytest.raises(Crash):
        shop.sync()
    found = explain(shop, "NEW")
    assert found.verdict == story.IN_DOUBT
    assert (
        found.why
        == "a create went out in run 2 and its answer was lost: it may be on the CMS or not"
    )
    assert found.next["words"].startswith("look the key up on the CMS first")


def test_an_unknown_key_gets_the_known_keys_it_differs_from_by_case(tmp_path: Path) -> None:
    shop = synced(tmp_path)
    found = explain(shop, "sku-0001")
    assert found.verdict == story.UNKNOWN and not found.known
    assert found.similar == ["SKU-0001"]
    assert "did you mean 'SKU-0001'?" in found.why
    nothing = explain(shop, "NOPE")
    assert nothing.verdict == story.UNKNOWN and nothing.similar == []


def test_a_key_in_another_unicode_form_is_read_as_stored(tmp_path: Path) -> None:
    shop = Shop(tmp_path)
    shop.export([{"sku": "CAFÉ-1", "name": "Coffee", "price": "1"}])
    shop.sync()
    found = explain(shop, "CAFE\u0301-1 ")
    assert found.key == "CAFÉ-1" and found.verdict == story.IN_STEP
    assert any("Unicode NFC" in note for note in found.notes)


def test_a_create_only_field_edited_in_the_source_is_not_sent_and_says_why(
    tmp_path: Path,
) -> None:
    mapping = {
        "key": "sku",
        "fields": {"sku": "sku", "name": {"column": "name", "create_only": True}, "price": "price"},
    }
    shop = synced(tmp_path, mapping=mapping)
    rows = catalog(3)
    rows[0]["name"] = "Renamed in the ERP"
    shop.export(rows)
    found = explain(shop, "SKU-0000")
    assert found.not_sent == [
        {"field": "name", "why": "create_only: sent when it was created, the CMS's since"}
    ]
    assert found.next["words"] == "nothing goes out: only fields the CMS owns changed"


def test_the_next_run_of_an_undone_feed_is_said_refused(tmp_path: Path) -> None:
    shop = synced(tmp_path)
    shop.export(catalog(3, factor=100))
    bad = shop.sync(force=True).run_id
    undone = shop.undo(bad).run_id
    found = explain(shop, "SKU-0001")
    assert found.next["action"] == "refused"
    assert f"`skuferry undo {bad}`" in found.next["words"]
    kinds = [(e.run_id, e.kind) for e in found.history]
    assert kinds == [(undone, "update"), (bad, "update"), (1, "create")]


def test_an_undone_feed_without_a_token_is_said_refused_by_its_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The export synced in its first seconds (no change token): explain reads the source,
    and knows the feed by what it read."""
    shop = synced(tmp_path)
    monkeypatch.setattr(change_token, "RACY_S", 3600.0)
    shop.export(catalog(3, factor=100))
    bad = shop.sync(force=True).run_id
    shop.undo(bad)
    found = explain(shop, "SKU-0001")
    assert found.next["action"] == "refused"
    assert f"`skuferry undo {bad}`" in found.next["words"]


def test_the_json_story_has_its_documented_shape(tmp_path: Path) -> None:
    shop = synced(tmp_path)
    data = json.loads(json.dumps(explain(shop, "SKU-0001").as_json(), default=str))
    assert set(data) == {
        "key", "asked", "known", "verdict", "why", "again", "since", "source", "cms", "next",
        "not_sent", "history", "similar", "notes",
    }  # fmt: skip
    assert set(data["history"][0]) == {
        "run_id",
        "at",
        "kind",
        "outcome",
        "status",
        "error",
        "remote_id",
        "changes",
    }
    assert set(data["history"][0]["changes"][0]) == {"field", "before", "before_known", "after"}
    assert set(data["next"]) == {"action", "words", "changes"}


def test_explain_never_writes(tmp_path: Path) -> None:
    shop = synced(tmp_path)
    before = shop.settings.state.path.read_bytes()
    explain(shop, "SKU-0001")
    explain(shop, "NOPE")
    assert shop.settings.state.path.read_bytes() == before
