"""The one forwarding of an incremental source through a wrapper (``IncrementalWrapper``):
``skip_if_empty`` and products in pieces both keep the capability the same way, pinned here
for each (issue 40 item 24: it was written twice)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from skuferry.config.schema import MappingSettings
from skuferry.models import BadRecord, RawRecord
from skuferry.sources.base import IncrementalSource, IncrementalWrapper, Source
from skuferry.sources.skip import skip_empty_rows
from skuferry.sync.read.pieces import assemble

SINCE = datetime(2026, 1, 1, tzinfo=UTC)


class Changes(IncrementalSource):
    full_every = 7
    overlap_s = 60.0
    since_format = "epoch"

    def __init__(self) -> None:
        self.asked: list[datetime] = []

    @property
    def incremental(self) -> bool:
        return True

    @property
    def change_time_field(self) -> str | None:
        return "updated"

    def change_time(self, fields: Any) -> Any:
        return fields.get("updated")

    def records(self) -> Iterator[RawRecord | BadRecord]:
        yield RawRecord(1, {"sku": "A", "updated": 1})

    def records_since(self, since: datetime) -> Iterator[RawRecord | BadRecord]:
        self.asked.append(since)
        yield RawRecord(1, {"sku": "B", "updated": 5})
        yield RawRecord(2, {"sku": "", "updated": 6})

    def describe(self) -> str:
        return "changes"


WRAPPERS: dict[str, Callable[[Source], Source]] = {
    "skip_if_empty": lambda inner: skip_empty_rows(inner, ["sku"]),
    "pieces (where)": lambda inner: assemble(
        inner,
        MappingSettings.model_validate({"key": "sku", "fields": {"sku": "sku"}}),
        where="sku != ''",
        joins=[],
    ),
}


@pytest.mark.parametrize("name", WRAPPERS)
def test_a_wrapper_keeps_the_window_and_passes_each_pull_through_itself(name: str) -> None:
    inner = Changes()
    wrapped = WRAPPERS[name](inner)
    assert isinstance(wrapped, IncrementalWrapper), "the one forwarding, not a copy of it"
    assert (wrapped.incremental, wrapped.full_every, wrapped.overlap_s) == (True, 7, 60.0)
    assert (wrapped.since_format, wrapped.change_time_field) == ("epoch", "updated")
    since = [r.fields["sku"] for r in wrapped.records_since(SINCE) if isinstance(r, RawRecord)]
    assert since == ["B"] and inner.asked == [SINCE], "the wrapper's change applies"
    seen: list[tuple[Any, int]] = []
    pulled = list(wrapped.pull(SINCE, lambda at, line: seen.append((at, line))))
    assert [r.fields["sku"] for r in pulled if isinstance(r, RawRecord)] == ["B"]
    assert seen == [(5, 1), (6, 2)], "a dropped record was read too: its change time counts"
    assert [r.fields["sku"] for r in wrapped.pull(None) if isinstance(r, RawRecord)] == ["A"]
