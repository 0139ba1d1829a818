"""How an API source walks its pages: one strategy per ``pagination``, one walk for all.

A paginator says what to ask for first (``Ask``: a URL and the parameters the
requester places: query members, body members or GraphQL variables), and, from
each page that came back, what to ask for next, or None at the end. ``walk`` runs
any of them against a requester's ``fetch``, as a declarative stream composes a
requester with a paginator. The strategies:

- ``PageNumber``: a page number from ``first_page`` on, with the page size;
- ``Offset``: an offset that grows by each page's records, with the page size;
- ``Cursor``: a token from each page sent back as one parameter (``search_after``
  style, or a GraphQL connection's ``endCursor``);
- ``NextLink``: a URL the page points to (a body field or a ``Link: rel="next"``
  header), resolved against the page's own URL.

Each counts its pages as evidence (``tally``, the pull's ``EndProof``) and stops
where the page says: empty or short, the announced total reached, no cursor, no next
link. A walk that would go round in circles (the same page, cursor or link again)
raises ``SourceError`` instead of looping.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from skuferry.errors import SourceError
from skuferry.models import BadRecord, RawRecord
from skuferry.sources.ends import Announced


@dataclass(frozen=True, slots=True)
class Ask:
    """One page's request as a paginator shapes it; the requester builds the HTTP of it."""

    url: httpx.URL | str
    params: dict[str, Any] | None  # None: the URL says it all (a next link)


@dataclass(frozen=True, slots=True)
class Page:
    """One page that came back, decoded."""

    number: int
    url: httpx.URL
    body: Any
    items: list[Any]  # what items_path found: a list, or the page failed
    headers: httpx.Headers
    next_header: str | None = None  # the rel="next" target of a Link header, if any


# Counts one page as evidence of the pull's end (``has_next``: the page points on);
# the announcements in force after it.
Tally = Callable[[Page, bool], Announced]


def untallied(_page: Page, _has_next: bool) -> Announced:
    """For a walk that weighs no announcements: nothing announced."""
    return Announced()


class Paginator(ABC):
    """One walk's strategy; holds the walk's own state, so one instance walks once."""

    @abstractmethod
    def first(self) -> Ask: ...

    def check(self, page: Page) -> None:  # noqa: B027 - most strategies trust every page
        """Raise before ``page``'s items are used when it cannot be right."""

    @abstractmethod
    def next(self, page: Page) -> Ask | None:
        """The request after ``page``, or None: the walk ends with it."""


def walk(fetch: Callable[[Ask, int], Page], paginator: Paginator) -> Iterator[Page]:
    """The pages of one walk: fetched one at a time, each yielded before the next is asked."""
    ask: Ask | None = paginator.first()
    for number in itertools.count(1):
        if ask is None:
            return
        page = fetch(ask, number)
        paginator.check(page)
        yield page
        ask = paginator.next(page)


class _Sized(Paginator):
    """A walk by a number that the paginator counts (``param``), ``base`` with every page.

    It ends at an empty page, at the announced end, else at a short page. When both a
    total and a page count are announced, ``_records_first`` says which one rules (an
    offset counts records, a page number counts pages).
    """

    _records_first: bool

    def __init__(
        self, url: str, base: dict[str, Any], *, param: str, page_size: int, tally: Tally
    ) -> None:
        self._url, self._base, self._param = url, base, param
        self._size, self._tally = page_size, tally
        self._records = 0  # records so far, this page's included

    def _ask(self, value: int) -> Ask:
        return Ask(self._url, {**self._base, self._param: value})

    def next(self, page: Page) -> Ask | None:
        count = len(page.items)
        said = self._tally(page, False)
        self._records += count
        if count == 0:
            return None
        by_pages = None if said.pages is None else page.number >= said.pages
        by_records = None if said.records is None else self._records >= said.records
        ruling = (by_records, by_pages) if self._records_first else (by_pages, by_records)
        verdict = next((v for v in ruling if v is not None), count < self._size)
        return None if verdict else self._after(page)

    @abstractmethod
    def _after(self, page: Page) -> Ask:
        """The ask after ``page``, which did not end the walk."""


