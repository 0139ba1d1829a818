"""An XLSX export (data on its 4th sheet) and a BMEcat file sync end to end into the sandbox.

Run as a user runs it: a config file, ``skuferry sync --json``; exit 0 with exact values
(prices as decimals, EANs and leading-zero keys as text), then a second run with no writes.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from skuferry.sandbox import Sandbox
from skuferry.sandbox.catalog_files import bmecat, bmecat_article, write_xlsx
from tests.integration.conftest import KEY, WORKSPACE

pytestmark = pytest.mark.integration


def sync_json(run_cli: Callable[..., Any], config: Path) -> dict[str, Any]:
    """``skuferry sync --json`` as a user runs it; asserts exit 0, returns the summary."""
    import json

    result = run_cli("sync", "--json", "--config", str(config))
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert isinstance(summary, dict)
    return summary


def write_sync_config(sandbox: Sandbox, tmp_path: Path, source: str, fields: str) -> Path:
    """A config file syncing ``[source]`` (TOML lines) into ``sandbox`` with ``fields``."""
    path = tmp_path / "skuferry.toml"
    path.write_text(
        f'[api]\nbase_url = "{sandbox.url}"\napi_key = "{KEY}"\nupdate_method = "patch"\n\n'
        f'[source]\n{source}\n\n[mapping]\nkey = "sku"\n[mapping.fields]\n{fields}\n\n'
        '[state]\npath = "state/skuferry.db"\n',
        encoding="utf-8",
    )
    return path


def _remote(sandbox: Sandbox) -> dict[str, dict[str, Any]]:
    return {str(p["sku"]): p for p in sandbox.products(WORKSPACE)}


def writes(sandbox: Sandbox) -> int:
    return sandbox.stats().requests_by_key.get(KEY, {}).get("write", 0)


def test_an_xlsx_with_the_data_on_its_fourth_sheet(
    sandbox: Sandbox, tmp_path: Path, run_cli: Callable[..., Any]
) -> None:
    write_xlsx(
        tmp_path / "export.xlsx",
        {
            "Anleitung": [["Bitte Blatt 4 verwenden"]],
            "Makros": [["Sub Auto_Open()"]],
            "Einheiten": [["C62", "Stück"]],
            "Artikel": [
                ["Preisliste 2024"],
                ["Artikelnummer", "Bezeichnung", "EAN", "Preis", "Hinweis", "Hinweis"],
                ["012345", "Akku-Bohrschrauber", "04596710520787", 21.35, "a", "b"],
                [12346, "Stichsäge", 4006381333931, 52, "a", "b"],
                [None, None, None, None, None],
                ["079685", "Winkelschleifer", "'0850064060010", "=D3*2", "a", "b"],
            ],
        },
        cached={"Artikel!D6": 42.7},
    )
    config = write_sync_config(
        sandbox,
        tmp_path,
        'type = "xlsx"\npath = "export.xlsx"\nsheet = 4\nheader_row = 2',
        'sku = "Artikelnummer"\nname = "Bezeichnung"\nean = "EAN"\n'
        'price = { column = "Preis", type = "decimal" }',
    )
    assert sync_json(run_cli, config)["created"] == 3
    remote = _remote(sandbox)
    assert set(remote) == {"012345", "12346", "079685"}
    assert remote["012345"]["ean"] == "04596710520787"
    assert remote["12346"]["ean"] == "4006381333931"
    assert Decimal(str(remote["012345"]["price"])) == Decimal("21.35")
    assert Decimal(str(remote["079685"]["price"])) == Decimal("42.7")
    assert sync_json(run_cli, config)["unchanged"] == 3
    assert writes(sandbox) == 3, "a second run made writes"
    # The default reader (auto: calamine for this size) and openpyxl map the same values:
    # switching readers sends nothing.
    for reader in ("openpyxl", "calamine"):
        config = write_sync_config(
            sandbox,
            tmp_path,
            f'type = "xlsx"\npath = "export.xlsx"\nsheet = 4\nheader_row = 2\nreader = "{reader}"',
            'sku = "Artikelnummer"\nname = "Bezeichnung"\nean = "EAN"\n'
            'price = { column = "Preis", type = "decimal" }',
        )
        assert sync_json(run_cli, config)["unchanged"] == 3, reader
    assert writes(sandbox) == 3, "switching readers made writes"


def test_a_bmecat_file(sandbox: Sandbox, tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    articles = [
        bmecat_article("079685", "Akku-Bohrschrauber", ean="04596710520787", price="199.00"),
        bmecat_article("000042", "Stichsäge 6,5°", ean="4006381333931", price="52.50"),
    ]
    (tmp_path / "bmecat.xml").write_text(bmecat(articles), encoding="utf-8")
    # TOML basic string: \" is a quote inside the JMESPath (a quoted identifier).
    price = r"ARTICLE_PRICE_DETAILS.ARTICLE_PRICE[?\"@price_type\"=='net_list'].PRICE_AMOUNT | [0]"
    config = write_sync_config(
        sandbox,
        tmp_path,
        'type = "xml"\npath = "bmecat.xml"\nrecord = "ARTICLE"',
        'sku = "SUPPLIER_AID"\n'
        'name = { path = "ARTICLE_DETAILS.DESCRIPTION_SHORT" }\n'
        'ean = { path = "ARTICLE_DETAILS.EAN" }\n'
        f'price = {{ path = "{price}", type = "decimal" }}',
    )
    assert sync_json(run_cli, config)["created"] == 2
    remote = _remote(sandbox)
    assert set(remote) == {"079685", "000042"}
    assert remote["000042"]["name"] == "Stichsäge 6,5°"
    assert remote["079685"]["ean"] == "04596710520787"
    assert Decimal(str(remote["079685"]["price"])) == Decimal("199.00")
    assert sync_json(run_cli, config)["unchanged"] == 2
    assert writes(sandbox) == 2, "a second run made writes"
