"""Issue 37's findings, each tried as a new user tries it: the CLI against the sandbox.

Each test is one "Found" of the issue, over a synced catalog, with the documented config:
it fails on the release before (the change reached the CMS as data) and passes now.

1. a renamed column (300 products, and 8 under the guard's floor) nulls no price, with or
   without ``--force``; accepting it on purpose is one step, and a mapping that follows
   the rename syncs;
2. a dropped column gives no product its ``default``;
3. a JSON field moved (``price`` to ``pricing.amount``) nulls no price;
4. a re-encoded file (declared cp1252, now UTF-8) writes no mojibake;
5. keys that lost their leading zeros create no copies, whatever ``[gone]`` says;
6. a repeated header line is no product;
7. a missing key column is one error, and ``skuferry check`` fails too;
8. an incremental window without a change time says so on every run;
9. a state file pointed at another CMS workspace is refused.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from skuferry.sandbox import Sandbox
from skuferry.sources.change_token import RACY_S
from tests.fakes import write_config_file
from tests.integration.conftest import FAST, KEY, WORKSPACE
from tests.json_api import JsonApi

pytestmark = pytest.mark.integration

Run = Callable[..., subprocess.CompletedProcess[str]]
NAMES = ("Müller Kaffee", "Crème brûlée", "Öl extra", "Süßholz")


def _rows(n: int) -> list[tuple[str, str, str]]:
    return [
        (f"{i:05d}", f"{NAMES[i % 4]} {i}", f"{i % 90 + 1},{i % 100:02d}") for i in range(1, n + 1)
    ]


def _csv(
    path: Path,
    rows: list[tuple[str, str, str]],
    header: tuple[str, ...] = ("ItemNo", "Description", "UnitPrice"),
    *,
    encoding: str = "cp1252",
) -> Path:
    lines = [";".join(header), *(";".join(r[: len(header)]) for r in rows)]
    path.write_bytes(("\n".join(lines) + "\n").encode(encoding))
    _settle(path)
    return path


def _settle(path: Path) -> None:
    """Past the racy window: the next run sees the file as changed."""
    age = time.time() - path.stat().st_mtime
    if age < RACY_S:
        time.sleep(RACY_S - age + 0.05)


def _config(tmp_path: Path, url: str, source: str, fields: str, *, extra: str = "") -> Path:
    return write_config_file(
        tmp_path,
        f'[api]\nbase_url = "{url}"\napi_key = "{KEY}"\nupdate_method = "patch"\n\n'
        f'[source]\n{source}\n\n[mapping]\nkey = "sku"\n[mapping.fields]\n{fields}\n\n'
        f"[budget]\nread_per_minute = {FAST}\nwrite_per_minute = {FAST}\n\n"
        f'[state]\npath = "state/skuferry.db"\n{extra}',
    )


CSV_SOURCE = 'type = "csv"\npath = "artikel.csv"\ndelimiter = ";"\nencoding = "cp1252"'
CSV_FIELDS = (
    'sku = "ItemNo"\nname = { column = "Description", default = "(no text)" }\n'
    'price = { column = "UnitPrice", type = "decimal", decimal = "," }'
)


def _sync(run_cli: Run, config: Path, *args: str) -> tuple[int, dict[str, Any] | None, str]:
    done = run_cli("sync", "--json", "--config", str(config), *args)
    lines = done.stdout.strip().splitlines()
    return done.returncode, json.loads(lines[-1]) if lines else None, done.stderr


def _by_sku(sandbox: Sandbox, workspace: str = WORKSPACE) -> dict[str, dict[str, Any]]:
    return {str(p["sku"]): p for p in sandbox.products(workspace)}


def _writes(sandbox: Sandbox) -> int:
    return len(sandbox.updates_received(WORKSPACE)) + len(sandbox.products(WORKSPACE))


def _synced(tmp_path: Path, sandbox: Sandbox, run_cli: Run, n: int, **kw: Any) -> Path:
    """A catalog of ``n`` products synced from a cp1252 CSV export."""
    _csv(tmp_path / "artikel.csv", _rows(n))
    config = _config(tmp_path, sandbox.url, kw.get("source", CSV_SOURCE), CSV_FIELDS,
                     extra=kw.get("extra", ""))  # fmt: skip
    code, summary, stderr = _sync(run_cli, config)
    assert code == 0 and summary is not None and summary["created"] == n, stderr
    return config


# --- 1. a renamed column ------------------------------------------------------------------


@pytest.mark.parametrize("size", [300, 8])
def test_found_1_a_renamed_column_nulls_no_price(
    tmp_path: Path, sandbox: Sandbox, run_cli: Run, size: int
) -> None:
    config = _synced(tmp_path, sandbox, run_cli, size)
    before = _by_sku(sandbox)
    _csv(tmp_path / "artikel.csv", _rows(size), ("ItemNo", "Description", "Price (EUR)"))
    for force in ((), ("--force",)):
        code, _, stderr = _sync(run_cli, config, *force)
        assert code == 2, stderr
        assert "field 'price' reads column 'UnitPrice'" in stderr
        assert "closest: 'Price (EUR)'" in stderr and "skuferry accept-shape" in stderr
        assert _by_sku(sandbox) == before, "nothing written, with or without --force"


def test_found_1_accepting_a_rename_on_purpose_is_one_step(
    tmp_path: Path, sandbox: Sandbox, run_cli: Run
) -> None:
    """The ERP really renamed the column: the mapping follows it, and the run syncs (the
    field reads another column: no acceptance needed). The column dropped for good
    instead: ``accept-shape`` once, and the CMS keeps its prices."""
    config = _synced(tmp_path, sandbox, run_cli, 20)
    rows = _rows(20)
    rows[3] = (rows[3][0], rows[3][1], "99,99")
    _csv(tmp_path / "artikel.csv", rows, ("ItemNo", "Description", "Price (EUR)"))
    assert _sync(run_cli, config)[0] == 2
    text = config.read_text(encoding="utf-8").replace('"UnitPrice"', '"Price (EUR)"')
    config.write_text(text, encoding="utf-8")
    code, summary, stderr = _sync(run_cli, config)
    assert (code, summary and summary["updated"]) == (0, 1), stderr
    assert _by_sku(sandbox)[rows[3][0]]["price"] == Decimal("99.99")

    _csv(tmp_path / "artikel.csv", rows, ("ItemNo", "Description"))  # dropped for good
    assert _sync(run_cli, config)[0] == 2
    accepted = run_cli("accept-shape", "--config", str(config))
    assert accepted.returncode == 0, accepted.stderr
    assert "field 'price' reads column 'Price (EUR)'" in accepted.stdout
    assert "their products keep their values on the CMS" in accepted.stdout
    writes = _writes(sandbox)
    code, summary, stderr = _sync(run_cli, config)
    assert (code, summary and summary["updated"]) == (0, 0), stderr
    assert _writes(sandbox) == writes
    assert _by_sku(sandbox)[rows[3][0]]["price"] == Decimal("99.99"), "left alone"


# --- 2. a dropped column with a default ---------------------------------------------------


def test_found_2_a_dropped_column_gives_no_product_its_default(
    tmp_path: Path, sandbox: Sandbox, run_cli: Run
) -> None:
    config = _synced(tmp_path, sandbox, run_cli, 8)
    before = _by_sku(sandbox)
    _csv(
        tmp_path / "artikel.csv", [(k, "", p) for k, _, p in _rows(8)], ("ItemNo", "X", "UnitPrice")
    )
    for force in ((), ("--force",)):
        code, _, stderr = _sync(run_cli, config, *force)
        assert code == 2 and "field 'name' reads column 'Description'" in stderr
    assert _by_sku(sandbox) == before
    assert not any(p["name"] == "(no text)" for p in _by_sku(sandbox).values())


# --- 3. a JSON field moved ----------------------------------------------------------------


def _items(n: int, *, moved: bool = False) -> dict[str, Any]:
    items = []
    for i in range(1, n + 1):
        item: dict[str, Any] = {"id": f"A-{i}", "title": f"Article {i}"}
        price = f"{i}.50"
        item.update({"pricing": {"amount": price}} if moved else {"price": price})
        items.append(item)
    return {"items": items}


HTTP_FIELDS = (
    'sku = { path = "id" }\nname = { path = "title" }\nprice = { path = "price", type = "decimal" }'
)


def test_found_3_a_moved_json_field_nulls_no_price(
    tmp_path: Path, sandbox: Sandbox, run_cli: Run, json_api: JsonApi
) -> None:
    json_api.serve(_items(250))
    source = f'type = "http"\nurl = "{json_api.url}"\nitems_path = "items"\npagination = "none"'
    config = _config(tmp_path, sandbox.url, source, HTTP_FIELDS)
    assert _sync(run_cli, config)[0] == 0
    before = _by_sku(sandbox)
    json_api.serve(_items(250, moved=True))
    for force in ((), ("--force",)):
        code, _, stderr = _sync(run_cli, config, *force)
        assert code == 2, stderr
        assert "field 'price' reads path 'price', which gave a value in 250 of 250" in stderr
        assert "closest: 'pricing'" in stderr or "the records hold: id, title, pricing" in stderr
    assert _by_sku(sandbox) == before


# --- 4. a re-encoded file -----------------------------------------------------------------


def test_found_4_a_reencoded_file_writes_no_mojibake(
    tmp_path: Path, sandbox: Sandbox, run_cli: Run
) -> None:
    config = _synced(tmp_path, sandbox, run_cli, 60)
    before = _by_sku(sandbox)
    _csv(tmp_path / "artikel.csv", _rows(60), encoding="utf-8")  # the job moved to Linux
    code, _, stderr = _sync(run_cli, config)
    assert code == 2
    assert "artikel.csv line 2: the file is declared 'cp1252' ([source] encoding)" in stderr
    assert _by_sku(sandbox) == before
    assert not any("Ã" in p["name"] for p in _by_sku(sandbox).values())
    # encoding = "auto" reads what the bytes are: nothing to write
    text = config.read_text(encoding="utf-8").replace('encoding = "cp1252"', 'encoding = "auto"')
    config.write_text(text, encoding="utf-8")
    code, summary, stderr = _sync(run_cli, config)
    assert (code, summary and summary["updated"]) == (0, 0), stderr


# --- 5. keys that lost their leading zeros -------------------------------------------------


@pytest.mark.parametrize(
    "gone", ["", '\n[gone]\naction = "patch"\npatch = { status = "archived" }\n']
)
def test_found_5_keys_without_their_zeros_duplicate_nothing(
    tmp_path: Path, sandbox: Sandbox, run_cli: Run, gone: str
) -> None:
    config = _synced(tmp_path, sandbox, run_cli, 300, extra=gone)
    _csv(tmp_path / "artikel.csv", [(k.lstrip("0"), n, p) for k, n, p in _rows(300)])
    for force in ((), ("--force",)):
        code, _, stderr = _sync(run_cli, config, *force)
        assert code == 2, stderr
        assert "keys changed format: 300 product(s)" in stderr
        examples = r"\(e\.g\. '0+(\d+)' -> '\1', '0+(\d+)' -> '\2', '0+(\d+)' -> '\3'\)"
        assert re.search(examples, stderr), "three examples, each old key and its new form"
    assert len(sandbox.products(WORKSPACE)) == 300, "no copies under new keys"
    assert not any(p.get("status") for p in sandbox.products(WORKSPACE)), "nothing archived"


def test_found_5_the_gone_guard_counts_under_every_action(
    tmp_path: Path, sandbox: Sandbox, run_cli: Run
) -> None:
    config = _synced(tmp_path, sandbox, run_cli, 100)  # [gone] action "leave", the default
    _csv(tmp_path / "artikel.csv", _rows(100)[:60])
    code, _, stderr = _sync(run_cli, config)
    assert (
        code == 2
        and "40 of 100 known products (40%) left the source and would be marked gone" in stderr
    )


# --- 6. a repeated header line ----------------------------------------------------------------


def test_found_6_a_repeated_header_line_is_no_product(
    tmp_path: Path, sandbox: Sandbox, run_cli: Run
) -> None:
    path = tmp_path / "artikel.csv"
    rows = _rows(10)
    text = "ItemNo;Description\n" + "".join(f"{k};{n}\n" for k, n, _ in rows[:5])
    text += "ItemNo;Description\n" + "".join(f"{k};{n}\n" for k, n, _ in rows[5:])
    path.write_bytes(text.encode("cp1252"))
    config = _config(tmp_path, sandbox.url, CSV_SOURCE, 'sku = "ItemNo"\nname = "Description"')
    code, summary, stderr = _sync(run_cli, config)
    assert code == 1 and summary is not None, stderr
    assert sorted(_by_sku(sandbox)) == sorted(k for k, _, _ in rows), "no product 'ItemNo'"
    (problem,) = summary["problems"]
    assert problem["line"] == 7 and "repeats the header" in problem["reason"]
    assert (summary["gone_skipped"], summary["rows_without_key"]) == (False, 0)


# --- 7. a missing key column ----------------------------------------------------------------


def test_found_7_a_missing_key_column_is_one_error(
    tmp_path: Path, sandbox: Sandbox, run_cli: Run
) -> None:
    _csv(tmp_path / "artikel.csv", _rows(1000), ("SKU", "Description", "UnitPrice"))
    config = _config(tmp_path, sandbox.url, CSV_SOURCE, CSV_FIELDS)
    code, _, stderr = _sync(run_cli, config)
    assert code == 2
    said = [line for line in stderr.splitlines() if not line.startswith("{")]  # not the logs
    assert (
        said[0]
        == "skuferry: the shape of artikel.csv changed: nothing was written, nothing marked gone"
    )
    assert [line for line in said if line.startswith("  - ")] == [
        "  - the key 'sku' reads column 'ItemNo', which is not in the header of artikel.csv "
        "(the header: SKU, Description, UnitPrice)"
    ]
    checked = run_cli("check", "--config", str(config), "--sample", "0")
    assert checked.returncode == 2 and "the key 'sku' reads column 'ItemNo'" in checked.stderr
    assert sandbox.products(WORKSPACE) == []


def test_found_7_check_fails_when_no_record_is_valid(
    tmp_path: Path, sandbox: Sandbox, run_cli: Run
) -> None:
    _csv(tmp_path / "artikel.csv", [(k, n, "n/a") for k, n, _ in _rows(5)])
    config = _config(tmp_path, sandbox.url, CSV_SOURCE, CSV_FIELDS)
    checked = run_cli("check", "--config", str(config), "--sample", "0")
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert "source: 0 valid record(s), 5 rejected" in checked.stdout
    assert "the source yields no valid record" in checked.stderr


# --- 8. an incremental window on skuferry's clock ------------------------------------------


def test_found_8_an_unproven_window_says_so_on_every_run(
    tmp_path: Path, sandbox: Sandbox, run_cli: Run, json_api: JsonApi
) -> None:
    json_api.serve(_items(5))
    source = (
        f'type = "http"\nurl = "{json_api.url}"\nitems_path = "items"\npagination = "none"\n'
        'since_param = "modified_after"\nsince_format = "%Y-%m-%d %H:%M:%S"'
    )
    config = _config(tmp_path, sandbox.url, source, HTTP_FIELDS)
    for _ in range(3):
        done = run_cli("sync", "--json", "--log-format", "json", "--config", str(config))
        assert done.returncode == 0, done.stderr
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        assert any("computed from skuferry's clock" in n for n in summary["notes"])
        assert '"event": "sync.window.unproven"' in done.stderr
    assert any("modified_after" in asked for asked in json_api.asked), "incremental pulls ran"


# --- 9. the CMS a state mirrors ---------------------------------------------------------------


def test_found_9_a_state_pointed_at_another_workspace_is_refused(
    tmp_path: Path, sandbox: Sandbox, run_cli: Run
) -> None:
    sandbox.add_key("key-of-shop-b", "shop-b")
    config = _synced(tmp_path, sandbox, run_cli, 20)
    other = tmp_path / "shop-b.toml"
    other.write_text(
        config.read_text(encoding="utf-8").replace(f'"{KEY}"', '"key-of-shop-b"'), encoding="utf-8"
    )
    other.chmod(0o600)
    code, summary, stderr = _sync(run_cli, other)
    assert code == 2 and summary is None
    state = tmp_path / "state" / "skuferry.db"
    assert f"state file {state} mirrors {sandbox.url}" in stderr
    assert "not this CMS's" in stderr and "--moved-cms" in stderr
    assert sandbox.products("shop-b") == []
    # the first config still syncs, unchanged (the quick lane or the full start)
    assert _sync(run_cli, config)[0] == 0
    # the workspace moved, on purpose: the state follows it, each product found or sent
    code, summary, stderr = _sync(run_cli, other, "--moved-cms")
    assert code == 0 and summary is not None, stderr
    assert len(sandbox.products("shop-b")) == 20
    assert any("--moved-cms" in n for n in summary["notes"])
    assert _sync(run_cli, other)[0] == 0
    assert _sync(run_cli, config)[0] == 2, "now the first one is the other CMS"


def test_found_9_a_copied_state_of_another_shop_is_refused(
    tmp_path: Path, sandbox: Sandbox, run_cli: Run
) -> None:
    config = _synced(tmp_path, sandbox, run_cli, 5)
    state = tmp_path / "state" / "skuferry.db"
    conn = sqlite3.connect(state)
    conn.execute("DELETE FROM meta WHERE name = 'cms.binding'")  # as a release before wrote it
    conn.execute("UPDATE products SET remote_id = 'p_9' || remote_id")  # another shop's ids
    conn.commit()
    conn.close()
    code, _, stderr = _sync(run_cli, config)
    assert code == 2 and "another CMS (not recorded)" in stderr and "no product p_9" in stderr
