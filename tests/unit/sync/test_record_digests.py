"""Unchanged source rows are recognised by their record digest and never mapped again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from skuferry.config.load import settings_from_dict
from skuferry.config.schema import FieldSpec, MappingSettings, Settings
from skuferry.models import (
    BadRecord,
    Kind,
    MirrorRow,
    Product,
    RawRecord,
    RunOptions,
    State,
    was_mapped,
)
from skuferry.state.mirror import Mirror
from skuferry.sync.engine import Adapters, run_once
from skuferry.sync.map.mapper import Mapper
from skuferry.sync.plan.planner import plan
from tests.fakes import FakeRemote, ListSource

MAPPING = MappingSettings(
    key="sku", fields={"sku": "SKU", "price": FieldSpec(column="Price", type="decimal")}
)


def rec(line: int, sku: str, price: str, **extra: str) -> RawRecord:
    return RawRecord(line, {"SKU": sku, "Price": price, **extra})


class CountingMapper(Mapper):
    def __init__(self, settings: MappingSettings) -> None:
        super().__init__(settings)
        self.mapped = 0

    def map(self, record: RawRecord) -> Product | BadRecord:
        self.mapped += 1
        return super().map(record)


def test_fingerprint_covers_the_mapped_columns_and_the_mapping_only() -> None:
    mapper = Mapper(MAPPING)
    base = mapper.record_digest(rec(2, "A", "1.50"))
    assert mapper.record_digest(rec(9, "A", "1.50")) == base, "the line does not count"
    assert mapper.record_digest(rec(2, "A", "1.50", Unmapped="x")) == base
    assert mapper.record_digest(rec(2, "A", "1.5")) != base
    assert mapper.record_digest(RawRecord(2, {"SKU": "A"})) != base, "an absent column counts"
    other = MappingSettings(key="sku", fields={"sku": "SKU", "price": "Price"})
    assert Mapper(other).record_digest(rec(2, "A", "1.50")) != base, "the mapping counts"
    product = mapper.map(rec(2, "A", "1.50"))
    assert isinstance(product, Product) and product.record_digest == base


def test_a_synced_row_with_the_same_fingerprint_is_unchanged_without_mapping() -> None:
    mapper = CountingMapper(MAPPING)
    same, changed = rec(2, "A", "1.50"), rec(3, "B", "2.00")
    a = mapper.map(same)
    b = mapper.map(rec(3, "B", "1.00"))
    assert isinstance(a, Product) and isinstance(b, Product)
    mirror = {
        "A": MirrorRow("A", State.SYNCED, a.digest, "r1", record_digest=a.record_digest),
        "B": MirrorRow("B", State.SYNCED, b.digest, "r2", record_digest=b.record_digest),
    }
    mapper.mapped = 0
    actions = {x.key: x for x in plan([same, changed], mirror, walked=True, mapper=mapper)}
    assert mapper.mapped == 1, "only the changed row was mapped"
    assert actions["A"].kind is Kind.UNCHANGED
    assert actions["A"].product is not None and not was_mapped(actions["A"].product)
    assert actions["B"].kind is Kind.UPDATE and actions["B"].remote_id == "r2"


@pytest.mark.parametrize(
    "row",
    [
        MirrorRow("A", State.FAILED, "d", "r1", record_digest="fp"),
        MirrorRow("A", State.SYNCED, "d", "r1", intent_digest="d", record_digest="fp"),
        MirrorRow("A", State.SYNCED, "d", "r1", record_digest=None),
    ],
    ids=["not-synced", "open-intent", "no-fingerprint"],
)
def test_rows_in_doubt_are_always_mapped(row: MirrorRow) -> None:
    mapper = CountingMapper(MAPPING)
    record = rec(2, "A", "1.50")
    row = MirrorRow(
        row.key,
        row.state,
        row.digest,
        row.remote_id,
        row.intent_digest,
        record_digest=mapper.record_digest(record) if row.record_digest else None,
    )
    list(plan([record], {"A": row}, walked=True, mapper=mapper))
    assert mapper.mapped == 1


def _settings(tmp_path: Path, fields: dict[str, Any]) -> Settings:
    return settings_from_dict(
        {
            "api": {"base_url": "http://127.0.0.1:9", "api_key": "k"},
            "source": {"type": "csv", "path": str(tmp_path / "x.csv")},
            "mapping": {"key": "sku", "fields": fields},
            "state": {"path": str(tmp_path / "state.db")},
        }
    )


def _count_maps(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    calls = {"n": 0}
    original = Mapper.map

    def counting(self: Mapper, record: RawRecord) -> Product | BadRecord:
        calls["n"] += 1
        return original(self, record)

    monkeypatch.setattr(Mapper, "map", counting)
    return calls


def test_a_no_op_run_maps_nothing_and_a_mapping_change_maps_everything_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fields = {"sku": "SKU", "name": "Name", "price": {"column": "Price", "type": "decimal"}}
    rows: list[dict[str, Any] | str] = [
        {"SKU": f"S{i}", "Name": "n", "Price": "1.00", "Note": "x"} for i in range(30)
    ]
    remote = FakeRemote()
    settings = _settings(tmp_path, fields)
    calls = _count_maps(monkeypatch)

    def sync(s: Settings) -> Any:
        calls["n"] = 0
        forced = RunOptions(force=True)
        return run_once(s, forced, adapters=Adapters(source=ListSource(rows), client=remote))

    assert sync(settings).created == 30
    second = sync(settings)
    assert (second.unchanged, calls["n"]) == (30, 0), "nothing mapped in a no-op run"

    rows[3] = {"SKU": "S3", "Name": "n", "Price": "9.00", "Note": "x"}
    rows[4] = {"SKU": "S4", "Name": "n", "Price": "1.00", "Note": "changed, but not mapped"}
    third = sync(settings)
    assert (third.updated, third.unchanged) == (1, 29)
    assert calls["n"] == 1, "only S3 was mapped: the mapping does not read Note"
    assert sync(settings).unchanged == 30 and calls["n"] == 0, "S3's update kept its fingerprint"

    renamed = _settings(tmp_path, {**fields, "note": "Note"})
    fourth = sync(renamed)
    assert calls["n"] == 30, "a changed mapping maps every row again"
    assert fourth.updated == 30, "and sends what the new mapping adds"


def test_an_upgraded_mirror_without_fingerprints_learns_them_in_one_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _settings(tmp_path, {"sku": "SKU", "name": "Name"})
    rows: list[dict[str, Any] | str] = [{"SKU": f"S{i}", "Name": "n"} for i in range(10)]
    remote = FakeRemote()
    run_once(settings, adapters=Adapters(source=ListSource(rows), client=remote))
    mirror = Mirror(settings.state.path)
    mirror.db.conn.execute(
        "UPDATE products SET source_fingerprint = NULL"
    )  # as migration 3 left it
    mirror.close()
    calls = _count_maps(monkeypatch)
    first = run_once(settings, adapters=Adapters(source=ListSource(rows), client=remote))
    assert (first.unchanged, calls["n"]) == (10, 10)
    calls["n"] = 0
    again = run_once(settings, adapters=Adapters(source=ListSource(rows), client=remote))
    assert (again.unchanged, calls["n"]) == (10, 0)
    assert remote.requests["write"] == 10, "learning fingerprints sends nothing"
