"""``[source] item_url``: single items by key (sources/http_items.py) against sandbox/pim.py
on 127.0.0.1: one GET each, with the source's auth, pacing, retries and origin pinning."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from pydantic import ValidationError

from skuferry.config.schema import HttpSourceSettings
from skuferry.errors import SourceError
from skuferry.models import RawRecord
from skuferry.sandbox.pim import Fault, PimServer
from skuferry.sources.http import HttpSource
from skuferry.sources.http_items import item_url
from skuferry.sources.wiring import Wiring

pytestmark = pytest.mark.integration  # a real PIM server on loopback

TOKEN = "item-token-value"
CATALOG = [{"sku": f"P-{i}", "name": f"Bolt {i}"} for i in range(1, 6)] + [
    {"sku": "A/B 1", "name": "Slashed"}
]


@pytest.fixture
def pim() -> Iterator[PimServer]:
    with PimServer(CATALOG, token=TOKEN) as server:
        yield server


def source(pim: PimServer, sleeps: list[float], **options: object) -> HttpSource:
    settings = HttpSourceSettings.model_validate(
        {
            "type": "http",
            "url": pim.url("page"),
            "item_url": pim.url("page") + "/{key}",
            "auth": "bearer",
            "token": TOKEN,
            **options,
        }
    )
    return HttpSource(settings, Wiring(sleep=sleeps.append, rng=random.Random(3)))


def test_one_authenticated_get_per_key_and_a_404_is_no_record(pim: PimServer) -> None:
    found = list(source(pim, []).fetch_items(["P-2", "NOPE", "A/B 1"]))
    assert [r.fields["sku"] for r in found if isinstance(r, RawRecord)] == ["P-2", "A/B 1"]
    assert [seen.path for seen in pim.requests] == [
        "/page/products/P-2",
        "/page/products/NOPE",
        "/page/products/A%2FB%201",  # one path segment, percent-encoded
    ]
    assert {seen.authorization for seen in pim.requests} == {f"Bearer {TOKEN}"}


def test_items_fetched_by_key_are_not_the_feed(pim: PimServer) -> None:
    """A few items are not the whole feed: the digest of the last full pull goes."""
    read = source(pim, [], items_path="items", pagination="page")
    list(read.records())
    assert read.feed_digest() is not None
    assert len(list(read.fetch_items(["P-2"]))) == 1
    assert read.feed_digest() is None


def test_a_5xx_is_retried_and_a_refusal_fails_the_read(pim: PimServer) -> None:
    sleeps: list[float] = []
    pim.faults.append(Fault(503, times=1, match="/P-3"))
    assert len(list(source(pim, sleeps).fetch_items(["P-3"]))) == 1
    assert len(sleeps) == 1, "one backoff, then the item"
    pim.faults.append(Fault(403, times=None, match="/P-4"))
    with pytest.raises(SourceError, match="403"):
        list(source(pim, []).fetch_items(["P-4"]))


def test_the_item_url_must_name_the_key_and_stay_on_a_trusted_origin(pim: PimServer) -> None:
    with pytest.raises(ValidationError, match="key"):
        HttpSourceSettings.model_validate(
            {"type": "http", "url": pim.url("page"), "item_url": pim.url("page")}
        )
    elsewhere = source(pim, [], item_url="http://127.0.0.2:9/products/{key}")
    with pytest.raises(SourceError, match="origin"):
        list(elsewhere.fetch_items(["P-1"]))
    assert pim.requests == [], "the token went nowhere"
    assert item_url("https://pim/p/{key}", "a b") == "https://pim/p/a%20b"