class PageNumber(_Sized):
    """``page_param`` counts from ``first_page``."""

    _records_first = False

    def __init__(
        self,
        url: str,
        base: dict[str, Any],
        *,
        page_param: str,
        first_page: int,
        page_size: int,
        tally: Tally,
        where: str,
    ) -> None:
        super().__init__(url, base, param=page_param, page_size=page_size, tally=tally)
        self._first, self._where = first_page, where
        self._previous: list[Any] = []

    def first(self) -> Ask:
        return self._ask(self._first)

    def check(self, page: Page) -> None:
        number = page.number
        if page.items and page.items == self._previous:
            # Magento serves its last page again past the end; an API that ignores
            # page_param serves page 1 again: the two look alike, so neither ends
            # the walk in silence (a total stops it before the repeat)
            raise SourceError(
                f"{self._where}: page {number} repeats page {number - 1}: the API "
                f"ignores page_param {self._param!r}, or serves its last page again "
                "past the end (Magento does); set total_path or total_header to the "
                'total it announces (Magento: total_path = "total_count") so the walk '
                "stops at the end"
            )
        self._previous = page.items

    def _after(self, page: Page) -> Ask:
        return self._ask(self._first + page.number)


class Offset(_Sized):
    """``offset_param`` grows by each page's records, from 0."""

    _records_first = True

    def __init__(
        self, url: str, base: dict[str, Any], *, offset_param: str, page_size: int, tally: Tally
    ) -> None:
        super().__init__(url, base, param=offset_param, page_size=page_size, tally=tally)

    def first(self) -> Ask:
        return self._ask(0)

    def _after(self, page: Page) -> Ask:
        return self._ask(self._records)


class Cursor(Paginator):
    """``token`` of each page goes back as ``param``; no token, or an empty page, ends it."""

    def __init__(
        self,
        url: str,
        base: dict[str, Any],
        *,
        param: str,
        token: Callable[[Page], str | None],
        tally: Tally = untallied,
        where: str,
    ) -> None:
        self._url, self._base, self._param = url, base, param
        self._token, self._tally, self._where = token, tally, where
        self._seen: set[str] = set()

    def first(self) -> Ask:
        return Ask(self._url, dict(self._base))

    def next(self, page: Page) -> Ask | None:
        cursor = self._token(page)
        more = cursor is not None and bool(page.items)
        self._tally(page, more)
        if cursor is None or not more:
            return None
        if cursor in self._seen:
            raise SourceError(
                f"{self._where}: page {page.number} repeats cursor {cursor!r}; "
                "the API would loop forever"
            )
        self._seen.add(cursor)
        return Ask(self._url, {**self._base, self._param: cursor})


class NextLink(Paginator):
    """The URL ``link`` finds on each page, joined to the page's URL; none ends the walk.

    ``at_end`` sees the last page (what it left behind may prove an early end);
    ``show`` is how an error prints a URL (secrets masked).
    """

    def __init__(
        self,
        url: httpx.URL,
        *,
        link: Callable[[Page], str | None],
        tally: Tally,
        where: str,
        at_end: Callable[[Page], None] = lambda _page: None,
        show: Callable[[httpx.URL], str] = str,
    ) -> None:
        self._url, self._link, self._tally, self._where = url, link, tally, where
        self._at_end, self._show = at_end, show
        self._visited: set[httpx.URL] = set()

    def first(self) -> Ask:
        return Ask(self._url, None)

    def next(self, page: Page) -> Ask | None:
        target = self._link(page)
        self._tally(page, bool(target))
        if not target:
            self._at_end(page)
            return None
        self._visited.add(page.url)
        url = page.url.join(target)
        if url in self._visited:
            raise SourceError(
                f"{self._where}: page {page.number} links back to "
                f"{self._show(url)}; the API would loop forever"
            )
        return Ask(url, None)


def records_of(pages: Iterable[Page]) -> Generator[RawRecord | BadRecord, None, int]:
    """Each item of each page as a record, numbered from 1; returns how many there were.

    An item that is not a JSON object is a ``BadRecord`` naming its page: the rest of the
    catalog goes on.
    """
    line = 0
    for page in pages:
        for item in page.items:
            line += 1
            if isinstance(item, dict):
                yield RawRecord(line=line, fields=item)
            else:
                yield BadRecord(
                    line=line,
                    reason=f"record {line} (page {page.number}): expected a JSON "
                    f"object, got {type(item).__name__}",
                )
    return line
