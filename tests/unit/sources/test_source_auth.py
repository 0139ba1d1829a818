"""[source] auth for the API sources: OAuth2 flows, header tokens, where each secret goes.

A respx router stands in for the token endpoint (on another host, as Microsoft's is)
and the API; nothing leaves the process and nothing really sleeps.
"""

from __future__ import annotations

import base64
import json
import random
from typing import Any

import httpx
import pytest
import respx

from skuferry.config.schema import HttpSourceSettings
from skuferry.errors import SourceError
from skuferry.models import RawRecord
from skuferry.sources.auth import OAuth2
from skuferry.sources.http import HttpSource
from skuferry.sources.wiring import Wiring

API = "https://erp.example.com/api/items"
TOKEN_URL = "https://login.example.net/tenant/oauth2/v2.0/token"
CLIENT_ID = "client-7f3a"
SECRET = "client-secret-Qw8zX1v"
PASSWORD = "user-password-Hj5kL2"
ALL = ["S-1", "S-1b", "S-2", "S-2b", "S-3"]  # three pages, the last one short


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def router() -> respx.MockRouter:
    return respx.MockRouter(assert_all_called=False, assert_all_mocked=True)


def source(router: respx.MockRouter, clock: Clock | None = None, **options: Any) -> HttpSource:
    fake = clock or Clock()
    settings = HttpSourceSettings.model_validate(
        {
            "type": "http",
            "url": API,
            "items_path": "value",
            "next_path": "next",
            "auth": "oauth2",
            "token_url": TOKEN_URL,
            "client_id": CLIENT_ID,
            "client_secret": SECRET,
            **options,
        }
    )
    return HttpSource(
        settings,
        Wiring(
            transport=httpx.MockTransport(router.handler),
            sleep=fake.sleep,
            clock=fake,
            rng=random.Random(3),
            env={},
        ),
    )


class Tokens:
    """A token endpoint: issues tok-1, tok-2, ... (refresh tokens ref-1, ... when asked)."""

    def __init__(self, *, expires_in: int = 3600, refresh: bool = False) -> None:
        self.expires_in = expires_in
        self.refresh = refresh
        self.issued: list[str] = []
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        self.issued.append(f"tok-{len(self.issued) + 1}")
        body: dict[str, Any] = {
            "access_token": self.issued[-1],
            "token_type": "Bearer",
            "expires_in": self.expires_in,
        }
        if self.refresh:
            body["refresh_token"] = f"ref-{len(self.issued)}"
        return httpx.Response(200, json=body)


def api_page(request: httpx.Request, *, good: set[str]) -> httpx.Response:
    auth = request.headers.get("Authorization", "")
    if auth.removeprefix("Bearer ") not in good:
        return httpx.Response(401, json={"error": {"code": "Unauthorized"}})
    page = int(request.url.params.get("page", "1"))
    rows = [{"sku": f"S-{page}"}] + ([{"sku": f"S-{page}b"}] if page < 3 else [])
    body: dict[str, Any] = {"value": rows}  # the last page is short: the pull provably ended
    if page < 3:
        body["next"] = f"{API}?page={page + 1}"
    return httpx.Response(200, json=body)


def skus(src: HttpSource) -> list[str]:
    return [str(r.fields["sku"]) for r in src.records() if isinstance(r, RawRecord)]


def form(request: httpx.Request) -> dict[str, str]:
    return dict(httpx.QueryParams(request.content.decode()))


def test_client_credentials_form_with_basic_client_auth(router: respx.MockRouter) -> None:
    tokens = Tokens()
    router.post(TOKEN_URL).mock(side_effect=tokens)
    api = router.get(url__startswith=API).mock(side_effect=lambda r: api_page(r, good={"tok-1"}))
    assert skus(source(router, scope="https://api.example.com/.default")) == ALL
    assert len(tokens.requests) == 1  # one token for the whole pull
    sent = tokens.requests[0]
    assert form(sent) == {
        "grant_type": "client_credentials",
        "scope": "https://api.example.com/.default",
    }
    expected = base64.b64encode(f"{CLIENT_ID}:{SECRET}".encode()).decode()
    assert sent.headers["Authorization"] == f"Basic {expected}"
    for call in api.calls:  # the API sees the token, never the client secret
        assert call.request.headers["Authorization"] == "Bearer tok-1"
        assert SECRET not in str(call.request.headers) + call.request.content.decode()


def test_client_in_body(router: respx.MockRouter) -> None:
    tokens = Tokens()
    router.post(TOKEN_URL).mock(side_effect=tokens)
    router.get(url__startswith=API).mock(side_effect=lambda r: api_page(r, good={"tok-1"}))
    skus(source(router, client_auth="body"))
    sent = tokens.requests[0]
    assert "Authorization" not in sent.headers
    assert form(sent)["client_id"] == CLIENT_ID
    assert form(sent)["client_secret"] == SECRET


