"""The contract every source adapter passes (subclass ``SourceContract`` in a test module).

A subclass implements the ``make_*`` hooks for its adapter; the tests here are
shared, so csv, jsonl, http and sql all promise the same behaviour (a feed's content
identity, ``feed_digest``, included: known after a whole reading, never after a part).
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from skuferry.errors import SourceError
from skuferry.models import BadRecord, RawRecord
from skuferry.sources.base import Source

GOOD = [
    {"sku": "A-1", "name": "Anvil", "price": "19.90"},
    {"sku": "B-2", "name": "Bucket", "price": "4.50"},
    {"sku": "C-3", "name": "Crowbar ü", "price": "12.00"},
]


class SourceContract:
    """Hooks to implement; each returns a ready ``Source``."""

    def make_source(self, tmp_path: Path, records: list[dict[str, Any]]) -> Source:
        raise NotImplementedError

    def make_source_with_bad_record(self, tmp_path: Path) -> tuple[Source, int]:
        """A source holding GOOD with one undecodable record in the middle; returns (source, 1)."""
        raise NotImplementedError

    def make_unreachable_source(self, tmp_path: Path) -> tuple[Source, str]:
        """A source that cannot be opened; returns (source, text the error must name)."""
        raise NotImplementedError

    def make_large_source(self, tmp_path: Path, n: int) -> Source:
        raise NotImplementedError

    # -- the shared tests ------------------------------------------------------------

    def test_yields_every_record_in_order(self, tmp_path: Path) -> None:
        out = list(self.make_source(tmp_path, GOOD).records())
        assert all(isinstance(r, RawRecord) for r in out)
        assert [str(r.fields["sku"]) for r in out if isinstance(r, RawRecord)] == [
            "A-1",
            "B-2",
            "C-3",
        ]
        lines = [r.line for r in out]
        assert lines == sorted(lines) and len(set(lines)) == 3

    def test_empty_source_yields_nothing(self, tmp_path: Path) -> None:
        assert list(self.make_source(tmp_path, []).records()) == []

    def test_bad_record_does_not_stop_the_rest(self, tmp_path: Path) -> None:
        source, bad = self.make_source_with_bad_record(tmp_path)
        out = list(source.records())
        bads = [r for r in out if isinstance(r, BadRecord)]
        goods = [r for r in out if isinstance(r, RawRecord)]
        assert len(bads) == bad
        assert {str(r.fields["sku"]) for r in goods} == {"A-1", "B-2", "C-3"}
        assert all(str(b.line) in b.reason for b in bads), "a bad record's reason names its line"

    def test_unreachable_source_raises_source_error_naming_it(self, tmp_path: Path) -> None:
        source, where = self.make_unreachable_source(tmp_path)
        with pytest.raises(SourceError) as info:
            list(source.records())
        assert where in str(info.value)

    def test_describe_names_the_source(self, tmp_path: Path) -> None:
        assert self.make_source(tmp_path, GOOD).describe()

    def test_large_source_streams_with_flat_memory(self, tmp_path: Path) -> None:
        n = 50_000
        source = self.make_large_source(tmp_path, n)
        tracemalloc.start()
        try:
            count = sum(1 for _ in source.records())
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert count == n
        # 50k records held at once would take tens of MB; streaming stays far below.
        assert peak < 8 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB: the source is not streaming"

    def test_a_whole_reading_knows_its_feed_and_a_part_never_does(self, tmp_path: Path) -> None:
        """``feed_digest``: what the last reading read, once it went to its end; the same
        records give the same digest, other records another; a reading stopped after a
        few records (the rest of a large feed unread) or one that failed gives None."""
        for folder in ("a", "b", "c", "d"):
            (tmp_path / folder).mkdir()
        source = self.make_source(tmp_path / "a", GOOD)
        assert source.feed_digest() is None, "nothing read yet"
        list(source.records())
        whole = source.feed_digest()
        assert whole is not None
        list(source.records())
        assert source.feed_digest() == whole, "the same feed read again"
        again = self.make_source(tmp_path / "b", GOOD)
        list(again.records())
        assert again.feed_digest() == whole, "the same records, written again"
        other = self.make_source(tmp_path / "c", [*GOOD[:2], {**GOOD[2], "price": "12.01"}])
        list(other.records())
        assert other.feed_digest() not in (None, whole), "one price changed"
        large = self.make_large_source(tmp_path / "d", 50_000)
        records = large.records()
        taken = [record for _, record in zip(range(3), records, strict=False)]
        records.close()  # type: ignore[attr-defined]  # a generator: the reading stops here
        assert len(taken) == 3
        assert large.feed_digest() is None, "a digest of a part of the feed"

    def test_a_failed_reading_knows_no_feed(self, tmp_path: Path) -> None:
        source, _ = self.make_unreachable_source(tmp_path)
        with pytest.raises(SourceError):
            list(source.records())
        assert source.feed_digest() is None
