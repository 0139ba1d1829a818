"""The requester the API sources share: one page's request sent, read within its bound, named.

A mock transport stands in for the API; what is asserted is what a user reads.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from skuferry import logs
from skuferry.config.schema import HttpSourceSettings
from skuferry.errors import SourceError
from skuferry.sources.api import ApiConnection
from skuferry.sources.paginators import Ask
from skuferry.sources.requester import Requester
from skuferry.sources.wiring import Wiring

URL = "https://pim.example.com/api/products"


class Untouchable(httpx.SyncByteStream):
    """A body that must not be read: its declared length already refuses it."""

    def __iter__(self) -> Iterator[bytes]:
        raise AssertionError("the body was read although its Content-Length is too large")


def requester(answer: Any, *, show: bool = True, max_bytes: int = 100) -> tuple[Requester, Any]:
    settings = HttpSourceSettings.model_validate({"type": "http", "url": URL, "max_retries": 1})
    wiring = Wiring(
        transport=httpx.MockTransport(answer), sleep=lambda _s: None, rng=random.Random(1)
    )
    api = ApiConnection(settings, wiring)
    built = Requester(
        api,
        name=f"http {URL}",
        build=lambda client, ask: client.build_request("GET", ask.url, params=ask.params),
        log=logs.get(__name__),
        event="source.test",
        max_bytes=max_bytes,
        advice="smaller pages",
        show=(lambda url: str(url).replace("s3cr3t", "***")) if show else None,
    )
    return built, api


def fetch(built: Requester, api: ApiConnection, params: dict[str, Any] | None = None) -> Any:
    with api.client() as client:
        return built.fetch(client, Ask(URL, params), 3, lambda _answer, body: body)


def test_a_declared_length_past_the_bound_is_refused_before_a_byte_is_read() -> None:
    def answer(_request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"Content-Length": "5000"}, stream=Untouchable())

    built, api = requester(answer)
    with pytest.raises(SourceError) as caught:
        fetch(built, api)
    assert str(caught.value) == (
        f"http {URL}: page 3 ({URL}) is larger than max_page_bytes (100 bytes); "
        "ask for smaller pages"
    )


def test_a_body_past_the_bound_without_a_length_is_cut_while_read() -> None:
    def chunks() -> Iterator[bytes]:
        yield b"[" + b"1," * 60
        yield b"1]"

    def answer(_request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=chunks())

    built, api = requester(answer)
    with pytest.raises(SourceError, match=r"page 3 \(.*\) is larger than max_page_bytes"):
        fetch(built, api)


def test_a_page_that_keeps_failing_names_the_request_it_sent_secrets_masked() -> None:
    built, api = requester(lambda _request: httpx.Response(503))
    with pytest.raises(SourceError) as caught:
        fetch(built, api, {"token": "s3cr3t", "page": 3})
    assert str(caught.value) == (
        f"http {URL}: page 3 ({URL}?token=***&page=3) failed after 2 attempt(s): HTTP 503"
    )


def test_without_show_no_url_is_named() -> None:
    built, api = requester(lambda _request: httpx.Response(200, text="<html>"), show=False)
    with pytest.raises(SourceError) as caught:
        fetch(built, api)
    assert str(caught.value) == (
        f"http {URL}: page 3 is not JSON (content-type text/plain; charset=utf-8, "
        "body starts '<html>')"
    )


def test_a_final_4xx_is_refused_with_the_apis_message() -> None:
    answer = httpx.Response(403, json={"message": "no access to channel"})
    built, api = requester(lambda _request: answer)
    with pytest.raises(SourceError) as caught:
        fetch(built, api)
    assert str(caught.value) == (
        f"http {URL}: page 3 ({URL}) answered HTTP 403: no access to channel "
        "(the credentials were refused)"
    )


def test_the_decoded_body_goes_to_accept() -> None:
    built, api = requester(lambda _request: httpx.Response(200, json={"items": [1, 2]}))
    assert fetch(built, api) == {"items": [1, 2]}
