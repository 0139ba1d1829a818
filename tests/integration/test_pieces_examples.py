"""The worked examples of docs/mapping-pieces.md sync as shipped, as a new user runs them:
the example folder as it is in a fresh clone (config, data files, relative paths), the CLI
run from another folder, the sandbox as the API, the key in ``SKUFERRY_API_KEY`` as the
examples say. Only the API address and the state path are changed."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from skuferry.sandbox import Sandbox
from tests.integration.conftest import KEY, WORKSPACE

pytestmark = pytest.mark.integration

Run = Callable[..., subprocess.CompletedProcess[str]]
EXAMPLES = Path(__file__).parents[2] / "examples"
KEY_ENV = {"SKUFERRY_API_KEY": KEY}


def _example(tmp_path: Path, sandbox: Sandbox, folder: str, name: str) -> Path:
    """The example's folder copied under ``tmp_path/clone``, its config aimed at the sandbox."""
    clone = tmp_path / "clone"
    shutil.copytree(EXAMPLES / folder if folder else EXAMPLES, clone)
    config = clone / name
    text = config.read_text(encoding="utf-8")
    text = text.replace("http://127.0.0.1:8765", sandbox.url)
    state = str(tmp_path / "state" / "skuferry.db")
    text = "\n".join(
        f'path = "{state}"' if line.startswith('path = "/tmp/skuferry-example') else line
        for line in text.splitlines()
    )
    config.write_text(text + "\n", encoding="utf-8")
    return config


def _sync_twice(run_cli: Run, config: Path, sandbox: Sandbox) -> dict[str, Any]:
    first = run_cli("sync", "--json", "--config", str(config), env=KEY_ENV)
    assert first.returncode == 0, first.stdout + first.stderr
    summary: dict[str, Any] = json.loads(first.stdout.strip().splitlines()[-1])
    writes = sandbox.stats().requests_by_key[KEY].get("write", 0)
    again = run_cli("sync", "--json", "--config", str(config), env=KEY_ENV)
    assert again.returncode == 0, again.stdout + again.stderr
    assert sandbox.stats().requests_by_key[KEY].get("write", 0) == writes, "no writes"
    return summary


def _by_sku(sandbox: Sandbox) -> dict[str, dict[str, Any]]:
    return {str(p["sku"]): p for p in sandbox.products(WORKSPACE)}


def test_the_shopify_example_makes_every_variant_a_product_with_its_title(
    sandbox: Sandbox, tmp_path: Path, run_cli: Run
) -> None:
    config = _example(tmp_path, sandbox, "", "shopify.toml")
    summary = _sync_twice(run_cli, config, sandbox)
    assert summary["created"] == 5 and summary["skipped"] == 2
    remote = _by_sku(sandbox)
    assert {sku: p["name"] for sku, p in remote.items()} == {
        "LS-0001-S": "Linen shirt",
        "LS-0001-M": "Linen shirt",
        "LS-0001-L": "Linen shirt",
        "WS-0002-A": "Wool socks",
        "WS-0002-B": "Wool socks",
    }
    assert {sku: p["barcode"] for sku, p in remote.items()} == {
        "LS-0001-S": "04012345000016",
        "LS-0001-M": "04012345000023",
        "LS-0001-L": "0850064060010",
        "WS-0002-A": "4006381333931",
        "WS-0002-B": "96385074",
    }, "exact: apostrophe stripped, leading zeros kept"


def test_the_erp_pim_example_joins_texts_to_prices(
    sandbox: Sandbox, tmp_path: Path, run_cli: Run
) -> None:
    config = _example(tmp_path, sandbox, "erp-pim", "erp-pim.toml")
    summary = _sync_twice(run_cli, config, sandbox)
    assert summary["created"] == 4 and summary["joins"] == {"pim": "read"}
    drill = _by_sku(sandbox)["100017"]
    assert drill["price"] == Decimal("1299.00") and drill["stock"] == 5
    assert drill["name"] == "Cordless drill 18 V" and drill["brand"] == "Fernweh Tools"
    assert drill["unit"] == "piece" and drill["tags"] == ["drill", "cordless", "18V"]
    shown = run_cli("check", "--sample", "1", "--config", str(config), env=KEY_ENV)
    assert shown.returncode == 0, shown.stderr
    assert '"pim": {' in shown.stdout, "check --sample shows the record as joined"


def test_the_prestashop_example_joins_the_language_file_and_looks_up_categories(
    sandbox: Sandbox, tmp_path: Path, run_cli: Run
) -> None:
    config = _example(tmp_path, sandbox, "prestashop", "prestashop.toml")
    summary = _sync_twice(run_cli, config, sandbox)
    assert summary["created"] == 4
    remote = _by_sku(sandbox)
    assert remote["demo_1"]["name"] == "Hummingbird printed t-shirt"
    assert remote["demo_1"]["category"] == "Men"
    assert remote["demo_12"]["category"] == "Home accessories"
    assert remote["demo_6"]["category"] == "Uncategorised", "the table's default"
    assert remote["demo_3"]["description"] == "<p>Soft and warm.</p>"
