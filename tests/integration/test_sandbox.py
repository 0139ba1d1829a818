"""The sandbox over real loopback HTTP, as a client sees it (httpx)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from skuferry.sandbox import Faults, Sandbox, SandboxConfig, TierLimit
from tests.fakes import FakeClock

pytestmark = pytest.mark.integration

KEY = "sandbox-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
PRODUCTS = "/api/v1/products"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(5000.0)


@pytest.fixture
def sandbox(clock: FakeClock) -> Iterator[Sandbox]:
    config = SandboxConfig(
        keys={KEY: "default", "other-key": "default", "far-key": "elsewhere"},
        key_limits={"write": 3, "read": 50},
        workspace_limits={"write": 4, "read": 100},
        clock=clock,
    )
    with Sandbox(config) as sb:
        yield sb


@pytest.fixture
def client(sandbox: Sandbox) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sandbox.url, headers=AUTH, timeout=5.0) as c:
        yield c


def post(client: httpx.Client, sku: str, **fields: Any) -> httpx.Response:
    return client.post(PRODUCTS, json={"sku": sku, "name": f"Product {sku}", **fields})


def unlimited(sandbox: Sandbox) -> None:
    sandbox.set_limits(write=TierLimit(10_000, 10_000), read=TierLimit(10_000, 10_000))


# -- envelope, pagination, auth, routes ----------------------------------------------


def test_post_echoes_the_stored_product_with_a_server_id(
    client: httpx.Client, sandbox: Sandbox
) -> None:
    response = post(client, "A-1", colour="red")
    assert response.status_code == 201
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["data"]["id"].startswith("p_")
    assert body["data"] | {"id": "x"} == {
        "id": "x",
        "sku": "A-1",
        "name": "Product A-1",
        "colour": "red",
    }
    assert sandbox.products() == [body["data"]]
    got = client.get(f"{PRODUCTS}/{body['data']['id']}")
    assert got.json()["data"] == body["data"]


def test_empty_list_has_zero_pages(client: httpx.Client) -> None:
    body = client.get(PRODUCTS).json()
    assert body == {"data": [], "meta": {"pages": 0, "page": 1, "limit": 20, "total": 0}}


def test_pages_of_250_products_in_insertion_order(client: httpx.Client, sandbox: Sandbox) -> None:
    sandbox.seed_products({"sku": f"S{i:03d}", "name": "n"} for i in range(250))
    first = client.get(PRODUCTS, params={"limit": 100}).json()
    assert first["meta"] == {"pages": 3, "page": 1, "limit": 100, "total": 250}
    last = client.get(PRODUCTS, params={"limit": 100, "page": 3}).json()
    assert [p["sku"] for p in last["data"]] == [f"S{i:03d}" for i in range(200, 250)]
    clamped = client.get(PRODUCTS, params={"limit": 500}).json()
    assert clamped["meta"]["limit"] == 100
    assert len(clamped["data"]) == 100
    default = client.get(PRODUCTS).json()
    assert default["meta"]["pages"] == 13
    assert len(default["data"]) == 20
    assert client.get(PRODUCTS, params={"page": 0}).status_code == 422
    assert client.get(PRODUCTS, params={"limit": "x"}).status_code == 422


def test_missing_or_unknown_key_is_401(sandbox: Sandbox) -> None:
    with httpx.Client(base_url=sandbox.url) as anonymous:
        missing = anonymous.get(PRODUCTS)
        unknown = anonymous.get(PRODUCTS, headers={"Authorization": "Bearer nope"})
    for response in (missing, unknown):
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "UNAUTHORIZED"


def test_unknown_route_and_unknown_product_are_404(client: httpx.Client) -> None:
    assert client.get("/api/v1/nothing").json()["error"]["code"] == "NOT_FOUND"
    assert client.get("/api/v2/products").status_code == 404
    assert client.get(f"{PRODUCTS}/p_999999").status_code == 404


def test_projects_and_content_endpoints(client: httpx.Client) -> None:
    projects = client.get("/api/v1/projects").json()
    assert projects["meta"]["pages"] == 1
    created = client.post("/api/v1/content", json={"title": "hello"})
    assert created.status_code == 201
    assert created.json()["data"]["title"] == "hello"


def test_patch_is_served_by_default_and_strict_mode_answers_405(
    client: httpx.Client, sandbox: Sandbox
) -> None:
    unlimited(sandbox)
    first = post(client, "Z").json()["data"]["id"]
    assert client.patch(f"{PRODUCTS}/{first}", json={"name": "new"}).status_code == 200
    assert client.put(f"{PRODUCTS}/{first}", json={"sku": "Z", "name": "n"}).status_code == 405
    sandbox.set_updates(None)  # skuferry sandbox --strict: the spec lists neither method
    product_id = post(client, "A").json()["data"]["id"]
    response = client.patch(f"{PRODUCTS}/{product_id}", json={"name": "new"})
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "METHOD_NOT_ALLOWED"
    assert response.headers["allow"] == "GET"
    assert client.put(f"{PRODUCTS}/{product_id}", json={"sku": "A", "name": "n"}).status_code == 405


def test_patch_merges_and_put_replaces_keeping_the_id(
    client: httpx.Client, sandbox: Sandbox
) -> None:
    unlimited(sandbox)
    sandbox.set_updates("both")
    product_id = post(client, "A", colour="red", size="M").json()["data"]["id"]
    patched = client.patch(f"{PRODUCTS}/{product_id}", json={"colour": "blue", "id": "p_x"})
    assert patched.status_code == 200
    assert patched.json()["data"] == {
        "id": product_id,
        "sku": "A",
        "name": "Product A",
        "colour": "blue",
        "size": "M",
    }
    put = client.put(f"{PRODUCTS}/{product_id}", json={"sku": "A", "name": "Whole"})
    assert put.json()["data"] == {"id": product_id, "sku": "A", "name": "Whole"}
    assert sandbox.products() == [put.json()["data"]]
    assert client.put(f"{PRODUCTS}/{product_id}", json={"sku": "A"}).status_code == 422
    sandbox.set_updates("patch")
    assert client.put(f"{PRODUCTS}/{product_id}", json={"sku": "A", "name": "x"}).status_code == 405


def test_validation_and_bad_json(client: httpx.Client, sandbox: Sandbox) -> None:
    unlimited(sandbox)
    for payload, field in (
        ({"name": "n"}, "sku"),
        ({"sku": "A"}, "name"),
        ({"sku": "", "name": "n"}, "sku"),
        ({"sku": 5, "name": "n"}, "sku"),
    ):
        response = client.post(PRODUCTS, json=payload)
        assert response.status_code == 422
        assert response.json()["error"]["code"] == "VALIDATION_ERROR"
        assert f"'{field}'" in response.json()["error"]["message"]
    not_json = client.post(PRODUCTS, content=b"{nope", headers={"Content-Type": "application/json"})
    assert not_json.status_code == 400
    assert not_json.json()["error"]["code"] == "BAD_REQUEST"
    assert sandbox.products() == []


def test_decimals_round_trip_verbatim(client: httpx.Client) -> None:
    response = client.post(PRODUCTS, content=b'{"sku": "A", "name": "n", "price": 19.90}')
    assert '"price":19.90' in response.text
    assert '"price":19.90' in client.get(PRODUCTS).text


def test_duplicates_are_accepted_and_counted(client: httpx.Client, sandbox: Sandbox) -> None:
    assert post(client, "A").status_code == 201
    assert post(client, "A").status_code == 201
    assert post(client, "B").status_code == 201
    stats = sandbox.stats()
    assert stats.products == {"default": 3}
    assert stats.duplicates == {"default": {"A": 2}}
    assert stats.writes_committed == 3
    assert stats.requests["write"] == 3
    assert stats.requests_by_key[KEY] == {"write": 3}
    assert stats.responses == {201: 3}


# -- rate limits ---------------------------------------------------------------------


def test_over_the_limit_is_429_with_retry_after_and_early_retries_recorded(
    client: httpx.Client, sandbox: Sandbox, clock: FakeClock
) -> None:
    for sku in ("A", "B", "C"):
        assert post(client, sku).status_code == 201
    clock.now += 15.5
    refused = post(client, "D")
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "45"
    assert refused.json()["error"]["code"] == "RATE_LIMITED"
    assert "45 seconds" in refused.json()["error"]["message"]
    clock.now += 40
    assert post(client, "D").status_code == 429  # 5 s early: refused again, and recorded
    clock.now += 5
    assert post(client, "D").status_code == 201
    stats = sandbox.stats()
    assert [(e.key, e.tier, e.early_by_s) for e in stats.early_retries] == [(KEY, "write", 5.0)]
    assert stats.rate_limited == {"write": 2}
    assert stats.write_times == (0.0, 0.0, 0.0, 60.5)  # admitted writes only
    assert stats.products == {"default": 4}  # refused requests stored nothing
    assert client.get(PRODUCTS).status_code == 200  # reads have their own budget


def test_workspace_limit_spans_keys(sandbox: Sandbox, client: httpx.Client) -> None:
    for sku in ("A", "B", "C"):
        post(client, sku)
    with httpx.Client(base_url=sandbox.url, headers={"Authorization": "Bearer other-key"}) as other:
        assert post(other, "D").status_code == 201  # the workspace's 4th write
        assert post(other, "E").status_code == 429  # key has budget, workspace has not
    sandbox.add_key("new-key", "elsewhere")
    with httpx.Client(base_url=sandbox.url, headers={"Authorization": "Bearer new-key"}) as far:
        assert post(far, "F").status_code == 201  # another workspace
    assert sandbox.stats().rate_limited_by_key == {"other-key": {"write": 1}}
    assert [p["sku"] for p in sandbox.products("elsewhere")] == ["F"]


def test_bucket_mode_retry_after_counts_to_the_next_token(
    sandbox: Sandbox, client: httpx.Client
) -> None:
    sandbox.set_limits(mode="bucket", write=TierLimit(per_key=3, per_workspace=100))
    for sku in ("A", "B", "C"):
        assert post(client, sku).status_code == 201
    assert post(client, "D").headers["retry-after"] == "20"


def test_rate_limit_comes_before_faults(sandbox: Sandbox, client: httpx.Client) -> None:
    sandbox.set_faults(Faults(error_before_commit=1.0))
    for sku in ("A", "B", "C"):
        assert post(client, sku).status_code == 500
    assert post(client, "D").status_code == 429
    assert sandbox.stats().faults == {"error_before_commit": 3}


# -- faults --------------------------------------------------------------------------


def test_drop_after_commit_loses_the_response_but_stores_the_product(
    sandbox: Sandbox, client: httpx.Client
) -> None:
    sandbox.set_faults(Faults(drop_after_commit=1.0))
    with pytest.raises(httpx.RemoteProtocolError):
        post(client, "A")
    assert [p["sku"] for p in sandbox.products()] == ["A"]
    assert client.get(PRODUCTS).status_code == 200  # reads are not faulted by default
    assert sandbox.stats().faults == {"drop_after_commit": 1}


def test_error_after_commit_is_500_and_stored(sandbox: Sandbox, client: httpx.Client) -> None:
    sandbox.set_faults(Faults(error_after_commit=1.0))
    response = post(client, "A")
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "INTERNAL_ERROR"
    assert [p["sku"] for p in sandbox.products()] == ["A"]


def test_error_before_commit_is_500_and_nothing_stored(
    sandbox: Sandbox, client: httpx.Client
) -> None:
    sandbox.set_faults(Faults(error_before_commit=1.0))
    assert post(client, "A").status_code == 500
    assert sandbox.products() == []
    assert sandbox.stats().writes_committed == 0


def test_reset_is_a_connection_reset_and_nothing_stored(
    sandbox: Sandbox, client: httpx.Client
) -> None:
    sandbox.set_faults(Faults(reset=1.0))
    with pytest.raises(httpx.ReadError, match="reset"):
        post(client, "A")
    assert sandbox.products() == []
    assert sandbox.stats().faults == {"reset": 1}


def test_slow_after_commit_times_the_client_out_but_stores(sandbox: Sandbox) -> None:
    sandbox.set_faults(Faults(slow_after_commit=1.0, slow_s=30.0))
    impatient = httpx.Client(base_url=sandbox.url, headers=AUTH, timeout=0.2)
    with impatient, pytest.raises(httpx.ReadTimeout):
        post(impatient, "A")
    assert [p["sku"] for p in sandbox.products()] == ["A"]
    sandbox.stop()  # wakes the 30 s wait: the late answer is written before stop returns
    assert sandbox.stats().responses == {201: 1}


def test_latency_delays_every_response(sandbox: Sandbox) -> None:
    sandbox.set_faults(Faults(latency_s=30.0))
    impatient = httpx.Client(base_url=sandbox.url, headers=AUTH, timeout=0.2)
    with impatient, pytest.raises(httpx.ReadTimeout):
        impatient.get(PRODUCTS)
    sandbox.stop()  # wakes the wait, as for slow answers
    assert sandbox.stats().responses == {200: 1}


def test_faults_on_every_request_when_scoped_to_all(sandbox: Sandbox, client: httpx.Client) -> None:
    sandbox.set_faults(Faults(error_before_commit=1.0, scope="all"))
    assert client.get(PRODUCTS).status_code == 500


@pytest.mark.parametrize("kind", ["html", "json"])
def test_garbage_modes(sandbox: Sandbox, client: httpx.Client, kind: str) -> None:
    sandbox.set_faults(Faults(garbage=kind))  # type: ignore[arg-type]
    response = client.get(PRODUCTS)
    if kind == "html":
        assert response.status_code == 502
        assert response.headers["content-type"].startswith("text/html")
    else:
        assert response.status_code == 200
        with pytest.raises(json.JSONDecodeError):
            response.json()
    with httpx.Client(base_url=sandbox.url) as anonymous:
        assert anonymous.get(PRODUCTS).status_code == 401  # auth stays honest


# -- admin endpoints and lifecycle ----------------------------------------------------


def test_admin_endpoints(sandbox: Sandbox, client: httpx.Client) -> None:
    post(client, "A")
    post(client, "A")
    with httpx.Client(base_url=sandbox.url) as admin:  # no key needed
        stats = admin.get("/_sandbox/stats").json()["data"]
        assert stats["duplicates"] == {"default": {"A": 2}}
        assert stats["responses"] == {"201": 2}
        listed = admin.get("/_sandbox/products").json()
        assert [p["sku"] for p in listed["data"]] == ["A", "A"]
        set_faults = admin.post("/_sandbox/faults", json={"error_before_commit": 1})
        assert set_faults.json()["data"]["error_before_commit"] == 1.0
        assert post(client, "B").status_code == 500
        assert admin.post("/_sandbox/faults", json={"bogus": 1}).status_code == 400
        assert admin.post("/_sandbox/faults", json={}).status_code == 200  # faults off
        assert admin.post("/_sandbox/reset").status_code == 200
        assert admin.get("/_sandbox/products").json()["data"] == []
        assert admin.get("/_sandbox/nothing").status_code == 404
    assert sandbox.stats().requests == {}
    assert post(client, "C").status_code == 201  # budgets were reset too


def test_min_elapsed_uses_the_sandbox_limits(sandbox: Sandbox) -> None:
    assert sandbox.min_elapsed_for(7) == 120.0  # 3 per window
    assert sandbox.min_elapsed_for(7, keys=2) == 60.0  # 4 per window (workspace cap)


def test_stop_closes_idle_keep_alive_connections() -> None:
    sandbox = Sandbox()
    url = sandbox.start()
    with httpx.Client(base_url=url, headers=AUTH) as c:
        assert c.get(PRODUCTS).status_code == 200
        sandbox.stop()  # the pooled connection is still open on the client side
        with pytest.raises(httpx.TransportError):
            c.get(PRODUCTS)


def test_cli_serves_until_sigterm() -> None:
    code = "from skuferry.sandbox.cli import sandbox_command; sandbox_command()"
    args = [sys.executable, "-c", code, "--port", "0", "--key", "k1=shop", "--mode", "bucket"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env=env) as proc:
        assert proc.stdout is not None
        url = ""
        for line in proc.stdout:
            if "sandbox CMS API at " in line:
                url = line.split(" at ", 1)[1].split()[0]
                break
        try:
            with httpx.Client(base_url=url, headers={"Authorization": "Bearer k1"}) as c:
                assert post(c, "A").status_code == 201
            proc.send_signal(signal.SIGTERM)
            rest = proc.stdout.read()
            assert proc.wait(timeout=10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    assert "sandbox stopped" in rest


def test_cli_names_the_port_flag_when_the_port_is_taken() -> None:
    """Issue 40 item 20: the walkthrough's sandbox still running gave a bare
    "Address already in use"."""
    import socket

    from skuferry.sandbox.pims.standins import PORTS

    code = "from skuferry.sandbox.cli import sandbox_command; sandbox_command()"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = [sys.executable, "-c", code, "--port", str(port), "--pim", "shopify"]
        done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    said = " ".join(done.stderr.split())
    assert f"cannot serve on 127.0.0.1:{port}: the port is in use" in said
    assert "the walkthrough's" in said and f"--port {port + 1}" in said
    assert "Traceback" not in done.stderr

    with socket.socket() as taken:
        try:
            taken.bind(("127.0.0.1", PORTS["shopify"]))
        except OSError:
            pytest.skip("the stand-in's own port is in use on this machine")
        taken.listen()
        args = [sys.executable, "-c", code, "--port", "0", "--pim", "shopify"]
        done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    said = " ".join(done.stderr.split())
    assert done.returncode != 0
    assert f"the shopify stand-in on 127.0.0.1:{PORTS['shopify']}" in said
    assert "`skuferry sandbox --pim shopify` still running" in said


def test_cli_with_a_stand_in_says_how_long_the_try_takes_and_how_to_hurry_it() -> None:
    """Issue 40 item 21: the try-it's four minutes were a surprise."""
    code = "from skuferry.sandbox.cli import sandbox_command; sandbox_command()"
    args = [sys.executable, "-c", code, "--port", "0", "--pim", "shopify", "--pim-products", "5"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    said = []
    with subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env=env) as proc:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                said.append(line)
                if "Ctrl-C to stop" in line:
                    break
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=20)
    text = " ".join("".join(said).split())
    assert "It takes about 1 min: 5 products at 60 writes a minute" in text
    assert "--write-per-minute 600 --workspace-write-per-minute 600" in text
    assert "export SKUFERRY_BUDGET__WRITE_PER_MINUTE=600" in text
