"""The CMS client paced at its gate: the budget asked once per request on the wire,
with that request's tier, in the sending thread, and the key it names put on.

Retries stay the client's: the gate only paces. A respx router stands in for the
CMS; the budgets are recording fakes, or the real one on a fake clock.
"""

from __future__ import annotations

import io
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import respx
from pydantic import SecretStr

from skuferry import errors, logs
from skuferry.config.keys import fingerprint
from skuferry.net.transport import OffOriginError
from skuferry.remote import client as client_module
from skuferry.remote import priority
from skuferry.remote.budget import Budget
from skuferry.remote.client import RemoteClient
from skuferry.state.budgetbook import BudgetBook
from skuferry.state.schema import open_state
from tests.fakes import FakeClock

BASE = "http://127.0.0.1:8998"
PRODUCTS = f"{BASE}/api/v1/products"
KEYS = ["sk-pace-first-1111", "sk-pace-second-2222", "sk-pace-third-3333"]
FPS = [fingerprint(SecretStr(k)) for k in KEYS]
START = 1_700_000_000.0


class NamingBudget:
    """Names the keys in ``order`` (or none), and records what it was asked."""

    def __init__(self, order: list[str] | None = None) -> None:
        self.order = list(order or [])
        self.acquired: list[tuple[str, bool]] = []  # (tier, the sending thread urgent?)
        self.penalized: list[tuple[str, float, str | None]] = []
        self.lock = threading.Lock()

    def acquire(self, tier: str, *, stop: threading.Event | None = None) -> str | None:
        with self.lock:
            self.acquired.append((tier, priority.is_urgent()))
            return self.order.pop(0) if self.order else None

    def penalize(self, tier: str, seconds: float, *, key: str | None = None) -> None:
        self.penalized.append((tier, seconds, key))


def created(_request: httpx.Request) -> httpx.Response:
    return httpx.Response(201, json={"data": {"id": "n1"}})


def client_for(router: respx.MockRouter, budget: Any, *, keys: list[str] = KEYS) -> RemoteClient:
    return RemoteClient(
        base_url=BASE,
        api_keys=[SecretStr(k) for k in keys],
        budget=budget,
        transport=httpx.MockTransport(router.handler),
        sleep=lambda _s: None,
    )


@pytest.fixture
def router() -> respx.MockRouter:
    return respx.MockRouter(assert_all_called=False, assert_all_mocked=True)


@pytest.fixture
def log_stream() -> io.StringIO:
    stream = io.StringIO()  # every test gets the logging configuration back (tests/conftest)
    logs.configure(level="debug", json=True, stream=stream)
    return stream


def events(stream: io.StringIO, name: str) -> list[dict[str, Any]]:
    found = [json.loads(line) for line in stream.getvalue().splitlines()]
    return [e for e in found if e["event"] == name]


def bearer(request: httpx.Request) -> str:
    return request.headers["Authorization"].removeprefix("Bearer ")


def test_each_attempt_goes_with_the_key_the_budget_named_and_its_429_blames_that_key(
    router: respx.MockRouter, log_stream: io.StringIO
) -> None:
    limited = httpx.Response(
        429, headers={"Retry-After": "2"}, json={"error": {"code": "RATE_LIMITED"}}
    )
    route = router.post(PRODUCTS).mock(
        side_effect=[limited, httpx.Response(201, json={"data": {"id": "n1"}})]
    )
    budget = NamingBudget([FPS[1], FPS[2]])
    with client_for(router, budget) as client:
        assert client.create_product({"sku": "A"}) == {"id": "n1"}
    # a write refused with RATE_LIMITED was provably not applied: the client sends it again
    assert [bearer(c.request) for c in route.calls] == [KEYS[1], KEYS[2]]
    assert budget.acquired == [("write", False), ("write", False)]
    assert budget.penalized == [("write", 2.0, FPS[1])], "the wait blames the key that was told"
    assert client.requests == {"read": 0, "write": 2}
    assert client.requests_by_key == {FPS[1]: 1, FPS[2]: 1}
    assert [e["key"] for e in events(log_stream, "api.rate_limited")] == [FPS[1]]
    assert [e["key"] for e in events(log_stream, "api.retry")] == [FPS[1]]
    assert not any(k in log_stream.getvalue() for k in KEYS)


