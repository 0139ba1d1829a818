"""A sync larger than any one page of the plan, with the real budget sharing the state file."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from skuferry.sandbox import Sandbox
from tests.integration.conftest import assert_each_once, catalog_keys, catalog_rows

pytestmark = pytest.mark.integration

N = 1_300  # over the plan store's page and the mirror's batch sizes


def test_a_sync_of_more_than_a_thousand_products_commits_every_one(
    sandbox_factory: Callable[..., Sandbox],
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    run_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    # The budget's own connection writes to the state file between the mirror's
    # commits; a plan read through a long-lived cursor made those commits fail.
    sandbox = sandbox_factory(updates="patch", latency_s=0.0)
    write_catalog(catalog_rows(N))
    config = write_config(sandbox.url, reads=60_000, writes=60_000)
    first = run_cli("sync", "--config", str(config), "--json")
    assert first.returncode == 0, first.stderr[-2000:]
    assert json.loads(first.stdout.splitlines()[-1])["created"] == N
    assert_each_once(sandbox, catalog_keys(N))
    write_catalog(catalog_rows(N, version=1))
    second = run_cli("sync", "--config", str(config), "--json", "--force")
    assert second.returncode == 0, second.stderr[-2000:]
    assert json.loads(second.stdout.splitlines()[-1])["updated"] == N
    assert sandbox.stats().writes_committed == 2 * N
