"""Every pull reports its verdict to the run's ledger, and gone is decided only from it.

``reported`` wraps the records of the primary pull (and of ``item_url`` fetches); the
planner's gone decisions ask ``Ledger.may_mark_gone`` and nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from skuferry import canonical
from skuferry.completeness import Ledger, Reader
from skuferry.config.schema import MappingSettings
from skuferry.errors import SourceError
from skuferry.models import BadRecord, Kind, MirrorRow, Product, RawRecord, State
from skuferry.sources.base import Source
from skuferry.sync.map.mapper import Mapper
from skuferry.sync.plan.planner import Tally, plan
from skuferry.sync.read.incremental import Pull
from skuferry.sync.read.named import NamedPull
from skuferry.sync.read.pulled import reported

NOW = datetime(2026, 11, 26, tzinfo=UTC)
FULL = Pull(full=True, started_at=NOW)
INCREMENTAL = Pull(full=False, started_at=NOW, since=NOW)


def _product(key: str) -> Product:
    payload = {"sku": key}
    return Product(key, payload, canonical.digest(payload), line=2)


def _row(key: str) -> MirrorRow:
    return MirrorRow(key, State.SYNCED, digest=_product(key).digest, remote_id=f"r-{key}")


MIRROR = {"A": _row("A"), "B": _row("B")}


def _gone(ledger: Ledger, records: Iterable[Any] = (), tally: Tally | None = None) -> list[str]:
    return [
        a.key or ""
        for a in plan([_product("A"), *records], MIRROR, walked=True, ledger=ledger, tally=tally)
        if a.kind is Kind.GONE
    ]


def test_a_full_pull_read_to_its_end_is_complete() -> None:
    ledger = Ledger()
    assert list(reported(iter([1, 2]), ledger, "c.csv", pull=FULL)) == [1, 2]
    assert [str(v) for v in ledger.verdicts()] == ["source c.csv: complete"]
    assert ledger.may_mark_gone()
    assert _gone(ledger) == ["B"]


def test_a_pull_that_fails_is_not_complete_and_fails() -> None:
    def torn() -> Iterator[int]:
        yield 1
        raise SourceError("c.csv line 3: the file ends inside this line")

    ledger = Ledger()
    with pytest.raises(SourceError):
        list(reported(torn(), ledger, "c.csv", pull=FULL))
    assert ledger.reasons() == [
        "source c.csv: not complete: c.csv line 3: the file ends inside this line"
    ]
    assert not ledger.may_mark_gone()
    assert _gone(ledger) == []


def test_an_incremental_pull_proves_no_absence() -> None:
    ledger = Ledger()
    list(reported(iter([1]), ledger, "api", pull=INCREMENTAL))
    assert not ledger.may_mark_gone()
    assert _gone(ledger) == []


def test_rows_whose_product_is_unknown_make_the_pull_incomplete() -> None:
    ledger = Ledger()
    list(reported(iter([]), ledger, "c.csv", pull=FULL))
    tally = Tally()
    assert _gone(ledger, [BadRecord(3, "unreadable")], tally) == []
    assert tally.gone_skipped and tally.unsure == 1
    assert ledger.reasons() == [
        "rows rejected: not complete: 1 rejected row(s) whose product cannot be told for sure"
    ]


class _Items(Source):
    """A source that fetches single items by key (``[source] item_url``)."""

    by_key = True

    def __init__(self, fail: bool) -> None:
        self.fail = fail

    def records(self) -> Iterator[RawRecord | BadRecord]:  # pragma: no cover - by key only
        raise AssertionError("a named pull by key reads no pages")

    def describe(self) -> str:
        return "https://pim.example/api"

    def fetch_items(self, keys: Iterable[str]) -> Iterator[RawRecord | BadRecord]:
        for key in keys:
            if self.fail:
                raise SourceError(f"item {key!r} failed after 3 attempt(s)")
            yield RawRecord(1, {"sku": key})


@pytest.mark.parametrize("fail", [False, True])
def test_item_url_fetches_report_their_verdict(fail: bool) -> None:
    mapper = Mapper(MappingSettings(key="sku", fields={"sku": "sku"}), source_name="pim")
    named = NamedPull(["A"], mapper)
    source = _Items(fail)
    ledger = Ledger()
    stream = reported(named.records(source), ledger, source.describe(), pull=None, named=named)
    if fail:
        with pytest.raises(SourceError):
            list(stream)
    else:
        assert len(list(stream)) == 1
    items = [v for v in ledger.verdicts() if v.reader is Reader.ITEMS]
    assert [v.complete for v in items] == [not fail]
    assert not ledger.may_mark_gone()  # a named pull never proves absence
