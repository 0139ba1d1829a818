"""The origin gate: every request pinned to its origins, then paced, then sent; never retried.

The gate is an httpx transport in front of the real one, shared by the CMS client and
the API sources' clients. A recording transport stands in for the network.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from pydantic import SecretStr

from skuferry.config.schema import HttpSourceSettings
from skuferry.models import RawRecord
from skuferry.net.origins import parse_allowed
from skuferry.net.transport import Gate, OffOriginError, _environment_proxy, gated_client
from skuferry.remote.client import RemoteClient
from skuferry.sources.http import HttpSource
from skuferry.sources.wiring import Wiring

HOME = "https://pim.example.com/api/products"


class Wire(httpx.BaseTransport):
    """The network: records what reached it, answers with ``answer``."""

    def __init__(self, answer: Callable[[httpx.Request], httpx.Response] | None = None) -> None:
        self.sent: list[httpx.Request] = []
        self.answer = answer or (lambda _request: httpx.Response(200, json={}))

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        return self.answer(request)


def test_a_request_to_another_origin_is_refused_before_it_reaches_the_wire() -> None:
    wire, paced = Wire(), list[httpx.Request]()
    client = httpx.Client(transport=Gate(wire, home=HOME, pace=paced.append))
    with client, pytest.raises(OffOriginError) as caught:
        client.get("https://evil.example.com/steal", headers={"Authorization": "Bearer t"})
    assert wire.sent == [] and paced == [], "nothing sent, and no pace spent on it"
    message = str(caught.value)
    assert "https://evil.example.com:443" in message and "https://pim.example.com:443" in message


def test_an_allowed_origin_passes_and_a_downgrade_never_does() -> None:
    wire = Wire()
    allowed = parse_allowed(["https://cdn.example.com", "http://pim.example.com"])
    with httpx.Client(transport=Gate(wire, home=HOME, allowed=allowed)) as client:
        assert client.get("https://cdn.example.com/page/2").status_code == 200
        with pytest.raises(OffOriginError, match="clear text"):
            client.get("http://pim.example.com/api/products")
    assert [str(r.url) for r in wire.sent] == ["https://cdn.example.com/page/2"]


def test_every_request_is_paced_once_before_it_is_sent() -> None:
    order: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        order.append(f"sent {request.url.path}")
        return httpx.Response(200)

    wire = Wire(answer)

    def pace(request: httpx.Request) -> None:
        order.append(f"paced {request.url.path}")
        request.headers["Authorization"] = "Bearer put-on-by-the-pace"

    with httpx.Client(transport=Gate(wire, home=HOME, pace=pace)) as client:
        client.get("https://pim.example.com/a")
        client.post("https://pim.example.com/b", json={})
    assert order == ["paced /a", "sent /a", "paced /b", "sent /b"]
    assert all(r.headers["Authorization"] == "Bearer put-on-by-the-pace" for r in wire.sent)


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "GET"])
def test_the_gate_never_sends_a_request_again(method: str) -> None:
    """Retries are the caller's: it alone knows whether a write may be repeated."""
    failing = Wire(lambda _r: httpx.Response(503))
    with httpx.Client(transport=Gate(failing, home=HOME)) as client:
        assert client.request(method, HOME, json={"sku": "A"}).status_code == 503
    assert len(failing.sent) == 1

    def cut(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadError("reset", request=request)

    broken = Wire(cut)
    client = httpx.Client(transport=Gate(broken, home=HOME))
    with client, pytest.raises(httpx.ReadError):
        client.request(method, HOME, json={"sku": "A"})
    assert len(broken.sent) == 1


def test_a_gated_client_follows_no_redirect_itself() -> None:
    wire = Wire(lambda _r: httpx.Response(302, headers={"Location": "https://evil.example.com/"}))
    with gated_client(home=HOME, transport=wire) as client:
        assert client.get(HOME).status_code == 302
    assert len(wire.sent) == 1


def test_the_environments_proxy_is_the_inner_transports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("NO_PROXY", "local.example.com")
    assert _environment_proxy(HOME) == "http://proxy.internal:3128"
    assert _environment_proxy("https://local.example.com/api") is None
    monkeypatch.delenv("HTTPS_PROXY")
    assert _environment_proxy(HOME) is None


def test_each_origin_gets_the_environments_proxy_for_its_own_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("NO_PROXY", "pim.internal")
    built: dict[str, str | None] = {}

    class Recording(httpx.BaseTransport):
        def __init__(self, *, proxy: str | None, **_: object) -> None:
            self.proxy = proxy

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            built.setdefault(request.url.host, self.proxy)
            return httpx.Response(200, json={}, request=request)

    monkeypatch.setattr(httpx, "HTTPTransport", Recording)
    cdn = parse_allowed(["https://cdn.example.net"])
    with gated_client(home="https://pim.internal/api", allowed=cdn) as client:
        client.get("https://pim.internal/api/products")
        client.get("https://cdn.example.net/export.json")  # a next link to an allowed host
    assert built == {"pim.internal": None, "cdn.example.net": "http://proxy.internal:3128"}


def test_the_cms_client_is_pinned_to_its_base_url() -> None:
    wire = Wire(lambda _r: httpx.Response(200, json={"data": [], "meta": {"pages": 0}}))
    client = RemoteClient(
        base_url="https://cms.example.com", api_key=SecretStr("k-1"), transport=wire
    )
    with client:
        assert client.probe() == 0
        assert wire.sent[0].headers["Authorization"] == "Bearer k-1"
        with pytest.raises(OffOriginError):  # its one client sends nowhere else
            client._http.get("https://elsewhere.example.com/api/v1/products")
    assert len(wire.sent) == 1


def test_a_sources_redirect_hop_is_paced_like_any_request() -> None:
    """``requests_per_minute`` counts what reaches the server: a redirect hop too."""
    target = "https://pim.example.com/v2/products"

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/products":
            return httpx.Response(301, headers={"Location": target})
        return httpx.Response(200, json={"items": [{"sku": "A"}], "next": None})

    now = [0.0]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    settings = HttpSourceSettings.model_validate(
        {"type": "http", "url": HOME, "requests_per_minute": 60, "items_path": "items"}
    )
    wire = Wire(answer)
    source = HttpSource(settings, Wiring(transport=wire, sleep=sleep, clock=lambda: now[0]))
    records = [r for r in source.records() if isinstance(r, RawRecord)]
    assert [r.fields["sku"] for r in records] == ["A"]
    assert [r.url.path for r in wire.sent] == ["/api/products", "/v2/products"]
    assert sleeps == [1.0], "the hop waited its turn at 60 a minute"


def test_a_sources_wiring_shows_no_environment_in_its_repr() -> None:
    wiring = Wiring(env={"PIM_TOKEN": "tok-in-the-env-7731"})
    assert "tok-in-the-env-7731" not in repr(wiring)
