"""What a ``skuferry sync`` start loads, checked in a fresh interpreter (issue 23 item 2).

A child process imports what the CLI imports on its way to a run (the verbs, their
actions, the engine, the runner, the report), loads a CSV config and hashes it as the unchanged
check does, then prints ``sys.modules`` and which source models pydantic has built.
The test fails when one of the modules below is imported again on that path: each cost
a start tens of milliseconds, and a no-op is mostly start. Timings are in ``bench/``
(``python -m bench --only startup,unchanged``), never asserted here.

The config loader is pydantic-settings (issue 30), whose import brings asyncio and
OpenSSL: the full start pays for them. The quick lane, which decides an unchanged
source's run before any of that, must not: a real skipped ``skuferry sync`` is run in a
child and its ``sys.modules`` checked against ``NOT_IN_THE_LANE``.

The full run (a real no-op sync against the sandbox, its own ``sys.modules``) is
``test_unchanged_cli.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from skuferry.sandbox import Sandbox
from skuferry.sources.change_token import RACY_S
from tests.integration.conftest import catalog_rows, clean_env

pytestmark = pytest.mark.integration

# name -> why a start must not load it
NOT_AT_START = {
    "apscheduler": "the daemon's scheduler and a cron [schedule] (config/schedule.py)",
    "colorama": "structlog's colours for Windows consoles",
    "rich": "terminal rendering; structlog loads without it off a terminal",
    "difflib": "did-you-mean for a config problem",
    "skuferry.sandbox": "the local CMS",
    "httpx": "loaded when a run has something to send",
    "openpyxl": "xlsx sources",
    "python_calamine": "xlsx sources",
    "sqlalchemy": "sql sources",
    "sqlite_utils": "status queries",
}

# name -> why the quick lane must not load it (besides everything a full start must not)
NOT_IN_THE_LANE = {
    **NOT_AT_START,
    "pydantic": "the config models: the lane decides on the raw reading alone",
    "pydantic_settings": "the loader; its import alone costs ~50 ms (asyncio, dotenv)",
    "dotenv": "pydantic-settings' dotenv source",
    "asyncio": "pydantic-settings and structlog's async methods",
    "ssl": "OpenSSL, loaded by asyncio or a ca_bundle check",
    "click": "the verbs: the lane runs before them",
    "skuferry.config.schema": "the settings models",
    "skuferry.config.load": "the loader",
}

_CHILD = """
import json, sys
from pathlib import Path
import skuferry.cli, skuferry.actions.sync, skuferry.actions.hand_over, skuferry.service.report
import skuferry.service.runner, skuferry.sync.engine
from skuferry.config import schema
from skuferry.config.load import load_settings
from skuferry.sync import skip
settings = load_settings(Path(sys.argv[1]), env={})
skip.identity(settings)
built = [m.__name__ for m in schema.SOURCE_MODELS if m.__pydantic_complete__]
print(json.dumps({"modules": sorted(sys.modules), "built": built}))
"""

CONFIG = """
[api]
base_url = "http://127.0.0.1:9"
api_key = "startup-test-key"

[source]
type = "csv"
path = "catalog.csv"

[mapping.fields]
sku = "SKU"
name = "Name"
price = { column = "Price", type = "decimal" }

[state]
path = "skuferry.db"
"""


def _start(tmp_path: Path) -> dict[str, list[str]]:
    config = tmp_path / "skuferry.toml"
    config.write_text(CONFIG, encoding="utf-8")
    config.chmod(0o600)
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, str(config)],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    found: dict[str, list[str]] = json.loads(result.stdout.strip().splitlines()[-1])
    return found


def test_a_csv_sync_starts_without_the_heavy_modules(tmp_path: Path) -> None:
    found = _start(tmp_path)
    modules = set(found["modules"])
    assert {"skuferry.sync.engine", "structlog", "pydantic"} <= modules, "the child's own list"
    loaded = {
        name: why
        for name, why in NOT_AT_START.items()
        if name in modules or any(m.startswith(name + ".") for m in modules)
    }
    assert not loaded, f"loaded at start: {loaded}"


def test_a_start_builds_the_one_source_model_its_config_uses(tmp_path: Path) -> None:
    assert _start(tmp_path)["built"] == ["CsvSourceSettings"]


_LANE = """
import atexit, json, sys
LISTING = sys.argv[1]
def _modules():
    with open(LISTING, "w", encoding="utf-8") as out:
        json.dump(sorted(sys.modules), out)
atexit.register(_modules)
OUTPUT = sys.argv[3:]
sys.argv = ["skuferry", "--log-format", "json", "-vv", "sync", *OUTPUT, "-c", sys.argv[2]]
from skuferry.start import main
main()
"""


@pytest.mark.parametrize("output", [["--json"], []], ids=["json", "printed"])
def test_the_quick_lane_loads_no_settings_library(
    output: list[str],
    *,
    sandbox: Sandbox,
    tmp_path: Path,
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    run_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    catalog = write_catalog(catalog_rows(5))
    config = write_config(sandbox.url)
    age = time.time() - catalog.stat().st_mtime  # a file this fresh may change unseen
    time.sleep(max(0.0, RACY_S - age + 0.1))
    first = run_cli("sync", "--json", "--config", str(config))
    assert first.returncode == 0, first.stderr
    listing = tmp_path / "modules.json"
    result = subprocess.run(
        [sys.executable, "-c", _LANE, str(listing), str(config), *output],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    taken = [json.loads(x) for x in result.stderr.splitlines() if '"sync.quick"' in x]
    assert taken and taken[-1]["taken"], result.stderr  # the lane, not the full start
    modules = set(json.loads(listing.read_text(encoding="utf-8")))
    assert "skuferry.service.quick" in modules, "the child's own list"
    loaded = {
        name: why
        for name, why in NOT_IN_THE_LANE.items()
        if name in modules or any(m.startswith(name + ".") for m in modules)
        if output or name != "rich"  # a printed summary is rich's table, as the full start's
    }
    assert not loaded, f"loaded by the quick lane: {loaded}"