def test_a_write_whose_outcome_is_unknown_is_paced_and_sent_once(
    router: respx.MockRouter,
) -> None:
    route = router.patch(f"{PRODUCTS}/7").mock(return_value=httpx.Response(503))
    budget = NamingBudget([FPS[0]])
    with client_for(router, budget) as client, pytest.raises(errors.OutcomeUnknown):
        client.update_product("7", {"v": 2}, method="patch")
    assert route.call_count == 1, "neither the gate nor the client sent it again"
    assert budget.acquired == [("write", False)]
    assert bearer(route.calls.last.request) == KEYS[0]


def test_the_real_budget_paces_each_tier_before_the_wire(
    router: respx.MockRouter, tmp_path: Path
) -> None:
    """Two writes a minute: the third waits a window; a read between them does not."""
    clock = FakeClock(START)
    arrived: list[tuple[str, float]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        arrived.append((request.method, clock.now))
        if request.method == "GET":
            return httpx.Response(200, json={"data": {"id": "r"}, "meta": {}})
        return created(request)

    router.route(url__startswith=PRODUCTS).mock(side_effect=answer)
    book = BudgetBook(lambda: open_state(tmp_path / "state.db"))
    with (
        Budget(book, limits={"read": 60, "write": 2}, clock=clock, wait=clock.wait) as budget,
        client_for(router, budget, keys=KEYS[:1]) as client,
    ):
        client.create_product({"sku": "A"})
        client.create_product({"sku": "B"})
        client.get_product("r")
        client.update_product("r", {"sku": "C"}, method="put")
    assert arrived == [
        ("POST", START),
        ("POST", START),
        ("GET", START),
        ("PUT", START + 60.5),  # the window plus its clock skew margin
    ]
    assert clock.waits == [60.5]
    assert client.requests == {"read": 1, "write": 3}


def test_the_sending_threads_urgency_reaches_the_budget(router: respx.MockRouter) -> None:
    router.post(PRODUCTS).mock(side_effect=created)
    budget = NamingBudget()
    with client_for(router, budget) as client:
        client.create_product({"sku": "plain"})
        with priority.urgent():
            client.create_product({"sku": "urgent"})
        raised = priority.Mark()
        with ThreadPoolExecutor(max_workers=1) as pool:
            pool.submit(priority.with_mark(client.create_product, raised), {"sku": "B"}).result()
            raised.raise_()
            pool.submit(priority.with_mark(client.create_product, raised), {"sku": "C"}).result()
            pool.submit(client.create_product, {"sku": "D"}).result()
    assert budget.acquired == [
        ("write", False),
        ("write", True),
        ("write", False),
        ("write", True),  # the lane's mark on its worker thread, raised meanwhile
        ("write", False),
    ]


def test_a_request_the_gate_refuses_spends_no_budget_and_carries_no_key(
    router: respx.MockRouter,
) -> None:
    budget = NamingBudget([FPS[0]])
    with client_for(router, budget) as client:
        with pytest.raises(OffOriginError):
            client._http.get("http://127.0.0.2:8998/api/v1/products")
        assert budget.acquired == [] and client.requests == {"read": 0, "write": 0}
        assert client.requests_by_key == {}


def test_a_requests_duration_leaves_the_budgets_wait_out(
    router: respx.MockRouter, log_stream: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [100.0]
    monkeypatch.setattr(client_module, "time", SimpleNamespace(monotonic=lambda: now[0]))

    class SlowBudget(NamingBudget):
        def acquire(self, tier: str, *, stop: threading.Event | None = None) -> str | None:
            now[0] += 40.0  # the budget kept it waiting
            return super().acquire(tier, stop=stop)

    def answer(request: httpx.Request) -> httpx.Response:
        now[0] += 0.25  # the server took this long
        return httpx.Response(200, json={"data": {"id": "1"}, "meta": {}})

    router.get(f"{PRODUCTS}/1").mock(side_effect=answer)
    with client_for(router, SlowBudget()) as client:
        client.get_product("1")
    assert [e["ms"] for e in events(log_stream, "api.request")] == [250]
