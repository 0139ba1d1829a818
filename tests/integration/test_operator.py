"""The operator's hands through the CLI against the sandbox: ``rejected``, ``retry``,
``sync --only`` / ``--keys-from`` (with an ``item_url`` API: only those items fetched)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from skuferry.sandbox import Sandbox
from skuferry.sandbox.pim import PimServer
from tests.integration.conftest import KEY, catalog_rows, remote_counts

pytestmark = pytest.mark.integration

Run = Callable[..., subprocess.CompletedProcess[str]]


def _json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.stdout.strip(), result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_422_is_listed_then_retry_creates_it_once_after_the_rule_is_relaxed(
    tmp_path: Path,
    sandbox_factory: Callable[..., Sandbox],
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    run_cli: Run,
) -> None:
    sandbox = sandbox_factory(updates="patch", required_fields=("sku", "name"))
    rows = catalog_rows(4)
    rows[1]["Name"] = ""  # SKU-00002: the CMS requires a name -> 422
    rows[2]["Price"] = "12,50"  # SKU-00003: the mapping refuses it
    write_catalog(rows)
    textfile = tmp_path / "skuferry.prom"
    config = str(write_config(sandbox.url, extra=f'[metrics]\ntextfile = "{textfile}"\n'))

    first = run_cli("sync", "--config", config, "--json")
    assert first.returncode == 1, first.stderr
    letters = {x["key"]: x for x in _json(run_cli("rejected", "--config", config, "--json"))}
    assert set(letters) == {"SKU-00002", "SKU-00003"}
    api, mapped = letters["SKU-00002"], letters["SKU-00003"]
    assert (api["stage"], api["status"], api["line"], api["source"]) == (
        "api",
        422,
        3,
        "catalog.csv",
    )
    assert "name" in api["message"] and api["first_seen"]
    assert (mapped["stage"], mapped["line"], mapped["status"]) == ("map", 4, None)
    assert "not a decimal number" in mapped["reason"]
    text = run_cli("rejected", "--config", config)
    assert "SKU-00002  [api HTTP 422]  catalog.csv:3" in text.stdout
    assert 'skuferry_dead_letters{stage="api"} 1' in textfile.read_text()
    assert 'skuferry_dead_letters{stage="map"} 1' in textfile.read_text()

    csv_file = tmp_path / "rejected.csv"
    assert run_cli("rejected", "--config", config, "--csv", str(csv_file)).returncode == 0
    assert csv_file.stat().st_mode & 0o077 == 0
    lines = csv_file.read_text().splitlines()
    assert lines[0].startswith("key,stage,reason,status,message,source,line,first_seen")
    assert len(lines) == 3

    second = _json(run_cli("sync", "--config", config, "--json"))
    assert (second["created"], second["rejected"]) == (0, 2), "not resent without a change"
    assert second["requests"]["write"] == 0

    sandbox.config.required_fields = ("sku",)  # the CMS side is fixed
    retried = run_cli("retry", "--config", config, "--all", "--json")
    outcome = {k["key"]: k for k in _json(retried)["keys"]}
    assert outcome["SKU-00002"]["result"] == "sent", outcome
    assert outcome["SKU-00003"]["result"] == "refused", "the mapping still refuses it"
    assert retried.returncode == 1  # one key is still refused
    assert remote_counts(sandbox)["SKU-00002"] == 1, "created once"
    left = _json(run_cli("rejected", "--config", config, "--json"))
    assert [x["key"] for x in left] == ["SKU-00003"]

    again = run_cli("retry", "--config", config, "SKU-00002", "--json")
    assert _json(again)["keys"][0]["result"] == "unchanged"
    assert again.returncode == 0
    assert remote_counts(sandbox)["SKU-00002"] == 1, "a retry of a product in step sends nothing"
    human = run_cli("retry", "--config", config, "NOPE")
    assert "NOPE" in human.stdout and "not in the source" in human.stdout
    assert human.returncode == 1, "a key that is not in the source is a problem (cron sees it)"


def _pim_config(tmp_path: Path, api_url: str, pim: PimServer) -> Path:
    config = tmp_path / "pim.toml"
    config.write_text(
        f"""[api]
base_url = "{api_url}"
api_key = "{KEY}"

[source]
type = "http"
url = "{pim.url("page")}"
item_url = "{pim.url("page")}/{{key}}"
items_path = "items"
pagination = "page"
page_size = 50
total_pages_path = "meta.pages"

[mapping]
key = "sku"
[mapping.fields]
sku = "sku"
name = "name"
price = "price"

[state]
path = "state.db"
""",
        encoding="utf-8",
    )
    config.chmod(0o600)
    return config


def test_only_with_an_item_url_fetches_just_those_items_and_writes_just_them(
    tmp_path: Path, sandbox: Sandbox, run_cli: Run
) -> None:
    catalog = [{"sku": f"P-{i}", "name": f"Bolt {i}", "price": f"{i}.50"} for i in range(1, 31)]
    with PimServer(catalog) as pim:
        config = str(_pim_config(tmp_path, sandbox.url, pim))
        assert run_cli("sync", "--config", config).returncode == 0
        for i in (2, 5, 7):  # three change; two are named
            catalog[i - 1]["name"] = f"Bolt {i}, zinc plated"
        del catalog[9]  # P-10 leaves the source: a named run decides nothing about it
        pim.requests.clear()
        result = run_cli("sync", "--config", config, "--json", "--only", "P-2", "P-5", "NOPE")
        fetched = sorted(seen.path for seen in pim.requests)
    summary = _json(result)
    assert fetched == ["/page/products/NOPE", "/page/products/P-2", "/page/products/P-5"]
    assert (summary["updated"], summary["gone"], summary["pull"]) == (2, 0, "named")
    assert {"key": "NOPE", "line": None, "reason": "not in the source"} in summary["problems"]
    assert result.returncode == 1, "a named key that is not in the source: exit 1"
    names = {p["sku"]: p["name"] for p in sandbox.products()}
    assert names["P-2"] == "Bolt 2, zinc plated" and names["P-5"] == "Bolt 5, zinc plated"
    assert names["P-7"] == "Bolt 7", "not named: not written"
    status = _json(run_cli("status", "--config", config, "--json"))
    assert "gone" not in status["products"], "P-10 is not decided gone by a named run"


def test_keys_from_a_file_with_a_file_source(
    tmp_path: Path,
    sandbox: Sandbox,
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    run_cli: Run,
) -> None:
    write_catalog(catalog_rows(6))
    config = str(write_config(sandbox.url))
    keys = tmp_path / "keys.txt"
    keys.write_text("# the two the merchandiser fixed\nSKU-00002\n\nSKU-00004\n", encoding="utf-8")
    result = run_cli("sync", "--config", config, "--json", "--keys-from", str(keys))
    assert _json(result)["created"] == 2, result.stderr
    assert sorted(remote_counts(sandbox)) == ["SKU-00002", "SKU-00004"]
    bare = run_cli("sync", "--config", config, "SKU-00001")
    assert bare.returncode != 0 and "--only" in bare.stderr
