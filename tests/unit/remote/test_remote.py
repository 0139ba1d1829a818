"""The CMS client: envelope, status mapping, retry policy, pagination, secrecy.

Every test drives ``RemoteClient`` through an ``httpx.MockTransport`` backed by
a respx router, so nothing leaves the process and nothing really sleeps: the
sleep, the jitter source and the budget are injected fakes.
"""

from __future__ import annotations

import io
import json
import random
import threading
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
import respx
import structlog
from pydantic import SecretStr

from skuferry import errors, logs
from skuferry.net.retry import BACKOFF_CAP_S, backoff_delay, parse_retry_after
from skuferry.remote.client import RemoteClient

BASE = "http://127.0.0.1:8999"
PRODUCTS = f"{BASE}/api/v1/products"
KEY = "sk-live-TOPSECRET-0123456789"


class MaxRng(random.Random):
    """Jitter that always draws the top of the range: exposes the backoff ceiling."""

    def uniform(self, a: float, b: float) -> float:
        return b


class FakeBudget:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def acquire(self, tier: str, *, stop: threading.Event | None = None) -> None:
        self.calls.append(("acquire", tier))

    def penalize(self, tier: str, seconds: float) -> None:
        self.calls.append(("penalize", (tier, seconds)))


def ok(data: Any, **meta: Any) -> httpx.Response:
    return httpx.Response(200, json={"data": data, "meta": meta})


def fail(status: int, code: str = "", message: str = "nope", **headers: str) -> httpx.Response:
    return httpx.Response(
        status, json={"error": {"code": code, "message": message}}, headers=headers
    )


@pytest.fixture
def router() -> respx.MockRouter:
    return respx.MockRouter(assert_all_called=False, assert_all_mocked=True)


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def make_client(router: respx.MockRouter, sleeps: list[float]) -> Iterator[Any]:
    made: list[RemoteClient] = []

    def make(**kw: Any) -> RemoteClient:
        kw.setdefault("rng", MaxRng())
        client = RemoteClient(
            base_url=BASE + "/",
            api_key=SecretStr(KEY),
            transport=httpx.MockTransport(router.handler),
            sleep=sleeps.append,
            **kw,
        )
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


# -- envelope -------------------------------------------------------------


def test_get_product_returns_data_with_decimals(router: respx.MockRouter, make_client: Any) -> None:
    router.get(f"{PRODUCTS}/p%2F1").mock(
        return_value=httpx.Response(
            200, content=b'{"data": {"id": "p/1", "price": 19.90}, "meta": {}}'
        )
    )
    product = make_client().get_product("p/1")
    assert product == {"id": "p/1", "price": Decimal("19.90")}
    assert str(product["price"]) == "19.90"


def test_create_returns_data_and_sends_decimals_verbatim(
    router: respx.MockRouter, make_client: Any
) -> None:
    route = router.post(PRODUCTS).mock(
        return_value=httpx.Response(201, json={"data": {"id": "r1", "sku": "A"}})
    )
    data = make_client().create_product({"sku": "A", "price": Decimal("19.90")})
    assert data == {"id": "r1", "sku": "A"}
    request = route.calls.last.request
    assert request.content == b'{"price":19.90,"sku":"A"}'
    assert request.headers["Content-Type"] == "application/json"


def test_create_without_id_is_bad_response(router: respx.MockRouter, make_client: Any) -> None:
    router.post(PRODUCTS).mock(return_value=httpx.Response(201, json={"data": {"sku": "A"}}))
    with pytest.raises(errors.BadResponse, match=r"data\.id"):
        make_client().create_product({"sku": "A"})


def test_bearer_and_accept_headers_sent(router: respx.MockRouter, make_client: Any) -> None:
    route = router.get(f"{PRODUCTS}/1").mock(return_value=ok({"id": "1"}))
    make_client().get_product("1")
    headers = route.calls.last.request.headers
    assert headers["Authorization"] == f"Bearer {KEY}"
    assert headers["Accept"] == "application/json"


def test_html_body_is_bad_response_naming_status_type_and_body(
    router: respx.MockRouter, make_client: Any
) -> None:
    html = "<html><body>Welcome to the login portal</body></html>" + "x" * 200
    router.get(f"{PRODUCTS}/1").mock(
        return_value=httpx.Response(
            200, text=html, headers={"Content-Type": "text/html; charset=utf-8"}
        )
    )
    with pytest.raises(errors.BadResponse) as info:
        make_client().get_product("1")
    message = str(info.value)
    assert "not JSON" in message
    assert "HTTP 200" in message
    assert "text/html" in message
    assert "<html><body>Welcome" in message
    assert "x" * 100 not in message  # only the start of the body
    assert info.value.__cause__ is None and info.value.__suppress_context__


