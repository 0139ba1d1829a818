"""The one completeness rule: absence is decided only on complete verdicts."""

from __future__ import annotations

from skuferry.completeness import Ledger, Reader


def test_nothing_reported_proves_nothing() -> None:
    ledger = Ledger()
    assert not ledger.may_mark_gone()
    assert not ledger.may_create_unseen()
    assert not ledger.may_default("pim")


def test_complete_source_allows_gone_until_a_fetch_is_incomplete() -> None:
    ledger = Ledger()
    ledger.complete(Reader.SOURCE, "catalog.csv")
    assert ledger.may_mark_gone()
    ledger.incomplete(Reader.ITEMS, "item_url", "3 fetches failed")
    assert not ledger.may_mark_gone()
    assert ledger.reasons() == ["items item_url: not complete: 3 fetches failed"]


def test_one_incomplete_walk_forbids_creates_of_the_unseen() -> None:
    ledger = Ledger()
    ledger.complete(Reader.WALK, "GET /api/v1/products")
    assert ledger.may_create_unseen()
    ledger.incomplete(Reader.WALK, "GET /api/v1/products", "page 2 of 3 was empty")
    assert not ledger.may_create_unseen()


def test_defaults_are_per_join() -> None:
    ledger = Ledger()
    ledger.complete(Reader.JOIN, "prices")
    ledger.incomplete(Reader.JOIN, "pim", "pim.jsonl is empty")
    assert ledger.may_default("prices")
    assert not ledger.may_default("pim")
    assert not ledger.may_default("never-read")
