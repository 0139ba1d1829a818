"""The README's "a bad feed is taken back", as a user types it, against the sandbox: the
export edited with ``sed -i`` and synced at once (within the two seconds in which a file
has no change token), ``skuferry undo RUN``, then ``skuferry sync``: refused, exit 2,
nothing written; the export changes: it syncs. The same for an HTTP API without
``ETag``/``Last-Modified`` and for a remote file served without them: a feed without a
change token is recognised by its content.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from skuferry.sandbox import Sandbox
from skuferry.sources.change_token import RACY_S
from tests.integration.conftest import KEY, WORKSPACE
from tests.integration.test_remote_files import FileServer, http_files  # noqa: F401 - a fixture
from tests.json_api import JsonApi

pytestmark = pytest.mark.integration

Run = Callable[..., subprocess.CompletedProcess[str]]

EXPORT = "SKU,Name,Price,Stock\nA-1,Drill,17.90,5\nA-2,Saw,29.90,3\nA-3,Level,9.90,0\n"
CENTS = "s/,17.90,/,1790,/; s/,29.90,/,2990,/; s/,9.90,/,990,/"  # the README's sed
MAPPING = """
[mapping]
key = "sku"
[mapping.fields]
sku = "SKU"
name = "Name"
price = { column = "Price", type = "decimal" }
stock = { column = "Stock", type = "integer" }
"""


def config(tmp_path: Path, sandbox: Sandbox, source: str) -> str:
    path = tmp_path / "my.toml"
    path.write_text(
        f'[api]\nbase_url = "{sandbox.url}"\napi_key = "{KEY}"\nupdate_method = "patch"\n'
        f"[source]\n{source}\n{MAPPING}"
        '[state]\npath = "state/skuferry.db"\n',
        encoding="utf-8",
    )
    path.chmod(0o600)
    return str(path)


def summary(result: subprocess.CompletedProcess[str], code: int = 0) -> dict[str, Any]:
    assert result.returncode == code, result.stdout[-2000:] + result.stderr[-2000:]
    found: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return found


def prices(sandbox: Sandbox) -> dict[str, Any]:
    return {str(p["sku"]): p.get("price") for p in sandbox.products(WORKSPACE)}


def writes(sandbox: Sandbox) -> int:
    return sandbox.stats().requests_by_key.get(KEY, {}).get("write", 0)


def run_row(tmp_path: Path, run: int) -> tuple[float, str | None, str | None]:
    conn = sqlite3.connect(tmp_path / "state" / "skuferry.db")
    try:
        started, token, feed = conn.execute(
            "SELECT started_at, token, feed FROM runs WHERE id = ?", (run,)
        ).fetchone()
    finally:
        conn.close()
    return float(started), token, feed


def take_back(
    run_cli: Run, conf: str, sandbox: Sandbox, bad: dict[str, Any], good: dict[str, Any]
) -> None:
    """``undo RUN``; the next sync over the same feed refused, exit 2, nothing written."""
    run = bad["run_id"]
    undo = run_cli("undo", "-c", conf, str(run))
    assert undo.returncode == 0, undo.stdout + undo.stderr
    assert f"the feed run {run} read is refused from now on" in undo.stdout
    assert prices(sandbox) == good
    before = writes(sandbox)
    for _ in range(2):  # the next run, and the one after (the daemon's, cron's)
        again = run_cli("sync", "-c", conf)
        assert again.returncode == 2, again.stdout + again.stderr
        assert f"`skuferry undo {run}`" in again.stderr and "--force" in again.stderr
    assert writes(sandbox) == before, "nothing written"
    assert prices(sandbox) == good


def test_the_readme_s_bad_feed_synced_at_once_is_refused_after_its_undo(
    sandbox: Sandbox, tmp_path: Path, run_cli: Run
) -> None:
    export = tmp_path / "catalog.csv"
    export.write_text(EXPORT, encoding="utf-8")
    conf = config(tmp_path, sandbox, 'type = "csv"\npath = "catalog.csv"')
    assert summary(run_cli("sync", "-c", conf, "--json"))["created"] == 3
    good = prices(sandbox)

    subprocess.run(["sed", "-i", CENTS, str(export)], check=True)  # then sync, at once
    bad = summary(run_cli("sync", "-c", conf, "--json"))
    assert bad["updated"] == 3
    started, token, feed = run_row(tmp_path, bad["run_id"])
    if started - export.stat().st_mtime < RACY_S:  # it started in the file's racy window
        assert token is None, "a file this fresh has no change token"
    assert feed is not None

    take_back(run_cli, conf, sandbox, bad, good)

    fixed_sed = "s/,1790,/,17.90,/; s/,2990,/,29.90,/; s/,990,/,9.90,/; s/Saw,29.90,3/Saw,29.90,2/"
    subprocess.run(["sed", "-i", fixed_sed, str(export)], check=True)  # the corrected export
    assert "1790" not in export.read_text()
    fixed = summary(run_cli("sync", "-c", conf, "--json"))
    assert (fixed["updated"], fixed["unchanged"]) == (1, 2), "the corrected export syncs"


def test_force_writes_it_and_a_dry_run_says_it_would_be_refused(
    sandbox: Sandbox, tmp_path: Path, run_cli: Run
) -> None:
    export = tmp_path / "catalog.csv"
    export.write_text(EXPORT, encoding="utf-8")
    conf = config(tmp_path, sandbox, 'type = "csv"\npath = "catalog.csv"')
    summary(run_cli("sync", "-c", conf, "--json"))
    subprocess.run(["sed", "-i", CENTS, str(export)], check=True)
    bad = summary(run_cli("sync", "-c", conf, "--json"))
    assert run_cli("undo", "-c", conf, str(bad["run_id"])).returncode == 0
    before = writes(sandbox)
    dry = summary(run_cli("sync", "-c", conf, "--json", "--dry-run"))
    assert any("a run would be refused" in n for n in dry["notes"]), dry["notes"]
    assert writes(sandbox) == before
    forced = summary(run_cli("sync", "-c", conf, "--json", "--force"))
    assert forced["updated"] == 3 and any("written anyway" in n for n in forced["notes"])
    assert prices(sandbox)["A-1"] == 1790
    assert summary(run_cli("sync", "-c", conf, "--json"))["updated"] == 0, "no longer refused"


ITEMS = [
    {"SKU": "A-1", "Name": "Drill", "Price": "17.90", "Stock": "5"},
    {"SKU": "A-2", "Name": "Saw", "Price": "29.90", "Stock": "3"},
    {"SKU": "A-3", "Name": "Level", "Price": "9.90", "Stock": "0"},
]


def cents(items: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{**i, "Price": i["Price"].replace(".", "").lstrip("0")} for i in items]


def test_an_api_without_validators_is_refused_after_the_undo(
    sandbox: Sandbox, tmp_path: Path, run_cli: Run, json_api: JsonApi
) -> None:
    conf = config(
        tmp_path, sandbox, f'type = "http"\nurl = "{json_api.url}"\nitems_path = "items"\n'
        'pagination = "none"'
    )  # fmt: skip
    json_api.serve({"generated_at": "10:00", "items": ITEMS})
    summary(run_cli("sync", "-c", conf, "--json"))
    good = prices(sandbox)
    json_api.serve({"generated_at": "10:05", "items": cents(ITEMS)})
    bad = summary(run_cli("sync", "-c", conf, "--json"))
    assert bad["updated"] == 3
    assert run_row(tmp_path, bad["run_id"])[1] is None, "an API without validators: no token"
    json_api.serve({"generated_at": "10:10", "items": cents(ITEMS)[::-1]})  # the same feed
    take_back(run_cli, conf, sandbox, bad, good)
    json_api.serve({"generated_at": "10:15", "items": [*ITEMS[:2], {**ITEMS[2], "Stock": "4"}]})
    fixed = summary(run_cli("sync", "-c", conf, "--json"))
    assert (fixed["updated"], fixed["unchanged"]) == (1, 2)


def test_a_remote_file_without_validators_is_refused_after_the_undo(
    sandbox: Sandbox,
    tmp_path: Path,
    run_cli: Run,
    http_files: Callable[[str], FileServer],  # noqa: F811 - the fixture imported above
) -> None:
    server = http_files("127.0.0.1")
    conf = config(tmp_path, sandbox, f'type = "csv"\npath = "{server.origin}/export/catalog.csv"')
    server.files["/export/catalog.csv"] = EXPORT.encode()
    summary(run_cli("sync", "-c", conf, "--json"))
    good = prices(sandbox)
    bad_export = EXPORT.replace(",17.90,", ",1790,").replace(",29.90,", ",2990,")
    server.files["/export/catalog.csv"] = bad_export.replace(",9.90,", ",990,").encode()
    bad = summary(run_cli("sync", "-c", conf, "--json"))
    assert bad["updated"] == 3 and run_row(tmp_path, bad["run_id"])[1] is None
    take_back(run_cli, conf, sandbox, bad, good)
    fixed_export = EXPORT.replace("A-2,Saw,29.90,3", "A-2,Saw,29.90,2")
    server.files["/export/catalog.csv"] = fixed_export.encode()
    fixed = summary(run_cli("sync", "-c", conf, "--json"))
    assert (fixed["updated"], fixed["unchanged"]) == (1, 2)