@pytest.mark.parametrize(
    "body",
    [
        {"items": []},  # no data
        [1, 2],  # not an object
        {"data": {"id": "1"}, "meta": {"pages": 1}},  # list data not an array
        {"data": [], "meta": {}},  # pages missing
        {"data": [], "meta": {"pages": "3"}},  # pages not an int
        {"data": [], "meta": {"pages": True}},  # bool is not a page count
        {"data": [], "meta": {"pages": -1}},
        {"data": [{"id": "1"}], "meta": {"pages": 0}},  # items on no pages
        {"data": ["a"], "meta": {"pages": 1}},  # items not objects
    ],
)
def test_list_of_wrong_shape_is_bad_response(
    router: respx.MockRouter, make_client: Any, body: Any
) -> None:
    router.get(PRODUCTS).mock(return_value=httpx.Response(200, json=body))
    with pytest.raises(errors.BadResponse, match=r"HTTP 200, content-type application/json"):
        list(make_client().iter_pages())


def test_single_product_data_must_be_object(router: respx.MockRouter, make_client: Any) -> None:
    router.get(f"{PRODUCTS}/1").mock(return_value=ok([1]))
    with pytest.raises(errors.BadResponse, match="not an object"):
        make_client().get_product("1")


# -- status mapping ---------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        (401, "UNAUTHORIZED", errors.AuthError),
        (403, "FORBIDDEN", errors.AuthError),
        (404, "NOT_FOUND", errors.NotFound),
        (405, "METHOD_NOT_ALLOWED", errors.MethodNotAllowed),
        (400, "BAD_REQUEST", errors.Rejected),
        (409, "CONFLICT", errors.Rejected),
        (422, "VALIDATION_FAILED", errors.Rejected),
        (429, "QUOTA_EXCEEDED", errors.QuotaExceeded),
        (429, "RATE_LIMITED", errors.RateLimited),
        (429, "SOMETHING_NEW", errors.RateLimited),
        (500, "INTERNAL", errors.ServerError),
        (503, "", errors.ServerError),
    ],
)
def test_status_maps_to_exception(
    router: respx.MockRouter, make_client: Any, status: int, code: str, expected: type
) -> None:
    router.get(f"{PRODUCTS}/1").mock(return_value=fail(status, code, "the reason"))
    with pytest.raises(errors.HttpError) as info:
        make_client(max_retries=0).get_product("1")
    assert type(info.value) is expected
    assert (info.value.status, info.value.code, info.value.message) == (status, code, "the reason")


def test_error_status_without_envelope_still_maps_by_status(
    router: respx.MockRouter, make_client: Any
) -> None:
    router.patch(f"{PRODUCTS}/1").mock(
        return_value=httpx.Response(
            405, text="<h1>Method Not Allowed</h1>", headers={"Content-Type": "text/html"}
        )
    )
    with pytest.raises(errors.MethodNotAllowed, match="Method Not Allowed"):
        make_client().update_product("1", {"a": 1}, method="patch")


def test_rate_limited_carries_retry_after(router: respx.MockRouter, make_client: Any) -> None:
    router.get(f"{PRODUCTS}/1").mock(
        return_value=fail(429, "RATE_LIMITED", **{"Retry-After": "12"})
    )
    client = make_client(max_retries=0)
    with pytest.raises(errors.RateLimited) as info:
        client.get_product("1")
    assert info.value.retry_after == 12.0
    assert client.rate_limited == 1


# -- retry policy -----------------------------------------------------------


def test_retry_after_seconds_is_slept_without_budget(
    router: respx.MockRouter, make_client: Any, sleeps: list[float]
) -> None:
    route = router.get(f"{PRODUCTS}/1").mock(
        side_effect=[fail(429, "RATE_LIMITED", **{"Retry-After": "7"}), ok({"id": "1"})]
    )
    assert make_client().get_product("1") == {"id": "1"}
    assert sleeps == [7.0]
    assert route.call_count == 2


