"""The record stream in pieces: group_by/inherit, each, [[join]] and [source] where."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skuferry.config.load import settings_from_dict
from skuferry.config.schema import JoinSettings, MappingSettings, Settings
from skuferry.errors import ConfigError, SourceError
from skuferry.models import BadRecord, RawRecord, RunSummary
from skuferry.service.report import print_summary
from skuferry.sources import change_token as change_tokens
from skuferry.sources.base import Source
from skuferry.sources.dispatch import open_source
from skuferry.sync.engine import Adapters, run_once
from skuferry.sync.map.mapper import Mapper
from skuferry.sync.read import joins as joins_module
from skuferry.sync.read.joins import open_joins
from skuferry.sync.read.pieces import Pieces, assemble, use_keys
from tests.fakes import FakeRemote


class ListSource(Source):
    def __init__(self, records: list[RawRecord | BadRecord]) -> None:
        self.items = records
        self.opened = 0

    def records(self) -> Iterator[RawRecord | BadRecord]:
        self.opened += 1
        return iter(self.items)

    def describe(self) -> str:
        return "products.jsonl"


def _raw(*rows: dict[str, Any]) -> list[RawRecord | BadRecord]:
    return [RawRecord(n, row) for n, row in enumerate(rows, 2)]


def _read(source: Source) -> list[RawRecord | BadRecord]:
    return list(source.records())


def _fields(records: list[RawRecord | BadRecord]) -> list[dict[str, Any]]:
    return [r.fields for r in records if isinstance(r, RawRecord)]


# --- group_by / inherit ------------------------------------------------------------------


def test_group_by_fills_empty_cells_from_the_groups_first_record() -> None:
    rows = _raw(
        {"Handle": "shirt", "Title": "Shirt", "Vendor": "A", "SKU": "S-1", "Image": "1.jpg"},
        {"Handle": "shirt", "Title": "", "Vendor": "", "SKU": "S-2", "Image": ""},
        {"Handle": "cap", "Title": "Cap", "Vendor": "", "SKU": "C-1", "Image": ""},
        {"Handle": "cap", "Title": " ", "Vendor": "B", "SKU": "C-2", "Image": ""},
        {"Handle": "shirt", "Title": "", "Vendor": "", "SKU": "S-3", "Image": ""},
    )
    mapping = MappingSettings(group_by="Handle", inherit=["Title", "Vendor"])
    out = _fields(_read(assemble(ListSource(rows), mapping, where=None, joins=[])))
    assert [(r["SKU"], r["Title"], r["Vendor"], r["Image"]) for r in out] == [
        ("S-1", "Shirt", "A", "1.jpg"),
        ("S-2", "Shirt", "A", ""),  # Image is not inherited
        ("C-1", "Cap", "", ""),
        ("C-2", "Cap", "B", ""),  # its own Vendor stays
        ("S-3", "", "", ""),  # not consecutive: a new group without a title
    ]
    everything = _fields(
        _read(assemble(ListSource(rows), MappingSettings(group_by="Handle"), where=None, joins=[]))
    )
    assert everything[1]["Image"] == "1.jpg", "without inherit every column is inherited"


def test_inherit_needs_group_by() -> None:
    with pytest.raises(ValueError, match="inherit needs group_by"):
        MappingSettings(inherit=["Title"])


# --- each ----------------------------------------------------------------------------------


def test_each_makes_every_element_a_record_with_its_parent_and_a_label() -> None:
    rows = _raw(
        {"title": "Shirt", "variants": [{"sku": "S"}, {"sku": "M"}]},
        {"title": "Gift card", "variants": []},
        {"title": "Cap", "variants": [{"sku": "C"}, "oops"]},
        {"title": "Mug", "variants": {"sku": "MUG"}},  # one object: one item
    )
    source = assemble(ListSource(rows), MappingSettings(each="variants"), where=None, joins=[])
    out = _read(source)
    assert [r.label for r in out if isinstance(r, RawRecord)] == [
        "record 1 (line 2), item 1",
        "record 1 (line 2), item 2",
        "record 3 (line 4), item 1",
        "record 4 (line 5), item 1",
    ]
    first = out[0]
    assert isinstance(first, RawRecord)
    assert first.fields["sku"] == "S" and first.fields["parent"]["title"] == "Shirt"
    (bad,) = [r for r in out if isinstance(r, BadRecord)]
    assert (
        bad.reason
        == "products.jsonl record 3 (line 4), item 2: an item must be an object, not 'oops'"
    )
    assert isinstance(source, Pieces) and source.notes() == [
        "1 record(s) had no item at [mapping] each"
    ]


def test_a_mapping_problem_of_an_item_names_record_and_item() -> None:
    rows = _raw({"title": "Shirt", "variants": [{"sku": "S", "price": "x"}]})
    source = assemble(ListSource(rows), MappingSettings(each="variants"), where=None, joins=[])
    mapping = MappingSettings(
        each="variants",
        fields={"sku": {"path": "sku"}, "price": {"path": "price", "type": "decimal"}},
    )
    (record,) = _read(source)
    assert isinstance(record, RawRecord)
    result = Mapper(mapping, source_name="products.jsonl").map(record)
    assert isinstance(result, BadRecord) and result.key == "S"
    assert result.reason == (
        "products.jsonl record 1 (line 2), item 1, path 'price': 'x' is not a decimal number"
    )


# --- where -----------------------------------------------------------------------------------


def test_where_skips_and_counts_jmespath_truth() -> None:
    rows = _raw(
        {"sku": "A", "enabled": True},
        {"sku": "B", "enabled": False},
        {"sku": "C", "enabled": 0},  # 0 is true in JMESPath
        {"sku": "D", "enabled": None},  # null: false
        {"sku": "E", "enabled": ""},
    )
    source = assemble(ListSource(rows), MappingSettings(), where="enabled", joins=[])
    assert [f["sku"] for f in _fields(_read(source))] == ["A", "C"]
    assert isinstance(source, Pieces) and source.skipped == 3
    assert source.notes() == ["3 record(s) skipped: [source] where = enabled"]


def test_a_record_lacking_a_field_where_reads_is_held_not_skipped() -> None:
    """The column `where` reads was renamed in the export: nothing may look filtered out
    (so gone); each record is refused with its key, so its product keeps its state."""
    rows = _raw(
        {"sku": "A", "Status": "active", "parent": {"status": "active"}},
        {"sku": "B", "status": "draft", "parent": {"status": "active"}},
        {"sku": "C", "status": "active", "parent": {}},
    )
    where = "status == 'active' && parent.status == 'active'"
    source = assemble(ListSource(rows), MappingSettings(), where=where, joins=[])
    use_keys(source, lambda record: str(record.fields["sku"]))
    out = _read(source)
    assert [(type(r).__name__, getattr(r, "key", None)) for r in out] == [
        ("BadRecord", "A"),
        ("BadRecord", "C"),
    ], "B is filtered out (its status is there); A and C are held"
    assert isinstance(out[0], BadRecord) and out[0].reason == (
        "products.jsonl line 2: [source] where: reads 'status', which this record lacks "
        "(a renamed or dropped column?); held, not skipped"
    )
    assert isinstance(out[1], BadRecord) and "reads 'parent.status'" in out[1].reason
    assert isinstance(source, Pieces) and source.skipped == 1
    assert source.notes() == [
        "1 record(s) skipped: [source] where = status == 'active' && parent.status == 'active'",
        "1 record(s) held: [source] where reads 'status', which they lack "
        "(a renamed or dropped column?)",
        "1 record(s) held: [source] where reads 'parent.status', which they lack "
        "(a renamed or dropped column?)",
    ]


def test_a_where_field_no_record_has_fails_the_pull_naming_file_and_field() -> None:
    rows = _raw({"sku": "A", "State": "active"}, {"sku": "B", "State": "draft"})
    source = assemble(ListSource(rows), MappingSettings(), where="Status == 'active'", joins=[])
    out: list[RawRecord | BadRecord] = []
    with pytest.raises(SourceError) as failed:
        out.extend(source.records())
    assert str(failed.value) == (
        "products.jsonl: [source] where reads 'Status', which none of the 2 record(s) it "
        "tested has (a renamed or dropped column?); nothing was synced: fix the export or the "
        "filter"
    )
    assert len(out) == 2 and all(isinstance(r, BadRecord) for r in out), "raised at the end"


def test_where_may_give_a_missing_field_a_fallback_and_reads_under_a_null_as_null() -> None:
    """`pim` is no join here: a field under its null reads null (through a join it is
    unknown: test_join_completeness.py)."""
    rows = _raw({"sku": "A"}, {"sku": "B", "status": "active"}, {"sku": "C", "pim": None})
    fallback = assemble(
        ListSource(rows), MappingSettings(), where="(status || 'draft') == 'active'", joins=[]
    )
    assert [f["sku"] for f in _fields(_read(fallback))] == ["B"]
    partner = assemble(ListSource(rows[2:]), MappingSettings(), where="pim.enabled", joins=[])
    assert _read(partner) == [] and isinstance(partner, Pieces) and partner.skipped == 1


def test_a_where_that_fails_on_a_record_rejects_that_record_only() -> None:
    rows = _raw({"sku": "A", "n": [1]}, {"sku": "B", "n": 5})
    source = assemble(ListSource(rows), MappingSettings(), where="length(n) > `0`", joins=[])
    use_keys(source, lambda record: str(record.fields["sku"]))
    out = _read(source)
    assert isinstance(out[0], RawRecord)
    assert isinstance(out[1], BadRecord) and "[source] where" in out[1].reason
    assert out[1].key == "B", "its product is named, so it is held, not gone"


# --- joins -----------------------------------------------------------------------------------


def _pim(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _join(path: Path) -> JoinSettings:
    return JoinSettings.model_validate(
        {"name": "pim", "type": "jsonl", "path": str(path), "key": "sku", "on": "SKU"}
    )


def test_join_adds_the_partner_first_record_wins_and_a_missing_partner_is_null(
    tmp_path: Path,
) -> None:
    pim = tmp_path / "pim.jsonl"
    _pim(pim, [{"sku": "A", "name": "First"}, {"sku": "A", "name": "Second"}])
    (join,) = open_joins([_join(pim)], tmp_path)
    rows = _raw({"SKU": "A"}, {"SKU": "B"}, {"SKU": 7}, {"SKU": None})
    source = assemble(ListSource(rows), MappingSettings(), where=None, joins=[join])
    assert [f["pim"] for f in _fields(_read(source))] == [
        {"sku": "A", "name": "First"},
        None,
        None,
        None,
    ], "every record of the join was usable: a missing partner is null"
    assert isinstance(source, Pieces)
    assert source.notes() == [
        "join 'pim': 1 record(s) repeat a key (e.g. 'A' on lines 1 and 2); "
        "the first record of a key wins",
    ]
    join.close()

    # A join record without a key may be B's or 7's partner: those two are held, not sent
    # without it; a record without an `on` value has no partner to miss.
    _pim(pim, [{"sku": "A", "name": "First"}, {"sku": "A", "name": "Second"}, {"name": "?"}])
    (join,) = open_joins([_join(pim)], tmp_path)
    source = assemble(ListSource(rows), MappingSettings(), where=None, joins=[join])
    use_keys(source, lambda record: str(record.fields["SKU"]))
    out = _read(source)
    assert [f["pim"] for f in _fields(out)] == [{"sku": "A", "name": "First"}, None]
    held = [r for r in out if isinstance(r, BadRecord)]
    assert [(r.key, r.line, r.stage) for r in held] == [("B", 3, "map"), ("7", 4, "map")]
    assert held[0].reason == (
        "products.jsonl line 3: its partner in join 'pim' (key 'B') may be in pim.jsonl:3, "
        "which could not be read: no key at 'sku'"
    )
    assert isinstance(source, Pieces)
    assert source.notes() == [
        "join 'pim': 1 record(s) repeat a key (e.g. 'A' on lines 1 and 2); "
        "the first record of a key wins",
        "join 'pim': 1 record(s) could not be used (first: line 3: no key at 'sku')",
        "join 'pim' (pim.jsonl): 2 record(s) held: their partner is missing and may be one "
        "of the records the join could not read",
    ]
    join.close()


def test_any_unreadable_join_record_holds_every_product_whose_partner_is_missing(
    tmp_path: Path,
) -> None:
    """A record the join could not read makes the join incomplete: a missing partner is
    then unknown, not null, even when the broken record's own key could be read (C's),
    since a reader that lost one record may have lost others (D's)."""
    pim = tmp_path / "pim.csv"
    pim.write_bytes(b"sku,name\nA,Drill\nC,Caf\xe9 mug\n")  # C's name: not UTF-8
    spec = JoinSettings.model_validate(  # declared UTF-8 ("auto" would read cp1252 here)
        {"name": "pim", "type": "csv", "path": str(pim), "key": "sku", "on": "SKU",
         "encoding": "utf-8"}
    )  # fmt: skip
    (join,) = open_joins([spec], tmp_path)
    rows = _raw({"SKU": "A"}, {"SKU": "C"}, {"SKU": "D"})
    source = assemble(ListSource(rows), MappingSettings(), where=None, joins=[join])
    use_keys(source, lambda record: str(record.fields["SKU"]))
    out = _read(source)
    assert [(type(r).__name__, getattr(r, "key", None)) for r in out] == [
        ("RawRecord", None),
        ("BadRecord", "C"),
        ("BadRecord", "D"),
    ], "A has its partner; C's is unreadable and D's may be: both held"
    assert isinstance(out[1], BadRecord) and out[1].reason == (
        "products.jsonl line 3: its partner in join 'pim' (key 'C') is pim.csv:3, which could "
        "not be read: pim.csv line 3, column 'name': invalid utf-8 (byte 0xe9)"
    )
    assert isinstance(out[2], BadRecord) and out[2].reason == (
        "products.jsonl line 4: its partner in join 'pim' (key 'D') may be in pim.csv:3, which "
        "could not be read: pim.csv line 3, column 'name': invalid utf-8 (byte 0xe9)"
    )
    assert isinstance(source, Pieces) and not source.ledger.may_default("pim")
    join.close()


def test_a_join_where_lacking_its_field_makes_the_record_unusable(tmp_path: Path) -> None:
    """The PIM export lost its `enabled` column: its records are not "disabled" (the
    partners missing, the products sent without the PIM's fields); they are unusable, so
    the products whose partner they are are held."""
    pim = tmp_path / "pim.jsonl"
    _pim(pim, [{"sku": "A", "Enabled": True, "name": "Drill"}, {"sku": "B", "enabled": False}])
    spec = JoinSettings.model_validate(
        {"name": "pim", "type": "jsonl", "path": str(pim), "key": "sku", "on": "SKU",
         "where": "enabled"}
    )  # fmt: skip
    (join,) = open_joins([spec], tmp_path)
    rows = _raw({"SKU": "A"}, {"SKU": "B"})
    source = assemble(ListSource(rows), MappingSettings(), where=None, joins=[join])
    use_keys(source, lambda record: str(record.fields["SKU"]))
    out = _read(source)
    assert isinstance(out[0], BadRecord) and out[0].key == "A"
    assert "its partner in join 'pim' (key 'A') is pim.jsonl:1" in out[0].reason
    assert "reads 'enabled', which this record lacks" in out[0].reason
    assert isinstance(out[1], BadRecord) and out[1].key == "B", "the join is not complete"
    join.close()

    _pim(pim, [{"sku": "A", "enabled": True, "name": "Drill"}, {"sku": "B", "enabled": False}])
    (join,) = open_joins([spec], tmp_path)
    source = assemble(ListSource(rows), MappingSettings(), where=None, joins=[join])
    out = _read(source)
    assert [r.fields["pim"] for r in out if isinstance(r, RawRecord)] == [
        {"sku": "A", "enabled": True, "name": "Drill"},
        None,
    ], "complete again: B, left out by the join's filter, has no partner"
    join.close()


def test_an_unchanged_join_source_is_not_opened_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pim = tmp_path / "pim.jsonl"
    _pim(pim, [{"sku": "A", "name": "Drill"}])
    opened: list[str] = []
    real = open_source

    def counting(settings: Any, **options: Any) -> Source:
        opened.append(str(settings.path))
        return real(settings, **options)

    monkeypatch.setattr(joins_module, "open_source", counting)
    monkeypatch.setattr(change_tokens, "RACY_S", 0.0)  # files seconds old; racy: see below
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    for _ in range(3):
        for join in open_joins([_join(pim)], scratch):
            join.close()
    assert opened == [str(pim)], "read once; twice more its index was reused"

    _pim(pim, [{"sku": "A", "name": "Drill 18V"}])  # a change: a new mtime (or size)
    os.utime(pim, ns=(pim.stat().st_atime_ns, pim.stat().st_mtime_ns + 1_000_000))
    (join,) = open_joins([_join(pim)], scratch)
    assert len(opened) == 2 and join.read
    assert join.index.get_many(["A"]) == {"A": '{"name":"Drill 18V","sku":"A"}'}
    join.close()
    assert oct((scratch / "join-pim.sqlite").stat().st_mode & 0o777) == "0o600"

    # Changed in place, same size, its old mtime put back (`cp -p`, a restore): the
    # ctime moved, so it is read again.
    before = pim.stat()
    _pim(pim, [{"sku": "A", "name": "DRILL 18V"}])
    os.utime(pim, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (pim.stat().st_size, pim.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    (join,) = open_joins([_join(pim)], scratch)
    assert len(opened) == 3 and join.index.get_many(["A"]) == {
        "A": '{"name":"DRILL 18V","sku":"A"}'
    }
    join.close()

    # A file changed within the racy window has no signature: read every time until it
    # settles (a second write in the same timestamp tick would look like no change).
    monkeypatch.setattr(change_tokens, "RACY_S", 3600.0)
    for _ in range(2):
        for join in open_joins([_join(pim)], scratch):
            join.close()
    assert len(opened) == 5


def test_a_readonly_run_builds_a_stale_join_elsewhere(tmp_path: Path) -> None:
    pim = tmp_path / "pim.jsonl"
    _pim(pim, [{"sku": "A"}])
    scratch, elsewhere = tmp_path / "scratch", tmp_path / "tmp"
    scratch.mkdir()
    elsewhere.mkdir()
    (join,) = open_joins([_join(pim)], scratch, build_in=elsewhere)
    join.close()
    assert list(scratch.iterdir()) == [] and (elsewhere / "join-pim.sqlite").exists()


# --- whole runs: unnested records are recognised on a no-op run --------------------------


def _settings(tmp_path: Path, **mapping: Any) -> Settings:
    return settings_from_dict(
        {
            "api": {"base_url": "http://127.0.0.1:9", "api_key": "k-test"},
            "source": {"type": "jsonl", "path": "products.jsonl"},
            "mapping": {"key": "sku", **mapping},
            "state": {"path": "state.db"},
        },
        base_dir=tmp_path,
    )


def test_a_second_run_over_nested_variants_maps_nothing_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    products = [
        {"title": "Shirt", "variants": [{"sku": "S", "price": "9.50"}, {"sku": "M"}]},
        {"title": "Cap", "variants": [{"sku": "C", "price": "5"}]},
    ]
    _pim(tmp_path / "products.jsonl", products)
    fields = {"sku": {"path": "sku"}, "name": {"path": "parent.title"}, "price": {"path": "price"}}
    settings = _settings(tmp_path, each="variants", fields=fields)
    remote = FakeRemote()
    first = run_once(settings, adapters=Adapters(client=remote))
    assert first.created == 3 and first.exit_code == 0
    mapped: list[RawRecord] = []
    real = Mapper.map

    def counting(self: Mapper, record: RawRecord) -> Any:
        mapped.append(record)
        return real(self, record)

    monkeypatch.setattr(Mapper, "map", counting)
    again = run_once(settings, adapters=Adapters(client=remote))
    assert (again.unchanged, again.created, again.updated) == (3, 0, 0)
    assert mapped == [], "recognised by fingerprint: not mapped again"
    products[0]["title"] = "Linen shirt"  # the parent changed: both its variants re-map
    _pim(tmp_path / "products.jsonl", products)
    third = run_once(settings, adapters=Adapters(client=remote))
    assert (third.updated, third.unchanged) == (2, 1)


def test_a_filtered_product_is_treated_as_gone(tmp_path: Path) -> None:
    rows = [{"sku": "A", "name": "a", "enabled": True}, {"sku": "B", "name": "b", "enabled": True}]
    _pim(tmp_path / "products.jsonl", rows)
    settings = settings_from_dict(
        {
            "api": {"base_url": "http://127.0.0.1:9", "api_key": "k-test"},
            "source": {"type": "jsonl", "path": "products.jsonl", "where": "enabled"},
            "mapping": {"key": "sku"},
            "state": {"path": "state.db"},
            "safety": {"max_gone_ratio": 1},
        },
        base_dir=tmp_path,
    )
    remote = FakeRemote()
    assert run_once(settings, adapters=Adapters(client=remote)).created == 2
    rows[1]["enabled"] = False
    _pim(tmp_path / "products.jsonl", rows)
    summary = run_once(settings, adapters=Adapters(client=remote))
    assert (summary.gone, summary.skipped, summary.rejected, summary.exit_code) == (1, 1, 0, 0)


def test_the_human_summary_shows_skipped_records_and_joins() -> None:
    out = io.StringIO()
    print_summary(RunSummary(created=2, skipped=23, joins={"pim": "reused"}), stream=out)
    lines = [line.split() for line in out.getvalue().splitlines()]
    assert ["skipped", "23"] in lines and ["joins", "pim", "reused"] in lines


def test_join_names_must_differ(tmp_path: Path) -> None:
    join = {"name": "pim", "type": "jsonl", "path": "p.jsonl", "key": "sku", "on": "SKU"}
    data = {
        "api": {"base_url": "http://127.0.0.1:9", "api_key": "k-test"},
        "source": {"type": "jsonl", "path": "products.jsonl"},
        "state": {"path": "state.db"},
        "join": [join, join],
    }
    with pytest.raises(ConfigError, match=r"at 'join.1.name': another \[\[join\]\] is named 'pim'"):
        settings_from_dict(data, base_dir=tmp_path)


def test_a_join_config_problem_is_named_as_the_user_wrote_it(tmp_path: Path) -> None:
    join = {"name": "en", "type": "xml", "path": "p.xml", "recrd": "product", "key": "@id"}
    data = {
        "api": {"base_url": "http://127.0.0.1:9", "api_key": "k-test"},
        "source": {"type": "jsonl", "path": "products.jsonl"},
        "state": {"path": "state.db"},
        "join": [join],
    }
    with pytest.raises(ConfigError) as raised:
        settings_from_dict(data, base_dir=tmp_path)
    text = str(raised.value)
    assert "at 'join.0.on': required" in text
    assert "at 'join.0.record': required" in text
    assert "at 'join.0.recrd': unknown key; did you mean 'record'?" in text
    assert ".source." not in text


def test_group_by_a_path_groups_woocommerce_variations_with_their_product() -> None:
    rows = _raw(
        {"ID": "10", "Parent": "", "SKU": "H", "Description": "<p>Warm</p>"},
        {"ID": "11", "Parent": "id:10", "SKU": "H-B", "Description": ""},
        {"ID": "13", "Parent": "", "SKU": "B", "Description": ""},
    )
    mapping = MappingSettings(group_by="Parent || concat('id:', ID)", inherit=["Description"])
    out = _fields(_read(assemble(ListSource(rows), mapping, where=None, joins=[])))
    assert [r["Description"] for r in out] == ["<p>Warm</p>", "<p>Warm</p>", ""]
