"""Flags a user will try: log options after the verb, ``plan --only``, ``--version``."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from skuferry import __version__
from skuferry.sandbox import Sandbox
from tests.integration.conftest import catalog_rows

pytestmark = pytest.mark.integration

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def config(
    sandbox: Sandbox, write_catalog: Callable[..., Path], write_config: Callable[..., Path]
) -> str:
    write_catalog(catalog_rows(5))
    return str(write_config(sandbox.url))


def test_version(run_cli: Run) -> None:
    result = run_cli("--version")
    assert result.returncode == 0
    assert __version__ in result.stdout


def test_log_options_after_the_verb_act_as_before_it(config: str, run_cli: Run) -> None:
    after = run_cli("sync", "-c", config, "-v", "--log-format", "json")
    assert after.returncode == 0, after.stderr
    events = [json.loads(line)["event"] for line in after.stderr.splitlines() if line.strip()]
    assert "sync.plan.started" in events  # info level and JSON, as asked after the verb
    before = run_cli("--log-format", "console", "status", "-c", config, "--debug")
    assert before.returncode == 0, before.stderr


def test_a_log_option_after_the_verb_is_not_taken_for_a_key(config: str, run_cli: Run) -> None:
    result = run_cli("sync", "-c", config, "--only", "SKU-00001", "-v", "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert (summary["pull"], summary["unchanged"] + summary["created"]) == ("named", 1)


def test_plan_takes_only_and_keys_from(config: str, run_cli: Run, tmp_path: Path) -> None:
    named = run_cli("plan", "-c", config, "--json", "--only", "SKU-00001", "SKU-00002")
    assert named.returncode == 0, named.stderr
    summary = json.loads(named.stdout.strip().splitlines()[-1])
    assert (summary["pull"], summary["created"], summary["dry_run"]) == ("named", 2, True)
    keys = tmp_path / "keys.txt"
    keys.write_text("# to check\nSKU-00003\n", encoding="utf-8")
    listed = run_cli("plan", "-c", config, "--json", "--keys-from", str(keys))
    assert json.loads(listed.stdout.strip().splitlines()[-1])["created"] == 1
    missing = run_cli("plan", "-c", config, "--json", "--only", "NOPE")
    assert missing.returncode == 1  # as sync --only would: the key is not in the source
    assert json.loads(missing.stdout.strip().splitlines()[-1])["problems"] == [
        {"key": "NOPE", "line": None, "reason": "not in the source"}
    ]
