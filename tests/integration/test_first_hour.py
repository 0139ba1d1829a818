"""A newcomer's first hour, as the README tells it: ``skuferry sandbox``, sync, a price
change, ``status``; the demo's advice; ``plan --full``."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from skuferry.sandbox import Sandbox
from skuferry.sandbox.config import DEFAULT_KEY
from skuferry.sandbox.pim import PimServer
from tests.integration.conftest import KEY, catalog_rows, clean_env

pytestmark = pytest.mark.integration

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """``skuferry sandbox --port 0 ARGS`` as a user starts it; returns the URL it prints."""
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str) -> str:
        proc = subprocess.Popen(
            [sys.executable, "-m", "skuferry", "sandbox", "--port", "0", *args],
            cwd=tmp_path,
            env=clean_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        procs.append(proc)
        assert proc.stdout is not None
        for line in proc.stdout:  # log lines may come first
            if line.startswith("sandbox CMS API at "):
                return line.split()[4]
        raise AssertionError("the sandbox did not say where it serves")

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()


def _config(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "my.toml"
    path.write_text(
        f"""[api]
base_url = "{url}"
api_key = "{DEFAULT_KEY}"
update_method = "patch"

[source]
type = "csv"
path = "catalog.csv"

[mapping]
key = "sku"
[mapping.fields]
sku = "SKU"
name = "Name"
price = {{ column = "Price", type = "decimal" }}
stock = {{ column = "Stock", type = "integer" }}

[state]
path = "skuferry.db"
""",
        encoding="utf-8",
    )
    path.chmod(0o600)
    return path


def _catalog(tmp_path: Path, *, version: int) -> None:
    rows = catalog_rows(5, version=version)
    lines = ["SKU,Name,Price,Stock", *(",".join(r.values()) for r in rows)]
    (tmp_path / "catalog.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _summary(result: subprocess.CompletedProcess[str]) -> dict[str, object]:
    data: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return data


def test_the_readme_walkthrough_a_price_change_is_an_update_not_drift(
    tmp_path: Path, served: Callable[..., str], run_cli: Run
) -> None:
    url = served()
    config = str(_config(tmp_path, url))
    _catalog(tmp_path, version=0)
    first = run_cli("sync", "--config", config, "--json")
    assert first.returncode == 0, first.stderr
    assert _summary(first)["created"] == 5
    _catalog(tmp_path, version=1)  # every price changes
    second = run_cli("sync", "--config", config, "--json")
    assert second.returncode == 0, second.stdout + second.stderr
    assert (_summary(second)["updated"], _summary(second)["drift"]) == (5, 0)
    status = run_cli("status", "--config", config)
    assert status.returncode == 0 and "synced" in status.stdout


def test_a_strict_sandbox_gives_drift_and_the_advice_names_the_flag(
    tmp_path: Path, served: Callable[..., str], run_cli: Run
) -> None:
    url = served("--strict")
    config = str(_config(tmp_path, url))
    _catalog(tmp_path, version=0)
    assert run_cli("sync", "--config", config).returncode == 0
    _catalog(tmp_path, version=1)
    result = run_cli("sync", "--config", config, "--json")
    assert result.returncode == 1
    summary = _summary(result)
    assert summary["drift"] == 5
    notes = " ".join(str(n) for n in summary["notes"])  # type: ignore[attr-defined]
    assert "--strict" in notes, notes
    assert 'update_method = "put"' in notes and 'update_method = "none"' in notes


def test_the_demo_names_a_command_that_works_and_leaves_no_temporary_folder(
    tmp_path: Path, run_cli: Run
) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    result = run_cli("demo", env={"TMPDIR": str(scratch), "PATH": "/usr/bin:/bin"}, timeout=180)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert list(scratch.iterdir()) == [], "the demo's temporary folder is removed"
    line = next(x for x in result.stdout.splitlines() if "check --config my.toml" in x)
    command = line.split(" check ")[0].strip()
    assert command != "skuferry", "skuferry is not on this PATH: the demo must not say it is"
    assert f"{command} init --from " in result.stdout, "day one starts from the user's export"
    works = subprocess.run([command, "--version"], capture_output=True, text=True, check=False)
    assert works.returncode == 0, (command, works.stderr)
    assert "not on your PATH" in result.stdout


@pytest.fixture
def sandbox_url(sandbox: Sandbox) -> str:
    return sandbox.url


def test_plan_full_reads_the_whole_incremental_source(
    tmp_path: Path, sandbox_url: str, run_cli: Run
) -> None:
    rows = [
        {"sku": f"P-{i}", "name": f"Bolt {i}", "price": "1.50", "updated": "2026-01-01T00:00:00"}
        for i in range(1, 6)
    ]
    with PimServer(rows) as pim:
        config = tmp_path / "inc.toml"
        config.write_text(
            f"""[api]
base_url = "{sandbox_url}"
api_key = "{KEY}"

[source]
type = "http"
url = "{pim.url("page")}"
items_path = "items"
pagination = "page"
page_size = 10
total_pages_path = "meta.pages"
since_param = "updated_since"

[mapping]
key = "sku"
[mapping.fields]
sku = "sku"
name = "name"
price = "price"

[state]
path = "state.db"
""",
            encoding="utf-8",
        )
        config.chmod(0o600)
        assert run_cli("sync", "--config", str(config)).returncode == 0
        incremental = run_cli("plan", "--config", str(config), "--json")
        full = run_cli("plan", "--config", str(config), "--json", "--full")
    assert _summary(incremental)["pull"] == "incremental", incremental.stderr
    assert _summary(full)["pull"] == "full", full.stderr
    assert _summary(full)["unchanged"] == 5