def test_retry_after_http_date_is_measured_against_server_date(
    router: respx.MockRouter, make_client: Any, sleeps: list[float]
) -> None:
    router.get(f"{PRODUCTS}/1").mock(
        side_effect=[
            fail(
                429,
                "RATE_LIMITED",
                **{
                    "Retry-After": "Wed, 21 Oct 2015 07:28:42 GMT",
                    "Date": "Wed, 21 Oct 2015 07:28:00 GMT",
                },
            ),
            ok({"id": "1"}),
        ]
    )
    make_client().get_product("1")
    assert sleeps == [42.0]


def test_retry_after_goes_to_budget_penalty_not_sleep(
    router: respx.MockRouter, make_client: Any, sleeps: list[float]
) -> None:
    router.post(PRODUCTS).mock(
        side_effect=[
            fail(429, "RATE_LIMITED", **{"Retry-After": "30"}),
            httpx.Response(201, json={"data": {"id": "n"}}),
        ]
    )
    budget = FakeBudget()
    make_client(budget=budget).create_product({"sku": "A"})
    assert budget.calls == [
        ("acquire", "write"),
        ("penalize", ("write", 30.0)),
        ("acquire", "write"),
    ]
    assert sleeps == []


@pytest.mark.parametrize("header", ["soon", "0", "-5", "nan", ""])
def test_unusable_retry_after_falls_back_to_backoff(
    router: respx.MockRouter, make_client: Any, sleeps: list[float], header: str
) -> None:
    router.get(f"{PRODUCTS}/1").mock(
        side_effect=[fail(429, "RATE_LIMITED", **{"Retry-After": header}), ok({"id": "1"})]
    )
    make_client().get_product("1")
    assert sleeps == [1.0]  # the first backoff ceiling, drawn at its top by MaxRng


def test_server_error_retry_after_is_honoured_for_reads(
    router: respx.MockRouter, make_client: Any, sleeps: list[float]
) -> None:
    router.get(f"{PRODUCTS}/1").mock(
        side_effect=[fail(503, **{"Retry-After": "5"}), ok({"id": "1"})]
    )
    make_client().get_product("1")
    assert sleeps == [5.0]


@pytest.mark.parametrize(
    ("header", "date", "expected"),
    [
        ("30", None, 30.0),
        (" 1.5 ", None, 1.5),
        ("Wed, 21 Oct 2015 07:28:10 GMT", "Wed, 21 Oct 2015 07:28:00 GMT", 10.0),
        ("Wed, 21 Oct 2015 07:28:10 -0000", "Wed, 21 Oct 2015 07:28:00 GMT", 10.0),
        ("Wed, 21 Oct 2015 07:27:00 GMT", "Wed, 21 Oct 2015 07:28:00 GMT", None),  # past
        ("Wed, 21 Oct 2015 07:28:00 GMT", None, None),  # past by our own clock
        ("inf", None, None),
        (None, None, None),
    ],
)
def test_parse_retry_after(header: str | None, date: str | None, expected: float | None) -> None:
    assert parse_retry_after(header, date_header=date) == expected


def test_backoff_doubles_per_retry(
    router: respx.MockRouter, make_client: Any, sleeps: list[float]
) -> None:
    router.get(f"{PRODUCTS}/1").mock(side_effect=[fail(503)] * 3 + [ok({"id": "1"})])
    make_client().get_product("1")
    assert sleeps == [1.0, 2.0, 4.0]


def test_backoff_is_full_jitter_within_zero_and_capped_ceiling() -> None:
    rng = random.Random(7)
    draws = [backoff_delay(n, rng=rng) for n in range(12) for _ in range(20)]
    ceilings = [min(BACKOFF_CAP_S, 2.0**n) for n in range(12) for _ in range(20)]
    assert all(0 <= d <= c for d, c in zip(draws, ceilings, strict=True))
    assert len(set(draws)) > 200  # really random, not the ceiling every time
    assert backoff_delay(50, rng=MaxRng()) == BACKOFF_CAP_S


def test_backoff_uses_injected_rng(
    router: respx.MockRouter, make_client: Any, sleeps: list[float]
) -> None:
    router.get(f"{PRODUCTS}/1").mock(side_effect=[fail(503), fail(503), ok({"id": "1"})])
    make_client(rng=random.Random(3)).get_product("1")
    expected = random.Random(3)
    assert sleeps == [expected.uniform(0, 1.0), expected.uniform(0, 2.0)]


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        (fail(503), errors.ServerError),
        # 429 RATE_LIMITED left this list with issue 12: being paced is not a failure, so
        # it is retried until its waits add up to RATE_LIMITED_GIVE_UP_S (test below).
        (httpx.ConnectError, errors.Unreachable),
        (httpx.ReadTimeout, errors.TransportError),
    ],
)
def test_at_most_three_retries_then_the_error(
    router: respx.MockRouter,
    make_client: Any,
    sleeps: list[float],
    response: Any,
    expected: type,
) -> None:
    route = router.get(f"{PRODUCTS}/1").mock(side_effect=[response] * 10)
    with pytest.raises(expected):
        make_client().get_product("1")
    assert route.call_count == 4
    assert len(sleeps) == 3


