"""An incremental window in the source's own clock (issue 29, found 8).

A shop whose change times are local wall-clock time west of UTC, with no zone
(PrestaShop's ``date_upd`` at UTC-5), pulled with ``since_format = "%Y-%m-%d
%H:%M:%S"`` and the default overlap. A window computed from skuferry's clock
asks for changes after a UTC time five hours ahead of the shop's clock and
misses every change; the window read from the records' own ``date_upd``
(``updated_path``) catches each one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from skuferry.config.load import settings_from_dict
from skuferry.config.schema import Settings
from skuferry.sandbox import Sandbox
from skuferry.sandbox.pims.prestashop import STAMP, WS_KEY, PrestaShopServer, make_products
from skuferry.state.mirror import Mirror
from skuferry.sync import engine
from skuferry.sync.read import incremental
from tests.integration.conftest import KEY

pytestmark = pytest.mark.integration


def _source(shop: PrestaShopServer, **extra: Any) -> dict[str, Any]:
    return {
        "type": "http",
        "url": f"{shop.url}/api/products?output_format=JSON&display=full&date=1&ws_key={WS_KEY}",
        "items_path": "products || `[]`",  # an empty list is `[]`, not {"products": []}
        "pagination": "none",
        "since_param": "filter[date_upd]",
        "since_template": ">[{since}]",
        "since_format": STAMP,
        **extra,
    }


def _settings(tmp_path: Path, sandbox: Sandbox, source: dict[str, Any]) -> Settings:
    return settings_from_dict(
        {
            "api": {"base_url": sandbox.url, "api_key": KEY},
            "source": source,
            "mapping": {
                "key": "sku",
                "fields": {"sku": "reference", "name": "name", "price": "price"},
            },
            "state": {"path": str(tmp_path / "state.db")},
        }
    )


def _prices(sandbox: Sandbox) -> dict[str, Any]:
    return {p["sku"]: p["price"] for p in sandbox.products()}


def _windows(shop: PrestaShopServer) -> list[str]:
    return [w for r in shop.requests if (w := r.arg("filter[date_upd]")) is not None]


def _meta(settings: Settings, name: str) -> str | None:
    mirror = Mirror(settings.state.path, readonly=True)
    try:
        return mirror.get_meta(name)
    finally:
        mirror.close()


def _shop() -> PrestaShopServer:
    shop = PrestaShopServer([])
    shop.products = make_products(12, updated=shop.local_now() - timedelta(hours=2))
    return shop


def test_a_price_changed_after_the_first_run_arrives_in_the_next_incremental_run(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    with _shop() as shop:
        settings = _settings(tmp_path, sandbox, _source(shop, updated_path="date_upd"))
        first = engine.run_once(settings)
        assert (first.pull, first.created) == ("full", 12)
        latest = max(p["date_upd"] for p in shop.products)
        assert _meta(settings, incremental.CURSOR) == latest, "the shop's own stamp, as written"

        for run, price in enumerate(("687.70", "702.15", "655.00"), start=1):
            changed = shop.change("P-003", price=price)
            shop.requests.clear()
            summary = engine.run_once(settings)
            assert (summary.pull, summary.updated) == ("incremental", 1), f"run {run}"
            assert summary.exit_code == 0
            assert _prices(sandbox)["P-003"] == price
            (window,) = _windows(shop)
            sent = datetime.strptime(window[2:-1], STAMP)
            assert sent < datetime.strptime(changed["date_upd"], STAMP)
            assert _meta(settings, incremental.CURSOR) == changed["date_upd"]

        quiet = engine.run_once(settings)
        assert (quiet.pull, quiet.updated, quiet.exit_code) == ("incremental", 0, 0)


def test_the_window_is_sent_back_in_the_shops_clock_with_the_overlap(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    with _shop() as shop:
        settings = _settings(tmp_path, sandbox, _source(shop, updated_path="date_upd"))
        engine.run_once(settings)
        latest = datetime.strptime(max(p["date_upd"] for p in shop.products), STAMP)
        shop.requests.clear()
        engine.run_once(settings)
        # no zone in the stamps: the window reaches back an hour, for the night that
        # daylight saving time ends and the wall clock runs back
        assert _windows(shop) == [f">[{(latest - timedelta(hours=1)).strftime(STAMP)}]"]


def test_skuferrys_clock_misses_the_change_where_the_records_carry_no_change_time(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    """Without ``updated_path`` the window can only be computed from skuferry's clock;
    against a shop five hours behind UTC it misses the change. ``check`` warns of it."""
    with _shop() as shop:
        settings = _settings(tmp_path, sandbox, _source(shop))
        engine.run_once(settings)
        shop.change("P-003", price="687.70")
        missed = engine.run_once(settings)
        assert (missed.pull, missed.updated) == ("incremental", 0)
        (window,) = _windows(shop)[-1:]
        utc_now = datetime.now(UTC).replace(tzinfo=None)
        assert datetime.strptime(window[2:-1], STAMP) > utc_now - timedelta(hours=1)


def test_check_warns_of_a_window_on_skuferrys_clock(
    tmp_path: Path, sandbox: Sandbox, run_cli: Callable[..., Any]
) -> None:
    with _shop() as shop:
        for extra, warned in (({}, True), ({"updated_path": "date_upd"}, False)):
            config = tmp_path / "skuferry.toml"
            source = _source(shop, **extra)
            lines = [f"{k} = {json.dumps(v)}" for k, v in source.items()]
            config.write_text(
                f'[api]\nbase_url = "{sandbox.url}"\napi_key = "{KEY}"\n'
                "[source]\n" + "\n".join(lines) + "\n"
                '[mapping]\nkey = "sku"\n'
                '[mapping.fields]\nsku = "reference"\nname = "name"\nprice = "price"\n'
                f'[state]\npath = "{tmp_path / "state.db"}"\n',
                encoding="utf-8",
            )
            config.chmod(0o600)
            done = run_cli("check", "--config", str(config), "--sample", "0")
            assert done.returncode == 0, done.stderr
            assert ("skuferry's clock" in done.stdout) is warned, done.stdout
            if warned:
                assert "updated_path" in done.stdout


def test_a_record_whose_change_time_cannot_be_read_is_synced_named_and_moves_nothing(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    with _shop() as shop:
        shop.products[4]["date_upd"] = "0000-00-00 00:00:00"  # MySQL's zero date
        settings = _settings(tmp_path, sandbox, _source(shop, updated_path="date_upd"))
        first = engine.run_once(settings)
        assert (first.created, first.exit_code) == (12, 0), "the record itself syncs"
        (note,) = [n for n in first.notes if "change time" in n]
        assert "record 5: updated_path 'date_upd' '0000-00-00 00:00:00' cannot be read" in note
        latest = max(p["date_upd"] for p in shop.products if p["date_upd"][0] != "0")
        assert _meta(settings, incremental.CURSOR) == latest, "taken from the readable ones"
        shop.change("P-003", price="687.70")
        second = engine.run_once(settings)
        assert (second.pull, second.updated) == ("incremental", 1)
        assert _prices(sandbox)["P-003"] == "687.70"
