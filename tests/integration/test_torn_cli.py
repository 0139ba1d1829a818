"""A torn export as a user meets it (issue 29, Found 1): a 60-row catalog synced with
``[gone] action = "patch"``, then the next export cut inside row 56's price. ``skuferry
sync`` exits 3 naming the file, the line and ``final_newline``; nothing is written and
nothing archived. The exporter that never writes a final line break says so, and the
same file then syncs."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from skuferry.sandbox import Sandbox
from tests.integration.conftest import FAST, KEY, WORKSPACE

pytestmark = pytest.mark.integration


def _catalog(rows: int, price: str) -> bytes:
    lines = ["sku,name,price"]
    lines += [f"{i:06d},Stehlampe {i},{price}" for i in range(1, rows + 1)]
    return ("\n".join(lines) + "\n").encode()


def _config(tmp_path: Path, sandbox: Sandbox, extra: str = "") -> Path:
    path = tmp_path / "skuferry.toml"
    path.write_text(
        f'[api]\nbase_url = "{sandbox.url}"\napi_key = "{KEY}"\n\n'
        f'[source]\ntype = "csv"\npath = "catalog.csv"\n{extra}\n'
        '[mapping]\nkey = "sku"\n[mapping.fields]\nsku = "sku"\nname = "name"\nprice = "price"\n\n'
        '[gone]\naction = "patch"\npatch = { status = "archived" }\n\n'
        "[safety]\nmax_gone_ratio = 1.0\nmax_change_ratio = 1.0\n\n"
        f"[budget]\nread_per_minute = {FAST}\nwrite_per_minute = {FAST}\n\n"
        '[state]\npath = "state/skuferry.db"\n',
        encoding="utf-8",
    )
    path.chmod(0o600)
    return path


def _remote(sandbox: Sandbox) -> dict[str, dict[str, Any]]:
    return {str(p["sku"]): p for p in sandbox.products(WORKSPACE)}


def test_a_torn_csv_exits_3_and_changes_nothing(
    sandbox: Sandbox, tmp_path: Path, run_cli: Callable[..., Any]
) -> None:
    catalog = tmp_path / "catalog.csv"
    catalog.write_bytes(_catalog(60, "687.70"))
    config = _config(tmp_path, sandbox)
    assert run_cli("sync", "--json", "--config", str(config)).returncode == 0
    before = _remote(sandbox)

    whole = _catalog(60, "687.71")
    cut = whole.index(b"000056,Stehlampe 56,68") + len(b"000056,Stehlampe 56,68")
    catalog.write_bytes(whole[:cut])  # row 56 has every column; its price reads "68"
    result = run_cli("sync", "--json", "--config", str(config))
    assert result.returncode == 3, result.stdout + result.stderr
    assert "catalog.csv line 57: the file ends inside this line" in result.stderr
    assert "'000056,Stehlampe 56,68'" in result.stderr
    assert 'final_newline = "optional"' in result.stderr
    assert _remote(sandbox) == before, "a torn export changed the CMS"

    # the exporter never writes a final line break: declared, the same file is read whole
    catalog.write_bytes(whole.rstrip(b"\n"))
    config = _config(tmp_path, sandbox, 'final_newline = "optional"\n')
    result = run_cli("sync", "--json", "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1])["updated"] == 60
    assert {p["price"] for p in _remote(sandbox).values()} == {"687.71"}