def test_rate_limited_is_retried_until_the_waits_add_up_to_the_bound(
    router: respx.MockRouter, make_client: Any, sleeps: list[float]
) -> None:
    route = router.get(f"{PRODUCTS}/1").mock(
        side_effect=[fail(429, "RATE_LIMITED", **{"Retry-After": "40"})] * 30
    )
    with pytest.raises(errors.RateLimited):
        make_client().get_product("1")
    # 15 waits of 40 s reach the 600 s bound; the 16th answer is the last
    assert sleeps == [40.0] * 15
    assert route.call_count == 16


def test_rate_limited_then_served_is_no_failure_after_more_than_three(
    router: respx.MockRouter, make_client: Any, sleeps: list[float]
) -> None:
    router.post(PRODUCTS).mock(
        side_effect=[
            *[fail(429, "RATE_LIMITED", **{"Retry-After": "2"})] * 6,
            httpx.Response(201, json={"data": {"id": "n"}}),
        ]
    )
    assert make_client().create_product({"sku": "A"})["id"] == "n"
    assert sleeps == [2.0] * 6


def test_quota_exceeded_is_not_retried(
    router: respx.MockRouter, make_client: Any, sleeps: list[float]
) -> None:
    route = router.get(f"{PRODUCTS}/1").mock(
        return_value=fail(429, "QUOTA_EXCEEDED", **{"Retry-After": "5"})
    )
    client = make_client()
    with pytest.raises(errors.QuotaExceeded):
        client.get_product("1")
    assert route.call_count == 1
    assert sleeps == []
    assert client.rate_limited == 0


def test_retry_after_beyond_the_window_gives_up(
    router: respx.MockRouter, make_client: Any, sleeps: list[float]
) -> None:
    route = router.get(f"{PRODUCTS}/1").mock(
        return_value=fail(429, "RATE_LIMITED", **{"Retry-After": "86400"})
    )
    with pytest.raises(errors.RateLimited):
        make_client().get_product("1")
    assert route.call_count == 1
    assert sleeps == []


@pytest.mark.parametrize(
    "effect",
    [
        httpx.ReadTimeout,
        httpx.WriteTimeout,
        httpx.RemoteProtocolError,
        httpx.ReadError,
        fail(500),
        fail(502, "BAD_GATEWAY"),
        httpx.Response(503, text="<html>down</html>"),
    ],
)
def test_post_never_retried_once_it_may_have_landed(
    router: respx.MockRouter, make_client: Any, sleeps: list[float], effect: Any
) -> None:
    route = router.post(PRODUCTS).mock(
        side_effect=[effect, httpx.Response(201, json={"data": {"id": "dup"}})]
    )
    with pytest.raises(errors.OutcomeUnknown, match="may have been applied"):
        make_client().create_product({"sku": "A"})
    assert route.call_count == 1
    assert sleeps == []


def test_post_not_retried_on_rejection(router: respx.MockRouter, make_client: Any) -> None:
    route = router.post(PRODUCTS).mock(return_value=fail(422, "VALIDATION_FAILED", "bad price"))
    with pytest.raises(errors.Rejected, match="bad price"):
        make_client().create_product({"sku": "A"})
    assert route.call_count == 1


@pytest.mark.parametrize(
    "first",
    [
        fail(429, "RATE_LIMITED", **{"Retry-After": "3"}),
        httpx.ConnectError,
        httpx.ConnectTimeout,
        httpx.PoolTimeout,
    ],
)
def test_post_retried_when_the_server_did_not_process_it(
    router: respx.MockRouter, make_client: Any, first: Any
) -> None:
    route = router.post(PRODUCTS).mock(
        side_effect=[first, httpx.Response(201, json={"data": {"id": "r1"}})]
    )
    client = make_client()
    assert client.create_product({"sku": "A"})["id"] == "r1"
    assert route.call_count == 2
    assert client.requests == {"read": 0, "write": 2}


