"""Many workspaces in one process, as an operator of many shops runs them.

``skuferry sync --workspaces DIR`` and ``skuferry run --workspaces DIR --listen``
against the sandbox, one CMS workspace (and key) per config file; the state lock
that a daemon holds between runs.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from skuferry.sandbox import Sandbox
from skuferry.service import hooks_http
from tests.fakes import wait_until, write_config_file
from tests.integration.conftest import (
    CONFIG,
    FAST,
    Cli,
    assert_each_once,
    catalog_rows,
    closed_port_url,
)

pytest.importorskip("skuferry.sync.engine")

pytestmark = pytest.mark.integration

SHOPS = {"acme": "sk-acme-Qw7r", "bolt": "sk-bolt-Hj3k", "crow": "sk-crow-Lp9m"}


def workspace_config(
    folder: Path, name: str, url: str, key: str, rows: int, *, extra: str = ""
) -> Path:
    """``folder/<name>.toml``: its own key, catalog and state, as each shop has."""
    catalog = folder.parent / f"{name}.csv"
    lines = ["SKU,Name,Price,Stock"] + [
        f"{r['SKU']},{r['Name']},{r['Price']},{r['Stock']}" for r in catalog_rows(rows)
    ]
    catalog.write_text("\n".join(lines) + "\n", encoding="utf-8")
    text = CONFIG.format(
        url=url,
        key_line=f'api_key = "{key}"',
        timeout_s=5.0,
        max_in_flight=4,
        max_retries=3,
        catalog=catalog,
        reads=FAST,
        writes=FAST,
        limiter="window",
        clock_skew_s=0.5,
        extra=extra,
    ).replace('path = "state/skuferry.db"', f'path = "{folder.parent}/state/{name}.db"')
    return write_config_file(folder, text, name=f"{name}.toml")


@pytest.fixture
def shops(sandbox_factory: Callable[..., Sandbox]) -> Sandbox:
    return sandbox_factory(updates="patch", keys={key: name for name, key in SHOPS.items()})


def last_json(stdout: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return result


def test_a_directory_syncs_with_one_command_and_a_broken_workspace_is_named(
    tmp_path: Path, shops: Sandbox, cli: Cli
) -> None:
    folder = tmp_path / "workspaces"
    for i, (name, key) in enumerate(SHOPS.items()):
        workspace_config(folder, name, shops.url, key, 20 + i)
    write_config_file(folder, "[api\nbase_url = ", name="broken.toml")
    workspace_config(folder, "revoked", shops.url, "sk-nobody-Zz1x", 5)
    (folder / "_notes.toml").write_text("not a workspace\n")

    done = cli.run("sync", "--workspaces", str(folder), "--json")

    lines = done.stdout.strip().splitlines()
    named = sorted(line.split(":", 1)[0] for line in lines[:-1])
    assert named == ["acme", "bolt", "broken", "crow", "revoked"], done.stdout
    report = last_json(done.stdout)["workspaces"]
    assert sorted(report) == named
    for i, name in enumerate(SHOPS):
        assert report[name]["exit_code"] == 0, report[name]
        assert report[name]["created"] == 20 + i
        assert_each_once(shops, [r["SKU"] for r in catalog_rows(20 + i)], workspace=name)
    assert report["broken"]["exit_code"] == 2
    assert "broken.toml" in report["broken"]["error"]
    assert report["revoked"]["exit_code"] == 3
    assert "refused" in report["revoked"]["error"]
    assert "sk-nobody" not in done.stdout + done.stderr
    assert done.returncode == 2  # the worst: a config that does not load


def test_a_dry_run_of_a_directory_says_would_be_created_as_plan_does(
    tmp_path: Path, shops: Sandbox, cli: Cli
) -> None:
    folder = tmp_path / "workspaces"
    config = workspace_config(folder, "acme", shops.url, SHOPS["acme"], 30)
    done = cli.run("sync", "--workspaces", str(folder), "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "acme: success (dry run, exit 0): 30 would be created," in done.stdout
    assert "30 created" not in done.stdout
    assert shops.products("acme") == [], "nothing was written"
    planned = cli.run("plan", "--config", str(config))
    assert "would be created" in planned.stdout, "the same words as plan's"


def test_two_shards_split_a_directory_without_overlap(tmp_path: Path, cli: Cli) -> None:
    folder = tmp_path / "workspaces"
    url = closed_port_url()
    names = [f"shop-{i:02d}" for i in range(12)]
    for name in names:  # every run fails fast (nothing listens): only the names count here
        workspace_config(folder, name, url, "sk-x-Aa11", 1)
    taken = []
    for k in range(2):
        done = cli.run("sync", "--workspaces", str(folder), "--shard", f"{k}/2", "--json")
        taken.append(set(last_json(done.stdout)["workspaces"]))
    assert not taken[0] & taken[1]
    assert taken[0] | taken[1] == set(names)
    assert taken[0] and taken[1]


def get(url: str) -> tuple[int, dict[str, Any]]:
    answer = httpx.get(url, timeout=10)
    return answer.status_code, answer.json()


def post(url: str, body: bytes, secret: bytes) -> int:
    headers = {hooks_http.SIGNATURE_HEADER: hooks_http.sign(secret, body)}
    return httpx.post(url, content=body, headers=headers, timeout=10).status_code


def free_listen() -> str:
    return closed_port_url().removeprefix("http://")


DAEMON = "[schedule]\ninterval_minutes = 600\n"


def test_the_fleet_daemon_lives_through_a_revoked_key_and_routes_hooks_per_workspace(
    tmp_path: Path, shops: Sandbox, cli: Cli
) -> None:
    folder = tmp_path / "workspaces"
    secrets = {}
    for name, key in SHOPS.items():
        secret_file = tmp_path / f"{name}.secret"
        secret_file.write_text(f"hook-secret-of-{name}\n")
        secret_file.chmod(0o600)
        secrets[name] = f"hook-secret-of-{name}".encode()
        extra = DAEMON + f'[daemon]\nhook_secret_file = "{secret_file}"\n'
        workspace_config(folder, name, shops.url, key, 10, extra=extra)
    listen = free_listen()
    base = f"http://{listen}"
    cli.start("run", "--workspaces", str(folder), "--listen", listen)
    wait_until(lambda: _healthy(base), "every workspace's first run")
    assert get(f"{base}/livez")[0] == 200

    metrics = httpx.get(f"{base}/metrics", timeout=10).text
    samples = [line for line in metrics.splitlines() if line and not line.startswith("#")]
    pool = ("skuferry_run_slots ", "skuferry_runs_running ", "skuferry_runs_waiting ")
    assert sorted(line.split()[0] for line in samples if line.startswith(pool)) == sorted(
        name.strip() for name in pool
    ), "the process's pool: no workspace label"
    own = [line for line in samples if not line.startswith(pool)]
    assert own
    assert all('workspace="' in line for line in own), own[:5]
    assert {name for name in SHOPS if f'workspace="{name}"' in metrics} == set(SHOPS)
    types = [line for line in metrics.splitlines() if line.startswith("# TYPE ")]
    assert len(types) == len(set(types))  # each family once, all workspaces in it
    assert list(text_string_to_metric_families(metrics))  # a scraper reads it

    # a hook signed with bolt's secret is refused on acme's route; taken on bolt's
    body = json.dumps({"keys": ["SKU-00001"]}).encode()
    assert post(f"{base}/hooks/acme/sync", body, secrets["bolt"]) == 401
    assert post(f"{base}/hooks/bolt/sync", body, secrets["bolt"]) == 202
    assert post(f"{base}/hooks/nobody/sync", body, secrets["bolt"]) == 404
    assert post(f"{base}/hooks/acme/run", b"{}", secrets["acme"]) == 202

    shops.revoke_key(SHOPS["crow"])
    with (tmp_path / "crow.csv").open("a") as catalog:  # something to send: the key is asked
        catalog.write("SKU-NEW,New drill,20.00,1\n")
    assert post(f"{base}/hooks/crow/run", b"{}", secrets["crow"]) == 202
    wait_until(lambda: get(f"{base}/healthz")[0] == 503, "crow's refused run")
    _status, health = get(f"{base}/healthz")
    assert health["failing"] == ["crow"]
    assert any("refused" in p for p in health["workspaces"]["crow"]["problems"])
    assert get(f"{base}/livez") == (200, {"status": "alive", "problems": {}})

    # the operator's page lists every workspace the process serves, each with its page
    front = httpx.get(f"{base}/", timeout=10)
    assert front.status_code == 200 and "text/html" in front.headers["content-type"]
    for name in SHOPS:
        assert f'href="/workspaces/{name}"' in front.text
        assert httpx.get(f"{base}/workspaces/{name}", timeout=10).status_code == 200
    refused = httpx.post(f"{base}/workspaces/acme/run", timeout=10)  # no token: read-only
    assert refused.status_code in (401, 403)


def _healthy(base: str) -> bool:
    try:
        status, body = get(f"{base}/healthz")
    except httpx.HTTPError:
        return False
    workspaces = body.get("workspaces", {})
    return status == 200 and all(
        workspaces.get(name, {}).get("last_run", {}).get("result") == "success" for name in SHOPS
    )


def test_sighup_picks_up_added_changed_and_removed_files(
    tmp_path: Path, shops: Sandbox, cli: Cli
) -> None:
    folder = tmp_path / "workspaces"
    for name in ("acme", "bolt"):
        workspace_config(folder, name, shops.url, SHOPS[name], 3, extra=DAEMON)
    listen = free_listen()
    base = f"http://{listen}"
    proc = cli.start("run", "--workspaces", str(folder), "--listen", listen)

    def names() -> set[str]:
        try:
            return set(get(f"{base}/healthz")[1].get("workspaces", {}))
        except httpx.HTTPError:
            return set()

    wait_until(lambda: names() == {"acme", "bolt"}, "the first two workspaces")
    workspace_config(folder, "crow", shops.url, SHOPS["crow"], 4, extra=DAEMON)
    moved = tmp_path / "bolt-moved.toml"
    (folder / "bolt.toml").rename(moved)
    text = (folder / "acme.toml").read_text()
    (folder / "acme.toml").write_text(text + '[metrics]\nlabels = { workspace = "acme-2" }\n')
    proc.send_signal(signal.SIGHUP)
    wait_until(lambda: names() == {"acme", "crow"}, "crow added and bolt removed")

    def relabelled() -> bool:
        text = httpx.get(f"{base}/metrics", timeout=10).text
        return 'workspace="acme-2"' in text and 'workspace="crow"' in text

    wait_until(relabelled, "acme's changed config")
    wait_until(lambda: len(shops.products("crow")) == 4, "crow's first run")
    # bolt's state is free again: its lock left with its workspace
    done = cli.run("sync", "--config", str(tmp_path / "bolt-moved.toml"))
    assert done.returncode == 0, done.stderr
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


# TEST-NET-1 (RFC 5737): no host has it, so the bind fails and nothing listens; the
# warning comes before the bind, as it does for an address this host has
NOT_LOOPBACK = "192.0.2.1:9"


@pytest.mark.parametrize("fleet", [False, True], ids=["one-workspace", "fleet"])
def test_a_listen_address_others_can_reach_is_warned_about_by_both(
    tmp_path: Path, shops: Sandbox, cli: Cli, fleet: bool
) -> None:
    folder = tmp_path / "workspaces"
    if fleet:
        folder.mkdir()
        done = cli.run("run", "--workspaces", str(folder), "--listen", NOT_LOOPBACK)
    else:
        config = workspace_config(
            folder,
            "acme",
            shops.url,
            SHOPS["acme"],
            1,
            extra=f'[daemon]\nlisten = "{NOT_LOOPBACK}"\n',
        )
        done = cli.run("run", "--config", str(config))
    logged = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    warned = [e for e in logged if e.get("event") == "daemon.listen.public"]
    assert [e["listen"] for e in warned] == [NOT_LOOPBACK], done.stderr
    assert "readable by anyone" in warned[0]["hint"]
    assert done.returncode == 2 and f"cannot listen on {NOT_LOOPBACK}" in done.stderr


@pytest.mark.parametrize("fleet", [False, True], ids=["one-workspace", "fleet"])
def test_a_second_process_on_a_served_state_exits_75_between_runs(
    tmp_path: Path, shops: Sandbox, cli: Cli, fleet: bool
) -> None:
    folder = tmp_path / "workspaces"
    config = workspace_config(folder, "acme", shops.url, SHOPS["acme"], 5, extra=DAEMON)
    listen = free_listen()
    if fleet:
        cli.start("run", "--workspaces", str(folder), "--listen", listen)
    else:
        config.write_text(config.read_text() + f'[daemon]\nlisten = "{listen}"\n')
        cli.start("run", "--config", str(config))

    def idle_after_first_run() -> bool:
        try:
            return get(f"http://{listen}/healthz")[0] == 200 and len(shops.products("acme")) == 5
        except httpx.HTTPError:
            return False

    wait_until(idle_after_first_run, "the daemon's first run")
    done = cli.run("sync", "--config", str(config))
    assert done.returncode == 75, done.stderr
    assert "holds" in done.stderr
    # a named sync beside the idle daemon hands its key over; the daemon runs it
    catalog = tmp_path / "acme.csv"
    catalog.write_text(catalog.read_text().replace("Cordless drill 2,", "Renamed drill 2,"))
    done = cli.run("sync", "--config", str(config), "--only", "SKU-00002")
    assert done.returncode == 0, done.stderr
    assert "handed 1 key(s)" in done.stdout

    def renamed() -> bool:
        names = {p["sku"]: p["name"] for p in shops.products("acme")}
        return names.get("SKU-00002") == "Renamed drill 2"

    wait_until(renamed, "the daemon to send the handed key")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["sync", "--shard", "0/2"], "--shard needs --workspaces"),
        (["sync", "--workspaces", ".", "--only", "SKU-1"], "--only names keys of one"),
        (["sync", "--workspaces", ".", "--config", "x.toml"], "either-or"),
        (["run", "--listen", "127.0.0.1:0", "--config", "x.toml"], "go with --workspaces"),
        (["run", "--console-token-env", "T", "--config", "x.toml"], "go with --workspaces"),
        (["run", "--workspaces", ".", "--console-token-env", "T"], "need --listen"),
        (["sync", "--workspaces", ".", "--shard", "3/3"], "K must be 0 to N-1"),
        (["run", "--max-runs", "2", "--config", "x.toml"], "--max-runs goes with --workspaces"),
        (["run", "--workspaces", ".", "--max-runs", "0"], "--max-runs"),
    ],
)
def test_the_fleet_options_refuse_what_does_not_go_together(
    cli: Cli, args: list[str], says: str
) -> None:
    done = cli.run(*args)
    assert done.returncode == 2
    assert says in done.stderr
