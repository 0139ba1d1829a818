"""The one retry loop (net/retry.py) and every client that uses it: Retry-After, backoff, stop.

respx stands in for the servers and a fake ``sleep`` records the waits (advancing a
fake clock where a client paces), so nothing leaves the process and nothing really
sleeps. A "SIGTERM during the wait" is a fake sleep that sets the stop event, or a
stop event whose ``wait`` returns at once as if it had been set meanwhile.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest
import respx
from pydantic import SecretStr

from skuferry import errors
from skuferry.config.schema import GraphqlSourceSettings, HttpSourceSettings
from skuferry.net.retry import (
    Failed,
    backoff_delay,
    pause,
    retry_after,
    retrying,
    transport_problem,
)
from skuferry.remote.client import RemoteClient
from skuferry.sources.dispatch import open_source
from skuferry.sources.graphql import GraphqlSource
from skuferry.sources.http import HttpSource
from skuferry.sources.wiring import Wiring

URL = "https://pim.example.com/api/items"


class Sleeps(list[float]):
    """A fake sleep: records each wait; ``stop_on`` sets a stop event on the n-th (1-based)."""

    def __init__(self, stop: threading.Event | None = None, stop_on: int = 0) -> None:
        super().__init__()
        self.stop = stop
        self.stop_on = stop_on

    def __call__(self, seconds: float) -> None:
        self.append(seconds)
        if self.stop is not None and len(self) == self.stop_on:
            self.stop.set()  # SIGTERM arrives while we wait


class SignalledStop(threading.Event):
    """A stop event that is set while anyone waits on it: ``wait`` records and returns True."""

    def __init__(self) -> None:
        super().__init__()
        self.waited: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waited.append(timeout)
        self.set()
        return True


@pytest.fixture
def router() -> respx.MockRouter:
    return respx.MockRouter(assert_all_called=False, assert_all_mocked=True)


def get(
    router: respx.MockRouter,
    *,
    retries: int = 3,
    sleep: Callable[[float], None],
    stop: threading.Event | None = None,
    rng: random.Random | None = None,
    on_retry: Callable[[Failed, int, float], None] | None = None,
) -> httpx.Response:
    """A GET through the loop, retried on connect errors, 429 and 5xx, as the clients do."""
    rng = rng or random.Random(3)
    with httpx.Client(transport=httpx.MockTransport(router.handler)) as client:

        def attempt() -> httpx.Response | Failed:
            try:
                response = client.get(URL)
            except httpx.TransportError as exc:
                return Failed(transport_problem(exc))
            if response.status_code == 429 or response.status_code >= 500:
                return Failed(f"HTTP {response.status_code}", wait=retry_after(response.headers))
            return response

        return retrying(
            attempt,
            retries=retries,
            backoff=lambda n: backoff_delay(n, rng=rng),
            give_up=lambda failed, n: errors.SourceError(f"failed after {n}: {failed.problem}"),
            on_retry=on_retry,
            stop=stop,
            sleep=sleep,
            what=f"GET {URL}",
        )


def http_date(when: datetime) -> str:
    return format_datetime(when.astimezone(UTC), usegmt=True)


# -- the loop ---------------------------------------------------------------------------


def test_retry_after_in_seconds_is_waited_exactly(router: respx.MockRouter) -> None:
    router.get(URL).mock(
        side_effect=[
            httpx.Response(503, headers={"Retry-After": "7"}),
            httpx.Response(429, headers={"Retry-After": "1.5"}),
            httpx.Response(200),
        ]
    )
    sleeps = Sleeps()
    assert get(router, sleep=sleeps).status_code == 200
    assert sleeps == [7.0, 1.5]  # not a backoff longer or shorter than the server asked


def test_retry_after_as_an_http_date_is_counted_on_the_servers_clock(
    router: respx.MockRouter,
) -> None:
    server_now = datetime(2026, 3, 2, 9, 0, 0, tzinfo=UTC)  # the server's clock is off by days
    router.get(URL).mock(
        side_effect=[
            httpx.Response(
                503,
                headers={
                    "Date": http_date(server_now),
                    "Retry-After": http_date(server_now + timedelta(seconds=90)),
                },
            ),
            httpx.Response(200),
        ]
    )
    sleeps = Sleeps()
    get(router, sleep=sleeps)
    assert sleeps == [90.0]


@pytest.mark.parametrize("header", [None, "0", "soon", "Wed, 21 Oct 2015 07:28:00 GMT"])
def test_without_a_usable_retry_after_the_wait_is_the_jittered_backoff(
    router: respx.MockRouter, header: str | None
) -> None:
    headers = {} if header is None else {"Retry-After": header}
    router.get(URL).mock(
        side_effect=[httpx.Response(503, headers=headers)] * 2 + [httpx.Response(200)]
    )
    sleeps = Sleeps()
    get(router, sleep=sleeps, rng=random.Random(11))
    expected = random.Random(11)
    assert sleeps == [backoff_delay(n, rng=expected) for n in (0, 1)]


def test_the_retries_run_out_and_give_up_counts_the_attempts(router: respx.MockRouter) -> None:
    route = router.get(URL).mock(side_effect=httpx.ConnectError("refused"))
    sleeps = Sleeps()
    with pytest.raises(errors.SourceError, match=r"failed after 3: ConnectError: refused"):
        get(router, retries=2, sleep=sleeps)
    assert route.call_count == 3 and len(sleeps) == 2


def test_no_retries_means_one_attempt_and_no_wait(router: respx.MockRouter) -> None:
    route = router.get(URL).mock(return_value=httpx.Response(503))
    sleeps = Sleeps()
    with pytest.raises(errors.SourceError, match="failed after 1: HTTP 503"):
        get(router, retries=0, sleep=sleeps)
    assert route.call_count == 1 and sleeps == []


def test_a_final_answer_is_not_retried(router: respx.MockRouter) -> None:
    route = router.get(URL).mock(return_value=httpx.Response(404))
    sleeps = Sleeps()
    assert get(router, sleep=sleeps).status_code == 404
    assert route.call_count == 1 and sleeps == []


def test_on_retry_hears_each_retry_before_its_wait(router: respx.MockRouter) -> None:
    router.get(URL).mock(
        side_effect=[httpx.Response(503, headers={"Retry-After": "4"})] * 2 + [httpx.Response(200)]
    )
    heard: list[tuple[str, int, float]] = []
    sleeps = Sleeps()
    get(router, sleep=sleeps, on_retry=lambda f, n, d: heard.append((f.problem, n, d)))
    assert heard == [("HTTP 503", 1, 4.0), ("HTTP 503", 2, 4.0)]


def test_uncounted_failures_do_not_use_up_the_retries() -> None:
    answers: list[str | Failed] = [
        Failed("paced", wait=2.0, counted=False),
        Failed("paced", wait=2.0, counted=False),
        Failed("HTTP 503", wait=1.0),
        Failed("paced", wait=2.0, counted=False),
        "done",
    ]
    sleeps = Sleeps()
    got = retrying(
        lambda: answers.pop(0),
        retries=1,
        backoff=lambda n: 99.0,
        give_up=lambda f, n: RuntimeError(f.problem),
        sleep=sleeps,
    )
    assert got == "done" and sleeps == [2.0, 2.0, 1.0, 2.0]


def test_a_deferred_wait_is_handed_over_instead_of_slept() -> None:
    handed: list[float] = []
    answers: list[str | Failed] = [Failed("rate_limited", wait=30.0, defer=handed.append), "ok"]
    sleeps = Sleeps()
    got = retrying(
        lambda: answers.pop(0),
        retries=3,
        backoff=lambda n: 1.0,
        give_up=lambda f, n: RuntimeError(f.problem),
        sleep=sleeps,
    )
    assert got == "ok" and handed == [30.0] and sleeps == []


def test_a_stop_during_a_wait_ends_the_loop_without_another_request(
    router: respx.MockRouter,
) -> None:
    route = router.get(URL).mock(return_value=httpx.Response(503, headers={"Retry-After": "600"}))
    stop = threading.Event()
    sleeps = Sleeps(stop, stop_on=1)
    with pytest.raises(errors.Interrupted, match=f"waiting to retry GET {URL}"):
        get(router, sleep=sleeps, stop=stop)
    assert route.call_count == 1 and sleeps == [600.0]


def test_a_real_wait_is_a_wait_on_the_stop_event(router: respx.MockRouter) -> None:
    # the default sleep: the wait is stop.wait(seconds), which a SIGTERM ends at once
    route = router.get(URL).mock(return_value=httpx.Response(503, headers={"Retry-After": "3"}))
    stop = SignalledStop()
    with pytest.raises(errors.Interrupted):
        get(router, sleep=time.sleep, stop=stop)
    assert stop.waited == [3.0] and route.call_count == 1


def test_pause_without_a_stop_sleeps_and_with_one_set_reports_it() -> None:
    sleeps = Sleeps()
    assert pause(2.0, stop=None, sleep=sleeps) is False and sleeps == [2.0]
    stop = threading.Event()
    assert pause(2.0, stop=stop, sleep=sleeps) is False
    stop.set()
    assert pause(2.0, stop=stop) is True  # stop.wait: returns at once, nothing slept


def test_negative_retries_are_refused() -> None:
    with pytest.raises(ValueError, match="retries"):
        retrying(lambda: 1, retries=-1, backoff=lambda n: 1.0, give_up=lambda f, n: ValueError())


# -- every client of the loop honours the stop ------------------------------------------


def http_settings(**options: Any) -> HttpSourceSettings:
    return HttpSourceSettings.model_validate(
        {"type": "http", "url": URL, "items_path": "items", "pagination": "none", **options}
    )


def test_the_http_source_ends_a_backoff_wait_on_stop(router: respx.MockRouter) -> None:
    route = router.get(URL).mock(return_value=httpx.Response(503, headers={"Retry-After": "120"}))
    stop = threading.Event()
    sleeps = Sleeps(stop, stop_on=1)
    source = HttpSource(
        http_settings(max_retries=5),
        Wiring(transport=httpx.MockTransport(router.handler), sleep=sleeps, stop=stop),
    )
    with pytest.raises(errors.Interrupted, match="page 1"):
        list(source.records())
    assert route.call_count == 1 and sleeps == [120.0]


def test_open_source_hands_the_engines_stop_to_an_api_source() -> None:
    # the engine opens the source with its stop event; a real wait is then a stop.wait
    stop = SignalledStop()
    with respx.mock(assert_all_mocked=True) as mock:
        route = mock.get(URL).mock(return_value=httpx.Response(503, headers={"Retry-After": "2"}))
        source = open_source(http_settings(max_retries=5), stop=stop)
        with pytest.raises(errors.Interrupted):
            list(source.records())
    assert stop.waited == [2.0] and route.call_count == 1


def test_the_graphql_source_ends_a_backoff_wait_on_stop(router: respx.MockRouter) -> None:
    gql = "https://shop.example.com/graphql.json"
    route = router.post(gql).mock(return_value=httpx.Response(502))
    stop = threading.Event()
    sleeps = Sleeps(stop, stop_on=1)
    settings = GraphqlSourceSettings.model_validate(
        {
            "type": "graphql",
            "url": gql,
            "query": "query($cursor: String) { items(after: $cursor) { sku } }",
            "items_path": "data.items",
            "max_retries": 4,
        }
    )
    source = GraphqlSource(
        settings, Wiring(transport=httpx.MockTransport(router.handler), sleep=sleeps, stop=stop)
    )
    with pytest.raises(errors.Interrupted):
        list(source.records())
    assert route.call_count == 1 and len(sleeps) == 1


def test_the_oauth2_token_request_ends_a_backoff_wait_on_stop(router: respx.MockRouter) -> None:
    token_url = "https://login.example.net/token"
    route = router.post(token_url).mock(return_value=httpx.Response(503))
    stop = threading.Event()
    sleeps = Sleeps(stop, stop_on=1)
    settings = http_settings(
        auth="oauth2", token_url=token_url, client_id="c-1", client_secret="s-Qw8zX1v"
    )
    source = HttpSource(
        settings, Wiring(transport=httpx.MockTransport(router.handler), sleep=sleeps, stop=stop)
    )
    with pytest.raises(errors.Interrupted, match="token request"):
        list(source.records())
    assert route.call_count == 1 and sleeps == [1.0]


def test_the_oauth2_token_request_obeys_retry_after(router: respx.MockRouter) -> None:
    token_url = "https://login.example.net/token"
    router.post(token_url).mock(
        side_effect=[
            httpx.Response(429, headers={"Retry-After": "12"}),
            httpx.Response(200, json={"access_token": "at-1", "token_type": "Bearer"}),
        ]
    )
    router.get(URL).mock(return_value=httpx.Response(200, json={"items": [{"sku": "A"}]}))
    sleeps = Sleeps()
    settings = http_settings(
        auth="oauth2", token_url=token_url, client_id="c-1", client_secret="s-Qw8zX1v"
    )
    source = HttpSource(
        settings, Wiring(transport=httpx.MockTransport(router.handler), sleep=sleeps)
    )
    assert len(list(source.records())) == 1
    assert sleeps == [12.0]


def test_the_cms_client_ends_a_backoff_wait_on_stop(router: respx.MockRouter) -> None:
    products = "https://cms.example.com/api/v1/products/7"
    route = router.get(products).mock(return_value=httpx.Response(503))
    stop = threading.Event()
    sleeps = Sleeps(stop, stop_on=1)
    client = RemoteClient(
        base_url="https://cms.example.com",
        api_key=SecretStr("k-test"),
        transport=httpx.MockTransport(router.handler),
        sleep=sleeps,
        rng=random.Random(5),
        stop=stop,
    )
    with client, pytest.raises(errors.Interrupted, match="GET /api/v1/products/7"):
        client.get_product("7")
    assert route.call_count == 1 and len(sleeps) == 1
