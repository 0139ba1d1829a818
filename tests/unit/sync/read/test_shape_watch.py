"""The read stage's shape watch (``sync.read.shape``): what it learns past its sample,
where it reports, and the keys a pull of some records only would create."""

from __future__ import annotations

from pathlib import Path

import pytest

from skuferry import errors
from skuferry.completeness import Ledger, Reader
from skuferry.config.load import settings_from_dict
from skuferry.config.schema import MappingSettings
from skuferry.models import RawRecord, RunOptions
from skuferry.shape import SAMPLE, FieldShape, Shape
from skuferry.sync.engine import Adapters, run_once
from skuferry.sync.map.mapper import Mapper
from skuferry.sync.read.shape import ShapeWatch
from tests.fakes import FakeRemote, ListSource

MAPPING = MappingSettings.model_validate(
    {"key": "sku", "fields": {"sku": {"path": "id"}, "price": {"path": "pricing.amount"}}}
)


def _learned() -> Shape:
    fields = (
        FieldShape("sku", "path", "id", 5, 5),
        FieldShape("price", "path", "pricing.amount", 5, 5),
    )
    return Shape("api", None, fields, records=5, whole=True)


def _watch(records: list[RawRecord], ledger: Ledger) -> ShapeWatch:
    watch = ShapeWatch(ListSource([]), Mapper(MAPPING), _learned(), ledger)
    ledger.complete(Reader.SOURCE, "api")
    assert list(watch.watched(records)) == records
    return watch


def test_a_field_given_only_after_the_sample_is_still_found() -> None:
    records = [RawRecord(i, {"id": f"A-{i}"}) for i in range(SAMPLE + 50)]
    records.append(RawRecord(0, {"id": "LAST", "pricing": {"amount": "1.00"}}))
    ledger = Ledger()
    watch = _watch(records, ledger)
    assert watch.verdict is not None and watch.verdict.holds
    assert ledger.shape_holds() and ledger.may_mark_gone()
    seen = watch.seen
    assert seen is not None and seen.field("price") == FieldShape(
        "price", "path", "pricing.amount", 1, SAMPLE + 51, True
    )


def test_a_field_given_by_no_record_is_reported_to_the_ledger_and_refused() -> None:
    records = [RawRecord(i, {"id": f"A-{i}", "price": "1"}) for i in range(SAMPLE + 5)]
    ledger = Ledger()
    with pytest.raises(errors.ShapeChanged, match=r"field 'price' reads path 'pricing\.amount'"):
        _watch(records, ledger)
    assert not ledger.shape_holds() and not ledger.may_mark_gone()
    (verdict,) = [v for v in ledger.verdicts() if v.reader is Reader.SHAPE]
    assert "pricing.amount" in verdict.reason


def test_a_named_pull_creates_no_key_equal_to_a_known_one(tmp_path: Path) -> None:
    """``sync --only 1`` while the state knows ``00001``: no copy, whatever the pull."""
    settings = settings_from_dict(
        {
            "api": {"base_url": "http://127.0.0.1:9", "api_key": "k"},
            "source": {"type": "csv", "path": str(tmp_path / "x.csv")},
            "mapping": {"key": "sku"},
            "state": {"path": str(tmp_path / "state.db")},
        }
    )
    remote = FakeRemote()
    rows = [{"sku": f"{i:05d}", "name": f"n{i}"} for i in range(1, 4)]
    run_once(settings, adapters=Adapters(source=ListSource(rows), client=remote))
    stripped = [{"sku": "1", "name": "n1"}]
    with pytest.raises(errors.ShapeChanged, match=r"'00001' -> '1'"):
        run_once(
            settings,
            RunOptions(only=("1",), force=True),
            adapters=Adapters(source=ListSource(stripped), client=remote),
        )
    assert sorted(remote.keys()) == ["00001", "00002", "00003"]
