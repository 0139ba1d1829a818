"""Nested records and locale numbers synced end to end, as a new user would: the CLI, a
config file, the sandbox as the API. Each syncs with exit 0, exact values, and a second
run that writes nothing. Fixtures are our own, shaped like the real formats."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from skuferry.sandbox import Sandbox
from skuferry.sandbox.pim import PimServer
from tests.integration.conftest import KEY, WORKSPACE

pytestmark = pytest.mark.integration

Run = Callable[..., subprocess.CompletedProcess[str]]


def _config(tmp_path: Path, url: str, source: str, fields: str) -> Path:
    path = tmp_path / "skuferry.toml"
    path.write_text(
        f'[api]\nbase_url = "{url}"\napi_key = "{KEY}"\n\n{source}\n'
        f'[mapping]\nkey = "sku"\n[mapping.fields]\n{fields}\n'
        '[state]\npath = "state/skuferry.db"\n',
        encoding="utf-8",
    )
    path.chmod(0o600)
    return path


def _sync_twice(run_cli: Run, config: Path, sandbox: Sandbox) -> dict[str, Any]:
    first = run_cli("sync", "--json", "--config", str(config))
    assert first.returncode == 0, first.stdout + first.stderr
    summary: dict[str, Any] = json.loads(first.stdout.strip().splitlines()[-1])
    writes = sandbox.stats().requests_by_key[KEY].get("write", 0)
    again = run_cli("sync", "--json", "--config", str(config))
    assert again.returncode == 0, again.stdout + again.stderr
    assert sandbox.stats().requests_by_key[KEY].get("write", 0) == writes, "no writes"
    assert json.loads(again.stdout.strip().splitlines()[-1])["created"] == 0
    return summary


def _by_sku(sandbox: Sandbox) -> dict[str, dict[str, Any]]:
    return {str(p["sku"]): p for p in sandbox.products(WORKSPACE)}


def akeneo(identifier: str, name: str, eur: str, usd: str) -> dict[str, Any]:
    return {
        "identifier": identifier,
        "enabled": True,
        "family": "tools",
        "categories": ["forge"],
        "values": {
            "name": [
                {"locale": "de_DE", "scope": None, "data": f"{name} (de)"},
                {"locale": "en_US", "scope": None, "data": name},
            ],
            "price": [
                {
                    "locale": None,
                    "scope": None,
                    "data": [
                        {"amount": usd, "currency": "USD"},
                        {"amount": eur, "currency": "EUR"},
                    ],
                }
            ],
            "ean": [{"locale": None, "scope": None, "data": "04006381333931"}],
        },
    }


def test_an_akeneo_shaped_api_syncs_by_paths(
    sandbox: Sandbox, tmp_path: Path, run_cli: Run
) -> None:
    items = [akeneo(f"0{7968 + i}", f"Anvil {i}", f"{849 + i}.50", "899.00") for i in range(7)]
    with PimServer(items) as pim:
        source = (
            f'[source]\ntype = "http"\nurl = "{pim.url("hal")}?limit=3"\n'
            'items_path = "_embedded.items"\npagination = "next_link"\n'
            'next_path = "_links.next.href"\n'
        )
        fields = (
            'sku = { path = "identifier" }\n'
            "name = { path = \"values.name[?locale=='en_US'].data | [0]\", required = true }\n"
            "price = { path = \"values.price[0].data[?currency=='EUR'].amount | [0]\", "
            'type = "decimal" }\n'
            'ean = { path = "values.ean[0].data" }\n'
            'currency = { value = "EUR" }\n'
        )
        summary = _sync_twice(run_cli, _config(tmp_path, sandbox.url, source, fields), sandbox)
    assert summary["created"] == 7
    remote = _by_sku(sandbox)
    assert sorted(remote) == [f"0{7968 + i}" for i in range(7)], "leading zeros kept"
    assert remote["07968"]["name"] == "Anvil 0"
    assert str(remote["07968"]["price"]) == "849.50", "sent with the PIM's digits"
    assert remote["07968"]["ean"] == "04006381333931"
    assert remote["07968"]["currency"] == "EUR"


GERMAN_CSV = (
    "Artikelnummer;Bezeichnung;VK-Preis;Bestand\r\n"
    "079685;Amboss geschmiedet, 50 kg;1.234,50;1.200\r\n"
    "079686;Schraubstock für Werkbänke;89,90;15\r\n"
    "079687;Zange 6,5°;12,5;0\r\n"
    "079688;Feile;12.50;3\r\n"  # a dot decimal in a comma column: rejected
)


def test_a_german_erp_export_syncs_its_locale_prices(
    sandbox: Sandbox, tmp_path: Path, run_cli: Run
) -> None:
    (tmp_path / "artikel.csv").write_bytes(GERMAN_CSV.encode("cp1252"))
    source = '[source]\ntype = "csv"\npath = "artikel.csv"\nencoding = "cp1252"\ndelimiter = ";"\n'
    fields = (
        'sku = "Artikelnummer"\nname = "Bezeichnung"\n'
        'price = { column = "VK-Preis", type = "decimal", decimal = ",", thousands = "." }\n'
        'stock = { column = "Bestand", type = "integer", thousands = "." }\n'
    )
    config = _config(tmp_path, sandbox.url, source, fields)
    first = run_cli("sync", "--json", "--config", str(config))
    assert first.returncode == 1, "one row is rejected"
    summary = json.loads(first.stdout.strip().splitlines()[-1])
    assert (summary["created"], summary["rejected"]) == (3, 1)
    reasons = [p["reason"] for p in summary["problems"]]
    assert reasons == [
        "artikel.csv line 5, column 'VK-Preis': '12.50' is not a decimal number "
        'written like 1.234,56 (decimal ",", thousands ".")'
    ]
    (tmp_path / "artikel.csv").write_bytes(GERMAN_CSV.replace("12.50", "12,50").encode("cp1252"))
    summary = _sync_twice(run_cli, config, sandbox)
    assert (summary["created"], summary["rejected"]) == (1, 0)
    remote = _by_sku(sandbox)
    assert str(remote["079685"]["price"]) == "1234.50", "exact, no float on the way"
    assert remote["079685"]["stock"] == 1200
    assert remote["079686"]["name"] == "Schraubstock für Werkbänke"
    assert [str(remote[k]["price"]) for k in ("079686", "079687", "079688")] == [
        "89.90", "12.5", "12.50",
    ]  # fmt: skip
