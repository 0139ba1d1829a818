"""``skuferry init --yes`` on exports shaped like the real ones, then ``check`` and a first
``sync`` against the sandbox, as a new user runs them: every valid product lands on the CMS
with the right values on the first try, and the refused rows are the truly bad ones.

Each export (``tests/init_exports.py``: a German ERP's CSV, a French one in cp1252, a
WooCommerce, a Shopify and a Magento export, an XLSX with a title row, a JSON Lines feed,
a BMEcat file, a gzipped CSV) is read with nothing but ``init --from FILE``; a JSON API
with a ``next`` link is served on loopback by the test, and a preset's API by its stand-in.
"""

from __future__ import annotations

import json
import stat
import subprocess
import threading
from collections.abc import Callable, Iterator
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from skuferry.sandbox import Sandbox
from skuferry.sandbox.pims.standins import stand_in
from tests.init_exports import FILE_EXPORTS, Export, gtin
from tests.integration.conftest import KEY, WORKSPACE

pytestmark = pytest.mark.integration

Run = Callable[..., subprocess.CompletedProcess[str]]


def _products(sandbox: Sandbox) -> dict[str, dict[str, Any]]:
    held = sandbox.products(WORKSPACE)
    by_key = {str(p["sku"]): p for p in held}
    assert len(by_key) == len(held), "a key is on the CMS twice"
    return by_key


def _same(value: Any, expected: Any) -> bool:
    if isinstance(expected, Decimal):
        return value is not None and Decimal(str(value)) == expected
    return bool(value == expected)


def init_check_sync(
    run_cli: Run, sandbox: Sandbox, origin: str, *extra: str, env: dict[str, str] | None = None
) -> tuple[dict[str, Any], subprocess.CompletedProcess[str]]:
    """init --yes, check, sync --json; the sync's summary and the init's output."""
    environment = {"SKUFERRY_API_KEY": KEY, **(env or {})}
    made = run_cli("init", "--from", origin, "--base-url", sandbox.url, "--yes", *extra,
                   env=environment)  # fmt: skip
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    checked = run_cli("check", "--config", "skuferry.toml", "--sample", "0", env=environment)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    synced = run_cli("sync", "--json", "--config", "skuferry.toml", env=environment)
    assert synced.returncode in (0, 1), synced.stdout + synced.stderr
    return json.loads(synced.stdout.strip().splitlines()[-1]), made


def assert_landed(sandbox: Sandbox, export: Export, summary: dict[str, Any]) -> None:
    held = _products(sandbox)
    assert set(held) == set(export.expected), (sorted(set(held) ^ set(export.expected)), summary)
    for key, payload in export.expected.items():
        wrong = {
            f: (held[key].get(f), v) for f, v in payload.items() if not _same(held[key].get(f), v)
        }
        assert not wrong, f"{key}: (on the CMS, expected) {wrong}"
    refused = {p["key"] for p in summary["problems"]}
    assert refused == export.refused, summary["problems"]
    assert summary["created"] == len(export.expected)
    assert summary["rejected"] == len(export.refused)


@pytest.mark.parametrize("make", FILE_EXPORTS, ids=lambda make: make().name)
def test_init_then_the_first_sync_puts_every_valid_product_on_the_cms(
    make: Callable[[], Export], run_cli: Run, sandbox: Sandbox, tmp_path: Path
) -> None:
    export = make()
    origin = export.write(tmp_path)
    summary, made = init_check_sync(run_cli, sandbox, origin.name)
    assert_landed(sandbox, export, summary)
    config = tmp_path / "skuferry.toml"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert KEY not in config.read_text(encoding="utf-8")  # the key stays in the environment
    assert KEY not in made.stdout + made.stderr
    # the preview wrote nothing (the sync created every product) and asked the CMS its count
    assert "nothing written" in made.stdout
    assert f"the CMS at {sandbox.url} lists 0 product(s)" in made.stdout


def test_init_never_replaces_a_config_without_force(
    run_cli: Run, sandbox: Sandbox, tmp_path: Path
) -> None:
    origin = FILE_EXPORTS[0]().write(tmp_path)
    config = tmp_path / "skuferry.toml"
    config.write_text("# mine\n", encoding="utf-8")
    refused = run_cli("init", "--from", origin.name, "--yes", env={"SKUFERRY_API_KEY": KEY})
    assert refused.returncode == 2
    assert "--force" in refused.stderr
    assert config.read_text(encoding="utf-8") == "# mine\n"
    replaced = run_cli("init", "--from", origin.name, "--yes", "--force")
    assert replaced.returncode == 0, replaced.stderr
    assert "Artikelnummer" in config.read_text(encoding="utf-8")
    assert stat.S_IMODE(config.stat().st_mode) == 0o600


# --- a JSON API whose pages link the next one ---------------------------------------------------

PAGE = 20
API_PRODUCTS: list[dict[str, Any]] = [
    {
        "id": 7000 + i,
        "code": f"API-{i:03d}",
        "label": f"Camping lamp {i}",
        "pricing": {"gross": f"{15 + i}.50", "currency": "EUR"},
        "stock": {"available": i * 2},
        "barcode": gtin(f"401234{i + 100:06d}"),
    }
    for i in range(1, 48)
]


class _Pages(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        page = int(parse_qs(parts.query).get("page", ["1"])[0])
        items = API_PRODUCTS[(page - 1) * PAGE : page * PAGE]
        host = self.headers["Host"]
        more = page * PAGE < len(API_PRODUCTS)
        body = {
            "products": items,
            "next": f"http://{host}/api/products?page={page + 1}" if more else None,
            "total": len(API_PRODUCTS),
        }
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def paged_api() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/api/products"
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def test_a_json_api_with_next_links(
    paged_api: str, run_cli: Run, sandbox: Sandbox, tmp_path: Path
) -> None:
    summary, _ = init_check_sync(run_cli, sandbox, paged_api)
    config = (tmp_path / "skuferry.toml").read_text(encoding="utf-8")
    assert 'items_path = "products"' in config
    assert 'next_path = "next"' in config
    expected = {
        p["code"]: {
            "sku": p["code"],
            "name": p["label"],
            "price": Decimal(p["pricing"]["gross"]),
            "stock": p["stock"]["available"],
            "ean": p["barcode"],
        }
        for p in API_PRODUCTS
    }
    assert_landed(sandbox, Export("api", lambda _: Path(), expected), summary)


# --- a preset's API --------------------------------------------------------------------------


def test_a_preset_api_read_through_its_stand_in(
    run_cli: Run, sandbox: Sandbox, tmp_path: Path
) -> None:
    standin = stand_in("shopify", products=60, workdir=tmp_path)
    with standin.running():
        summary, made = init_check_sync(
            run_cli, sandbox, standin.server.url, "--preset", "shopify", env=standin.secrets
        )
    config = (tmp_path / "skuferry.toml").read_text(encoding="utf-8")
    assert 'preset = "shopify"' in config
    assert 'token_env = "SHOPIFY_TOKEN"' in config
    for secret in standin.secrets.values():
        assert secret not in config and secret not in made.stdout
    assert summary["created"] == len(standin.keys) and summary["rejected"] == 0
    assert set(_products(sandbox)) == set(standin.keys)
