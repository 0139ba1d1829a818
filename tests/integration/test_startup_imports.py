"""What a ``skuferry sync`` start loads, checked in a fresh interpreter (issue 23 item 2).

A child process imports what the CLI imports on its way to a run (the verbs, their
actions, the engine, the runner, the report), loads a CSV config and hashes it as the unchanged
check does, then prints ``sys.modules`` and which source models pydantic has built.
The test fails when one of the modules below is imported again on that path: each cost
a start tens of milliseconds, and a no-op is mostly start. Timings are in ``bench/``
(``python -m bench --only startup,unchanged``), never asserted here.

The full run (a real no-op sync against the sandbox, its own ``sys.modules``) is
``test_unchanged_cli.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import clean_env

pytestmark = pytest.mark.integration

# name -> why a start must not load it
NOT_AT_START = {
    "asyncio": "structlog imports it for its async methods only (logs._light_structlog)",
    "ssl": "OpenSSL, loaded by asyncio or a ca_bundle check; a CSV sync has neither",
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
    "pydantic_settings": "not used (docs/development.md, the config loader)",
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
