"""A join partner that is empty, broken or cut never overwrites the CMS (issue 29, Found 2).

End to end as a user runs it: the CLI, an ERP CSV joined to a PIM export, `[gone]
action = "patch"`, against the sandbox. Each case starts from a synced catalog of 8
products and then breaks the PIM file the way exports break."""

from __future__ import annotations

import csv
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from skuferry.sandbox import Sandbox
from tests.integration.conftest import KEY, WORKSPACE

pytestmark = pytest.mark.integration

Run = Callable[..., subprocess.CompletedProcess[str]]

SKUS = [f"1000{n}" for n in range(1, 9)]
NAMES = {sku: f"Tool {sku}" for sku in SKUS}


def _config(tmp_path: Path, url: str, *, pim: str = "pim.jsonl", where: str = "") -> Path:
    kind = "csv" if pim.endswith(".csv") else "jsonl"
    filter_line = f'where = "{where}"\n' if where else ""
    text = f"""
[api]
base_url = "{url}"
api_key = "{KEY}"

[source]
type = "csv"
path = "erp.csv"
delimiter = ";"
{filter_line}
[[join]]
name = "pim"
type = "{kind}"
path = "{pim}"
key = "sku"
on = "Artikelnummer"

[gone]
action = "patch"
patch = {{ status = "archived" }}

[safety]
max_gone_ratio = 1
max_change_ratio = 1

[mapping]
key = "sku"
[mapping.fields]
sku = "Artikelnummer"
price = {{ column = "Preis", type = "decimal", decimal = "," }}
name = {{ path = "pim.name", default = "Artikel" }}
description = {{ path = "pim.description", default = "" }}

[state]
path = "state/skuferry.db"
"""
    path = tmp_path / "skuferry.toml"
    path.write_text(text, encoding="utf-8")
    path.chmod(0o600)
    return path