def test_post_unreachable_after_retries(router: respx.MockRouter, make_client: Any) -> None:
    route = router.post(PRODUCTS).mock(side_effect=httpx.ConnectError)
    with pytest.raises(errors.Unreachable):
        make_client().create_product({"sku": "A"})
    assert route.call_count == 4


@pytest.mark.parametrize(("method", "verb"), [("patch", "PATCH"), ("put", "PUT")])
def test_update_uses_the_chosen_method(
    router: respx.MockRouter, make_client: Any, method: str, verb: str
) -> None:
    patch = router.patch(f"{PRODUCTS}/7").mock(return_value=ok({"id": "7", "v": 2}))
    put = router.put(f"{PRODUCTS}/7").mock(return_value=ok({"id": "7", "v": 2}))
    data = make_client().update_product("7", {"v": 2}, method=method)
    assert data == {"id": "7", "v": 2}
    assert (patch.call_count, put.call_count) == ((1, 0) if verb == "PATCH" else (0, 1))
    sent = (patch if verb == "PATCH" else put).calls.last.request
    assert sent.method == verb and sent.content == b'{"v":2}'


def test_update_accepts_no_content(router: respx.MockRouter, make_client: Any) -> None:
    router.put(f"{PRODUCTS}/7").mock(return_value=httpx.Response(204))
    assert make_client().update_product("7", {"v": 2}, method="put") == {}


# -- budget, counters, stop -------------------------------------------------


def test_budget_acquired_once_per_attempt_with_tier(
    router: respx.MockRouter, make_client: Any
) -> None:
    router.get(f"{PRODUCTS}/1").mock(side_effect=[fail(503), ok({"id": "1"})])
    router.post(PRODUCTS).mock(
        side_effect=[httpx.ConnectError, httpx.Response(201, json={"data": {"id": "2"}})]
    )
    router.put(f"{PRODUCTS}/2").mock(return_value=ok({"id": "2"}))
    budget = FakeBudget()
    client = make_client(budget=budget)
    client.get_product("1")
    client.create_product({"sku": "B"})
    client.update_product("2", {"sku": "B"}, method="put")
    assert [c for c in budget.calls if c[0] == "acquire"] == [
        ("acquire", "read"),
        ("acquire", "read"),
        ("acquire", "write"),
        ("acquire", "write"),
        ("acquire", "write"),
    ]
    assert client.requests == {"read": 2, "write": 3}


def test_stop_prevents_new_attempts(
    router: respx.MockRouter, make_client: Any, sleeps: list[float]
) -> None:
    stop = threading.Event()

    def stop_then_fail(request: httpx.Request) -> httpx.Response:
        stop.set()
        return fail(503)

    route = router.get(f"{PRODUCTS}/1").mock(side_effect=stop_then_fail)
    client = make_client(stop=stop)
    with pytest.raises(errors.Interrupted):
        client.get_product("1")
    assert route.call_count == 1  # the in-flight request finished; no retry was started
    assert client.requests["read"] == 1


