"""The quick lane and the [gone] patch: an archive in doubt is work the next run does,
so the lane leaves that run to the full start, as the engine's own check does."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from skuferry import canonical
from skuferry.sandbox import Sandbox
from skuferry.sources.change_token import RACY_S
from tests.integration.conftest import catalog_rows

pytestmark = pytest.mark.integration

Run = Callable[..., subprocess.CompletedProcess[str]]
PATCH = {"stock": 0}


def _events(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]


def _taken(result: subprocess.CompletedProcess[str]) -> bool:
    return any(e["event"] == "sync.quick" and e["taken"] for e in _events(result))


def test_an_archive_in_doubt_is_not_skipped_by_the_lane(
    sandbox: Sandbox,
    tmp_path: Path,
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    run_cli: Run,
) -> None:
    catalog = write_catalog(catalog_rows(12))
    config = write_config(sandbox.url, extra='[gone]\naction = "patch"\npatch = { stock = 0 }\n')
    age = time.time() - catalog.stat().st_mtime
    if age < RACY_S:  # a change token of a file this young is not trusted
        time.sleep(RACY_S - age + 0.1)

    def sync() -> subprocess.CompletedProcess[str]:
        return run_cli("-vv", "sync", "--json", "--config", str(config))

    first = sync()
    assert first.returncode == 0, first.stderr
    assert _taken(sync()), "nothing changed, nothing pending: the lane skips"

    # the [gone] patch sent to a product whose answer was lost: archived, in doubt
    with sqlite3.connect(config.parent / "state" / "skuferry.db") as conn:
        conn.execute(
            # as the journal leaves it: the patch's digest where a refused one would be
            "UPDATE products SET state = 'archived', rejected_digest = ? WHERE key = 'SKU-00003'",
            (canonical.digest(PATCH),),
        )
    pending = sync()
    assert not _taken(pending), "the record knows the patch: its archive in doubt is work"
    summary = json.loads(pending.stdout.strip().splitlines()[-1])
    assert summary["pull"] == "full"
