"""The paginator strategies, walked against a fake fetch: what each asks for and where it ends.

No HTTP here: ``fetch`` answers each ``Ask`` from a list of pages, so a test reads as
the conversation between a walk and an API.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from skuferry.errors import SourceError
from skuferry.models import BadRecord, RawRecord
from skuferry.sources.ends import Announced
from skuferry.sources.paginators import (
    Ask,
    Cursor,
    NextLink,
    Offset,
    Page,
    PageNumber,
    Paginator,
    records_of,
    untallied,
    walk,
)

URL = "https://pim.example.com/api/products"


class Api:
    """Answers the n-th ask with the n-th body; records the asks."""

    def __init__(self, *bodies: Any, headers: dict[str, str] | None = None) -> None:
        self.bodies = list(bodies)
        self.asks: list[Ask] = []
        self.headers = httpx.Headers(headers or {})

    def fetch(self, ask: Ask, number: int) -> Page:
        self.asks.append(ask)
        body = self.bodies[number - 1]
        items = body["items"] if isinstance(body, dict) else body
        url = httpx.URL(ask.url).copy_merge_params(ask.params or {})
        return Page(number, url, body, items, self.headers)

    def params(self, name: str) -> list[Any]:
        return [(a.params or {}).get(name) for a in self.asks]


def pages(api: Api, paginator: Paginator) -> list[int]:
    return [page.number for page in walk(api.fetch, paginator)]


def announcing(records: int | None = None, pages: int | None = None) -> Callable[..., Announced]:
    def tally(_page: Page, _has_next: bool) -> Announced:
        return Announced(records=records, pages=pages)

    return tally


def page_number(**kw: Any) -> PageNumber:
    options: dict[str, Any] = {
        "page_param": "page",
        "first_page": 1,
        "page_size": 2,
        "tally": untallied,
        "where": "http pim",
    }
    return PageNumber(URL, {"limit": 2}, **{**options, **kw})


# -- page number ----------------------------------------------------------------------


def test_page_numbers_count_from_first_page_and_a_short_page_ends_the_walk() -> None:
    api = Api({"items": [1, 2]}, {"items": [3, 4]}, {"items": [5]})
    assert pages(api, page_number(first_page=0)) == [1, 2, 3]
    assert api.params("page") == [0, 1, 2]
    assert api.params("limit") == [2, 2, 2], "the base goes with every page"


def test_page_numbers_end_at_an_empty_page() -> None:
    api = Api({"items": [1, 2]}, {"items": []})
    assert pages(api, page_number()) == [1, 2]


def test_an_announced_page_count_rules_over_the_short_page_and_the_total() -> None:
    api = Api({"items": [1]}, {"items": [2]}, {"items": [3]})
    assert pages(api, page_number(tally=announcing(records=1, pages=3))) == [1, 2, 3]


def test_an_announced_total_ends_a_full_last_page_without_asking_again() -> None:
    api = Api({"items": [1, 2]}, {"items": [3, 4]})
    assert pages(api, page_number(tally=announcing(records=4))) == [1, 2]


def test_a_page_served_again_fails_the_walk_before_its_items_are_used() -> None:
    api = Api({"items": [1, 2]}, {"items": [1, 2]})
    walked = walk(api.fetch, page_number())
    assert next(walked).number == 1
    with pytest.raises(SourceError, match="page 2 repeats page 1: the API ignores page_param"):
        next(walked)


# -- offset ---------------------------------------------------------------------------


def test_an_offset_grows_by_the_records_of_each_page() -> None:
    api = Api({"items": [1, 2]}, {"items": [3, 4]}, {"items": [5]})
    walker = Offset(URL, {"limit": 2}, offset_param="skip", page_size=2, tally=untallied)
    assert pages(api, walker) == [1, 2, 3]
    assert api.params("skip") == [0, 2, 4]


def test_an_offsets_announced_total_rules_over_its_page_count() -> None:
    api = Api({"items": [1, 2]}, {"items": [3, 4]}, {"items": [5, 6]})
    tally = announcing(records=6, pages=1)
    walker = Offset(URL, {}, offset_param="offset", page_size=2, tally=tally)
    assert pages(api, walker) == [1, 2, 3]


# -- cursor ---------------------------------------------------------------------------


def cursor(token: Callable[[Page], str | None], **kw: Any) -> Cursor:
    return Cursor(URL, {"cursor": None}, param="cursor", token=token, where="graphql pim", **kw)


def test_a_cursor_goes_back_as_its_parameter_until_there_is_none() -> None:
    api = Api({"items": [1], "next": "c1"}, {"items": [2], "next": "c2"}, {"items": [3]})
    assert pages(api, cursor(lambda page: page.body.get("next"))) == [1, 2, 3]
    assert api.params("cursor") == [None, "c1", "c2"], "null on the first page"


def test_a_cursor_with_an_empty_page_ends_the_walk() -> None:
    api = Api({"items": [], "next": "c1"})
    seen: list[bool] = []

    def tally(_page: Page, has_next: bool) -> Announced:
        seen.append(has_next)
        return Announced()

    assert pages(api, cursor(lambda page: page.body["next"], tally=tally)) == [1]
    assert seen == [False], "an empty page does not point on, whatever its cursor"


def test_a_cursor_seen_before_fails_the_walk() -> None:
    api = Api({"items": [1], "next": "c1"}, {"items": [2], "next": "c1"})
    with pytest.raises(SourceError, match="page 2 repeats cursor 'c1'; the API would loop"):
        pages(api, cursor(lambda page: page.body["next"]))


# -- next link ------------------------------------------------------------------------


def next_link(**kw: Any) -> NextLink:
    return NextLink(
        httpx.URL(URL + "?since=x"),
        link=lambda page: page.body.get("next"),
        tally=untallied,
        where="http pim",
        **kw,
    )


def test_a_next_link_is_joined_to_its_pages_url_and_the_last_page_is_seen() -> None:
    api = Api(
        {"items": [1], "next": "?page=2"},
        {"items": [2], "next": "/v2/list?page=3"},
        {"items": [3], "next": "?page=4"},
        {"items": [4]},
    )
    last: list[int] = []
    assert pages(api, next_link(at_end=lambda page: last.append(page.number))) == [1, 2, 3, 4]
    assert [str(a.url) for a in api.asks] == [
        URL + "?since=x",
        URL + "?page=2",
        "https://pim.example.com/v2/list?page=3",
        "https://pim.example.com/v2/list?page=4",  # relative to the page it was on
    ]
    assert last == [4]


def test_a_next_link_back_to_a_page_read_fails_the_walk() -> None:
    api = Api({"items": [1], "next": "?page=2"}, {"items": [2], "next": "?since=x"})
    with pytest.raises(SourceError, match=r"page 2 links back to .*since=x; the API would loop"):
        pages(api, next_link())


# -- records --------------------------------------------------------------------------


def test_records_are_numbered_across_pages_and_a_non_object_is_a_bad_record() -> None:
    api = Api({"items": [{"sku": "A"}, 7], "next": "?page=2"}, {"items": [{"sku": "B"}]})
    walked = walk(api.fetch, next_link())
    records = records_of(walked)
    out: list[RawRecord | BadRecord] = []
    try:
        while True:
            out.append(next(records))
    except StopIteration as end:
        assert end.value == 3, "the count of records read"
    assert [r.line for r in out] == [1, 2, 3]
    bad = out[1]
    assert isinstance(bad, BadRecord)
    assert bad.reason == "record 2 (page 1): expected a JSON object, got int"