def test_password_grant_as_json_akeneo_style(router: respx.MockRouter) -> None:
    tokens = Tokens(refresh=True)
    router.post(TOKEN_URL).mock(side_effect=tokens)
    router.get(url__startswith=API).mock(side_effect=lambda r: api_page(r, good={"tok-1"}))
    src = source(
        router, grant="password", username="sync_user", password=PASSWORD, token_request="json"
    )
    assert len(skus(src)) == len(ALL)
    sent = tokens.requests[0]
    assert sent.headers["Content-Type"] == "application/json"
    assert json.loads(sent.content) == {
        "grant_type": "password",
        "username": "sync_user",
        "password": PASSWORD,
    }


def test_a_401_is_answered_with_the_refresh_token_then_retried(router: respx.MockRouter) -> None:
    tokens = Tokens(refresh=True)
    router.post(TOKEN_URL).mock(side_effect=tokens)
    good = {"tok-1"}

    def page(request: httpx.Request) -> httpx.Response:
        if request.url.params.get("page") == "2" and "tok-1" in good:
            good.discard("tok-1")  # the token is revoked mid-pull
            good.add("tok-2")
        return api_page(request, good=good)

    router.get(url__startswith=API).mock(side_effect=page)
    assert skus(source(router)) == ALL
    assert [form(r)["grant_type"] for r in tokens.requests] == [
        "client_credentials",
        "refresh_token",
    ]
    assert form(tokens.requests[1])["refresh_token"] == "ref-1"


def test_a_401_without_refresh_token_asks_for_a_new_grant(router: respx.MockRouter) -> None:
    tokens = Tokens()
    router.post(TOKEN_URL).mock(side_effect=tokens)
    good = {"tok-1"}

    def page(request: httpx.Request) -> httpx.Response:
        if request.url.params.get("page") == "3":
            good.clear()
            good.add("tok-2")
        return api_page(request, good=good)

    router.get(url__startswith=API).mock(side_effect=page)
    assert skus(source(router)) == ALL
    assert [form(r)["grant_type"] for r in tokens.requests] == ["client_credentials"] * 2


def test_a_second_401_fails_the_pull_naming_the_token_answer(router: respx.MockRouter) -> None:
    tokens = Tokens()
    router.post(TOKEN_URL).mock(side_effect=tokens)
    router.get(url__startswith=API).mock(side_effect=lambda r: api_page(r, good=set()))
    with pytest.raises(SourceError) as caught:
        skus(source(router))
    text = str(caught.value)
    assert "HTTP 401 again" in text
    assert TOKEN_URL in text and "expires_in 3600 s" in text
    assert "tok-" not in text and SECRET not in text
    assert len(tokens.requests) == 2  # the first token, then one renewal: no loop


def test_a_wrong_secret_names_the_endpoint_answer_without_the_secret(
    router: respx.MockRouter,
) -> None:
    router.post(TOKEN_URL).mock(
        return_value=httpx.Response(
            401,
            json={
                "error": "invalid_client",
                "error_description": f"AADSTS7000215: Invalid client secret {SECRET} provided.",
            },
        )
    )
    api = router.get(url__startswith=API).mock(side_effect=lambda r: api_page(r, good=set()))
    with pytest.raises(SourceError) as caught:
        skus(source(router))
    text = str(caught.value)
    assert "refused the client_credentials grant: HTTP 401: invalid_client" in text
    assert "AADSTS7000215" in text
    assert SECRET not in text
    assert not api.called  # no token: the API is never asked


def test_the_token_is_renewed_before_it_expires(router: respx.MockRouter) -> None:
    tokens = Tokens(expires_in=100)
    router.post(TOKEN_URL).mock(side_effect=tokens)
    clock = Clock()
    seen: list[str] = []

    def page(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["Authorization"])
        clock.now += 50  # each page takes 50 s: the token (100 s, renewed at 90 s) runs out
        return api_page(request, good={"tok-1", "tok-2"})

    router.get(url__startswith=API).mock(side_effect=page)
    assert len(skus(source(router, clock))) == len(ALL)
    assert seen == ["Bearer tok-1", "Bearer tok-1", "Bearer tok-2"]  # renewed, never refused


def test_a_redirecting_token_endpoint_gets_no_secret_on(router: respx.MockRouter) -> None:
    router.post(TOKEN_URL).mock(
        return_value=httpx.Response(302, headers={"Location": "https://evil.example.org/t"})
    )
    evil = router.post("https://evil.example.org/t").mock(return_value=httpx.Response(200))
    router.get(url__startswith=API).mock(side_effect=lambda r: api_page(r, good=set()))
    with pytest.raises(SourceError, match="a redirect"):
        skus(source(router))
    assert not evil.called


