"""A walk of the list pages proves itself complete, or says why not (sync/write/walks.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from skuferry.completeness import Ledger
from skuferry.sync.write.walks import PageProof, walk

Page = tuple[int, int, list[dict[str, Any]]]


def items(*ids: str) -> list[dict[str, Any]]:
    return [{"id": i, "sku": f"K-{i}"} for i in ids]


def judged(*pages: Page, limit: int | None = None) -> tuple[bool, str]:
    proof = PageProof(limit=limit)
    for page, count, rows in pages:
        proof.see(page, count, rows)
    verdict = proof.finish()
    return verdict.complete, verdict.reason


def test_consistent_pages_are_complete() -> None:
    assert judged((1, 3, items("a", "b")), (2, 3, items("c", "d")), (3, 3, items("e"))) == (
        True,
        "",
    )


def test_an_empty_catalog_is_complete() -> None:
    assert judged() == (True, "")
    assert judged((1, 1, items("a"))) == (True, "")


def test_a_page_short_of_the_limit_asked_for_is_short_even_when_all_are() -> None:
    # Page 1 short and the last page as short: only the limit asked for tells.
    pages = ((1, 2, items("a")), (2, 2, items("c")))
    assert judged(*pages) == (True, "")
    complete, reason = judged(*pages, limit=2)
    assert not complete and reason.startswith("page 1 of 2 held 1 products, a full page 2")


@pytest.mark.parametrize(
    ("pages", "reason"),
    [
        pytest.param(
            [(1, 3, items("a", "b")), (2, 3, []), (3, 3, items("e"))],
            "page 2 of 3 was empty",
            id="empty page before the last",
        ),
        pytest.param(
            [(1, 3, items("a", "b")), (2, 3, items("c")), (3, 3, items("e"))],
            "page 2 of 3 held 1 products, a full page 2 (a CMS that serves fewer per page "
            "than asked: set [api] page_size to its page size)",
            id="short page before the last",
        ),
        pytest.param(
            [(1, 2, items("a", "b")), (2, 2, [])],
            "the last page (2) was empty: fewer products than 2 pages",
            id="fewer items than the pages imply",
        ),
        pytest.param(
            [(1, 3, items("a", "b")), (2, 2, items("c", "d"))],
            "meta.pages changed from 3 to 2 at page 2",
            id="meta.pages changing",
        ),
        pytest.param(
            [(1, 2, items("a", "b")), (2, 2, items("b", "c"))],
            "product id b on page 2 was already on page 1",
            id="an item seen twice (shifted)",
        ),
        pytest.param(
            [(1, 2, items("a", "b")), (2, 2, items("a", "b"))],
            "product id a on page 2 was already on page 1",
            id="a page repeated",
        ),
        pytest.param(
            [(1, 3, items("a", "b")), (2, 3, items("c", "d"))],
            "the walk stopped at page 2 of 3",
            id="stopped before meta.pages",
        ),
        pytest.param(
            [(1, 3, items("a", "b")), (3, 3, items("c"))],
            "page 3 came where page 2 was due",
            id="a page skipped",
        ),
    ],
)
def test_inconsistent_pages_make_the_walk_incomplete(pages: list[Page], reason: str) -> None:
    assert judged(*pages) == (False, reason)


class Pages:
    """A list whose every walk serves the next script in turn (the last one repeats)."""

    def __init__(self, *walks: list[Page]) -> None:
        self.walks = list(walks)
        self.started = 0

    def iter_pages(self, *, limit: int = 100) -> Iterator[Page]:
        script = self.walks[min(self.started, len(self.walks) - 1)]
        self.started += 1
        yield from script


class Index:
    """Keeps what the last load saw, like the remote index (which empties itself first)."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def load(
        self,
        client: Any,
        *,
        page_size: int = 100,
        on_page: Callable[[int, int], None] | None = None,
    ) -> None:
        self.ids = [
            str(i["id"]) for _p, _n, rows in client.iter_pages(limit=page_size) for i in rows
        ]


GOOD = [(1, 2, items("a", "b")), (2, 2, items("c"))]
HOLE = [(1, 2, items("a", "b")), (2, 2, [])]


def test_an_incomplete_walk_is_read_once_more_from_page_1() -> None:
    pages, index, ledger = Pages(HOLE, GOOD), Index(), Ledger()
    walked = walk(pages, index, ledger, page_size=2)
    assert walked.verdict.complete and walked.attempts == 2
    assert index.ids == ["a", "b", "c"]
    assert ledger.may_create_unseen()


def test_a_walk_still_incomplete_when_read_again_forbids_creates_of_the_unseen() -> None:
    pages, index, ledger = Pages(HOLE, HOLE, GOOD), Index(), Ledger()
    walked = walk(pages, index, ledger, page_size=2)
    assert pages.started == 2, "read once more, not more"
    assert not walked.verdict.complete
    assert "the last page (2) was empty" in walked.verdict.reason
    assert "read 2 times from page 1" in walked.verdict.reason
    assert not ledger.may_create_unseen()
    assert [v.reason for v in ledger.verdicts()] == [walked.verdict.reason], "one per walk"


def test_a_complete_walk_is_read_once_and_watched() -> None:
    pages, index, ledger = Pages(GOOD), Index(), Ledger()
    seen: list[tuple[str, float]] = []
    ticks = iter(range(100))
    walked = walk(
        pages,
        index,
        ledger,
        page_size=2,
        clock=lambda: float(next(ticks)),
        watch=lambda rid, at: seen.append((rid, at)),
    )
    assert (walked.attempts, walked.started) == (1, 0.0)
    assert [rid for rid, _at in seen] == ["a", "b", "c"]
    assert seen[0][1] < seen[2][1], "each page is timed as it comes back"
