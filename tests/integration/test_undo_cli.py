"""A bad feed forced through, undone in one command, as a user meets it: ``skuferry sync
--force``, ``skuferry undo RUN`` and ``skuferry explain KEY`` against the sandbox.

- every price times 100 over a catalog of a few hundred products: every price exactly back,
  0 other writes, 0 duplicates, a product edited on the CMS meanwhile left and listed;
  the next scheduled run does not write the feed again; a corrected export syncs;
- a renamed column forced through (nulls sent) with creates and archives in the run;
- the undo killed with SIGKILL halfway, then run again: nothing written twice;
- the undo of the undo gives the bad values back.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from skuferry.sandbox import Sandbox
from skuferry.sources.change_token import RACY_S
from tests.integration.conftest import WORKSPACE, Cli, catalog_rows

pytestmark = pytest.mark.integration

Run = Callable[..., subprocess.CompletedProcess[str]]

GONE = """
[gone]
action = "patch"
patch = { status = "archived" }
restore = { status = "active" }
"""


def _aged(path: Path) -> Path:
    """Wait until the export is older than the racy window (it then has a change token, as
    an export written minutes before the run)."""
    newest = max(path.stat().st_mtime, path.stat().st_ctime)
    if (age := time.time() - newest) < RACY_S:
        time.sleep(RACY_S - age + 0.1)
    return path


def _json(result: subprocess.CompletedProcess[str], code: int) -> dict[str, Any]:
    assert result.returncode == code, result.stdout[-3000:] + result.stderr[-3000:]
    data: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return data


def _prices(sandbox: Sandbox) -> dict[str, Any]:
    return {str(p["sku"]): p.get("price") for p in sandbox.products(WORKSPACE)}


def _cents(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{**r, "Price": str(Decimal(r["Price"]) * 100)} for r in rows]


def test_a_forced_bad_feed_is_undone_in_one_command_and_not_written_again(
    sandbox: Sandbox,
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    run_cli: Run,
) -> None:
    good = catalog_rows(300)
    _aged(write_catalog(good))
    config = str(write_config(sandbox.url))
    _json(run_cli("sync", "--json", "--config", config), 0)
    before = _prices(sandbox)

    _aged(write_catalog(_cents(good)))  # an ERP job that exported prices in cents
    refused = run_cli("sync", "--config", config)
    assert refused.returncode == 2 and "max_change_ratio" in refused.stderr
    bad = _json(run_cli("sync", "--json", "--force", "--config", config), 0)
    assert bad["updated"] == 300 and isinstance(bad["run_id"], int)
    edited = next(p for p in sandbox.products(WORKSPACE) if p["sku"] == "SKU-00007")
    sandbox.edit_product(edited["id"], {"price": 9.99}, WORKSPACE)  # mended by hand
    writes = sandbox.stats().writes_committed

    preview = _json(
        run_cli("undo", str(bad["run_id"]), "--dry-run", "--json", "--config", config), 1
    )
    assert (preview["put_back"], preview["left"], preview["run_id"]) == (299, 1, None)
    assert sandbox.stats().writes_committed == writes, "a dry run writes nothing"

    undone = _json(run_cli("undo", str(bad["run_id"]), "--json", "--config", config), 1)
    assert (undone["put_back"], undone["left"], undone["undoes"]) == (299, 1, bad["run_id"])
    assert sandbox.stats().writes_committed - writes == 299, "0 other writes"
    [left] = [c for c in undone["changes"] if c["outcome"] == "left"]
    assert left["key"] == "SKU-00007" and "changed on the CMS since run" in left["reason"]
    prices = _prices(sandbox)
    assert Counter(str(p["sku"]) for p in sandbox.products(WORKSPACE)) == Counter(
        r["SKU"] for r in good
    ), "0 duplicates"
    assert prices.pop("SKU-00007") == 9.99
    assert all(Decimal(str(prices[k])) == Decimal(str(v)) for k, v in before.items() if k in prices)

    # the next scheduled run does not write the feed again, and says why
    again = run_cli("sync", "--config", config)
    assert again.returncode == 2, again.stdout + again.stderr
    assert f"skuferry undo {bad['run_id']}" in again.stderr and "--force" in again.stderr
    # explain tells the product's story, the undo in it
    story = _json(run_cli("explain", "SKU-00001", "--json", "--config", config), 0)
    assert story["next"]["action"] == "refused"
    assert [h["run_id"] for h in story["history"]] == [undone["run_id"], bad["run_id"], 1]

    # a corrected export syncs as a normal change: the product left is the only update
    _aged(write_catalog(good))
    fixed = _json(run_cli("sync", "--json", "--config", config), 0)
    assert (fixed["updated"], fixed["unchanged"], fixed["created"]) == (1, 299, 0)


def test_a_renamed_column_with_creates_and_archives_is_undone_even_when_killed_halfway(
    sandbox_factory: Callable[..., Sandbox],
    write_config: Callable[..., Path],
    tmp_path: Path,
    cli: Cli,
) -> None:
    # 30 ms per answer: the undo lasts long enough to be cut
    sandbox = sandbox_factory(updates="patch", latency_s=0.03)
    good = catalog_rows(120)
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(
        "SKU,Name,Price,Stock\n"
        + "".join(f"{r['SKU']},{r['Name']},{r['Price']},{r['Stock']}\n" for r in good),
        encoding="utf-8",
    )
    _aged(catalog)
    config = str(write_config(sandbox.url, max_in_flight=2, extra=f"\n{GONE}"))
    toml = Path(config)
    text = toml.read_text(encoding="utf-8").replace('key = "sku"', 'key = "sku"\nsend_nulls = true')
    toml.write_text(text, encoding="utf-8")
    _json(cli.run("sync", "--json", "--config", config), 0)
    before = {str(p["sku"]): (p.get("price"), p.get("status")) for p in sandbox.products(WORKSPACE)}

    # The ERP renames Price to Preis; two products leave, two arrive: forced through, the
    # new shape accepted (a shape change is refused otherwise, --force or not).
    renamed = (
        "SKU,Name,Preis,Stock\n"
        + "".join(f"{r['SKU']},{r['Name']},{r['Price']},{r['Stock']}\n" for r in good[2:])
        + "NEW-1,New one,1.00,1\nNEW-2,New two,2.00,2\n"
    )
    catalog.write_text(renamed, encoding="utf-8")
    _aged(catalog)
    bad = _json(cli.run("sync", "--json", "--force", "--accept-shape", "--config", config), 0)
    assert (bad["updated"], bad["created"], bad["archived"]) == (118, 2, 2)
    assert _prices(sandbox)["SKU-00005"] is None

    # SIGKILL the undo once it has written a while, then run it again
    writes = sandbox.stats().writes_committed
    proc = cli.start("undo", str(bad["run_id"]), "--config", config)
    deadline = time.monotonic() + 60
    while sandbox.stats().writes_committed - writes < 30 and time.monotonic() < deadline:
        assert proc.poll() is None, "the undo ended before it could be killed"
        time.sleep(0.01)
    proc.kill()
    assert proc.wait(timeout=30) == -9
    cut = sandbox.stats().writes_committed - writes
    assert 30 <= cut < 122, cut

    resumed = _json(cli.run("undo", str(bad["run_id"]), "--json", "--config", config), 0)
    assert resumed["resumed"] is True
    assert sandbox.stats().writes_committed - writes == 122, "nothing written twice"
    assert resumed["put_back"] + resumed["already"] + resumed["archived"] == 122
    after = {str(p["sku"]): (p.get("price"), p.get("status")) for p in sandbox.products(WORKSPACE)}
    for key, (price, status) in before.items():
        want = (price, "active" if key in ("SKU-00001", "SKU-00002") else status)
        assert after[key] == want, key
    assert after["NEW-1"][1] == after["NEW-2"][1] == "archived"
    assert len(after) == 122, "nothing deleted, nothing duplicated"

    # the undo of the undo gives the bad values back
    back = _json(cli.run("undo", str(resumed["run_id"]), "--json", "--config", config), 0)
    assert back["put_back"] + back["archived"] == 122
    assert _prices(sandbox)["SKU-00005"] is None  # as the renamed column sent it
    statuses = {str(p["sku"]): p.get("status") for p in sandbox.products(WORKSPACE)}
    assert statuses["NEW-1"] == statuses["NEW-2"] == "active"  # their archive undone
