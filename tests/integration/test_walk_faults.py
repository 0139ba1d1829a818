"""The issue's two figures against the sandbox, through the CLI.

- Page 2 of 3 answers ``{"data": [], "meta": {"pages": 3}}``: 0 duplicates; exit 3 while
  it persists, and the products the walk could not prove absent are not created.
- A list lagging behind writes, with create answers lost: 0 duplicates, exit 0.
"""

from __future__ import annotations

import json
import random
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from skuferry.sandbox import Sandbox
from skuferry.sandbox.faults import Faults
from tests.integration.conftest import (
    Cli,
    assert_each_once,
    catalog_keys,
    catalog_rows,
    remote_counts,
)

pytestmark = pytest.mark.integration


def _summary(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr
    summary: dict[str, Any] = json.loads(lines[-1])
    return summary


def _on_the_cms(rows: list[dict[str, str]]) -> list[dict[str, Any]]:
    return [{"sku": r["SKU"], "name": r["Name"], "price": r["Price"]} for r in rows]


def _api_key(config: Path, line: str) -> Path:
    """One more ``[api]`` key in the written config."""
    config.write_text(config.read_text().replace("max_retries = 3", f"max_retries = 3\n{line}"))
    return config


def _first_draws(p: float) -> int:
    """A seed whose first list draw hits (< p) and whose second misses."""
    for seed in range(1000):
        rng = random.Random(seed)
        if rng.random() < p <= rng.random():
            return seed
    raise AssertionError("no such seed")  # pragma: no cover


def test_page_2_of_3_empty_makes_no_duplicate_and_exits_3_while_it_persists(
    sandbox: Sandbox,
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    cli: Cli,
) -> None:
    rows = catalog_rows(200)
    sandbox.seed_products(_on_the_cms(rows[:150]))  # a fresh mirror over a CMS holding 150
    write_catalog(rows)
    config = write_config(sandbox.url, extra="")
    config.write_text(
        config.read_text().replace("max_retries = 3", "max_retries = 3\npage_size = 50")
    )
    sandbox.set_faults(Faults(list_empty=1.0, list_page=2))
    done = cli.run("sync", "-c", str(config), "--json")
    assert done.returncode == 3, done.stderr
    assert "page 2 of 3 was empty" in done.stderr
    assert sandbox.stats().faults == {"list_empty": 2}, "read once more from page 1, not more"
    assert max(remote_counts(sandbox).values()) == 1, "no duplicates"
    assert len(sandbox.products()) == 150, "nothing the walk could not prove absent was created"
    sandbox.set_faults(Faults())
    again = cli.run("sync", "-c", str(config), "--json")
    assert again.returncode == 0, again.stderr
    assert_each_once(sandbox, catalog_keys(200))


def test_page_2_of_3_empty_once_is_read_again_and_the_run_completes(
    sandbox_factory: Callable[..., Sandbox],
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    cli: Cli,
) -> None:
    sandbox = sandbox_factory(updates="patch", seed=_first_draws(0.5))
    rows = catalog_rows(200)
    sandbox.seed_products(_on_the_cms(rows[:150]))
    write_catalog(rows)
    config = write_config(sandbox.url)
    config.write_text(
        config.read_text().replace("max_retries = 3", "max_retries = 3\npage_size = 50")
    )
    sandbox.set_faults(Faults(list_empty=0.5, list_page=2))
    done = cli.run("sync", "-c", str(config), "--json")
    summary = _summary(done)
    assert done.returncode == 0, done.stderr
    assert sandbox.stats().faults == {"list_empty": 1}
    assert (summary["created"], summary["adopted"]) == (50, 150)
    assert_each_once(sandbox, catalog_keys(200))


def test_a_list_lagging_behind_writes_with_lost_create_answers_makes_no_duplicate(
    sandbox_factory: Callable[..., Sandbox],
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    cli: Cli,
    figures: Callable[[str], None],
) -> None:
    sandbox = sandbox_factory(
        updates="patch", seed=29, faults=Faults(drop_after_commit=0.15, list_lag_s=1.5)
    )
    n = 60
    write_catalog(catalog_rows(n))
    config = write_config(sandbox.url, timeout_s=5.0, extra="")
    config.write_text(
        config.read_text().replace("max_retries = 3", "max_retries = 3\nlist_lag_s = 5")
    )
    done = cli.run("sync", "-c", str(config), "--json")
    summary = _summary(done)
    lost = sandbox.stats().faults.get("drop_after_commit", 0)
    assert lost >= 3, "some create answers were lost"
    assert done.returncode == 0, summary["problems"]
    assert (summary["created"], summary["failed"]) == (n, 0)
    assert_each_once(sandbox, catalog_keys(n))
    figures(
        f"list lagging 1.5 s, {lost} of {n} create answers lost: duplicates 0, exit 0, "
        f"{summary['requests']['read']} reads (walks of 1 page), {summary['duration_s']} s"
    )
