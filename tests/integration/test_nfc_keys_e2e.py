"""Keys compare in Unicode NFC, through the CLI against the sandbox.

A SKU can reach skuferry in two spellings that look the same: ``CAFÉ-001`` with
the precomposed ``É`` (NFC, what most exporters write) or with ``E`` followed by
a combining accent (NFD, what some macOS tools and PIMs write). It is one product
either way: matched, never created twice, never archived.
"""

from __future__ import annotations

import json
import subprocess
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

from skuferry.sandbox import Sandbox

GONE = """
[gone]
action = "patch"
patch = { status = "archived", stock = 0 }
restore = { status = "active" }
"""

KEYS = ["CAFÉ-001", "CRÈME-002", "ÅNGSTRÖM-003"]

Run = Callable[..., subprocess.CompletedProcess[str]]


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def _nfd(text: str) -> str:
    return unicodedata.normalize("NFD", text)


def _export(path: Path, keys: list[str]) -> None:
    lines = ["SKU,Name,Price,Stock"]
    lines += [f"{key},Product {i},{10 + i}.50,{i}" for i, key in enumerate(keys, start=1)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _sync(run: Run, config: Path, *args: str) -> tuple[int, dict[str, Any]]:
    done = run("sync", "--json", "--config", str(config), *args)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def _skus(sandbox: Sandbox) -> list[str]:
    return sorted(str(p["sku"]) for p in sandbox.products("default"))


def test_the_same_export_in_nfd_matches_the_products_synced_in_nfc(
    tmp_path: Path, sandbox: Sandbox, write_config: Callable[..., Path], run_cli: Run
) -> None:
    """Found 6: the NFD export was 3 creates and 3 archives; it is 0 and 0, exit 0."""
    assert all(_nfd(k) != k for k in KEYS)  # the test means something
    config = write_config(sandbox.url, extra=GONE)
    catalog = tmp_path / "catalog.csv"
    _export(catalog, [_nfc(k) for k in KEYS])
    code, first = _sync(run_cli, config)
    assert (code, first["created"]) == (0, 3)

    _export(catalog, [_nfd(k) for k in KEYS])
    code, second = _sync(run_cli, config)
    assert code == 0, second
    assert (second["created"], second["archived"], second["updated"]) == (0, 0, 0), second
    assert _skus(sandbox) == sorted(_nfc(k) for k in KEYS)  # 3 products, NFC on the CMS
    assert not any(p.get("status") for p in sandbox.products("default"))

    # and back: the NFC export is the same products again
    _export(catalog, [_nfc(k) for k in KEYS])
    code, third = _sync(run_cli, config)
    assert code == 0, third
    assert (third["created"], third["archived"], third["updated"]) == (0, 0, 0), third
    assert len(sandbox.products("default")) == 3


def test_a_product_whose_sku_is_nfd_on_the_cms_is_adopted_not_duplicated(
    tmp_path: Path, sandbox: Sandbox, write_config: Callable[..., Path], run_cli: Run
) -> None:
    """A walk of the CMS reads keys in NFC: a product created there with the NFD spelling
    is the source's NFC product, adopted (its sku written in NFC), never created again."""
    sandbox.seed_products(
        {"sku": _nfd(key), "name": f"Product {i}", "price": "1"} for i, key in enumerate(KEYS, 1)
    )
    config = write_config(sandbox.url)
    _export(tmp_path / "catalog.csv", [_nfc(k) for k in KEYS])
    code, summary = _sync(run_cli, config)
    assert code == 0, summary
    assert summary["created"] == 0, summary
    assert len(sandbox.products("default")) == 3
    assert _skus(sandbox) == sorted(_nfc(k) for k in KEYS)


def test_named_runs_take_either_spelling_of_a_key(
    tmp_path: Path, sandbox: Sandbox, write_config: Callable[..., Path], run_cli: Run
) -> None:
    """``sync --only``, ``--keys-from`` and ``retry`` name the NFC product in NFD too."""
    config = write_config(sandbox.url)
    catalog = tmp_path / "catalog.csv"
    _export(catalog, [_nfc(k) for k in KEYS])
    assert _sync(run_cli, config)[0] == 0
    cafe = _nfc(KEYS[0])

    def price_of_cafe(old: str, new: str) -> None:
        text = catalog.read_text(encoding="utf-8")
        assert f"{cafe},Product 1,{old}" in text
        text = text.replace(f"{cafe},Product 1,{old}", f"{cafe},Product 1,{new}")
        catalog.write_text(text, encoding="utf-8")

    price_of_cafe("11.50", "12.50")
    code, only = _sync(run_cli, config, "--only", _nfd(cafe))
    assert code == 0, only
    assert (only["created"], only["updated"]) == (0, 1), only

    price_of_cafe("12.50", "13.50")
    listed = tmp_path / "keys.txt"
    listed.write_text(_nfd(cafe) + "\n", encoding="utf-8")
    code, from_file = _sync(run_cli, config, "--keys-from", str(listed))
    assert code == 0, from_file
    assert (from_file["created"], from_file["updated"]) == (0, 1), from_file

    done = run_cli("retry", "--json", "--config", str(config), _nfd(cafe))
    assert done.returncode == 0, done.stderr
    retried = json.loads(done.stdout)
    assert [k["key"] for k in retried["keys"]] == [cafe], retried
    assert retried["created"] == 0
    assert len(sandbox.products("default")) == 3
    prices = {p["sku"]: str(p["price"]) for p in sandbox.products("default")}
    assert prices[cafe] == "13.50"
