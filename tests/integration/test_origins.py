"""Credentials go only to the configured origin: two PIMs on 127.0.0.1 and 127.0.0.2.

Both addresses are loopback (Linux routes all of 127.0.0.0/8 to ``lo``), yet they are
two origins, as a PIM and a host it links to would be. The second PIM records every
request it receives, so "the token never reached it" is a fact read from the server.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from skuferry import errors
from skuferry.config.load import settings_from_dict
from skuferry.config.schema import Settings
from skuferry.models import State
from skuferry.remote.client import RemoteClient
from skuferry.sandbox import Sandbox
from skuferry.sandbox.pim import Fault, GeneratedCatalog, PimServer
from skuferry.state.mirror import Mirror
from skuferry.sync import engine
from tests.integration.conftest import KEY

pytestmark = pytest.mark.integration

TOKEN = "pim-token-Hq7wX2nB9"  # distinctive, so a leak into any output is found
PAGE = 20  # the test PIM's default page size: a next_link walk sends none at first


def _can_bind(host: str) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, 0))
        except OSError:
            return False
    return True


if not _can_bind("127.0.0.2"):  # Linux routes 127/8 to lo; some other kernels do not
    pytest.skip("127.0.0.2 is not bound to the loopback interface here", allow_module_level=True)


@pytest.fixture
def home() -> Iterator[PimServer]:
    """The configured PIM (127.0.0.1), 25 products in pages of 20."""
    with PimServer(GeneratedCatalog(25), token=TOKEN) as pim:
        yield pim


@pytest.fixture
def elsewhere() -> Iterator[PimServer]:
    """Another origin (127.0.0.2) serving the same catalog, and accepting the same token."""
    with PimServer(GeneratedCatalog(25), token=TOKEN, host="127.0.0.2") as pim:
        yield pim


def link_page_two_to(home: PimServer, target: PimServer) -> None:
    """Page 1 of ``home`` says: the next page is on ``target`` (an absolute link)."""
    items = list(home.catalog[:PAGE])
    body = {
        "_embedded": {"items": items},
        "_links": {"next": {"href": f"{target.url('hal')}?page=2&limit={PAGE}"}},
    }
    home.raw_pages["/hal/products"] = json.dumps(body, default=float).encode()


def source_table(home: PimServer, **extra: Any) -> dict[str, Any]:
    return {
        "type": "http",
        "url": home.url("hal"),
        "auth": "bearer",
        "token": TOKEN,
        "items_path": "_embedded.items",
        **extra,
    }


@pytest.fixture
def make_settings(tmp_path: Path, sandbox: Sandbox) -> Callable[..., Settings]:
    def make(source: dict[str, Any]) -> Settings:
        return settings_from_dict(
            {
                "api": {"base_url": sandbox.url, "api_key": KEY},
                "source": source,
                "mapping": {"key": "sku"},
                "state": {"path": str(tmp_path / "state" / "skuferry.db")},
            }
        )

    return make


def states(settings: Settings) -> dict[str, int]:
    mirror = Mirror(settings.state.path, readonly=True)
    try:
        return mirror.counts_by_state()
    finally:
        mirror.close()


def test_a_next_link_to_another_origin_fails_the_pull_and_sends_it_nothing(
    home: PimServer, elsewhere: PimServer, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(source_table(home))
    first = engine.run_once(settings)  # links stay on home: everything syncs
    assert first.created == 25
    link_page_two_to(home, elsewhere)

    with pytest.raises(errors.SourceError) as failed:
        engine.run_once(settings)
    message = str(failed.value)
    assert elsewhere.base_url in message and home.base_url in message  # both origins named
    assert "allowed_origins" in message
    assert TOKEN not in message
    assert elsewhere.requests == [], "nothing at all, let alone the token, went to 127.0.0.2"
    assert states(settings) == {State.SYNCED.value: 25}, "nothing marked gone or changed"


def test_allowed_origins_lets_the_walk_continue_there(
    home: PimServer, elsewhere: PimServer, make_settings: Callable[..., Settings]
) -> None:
    link_page_two_to(home, elsewhere)
    settings = make_settings(source_table(home, allowed_origins=[elsewhere.base_url]))
    summary = engine.run_once(settings)
    assert summary.created == 25
    assert elsewhere.requests, "pages 2 and 3 came from the allowed origin"
    assert all(seen.authorization == f"Bearer {TOKEN}" for seen in elsewhere.requests)


def test_a_redirect_to_another_origin_carries_no_credentials(
    home: PimServer, elsewhere: PimServer, make_settings: Callable[..., Settings]
) -> None:
    moved = f"{elsewhere.url('hal')}?page=2&limit={PAGE}"
    home.faults.append(Fault(302, times=None, match="page=2", headers={"Location": moved}))
    settings = make_settings(source_table(home))
    with pytest.raises(errors.SourceError, match=r"127\.0\.0\.2"):
        engine.run_once(settings)
    assert elsewhere.requests == []
    assert states(settings) == {}, "a pull that failed writes nothing"


def test_a_redirect_within_the_origin_is_followed(
    home: PimServer, make_settings: Callable[..., Settings]
) -> None:
    moved = f"/hal/products?page=2&limit={PAGE}&moved=1"
    home.faults.append(
        Fault(301, times=1, match=f"page=2&limit={PAGE}", headers={"Location": moved})
    )
    summary = engine.run_once(make_settings(source_table(home)))
    assert summary.created == 25
    assert any("moved=1" in seen.path for seen in home.requests)


def test_the_cms_client_does_not_follow_a_redirect_to_another_origin(
    home: PimServer, elsewhere: PimServer
) -> None:
    home.faults.append(Fault(302, times=None, headers={"Location": f"{elsewhere.base_url}/api"}))
    client = RemoteClient(base_url=home.base_url, api_key=SecretStr(KEY), max_retries=0)
    try:
        with pytest.raises(errors.BadResponse, match="redirects are not followed"):
            client.probe()
    finally:
        client.close()
    assert [seen.authorization for seen in home.requests] == [f"Bearer {KEY}"]
    assert elsewhere.requests == []


def test_the_cli_names_both_origins_and_exits_3(
    home: PimServer,
    elsewhere: PimServer,
    sandbox: Sandbox,
    tmp_path: Path,
    run_cli: Callable[..., Any],
) -> None:
    link_page_two_to(home, elsewhere)
    config = tmp_path / "skuferry.toml"
    config.write_text(
        f'[api]\nbase_url = "{sandbox.url}"\n\n'
        f'[source]\ntype = "http"\nurl = "{home.url("hal")}"\nauth = "bearer"\n'
        f'token_env = "PIM_TOKEN"\nitems_path = "_embedded.items"\n\n'
        '[state]\npath = "state/skuferry.db"\n',
        encoding="utf-8",
    )
    done = run_cli(
        "sync", "--config", str(config), env={"SKUFERRY_API_KEY": KEY, "PIM_TOKEN": TOKEN}
    )
    assert done.returncode == errors.EXIT_UNAVAILABLE, done.stderr
    assert elsewhere.base_url in done.stderr and home.base_url in done.stderr
    assert TOKEN not in done.stderr + done.stdout
    assert elsewhere.requests == []