def test_the_access_token_never_follows_a_link_to_another_origin(
    router: respx.MockRouter,
) -> None:
    router.post(TOKEN_URL).mock(side_effect=Tokens())
    router.get(url__startswith=API).mock(
        return_value=httpx.Response(
            200, json={"value": [{"sku": "S-1"}], "next": "https://cdn.example.org/p2"}
        )
    )
    other = router.get(url__startswith="https://cdn.example.org").mock(
        return_value=httpx.Response(200, json={"value": []})
    )
    with pytest.raises(SourceError, match="refusing to send credentials"):
        skus(source(router))
    assert not other.called


def test_a_flaky_token_endpoint_is_tried_again(router: respx.MockRouter) -> None:
    tokens = Tokens()
    answers = iter([httpx.Response(503)])
    router.post(TOKEN_URL).mock(side_effect=lambda r: next(answers, None) or tokens(r))
    router.get(url__startswith=API).mock(side_effect=lambda r: api_page(r, good={"tok-1"}))
    clock = Clock()
    assert len(skus(source(router, clock))) == len(ALL)
    assert clock.sleeps == [1.0]


def test_header_token(router: respx.MockRouter) -> None:
    api = router.get(url__startswith=API).mock(
        return_value=httpx.Response(200, json={"value": [{"sku": "S-1"}]})
    )
    settings = HttpSourceSettings.model_validate(
        {
            "type": "http",
            "url": API,
            "items_path": "value",
            "auth": "header",
            "header_name": "X-Shopify-Access-Token",
            "token_env": "SHOP_TOKEN",
        }
    )
    src = HttpSource(
        settings,
        Wiring(transport=httpx.MockTransport(router.handler), env={"SHOP_TOKEN": "shpat_abc123"}),
    )
    assert skus(src) == ["S-1"]
    assert api.calls[0].request.headers["X-Shopify-Access-Token"] == "shpat_abc123"
    assert "Authorization" not in api.calls[0].request.headers


def test_header_auth_needs_a_header_name() -> None:
    with pytest.raises(ValueError, match="header_name"):
        HttpSourceSettings.model_validate(
            {"type": "http", "url": API, "auth": "header", "token": "x"}
        )


def test_the_client_secret_follows_the_one_secret_order(router: respx.MockRouter) -> None:
    with pytest.raises(ValueError, match="give only one of client_secret, client_secret_env"):
        HttpSourceSettings.model_validate(
            {
                "type": "http",
                "url": API,
                "auth": "oauth2",
                "token_url": TOKEN_URL,
                "client_id": "c",
                "client_secret": "a",
                "client_secret_env": "B",
            }
        )
    settings = HttpSourceSettings.model_validate(
        {
            "type": "http",
            "url": API,
            "auth": "oauth2",
            "token_url": TOKEN_URL,
            "client_id": "c",
            "client_secret_env": "ERP_SECRET",
        }
    )
    tokens = Tokens()
    router.post(TOKEN_URL).mock(side_effect=tokens)
    auth = OAuth2(
        settings,
        Wiring(
            env={"ERP_SECRET": "from-env-secret"}, transport=httpx.MockTransport(router.handler)
        ),
    )
    assert auth.access_token() == "tok-1"
    expected = base64.b64encode(b"c:from-env-secret").decode()
    assert tokens.requests[0].headers["Authorization"] == f"Basic {expected}"


def test_a_clear_text_token_url_to_another_host_is_refused_at_load(tmp_path: Any) -> None:
    from skuferry.config.load import settings_from_dict
    from skuferry.errors import ConfigError

    data = {
        "api": {"base_url": "http://127.0.0.1:1", "api_key": "k"},
        "state": {"path": str(tmp_path / "s.db")},
        "source": {
            "type": "http",
            "url": API,
            "auth": "oauth2",
            "token_url": "http://login.example.net/token",
            "client_id": "c",
            "client_secret": "s",
        },
    }
    with pytest.raises(ConfigError, match=r"at 'source.token_url': http:// to login.example.net"):
        settings_from_dict(data)


def test_item_fetches_carry_the_oauth2_token(router: respx.MockRouter) -> None:
    """sync --only / retry read single items through item_url, authenticated as pages are."""
    router.post(TOKEN_URL).mock(side_effect=Tokens())
    item = router.get(f"{API}/A%2F1").mock(return_value=httpx.Response(200, json={"sku": "A/1"}))
    src = source(router, item_url=API + "/{key}")
    got = [r.fields["sku"] for r in src.fetch_items(["A/1"]) if isinstance(r, RawRecord)]
    assert got == ["A/1"]
    assert item.calls[0].request.headers["Authorization"] == "Bearer tok-1"
