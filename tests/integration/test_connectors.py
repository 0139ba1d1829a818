"""The worked examples in examples/connectors/, run as a user runs them, against the test servers.

Each test starts one system's local stand-in (skuferry.sandbox.pims) and the sandbox CMS, then runs
``python -m skuferry sync --config examples/connectors/<system>.toml`` with only what a
deployment changes set from the environment: the addresses (``SKUFERRY_SOURCE__URL``,
``SKUFERRY_API__BASE_URL``), the API key, the state path and the source's secret under the
name the example reads. The figures (source requests of a full and an incremental pull,
time) are printed in the session summary.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from skuferry.sandbox import Sandbox
from skuferry.sandbox.pims import business_central
from skuferry.sandbox.pims.base import ApiServer, Fault, Request
from skuferry.sandbox.pims.standins import stand_in
from tests.integration.conftest import FAST, KEY, assert_each_once

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "connectors"
N = 250  # products: three pages at the presets' page sizes (100), one at Shopify's (250)
WRONG = "wrong-secret-Vb7Xq2Lz9"  # distinctive, so a leak into any output is found

Run = Callable[..., subprocess.CompletedProcess[str]]


@dataclass
class System:
    """One system's stand-in, and how a test tells its secrets and its filtered listings."""

    name: str
    server: ApiServer
    keys: list[str]  # the SKUs the CMS should end up with
    env: dict[str, str]  # what the example needs: addresses, secrets, CA
    secret_var: str  # the variable holding the secret a wrong-secret test replaces
    secrets: list[str]  # every credential value, for leak checks
    touch: Callable[[str, datetime], None]
    carries_filter: Callable[[Request], bool]  # a listing request with the since filter
    servers: list[ApiServer] = field(default_factory=list)  # every server it runs

    def source_requests(self) -> int:
        return sum(len(s.requests) for s in self.servers)


def _list_requests(srv: ApiServer) -> list[Request]:
    return [r for r in srv.requests if "token" not in r.path]


# A listing that carries the incremental filter, as each system's API spells it.
_FILTERED: dict[str, Callable[[Request], bool]] = {
    "akeneo": lambda r: '"updated"' in (r.arg("search") or ""),
    "business-central": lambda r: (r.arg("$filter") or "").startswith("lastModifiedDateTime gt "),
    "shopify": lambda r: "updated_at:>" in str(r.json().get("variables", {}).get("query")),
    "odoo": lambda r: any(t[:2] == ["write_date", ">"] for t in r.json().get("domain", [])),
    "woocommerce": lambda r: r.arg("modified_after") is not None,
    "magento": lambda r: (
        r.arg("searchCriteria[filter_groups][0][filters][0][field]") == "updated_at"
    ),
}


@contextmanager
def start(name: str, tmp_path: Path) -> Iterator[System]:
    """The stand-in of ``name`` serving N products on loopback, as ``sandbox --pim`` starts it."""
    standin = stand_in(name, products=N, workdir=tmp_path)
    with standin.running():
        env = standin.environment()
        secret_var = next(iter(standin.secrets))
        yield System(
            name,
            standin.server,
            standin.keys,
            env,
            secret_var,
            list(standin.secrets.values()),
            standin.touch,
            _FILTERED[name],
            standin.servers(),
        )


SYSTEMS = ["akeneo", "business-central", "shopify", "odoo", "woocommerce", "magento"]