def test_concurrent_writes_are_all_counted(router: respx.MockRouter, make_client: Any) -> None:
    router.post(PRODUCTS).mock(return_value=httpx.Response(201, json={"data": {"id": "x"}}))
    client = make_client()
    threads = [
        threading.Thread(target=lambda: [client.create_product({"n": i}) for i in range(25)])
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert client.requests["write"] == 200


# -- pagination -------------------------------------------------------------


def paged(pages_by_page: dict[int, int], per_page: int = 2) -> Any:
    def handler(request: httpx.Request) -> httpx.Response:
        page = int(request.url.params["page"])
        items = [{"id": f"{page}-{i}"} for i in range(per_page)]
        return ok(items, pages=pages_by_page[page])

    return handler


def test_pagination_walks_every_page_and_stops_at_meta_pages(
    router: respx.MockRouter, make_client: Any
) -> None:
    route = router.get(PRODUCTS).mock(side_effect=paged({1: 3, 2: 3, 3: 3, 4: 3}))
    walked = list(make_client().iter_pages())
    assert [(p, n, [i["id"] for i in items]) for p, n, items in walked] == [
        (1, 3, ["1-0", "1-1"]),
        (2, 3, ["2-0", "2-1"]),
        (3, 3, ["3-0", "3-1"]),
    ]
    assert route.call_count == 3
    assert [dict(c.request.url.params) for c in route.calls] == [
        {"limit": "100", "page": str(n)} for n in (1, 2, 3)
    ]


def test_pagination_follows_latest_meta_pages(router: respx.MockRouter, make_client: Any) -> None:
    route = router.get(PRODUCTS).mock(side_effect=paged({1: 2, 2: 3, 3: 3}))
    ids = [p["id"] for p in make_client().iter_products()]
    assert ids == ["1-0", "1-1", "2-0", "2-1", "3-0", "3-1"]
    assert route.call_count == 3


def test_zero_pages_yields_nothing(router: respx.MockRouter, make_client: Any) -> None:
    route = router.get(PRODUCTS).mock(return_value=ok([], pages=0))
    assert list(make_client().iter_products()) == []
    assert route.call_count == 1


def test_endless_server_is_not_walked_forever(router: respx.MockRouter, make_client: Any) -> None:
    def endless(request: httpx.Request) -> httpx.Response:
        page = int(request.url.params["page"])
        assert page < 1000, "the client kept walking an endless list"
        return ok([{"id": "x"}], pages=page + 1)

    router.get(PRODUCTS).mock(side_effect=endless)
    with pytest.raises(errors.BadResponse, match="kept growing"):
        list(make_client().iter_pages())


def test_pagination_stops_when_the_list_shrinks(router: respx.MockRouter, make_client: Any) -> None:
    route = router.get(PRODUCTS).mock(side_effect=paged({1: 3, 2: 2, 3: 2}))
    assert [p for p, _n, _items in make_client().iter_pages()] == [1, 2]
    assert route.call_count == 2


def test_an_empty_page_does_not_end_the_walk(router: respx.MockRouter, make_client: Any) -> None:
    # Whether the pages add up is the walk's proof to judge (sync/write/walks.py): the client walks
    # on to meta.pages and hands over every page as it came, the empty one included.
    route = router.get(PRODUCTS).mock(
        side_effect=[ok([{"id": "a"}], pages=3), ok([], pages=3), ok([{"id": "c"}], pages=3)]
    )
    walked = list(make_client().iter_pages())
    assert [(p, n, [i["id"] for i in items]) for p, n, items in walked] == [
        (1, 3, ["a"]),
        (2, 3, []),
        (3, 3, ["c"]),
    ]
    assert route.call_count == 3


def test_a_page_past_a_shrunk_count_is_handed_over(
    router: respx.MockRouter, make_client: Any
) -> None:
    router.get(PRODUCTS).mock(side_effect=paged({1: 3, 2: 3, 3: 2}))
    assert [(p, n) for p, n, _items in make_client().iter_pages()] == [(1, 3), (2, 3), (3, 2)]


def test_probe_reads_one_item_for_the_page_count(
    router: respx.MockRouter, make_client: Any
) -> None:
    route = router.get(PRODUCTS).mock(return_value=ok([{"id": "a"}], pages=42))
    assert make_client().probe() == 42
    assert dict(route.calls.last.request.url.params) == {"limit": "1", "page": "1"}


# -- secrecy ----------------------------------------------------------------


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    saved = structlog.get_config()
    stream = io.StringIO()
    logs.configure(level="debug", json=True, stream=stream)
    yield stream
    structlog.configure(**saved)


def test_key_never_in_logs_nor_errors(
    router: respx.MockRouter, make_client: Any, log_stream: io.StringIO
) -> None:
    echo = f"token {KEY} is not allowed"
    router.get(f"{PRODUCTS}/1").mock(
        side_effect=[
            fail(429, "RATE_LIMITED", **{"Retry-After": "1"}),
            fail(503, "X", echo),
            fail(401, "UNAUTHORIZED", echo),
        ]
    )
    router.post(PRODUCTS).mock(side_effect=[httpx.ConnectError, httpx.ReadTimeout])
    router.get(f"{PRODUCTS}/2").mock(return_value=httpx.Response(200, text=f"<p>{KEY}</p>"))
    client = make_client()
    raised: list[str] = []
    calls: tuple[Callable[[], object], ...] = (
        lambda: client.get_product("1"),
        lambda: client.create_product({"a": 1}),
        lambda: client.get_product("2"),
    )
    for call in calls:
        with pytest.raises(errors.ApiError) as info:
            call()
        raised.append(str(info.value))
    output = log_stream.getvalue()
    events = [json.loads(line)["event"] for line in output.splitlines()]
    assert {"api.request", "api.retry", "api.rate_limited"} <= set(events)
    assert KEY not in output
    assert raised and not any(KEY in message for message in raised)
    assert "***" in raised[0] and "***" in raised[2]
    assert KEY not in repr(client)
