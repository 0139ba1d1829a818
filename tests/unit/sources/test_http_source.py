"""The http source vs the stand-in PIM (sandbox/pim.py) over loopback, real sockets, fake sleeps."""

from __future__ import annotations

import random
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from skuferry.config.schema import HttpSourceSettings
from skuferry.errors import ConfigError, SourceError
from skuferry.models import BadRecord, RawRecord
from skuferry.net.retry import backoff_delay, parse_retry_after
from skuferry.sandbox.pim import Fault, GeneratedCatalog, PimServer
from skuferry.sources.base import Source
from skuferry.sources.dispatch import open_source
from skuferry.sources.http import HttpSource, safe_url
from skuferry.sources.wiring import Wiring
from tests.source_contract import GOOD, SourceContract

pytestmark = pytest.mark.integration  # a real PIM server on loopback

TOKEN = "s3cret-token-value"
PASSWORD = "s3cret-password-value"


@pytest.fixture
def pim() -> Iterator[PimServer]:
    with PimServer(GeneratedCatalog(23)) as server:
        yield server


class Sleeps(list[float]):
    """A fake ``sleep`` that only records; optionally advances a fake clock."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 1000.0

    def __call__(self, seconds: float) -> None:
        self.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


def make(
    url: str, sleeps: Sleeps | None = None, env: dict[str, str] | None = None, **options: Any
) -> HttpSource:
    settings = HttpSourceSettings.model_validate({"type": "http", "url": url, **options})
    fake = sleeps if sleeps is not None else Sleeps()
    return HttpSource(settings, Wiring(sleep=fake, clock=fake.clock, rng=random.Random(7), env=env))


def skus(source: Source) -> list[str]:
    out = list(source.records())
    assert all(isinstance(r, RawRecord) for r in out)
    return [str(r.fields["sku"]) for r in out if isinstance(r, RawRecord)]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


EXPECTED = [f"SKU-{i:06d}" for i in range(1, 24)]


class TestContract(SourceContract):
    @pytest.fixture(autouse=True)
    def _server(self) -> Iterator[None]:
        with PimServer() as self.pim:
            yield

    def _hal(self, **options: Any) -> HttpSource:
        return make(self.pim.url("hal"), items_path="_embedded.items", **options)

    def make_source(self, tmp_path: Path, records: list[dict[str, Any]]) -> Source:
        self.pim.catalog = records
        return self._hal(pagination="next_link")

    def make_source_with_bad_record(self, tmp_path: Path) -> tuple[Source, int]:
        self.pim.catalog = [GOOD[0], "not an object", GOOD[1], GOOD[2]]
        return self._hal(), 1

    def make_unreachable_source(self, tmp_path: Path) -> tuple[Source, str]:
        port = closed_port()
        return make(f"http://127.0.0.1:{port}/products", max_retries=1), f"127.0.0.1:{port}"

    def make_large_source(self, tmp_path: Path, n: int) -> Source:
        self.pim.catalog = GeneratedCatalog(n)
        return make(
            self.pim.url("page"),
            items_path="items",
            pagination="page",
            page_size=1000,
            total_pages_path="meta.pages",
        )


# -- every pagination style walks the whole catalog ---------------------------------------


@pytest.mark.parametrize(
    ("style", "options", "pages"),
    [
        (
            "page",
            {
                "pagination": "page",
                "items_path": "items",
                "page_size": 5,
                "total_pages_path": "meta.pages",
            },
            5,
        ),
        # without a page count: stops at the first short page
        ("page", {"pagination": "page", "items_path": "items", "page_size": 5}, 5),
        (
            "offset",
            {"pagination": "offset", "items_path": "items", "page_size": 5, "total_path": "total"},
            5,
        ),
        ("offset", {"pagination": "offset", "items_path": "items", "page_size": 5}, 5),
        (
            "cursor",
            {
                "pagination": "cursor",
                "items_path": "data",
                "page_size": 5,
                "cursor_path": "next_cursor",
            },
            5,
        ),
        ("hal", {"items_path": "_embedded.items"}, 2),  # next_link is the default; limit 20
        ("link", {"pagination": "next_link"}, 2),  # body is the list; RFC 8288 Link header
    ],
)
def test_each_pagination_style_reads_every_record_once(
    pim: PimServer, style: str, options: dict[str, Any], pages: int
) -> None:
    assert skus(make(pim.url(style), **options)) == EXPECTED
    assert len(pim.requests) == pages


def test_page_style_sends_its_parameter_names(pim: PimServer) -> None:
    source = make(
        pim.url("page"),
        pagination="page",
        items_path="items",
        page_size=10,
        size_param="limit",
        page_param="page",
        first_page=1,
    )
    assert skus(source) == EXPECTED
    assert [r.path for r in pim.requests] == [
        "/page/products?limit=10&page=1",
        "/page/products?limit=10&page=2",
        "/page/products?limit=10&page=3",
    ]


def test_page_style_stops_at_an_empty_page_when_the_catalog_fills_the_last_page() -> None:
    with PimServer(GeneratedCatalog(10)) as pim:
        source = make(pim.url("page"), pagination="page", items_path="items", page_size=5)
        assert len(skus(source)) == 10
        assert len(pim.requests) == 3  # the third page is empty: the end


def test_cursor_is_sent_back_as_the_configured_parameter(pim: PimServer) -> None:
    source = make(
        pim.url("cursor"),
        pagination="cursor",
        items_path="data",
        page_size=20,
        cursor_path="next_cursor",
    )
    assert skus(source) == EXPECTED
    assert "cursor=" not in pim.requests[0].path
    assert "cursor=" in pim.requests[1].path


def test_next_links_may_be_absolute_and_the_url_keeps_its_own_query() -> None:
    with PimServer(GeneratedCatalog(23), absolute_links=True) as pim:
        source = make(pim.url("link") + "?limit=10")
        assert skus(source) == EXPECTED
        assert [r.path for r in pim.requests] == [
            "/link/products?limit=10",
            "/link/products?page=2&limit=10",
            "/link/products?page=3&limit=10",
        ]


def test_pagination_none_reads_one_page_only(pim: PimServer) -> None:
    assert len(skus(make(pim.url("link"), pagination="none"))) == 20
    assert len(pim.requests) == 1


def test_a_next_link_back_to_a_visited_page_is_a_source_error(pim: PimServer) -> None:
    pim.raw_pages["/hal/products"] = (
        b'{"_embedded": {"items": []}, "_links": {"next": {"href": "/hal/products"}}}'
    )
    with pytest.raises(SourceError, match="loop"):
        list(make(pim.url("hal"), items_path="_embedded.items").records())


def test_records_are_numbered_across_pages(pim: PimServer) -> None:
    out = list(make(pim.url("hal"), items_path="_embedded.items").records())
    assert [r.line for r in out] == list(range(1, 24))


# -- rate limits and failures ---------------------------------------------------------


def test_429_waits_at_least_retry_after_then_completes(pim: PimServer) -> None:
    pim.faults.append(Fault(429, match="page=2", headers={"Retry-After": "7"}))
    sleeps = Sleeps()
    source = make(pim.url("page"), sleeps, pagination="page", items_path="items", page_size=10)
    assert skus(source) == EXPECTED
    assert len(sleeps) == 1 and sleeps[0] >= 7
    assert [r.path for r in pim.requests].count("/page/products?limit=10&page=2") == 2


def test_a_transient_500_is_retried_with_growing_backoff_and_the_walk_completes(
    pim: PimServer,
) -> None:
    pim.faults.append(Fault(500, times=2, match="page=2"))
    sleeps = Sleeps()
    source = make(pim.url("page"), sleeps, pagination="page", items_path="items", page_size=10)
    assert skus(source) == EXPECTED
    assert len(sleeps) == 2
    # the CMS client's policy (net/retry.py): base 0.5 s, doubled, full jitter
    rng = random.Random(7)  # as make() seeds the source
    assert sleeps == [backoff_delay(n, rng=rng, base=0.5) for n in (0, 1)]
    assert 0 <= sleeps[0] <= 0.5 and 0 <= sleeps[1] <= 1.0


def test_a_500_that_persists_mid_walk_fails_the_pull(pim: PimServer) -> None:
    pim.faults.append(Fault(500, times=None, match="page=2"))
    sleeps = Sleeps()
    source = make(
        pim.url("page"), sleeps, pagination="page", items_path="items", page_size=10, max_retries=3
    )
    seen: list[RawRecord | BadRecord] = []
    with pytest.raises(SourceError) as info:
        seen.extend(source.records())
    message = str(info.value)
    assert "page 2" in message and pim.base_url in message and "HTTP 500" in message
    assert len(seen) == 10  # the first page was read; the stream then failed, not ended
    assert len(sleeps) == 3  # max_retries


def test_connect_errors_are_retried_then_fail_naming_the_url() -> None:
    port = closed_port()
    sleeps = Sleeps()
    with pytest.raises(SourceError, match=f"127.0.0.1:{port}.*3 attempt"):
        list(make(f"http://127.0.0.1:{port}/p", sleeps, max_retries=2).records())
    assert len(sleeps) == 2


def test_a_404_is_not_retried(pim: PimServer) -> None:
    sleeps = Sleeps()
    with pytest.raises(SourceError, match="HTTP 404"):
        list(make(pim.base_url + "/nothing", sleeps).records())
    assert sleeps == [] and len(pim.requests) == 1


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"<html>maintenance</html>", "not JSON"),
        (b'{"meta": {}}', "no 'items'"),
        (b'{"items": {"sku": "A"}}', "not a list"),
    ],
)
def test_a_malformed_page_fails_the_pull(pim: PimServer, body: bytes, problem: str) -> None:
    pim.raw_pages["/page/products?limit=10&page=2"] = body
    source = make(pim.url("page"), pagination="page", items_path="items", page_size=10)
    with pytest.raises(SourceError, match=problem) as info:
        list(source.records())
    assert "page 2" in str(info.value)


def test_requests_per_minute_paces_the_walk() -> None:
    with PimServer(GeneratedCatalog(23)) as pim:
        sleeps = Sleeps()
        source = make(
            pim.url("page"),
            sleeps,
            pagination="page",
            items_path="items",
            page_size=10,
            requests_per_minute=30,
        )
        assert skus(source) == EXPECTED
    assert sleeps == [2.0, 2.0]  # 3 requests, 60/30 s apart


def test_retry_after_accepts_seconds_and_http_dates() -> None:
    # the source reads Retry-After with the CMS client's parser (net/retry.py)
    assert parse_retry_after("12") == 12
    date = "Wed, 21 Oct 2015 07:28:20 GMT"  # the server's clock, not ours
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", date_header=date) == 10
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:30 -0000", date_header=date) == 10  # UTC
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None


def test_a_429_with_retry_after_zero_backs_off_instead_of_hammering(pim: PimServer) -> None:
    pim.faults.append(Fault(429, match="page=2", headers={"Retry-After": "0"}))
    sleeps = Sleeps()
    source = make(pim.url("page"), sleeps, pagination="page", items_path="items", page_size=10)
    assert skus(source) == EXPECTED
    assert sleeps == [backoff_delay(0, rng=random.Random(7), base=0.5)] and sleeps[0] > 0


# -- auth and secrets -----------------------------------------------------------------


def test_bearer_token_from_the_environment_is_sent() -> None:
    with PimServer(GeneratedCatalog(3), token=TOKEN) as pim:
        source = make(
            pim.url("hal"),
            env={"PIM_TOKEN": TOKEN},
            auth="bearer",
            token_env="PIM_TOKEN",
            items_path="_embedded.items",
        )
        assert len(skus(source)) == 3
        assert pim.requests[0].authorization == f"Bearer {TOKEN}"


def test_basic_auth_with_a_password_file_is_sent(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text(PASSWORD + "\n")
    with PimServer(GeneratedCatalog(3), basic=("erp", PASSWORD)) as pim:
        source = make(
            pim.url("hal"),
            auth="basic",
            username="erp",
            password_file=str(tmp_path / "pw"),
            items_path="_embedded.items",
        )
        assert len(skus(source)) == 3
        assert (pim.requests[0].authorization or "").startswith("Basic ")


def test_a_refused_token_fails_without_showing_it() -> None:
    with PimServer(GeneratedCatalog(3), token="the-right-one") as pim:
        source = make(pim.url("hal"), auth="bearer", token=TOKEN, items_path="_embedded.items")
        with pytest.raises(SourceError, match="credentials were refused") as info:
            list(source.records())
    assert TOKEN not in str(info.value)
    assert TOKEN not in source.describe() and TOKEN not in repr(source.settings)


def test_a_missing_token_variable_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"source\.token_env.*PIM_TOKEN"):
        make("http://127.0.0.1:9/p", env={}, auth="bearer", token_env="PIM_TOKEN")


def test_describe_and_errors_mask_credentials_in_the_url() -> None:
    url = "http://user:pw@127.0.0.1:9/p?api_key=abc&page=1"
    assert safe_url(url) == "http://127.0.0.1:9/p?api_key=***&page=1"


# -- settings -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "where"),
    [
        ({"auth": "bearer"}, "token"),
        ({"auth": "bearer", "token": "a", "token_env": "B"}, "token"),
        ({"auth": "basic", "password": "p"}, "username"),
        ({"auth": "basic", "username": "u"}, "password"),
        ({"pagination": "cursor"}, "cursor_path"),
        ({"url": "ftp://x"}, "url"),
    ],
)
def test_settings_problems_name_the_key(options: dict[str, Any], where: str) -> None:
    with pytest.raises(ValidationError) as info:
        HttpSourceSettings.model_validate({"type": "http", "url": "http://x/p", **options})
    assert [e["loc"][-1] for e in info.value.errors()] == [where]


def test_relative_token_file_resolves_against_the_config_folder(tmp_path: Path) -> None:
    settings = HttpSourceSettings.model_validate(
        {"type": "http", "url": "http://x/p", "auth": "bearer", "token_file": "secrets/pim"},
        context={"config_dir": tmp_path},
    )
    assert settings.token_file == tmp_path / "secrets" / "pim"


def test_open_source_builds_the_http_source(pim: PimServer) -> None:
    settings = HttpSourceSettings(type="http", url=pim.url("hal"), items_path="_embedded.items")
    assert isinstance(open_source(settings), HttpSource)
