"""A walk of the CMS's list pages proves itself complete, or says why it is not.

The API has no lookup filter, so "this product is not on the CMS" is learnt by
walking ``GET /api/v1/products`` from page 1 up to ``meta.pages`` (spec §4). A
walk proves its pages add up to the whole list only when what it read is
consistent; each of these makes it incomplete (``PageProof``):

- a page before the last one is empty, or holds fewer items than a full page (the
  ``limit`` asked for, as the spec says a page holds; or the largest page of the walk
  when no limit is known), or the last page is empty;
- ``meta.pages`` differs from one page to the next (the list grew or shrank under
  the walk: offset pages have shifted);
- a product id turns up a second time (a page repeated, or shifted by a create
  before it);
- the pages are not 1, 2, ... ``meta.pages``.

What no walk can see: a product deleted before the reader's offset during the walk
moves every later product one place forward, so one product can slip past the
reader unseen, and every page still looks whole (the count drops by one, which is
also what a plain delete looks like). ``meta`` members other than ``pages`` are not
in the spec, so they are not relied on. An incomplete walk is read once more from
page 1 (``walk``); the final verdict goes to the run's ledger, where the decision
"create a product the walk did not find" asks for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from skuferry import logs
from skuferry.completeness import Ledger, Reader, Verdict

log = logs.get(__name__)

WHERE = "GET /api/v1/products"
ATTEMPTS = 2  # an incomplete walk is read once more from page 1

Page = tuple[int, int, list[dict[str, Any]]]


class ProductPages(Protocol):
    def iter_pages(self, *, limit: int = 100) -> Iterator[Page]: ...


class Index(Protocol):
    """What a walk fills: ``state.remoteindex.RemoteIndex``."""

    def load(
        self,
        client: ProductPages,
        *,
        page_size: int = 100,
        on_page: Callable[[int, int], None] | None = None,
    ) -> None: ...


@dataclass
class PageProof:
    """Judges one walk from the pages it read; pure (no I/O, no clock). ``limit``: the
    page size asked for (spec §4: up to 100 is honoured)."""

    limit: int | None = None
    reason: str = ""  # the first inconsistency found; "" while none
    _expected_page: int = 1
    _last: tuple[int, int] | None = None  # (page, pages) of the latest page read
    _sizes: list[tuple[int, int]] = field(default_factory=list)  # (page, items)
    _ids: dict[str, int] = field(default_factory=dict)  # id -> page it was first seen on

    def see(self, page: int, pages: int, items: Iterable[dict[str, Any]]) -> None:
        rows = list(items)
        if page != self._expected_page:
            self._fail(f"page {page} came where page {self._expected_page} was due")
        self._expected_page = page + 1
        if self._last is not None and pages != self._last[1]:
            self._fail(f"meta.pages changed from {self._last[1]} to {pages} at page {page}")
        self._last = (page, pages)
        self._sizes.append((page, len(rows)))
        for item in rows:
            rid = item.get("id")
            if rid is None:
                continue
            first = self._ids.get(str(rid))
            if first is not None:
                self._fail(f"product id {rid} on page {page} was already on page {first}")
            else:
                self._ids[str(rid)] = page

    def finish(self) -> Verdict:
        """The verdict once the pages stopped coming."""
        if not self.reason:
            self._check_sizes()
        if self.reason:
            return Verdict(Reader.WALK, WHERE, complete=False, reason=self.reason)
        return Verdict(Reader.WALK, WHERE, complete=True)

    def _check_sizes(self) -> None:
        last = self._last
        if last is None:  # nothing yielded: the list answered meta.pages = 0
            return
        page, pages = last
        if page < pages:
            self._fail(f"the walk stopped at page {page} of {pages}")
            return
        full = self.limit or max(n for _p, n in self._sizes)
        for p, n in self._sizes:
            if p < pages and n == 0:
                self._fail(f"page {p} of {pages} was empty")
                return
            if p < pages and n < full:
                self._fail(
                    f"page {p} of {pages} held {n} products, a full page {full} (a CMS that "
                    "serves fewer per page than asked: set [api] page_size to its page size)"
                )
                return
        if self._sizes[-1][1] == 0:
            self._fail(f"the last page ({pages}) was empty: fewer products than {pages} pages")

    def _fail(self, reason: str) -> None:
        if not self.reason:
            self.reason = reason


class _Proven:
    """The client's pages, each shown to the proof (and timed) on its way to the index."""

    def __init__(
        self,
        client: ProductPages,
        proof: PageProof,
        clock: Callable[[], float],
        watch: Callable[[str, float], None] | None,
    ) -> None:
        self._client, self._proof, self._clock, self._watch = client, proof, clock, watch

    def iter_pages(self, *, limit: int = 100) -> Iterator[Page]:
        for page, pages, items in self._client.iter_pages(limit=limit):
            self._proof.see(page, pages, items)
            if self._watch is not None:
                read_at = self._clock()
                for item in items:
                    if item.get("id") is not None:
                        self._watch(str(item["id"]), read_at)
            yield page, pages, items


@dataclass(frozen=True, slots=True)
class Walked:
    """One walk's outcome: its verdict and when its first page was asked for."""

    verdict: Verdict
    started: float
    attempts: int


def walk(
    client: ProductPages,
    index: Index,
    ledger: Ledger,
    *,
    page_size: int,
    on_page: Callable[[int, int], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    watch: Callable[[str, float], None] | None = None,
) -> Walked:
    """Fill ``index`` by walking every page; once more from page 1 if the walk is not
    complete. The final verdict is reported to ``ledger`` (one per walk, not per
    attempt). ``watch(id, read_at)`` is told of every product id a page showed, with the
    time the page came back. Errors of the client propagate: a failed read is no walk."""
    verdict = Verdict(Reader.WALK, WHERE, complete=False, reason="not walked")
    started, attempt = 0.0, 0
    for attempt in range(1, ATTEMPTS + 1):
        proof = PageProof(limit=page_size)
        started = clock()
        index.load(_Proven(client, proof, clock, watch), page_size=page_size, on_page=on_page)
        verdict = proof.finish()
        if verdict.complete:
            break
        log.warning("remote.walk.incomplete", attempt=attempt, reason=verdict.reason)
    if not verdict.complete:
        reason = f"{verdict.reason} (read {attempt} times from page 1)"
        verdict = Verdict(Reader.WALK, WHERE, complete=False, reason=reason)
    ledger.report(verdict)
    return Walked(verdict, started, attempt)