def _erp(path: Path, prices: dict[str, str]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.writer(f, delimiter=";")
        out.writerow(["Artikelnummer", "Preis"])
        out.writerows([sku, price] for sku, price in prices.items())


def _pim_record(sku: str) -> dict[str, str]:
    return {"sku": sku, "enabled": "yes", "name": NAMES[sku], "description": f"<p>{NAMES[sku]}</p>"}


def _pim_jsonl(skus: list[str]) -> bytes:
    return "".join(json.dumps(_pim_record(s)) + "\n" for s in skus).encode()


def _pim_csv(skus: list[str]) -> bytes:
    rows = ["sku,enabled,name,description"]
    rows += [",".join(_pim_record(s).values()) for s in skus]
    return "".join(row + "\n" for row in rows).encode()


def _sync(run_cli: Run, config: Path) -> subprocess.CompletedProcess[str]:
    return run_cli("sync", "--json", "--config", str(config))


def _summary(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return summary


def _remote(sandbox: Sandbox) -> dict[str, dict[str, Any]]:
    return {str(p["sku"]): p for p in sandbox.products(WORKSPACE)}


def _texts_replaced(sandbox: Sandbox) -> int:
    return sum(1 for u in sandbox.updates_received() if {"name", "description"} & set(u["body"]))


def _synced(sandbox: Sandbox, tmp_path: Path, run_cli: Run, **options: str) -> Path:
    """8 products synced from erp.csv and a whole PIM export; the sandbox's log cleared."""
    pim = options.get("pim", "pim.jsonl")
    _erp(tmp_path / "erp.csv", dict.fromkeys(SKUS, "10,00"))
    whole = _pim_csv(SKUS) if pim.endswith(".csv") else _pim_jsonl(SKUS)
    (tmp_path / pim).write_bytes(whole)
    config = _config(tmp_path, sandbox.url, **options)
    first = _sync(run_cli, config)
    assert first.returncode == 0, first.stdout + first.stderr
    assert _summary(first)["created"] == 8
    assert {s: p["name"] for s, p in _remote(sandbox).items()} == NAMES
    sandbox.reset_stats()
    return config


def test_an_empty_partner_is_refused_and_replaces_no_text(
    sandbox: Sandbox, tmp_path: Path, run_cli: Run
) -> None:
    config = _synced(sandbox, tmp_path, run_cli)
    before = _remote(sandbox)
    (tmp_path / "pim.jsonl").write_bytes(b"")  # the PIM's export arrives empty
    _erp(tmp_path / "erp.csv", dict.fromkeys(SKUS, "12,00"))  # and the ERP has news

    result = _sync(run_cli, config)

    assert result.returncode == 2, result.stdout + result.stderr
    assert "join 'pim' (pim.jsonl) is empty: it gave no record" in result.stderr
    assert _texts_replaced(sandbox) == 0 and sandbox.updates_received() == []
    assert _remote(sandbox) == before, "nothing written: not even the ERP's prices"


def test_a_partner_unreadable_in_the_middle_holds_only_the_products_that_may_have_lost_it(
    sandbox: Sandbox, tmp_path: Path, run_cli: Run
) -> None:
    config = _synced(sandbox, tmp_path, run_cli)
    lines = _pim_jsonl(SKUS).decode().splitlines(keepends=True)
    lines[3] = '{"sku": "10004", "name": "Tool 10004", \x00broken}\n'  # line 4: not JSON
    del lines[5]  # 10006: no longer in the PIM at all
    (tmp_path / "pim.jsonl").write_text("".join(lines), encoding="utf-8")
    _erp(tmp_path / "erp.csv", dict.fromkeys(SKUS, "12,00"))

    result = _sync(run_cli, config)

    assert result.returncode == 1, result.stdout + result.stderr
    summary = _summary(result)
    held = {p["key"]: p["reason"] for p in summary["problems"]}
    assert set(held) == {"10004", "10006"}, "the two whose partner is missing"
    assert held["10006"].startswith(
        "erp.csv line 7: its partner in join 'pim' (key '10006') may be in pim.jsonl:4, "
        "which could not be read: "
    ), held["10006"]
    assert (summary["updated"], summary["archived"], summary["gone"]) == (6, 0, 0)
    remote = _remote(sandbox)
    assert {s for s, p in remote.items() if str(p["price"]) == "12.00"} == set(SKUS) - set(held)
    assert {s: p["name"] for s, p in remote.items()} == NAMES, "no text became the default"
    assert _texts_replaced(sandbox) == 0
    assert all(p.get("status") != "archived" for p in remote.values())


@pytest.mark.parametrize(
    ("pim", "cut"),
    [
        ("pim.jsonl", '{"sku": "10005", "enab'),  # inside a record: the join is not complete
        ("pim.jsonl", '<p>Tool 10004</p>"}\n'),  # between records: every record whole
        ("pim.csv", "<p>Tool 10004</p>\n"),
    ],
    ids=["jsonl-inside-a-record", "jsonl-between-records", "csv-between-records"],
)
def test_where_through_a_cut_partner_archives_nothing(
    sandbox: Sandbox, tmp_path: Path, run_cli: Run, pim: str, cut: str
) -> None:
    """`where = "pim.enabled == 'yes'"` over a PIM export still being written: the
    products whose partners were lost are held, not filtered out (so archived). Cut
    between records, the join looks whole; the filter still cannot read `enabled` of a
    partner that is not there."""
    config = _synced(sandbox, tmp_path, run_cli, pim=pim, where="pim.enabled == 'yes'")
    before = _remote(sandbox)
    whole = (tmp_path / pim).read_bytes()
    end = whole.index(cut.encode()) + len(cut)
    (tmp_path / pim).write_bytes(whole[:end])

    result = _sync(run_cli, config)

    assert result.returncode != 0, result.stdout + result.stderr
    remote = _remote(sandbox)
    assert [s for s, p in remote.items() if p.get("status") == "archived"] == []
    assert remote == before, "every product as the whole export left it"
    assert sandbox.updates_received() == []
    if result.returncode == 1:  # held, one by one (a torn end may fail the pull instead)
        held = {p["key"] for p in _summary(result)["problems"]}
        assert held == {"10005", "10006", "10007", "10008"}