def sync(
    run_cli: Run, system: System, sandbox: Sandbox, tmp_path: Path, **env: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """One ``skuferry sync --json`` of the system's worked example, as a user runs it."""
    environment = {
        "SKUFERRY_API__BASE_URL": sandbox.url,
        "SKUFERRY_API_KEY": KEY,
        "SKUFERRY_STATE_PATH": str(tmp_path / "state" / f"{system.name}.db"),
        "SKUFERRY_BUDGET__READ_PER_MINUTE": str(FAST),
        "SKUFERRY_BUDGET__WRITE_PER_MINUTE": str(FAST),
        **system.env,
        **env,
    }
    config = str(EXAMPLES / f"{system.name}.toml")
    done = run_cli("sync", "--json", "--config", config, env=environment)
    lines = done.stdout.strip().splitlines()
    summary = json.loads(lines[-1]) if done.returncode in (0, 1) and lines else {}
    return done, summary


def _no_secret(done: subprocess.CompletedProcess[str], *secrets: str) -> None:
    for secret in secrets:
        assert secret not in done.stdout and secret not in done.stderr


@pytest.mark.parametrize("name", SYSTEMS)
def test_full_pull_then_nothing_then_an_incremental_pull_with_the_filter(
    name: str, run_cli: Run, sandbox: Sandbox, tmp_path: Path, figures: Callable[[str], None]
) -> None:
    with start(name, tmp_path) as system:
        began = time.monotonic()
        done, summary = sync(run_cli, system, sandbox, tmp_path)
        full_s = time.monotonic() - began
        assert done.returncode == 0, done.stderr[-3000:]
        assert summary["pull"] == "full"
        assert summary["created"] == len(system.keys) and summary["rejected"] == 0
        assert_each_once(sandbox, system.keys)
        full_requests = system.source_requests()

        done, summary = sync(run_cli, system, sandbox, tmp_path)  # nothing changed
        assert done.returncode == 0, done.stderr[-3000:]
        assert summary["pull"] == "incremental"
        assert summary["requests"]["write"] == 0 and summary["created"] == 0

        changed = system.keys[7]
        system.touch(changed, datetime.now(UTC))
        before = system.source_requests()
        began = time.monotonic()
        done, summary = sync(run_cli, system, sandbox, tmp_path)
        incremental_s = time.monotonic() - began
        assert done.returncode == 0, done.stderr[-3000:]
        assert summary["pull"] == "incremental"
        assert summary["updated"] == 1 and summary["created"] == 0
        listing = _list_requests(system.server)[-1]
        assert system.carries_filter(listing), listing.target
        names = {p["sku"]: p["name"] for p in sandbox.products()}
        assert names[changed] == "geändert"
        _no_secret(done, *system.secrets)
        figures(
            f"connector {name}: {len(system.keys)} products, full pull {full_requests} source "
            f"requests in {full_s:.1f} s (CLI, writes included); incremental pull "
            f"{system.source_requests() - before} requests in {incremental_s:.1f} s"
        )


@pytest.mark.parametrize("name", SYSTEMS)
def test_a_wrong_secret_exits_3_and_prints_no_secret(
    name: str, run_cli: Run, sandbox: Sandbox, tmp_path: Path
) -> None:
    with start(name, tmp_path) as system:
        done, _ = sync(run_cli, system, sandbox, tmp_path, **{system.secret_var: WRONG})
        assert done.returncode == 3, done.stdout + done.stderr
        assert "refused" in done.stderr or "HTTP 401" in done.stderr, done.stderr[-2000:]
        _no_secret(done, WRONG, *system.secrets)
        assert sandbox.stats().products.get("default", 0) == 0


@pytest.mark.parametrize("name", ["akeneo", "business-central"])
def test_a_token_that_expires_during_the_pull_is_renewed(
    name: str, run_cli: Run, sandbox: Sandbox, tmp_path: Path
) -> None:
    with start(name, tmp_path) as system:
        system.server.tokens.expire_after = 1  # type: ignore[attr-defined]
        # pages of 100 (Business Central's preset asks for 1000): three pages, three tokens
        pages = json.dumps({"Prefer": "odata.maxpagesize=100"})
        done, summary = sync(run_cli, system, sandbox, tmp_path, SKUFERRY_SOURCE__HEADERS=pages)
        assert done.returncode == 0, done.stderr[-3000:]
        assert summary["created"] == len(system.keys)
        assert system.server.tokens.issued >= 3  # type: ignore[attr-defined]
        assert "source.oauth2.renewed" in done.stderr
        _no_secret(done, *system.secrets)


def test_a_throttled_shopify_page_is_waited_out(
    run_cli: Run, sandbox: Sandbox, tmp_path: Path
) -> None:
    with start("shopify", tmp_path) as system:
        system.server.throttle_next(2, wait=0.2)  # type: ignore[attr-defined]
        done, summary = sync(run_cli, system, sandbox, tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        assert summary["created"] == len(system.keys)
        assert system.server.counts["throttled"] >= 2
        assert "source.graphql.throttled" in done.stderr


def test_credentials_never_reach_a_third_origin(
    run_cli: Run, sandbox: Sandbox, tmp_path: Path
) -> None:
    """Business Central: the secret only to the identity origin, the token only to the API,
    and a next link to a third origin is refused before anything is sent there."""
    with start("business-central", tmp_path) as system, ApiServer(host="127.0.0.3") as third:
        srv: Any = system.server
        page = business_central.make_items(2)
        srv.faults.append(
            Fault(
                status=200,
                match="/items",
                body={"value": page, "@odata.nextLink": f"{third.url}/steal?page=2"},
            )
        )
        done, _ = sync(run_cli, system, sandbox, tmp_path)
        assert done.returncode == 3, done.stderr[-2000:]
        assert "refusing to send credentials" in done.stderr
        assert third.requests == []
        for request in srv.requests:  # the API never sees the client secret
            assert business_central.SECRET not in str(request.headers) + request.body.decode()
        for request in srv.identity.requests:  # the identity platform never sees a token
            assert "authorization" not in request.headers
        _no_secret(done, business_central.SECRET)
        assert sandbox.stats().products.get("default", 0) == 0


def test_a_second_401_with_a_fresh_token_exits_3_naming_the_token_answer(
    run_cli: Run, sandbox: Sandbox, tmp_path: Path
) -> None:
    with start("akeneo", tmp_path) as system:
        system.server.tokens.expire_after = 0  # type: ignore[attr-defined]  # every token refused
        done, _ = sync(run_cli, system, sandbox, tmp_path)
        assert done.returncode == 3, done.stderr[-2000:]
        assert "answered HTTP 401 again with a token just renewed" in done.stderr
        assert "expires_in 3600 s" in done.stderr  # what the token endpoint answered
        assert system.server.tokens.issued == 2  # type: ignore[attr-defined]  # no loop
        _no_secret(done, *system.secrets)
