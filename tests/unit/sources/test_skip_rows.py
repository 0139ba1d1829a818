"""``[source] skip_if_empty`` and the Shopify, WooCommerce and Magento examples in ``examples/``.

The three shop exports are synced through ``run_once`` with the configs the README
shows (loaded from ``examples/*.toml``, so the docs cannot drift from what works),
from fixtures written here in the shape of each shop's CSV export.
"""

# ruff: noqa: E501  (the fixtures are CSV rows as the shops export them)
from __future__ import annotations

import tomllib
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from structlog.testing import capture_logs

from skuferry import errors
from skuferry.config.load import settings_from_dict
from skuferry.config.schema import Settings, SqlSourceSettings
from skuferry.models import BadRecord, RawRecord, RunSummary
from skuferry.sources.base import IncrementalSource, Source
from skuferry.sources.dispatch import open_source
from skuferry.sources.skip import SkipEmptyRows, skip_empty_rows
from skuferry.sync.engine import Adapters, run_once
from tests.fakes import FakeRemote

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

SHOPIFY_HEADER = (
    "Handle,Title,Body (HTML),Vendor,Type,Tags,Published,Option1 Name,Option1 Value,"
    "Variant SKU,Variant Grams,Variant Inventory Qty,Variant Price,Variant Compare At Price,"
    "Variant Barcode,Image Src,Image Position,Status"
)
# 3 products x 2 variants; variant rows after the first repeat only the handle;
# image-only rows repeat the handle with every other product field empty.
SHOPIFY_CSV = f"""{SHOPIFY_HEADER}
linen-shirt,Linen Shirt,"<p>Breathable <strong>linen</strong>, cut loose.</p>
<p>Washes at 40&deg;C.</p>",Fernweh,Shirts,"summer, linen",true,Size,S,LS-0001-S,210,12,49.90,59.00,04012345000016,https://cdn.example.test/ls-1.jpg,1,active
linen-shirt,,,,,,,,M,LS-0001-M,220,0,49.90,,04012345000023,https://cdn.example.test/ls-2.jpg,2,
linen-shirt,,,,,,,,,,,,,,,https://cdn.example.test/ls-3.jpg,3,
wool-socks,Wool Socks,"<ul><li>Merino</li><li>Pack of ""two""</li></ul>",Fernweh,Socks,,true,Size,39-42,WS-0002-A,90,40,12.50,,,https://cdn.example.test/ws-1.jpg,1,active
wool-socks,,,,,,,,43-46,WS-0002-B,95,35,12.50,,,,,
wool-socks,,,,,,,,,,,,,,,https://cdn.example.test/ws-2.jpg,2,
canvas-tote,Canvas Tote,<p>Plain tote bag.</p>,Nordhaus,Bags,,true,Color,Natural,CT-0003-N,300,5,19.00,,,https://cdn.example.test/ct-1.jpg,1,active
canvas-tote,,,,,,,,Black,CT-0003-B,300,7,19.00,,,,,
canvas-tote,,,,,,,,,,,,,,,https://cdn.example.test/ct-2.jpg,2,
canvas-tote,,,,,,,,,,,,,,,https://cdn.example.test/ct-3.jpg,3,
"""

WOOCOMMERCE_CSV = """\
ID,Type,SKU,Name,Published,Short description,Description,Regular price,Sale price,Stock,Categories,Parent,Attribute 1 name,Attribute 1 value(s)
10,variable,WOO-HOODIE,Hoodie,1,Warm hoodie,"<p>Cotton hoodie with a ""kangaroo"" pocket.</p>",,,,Clothing > Hoodies,,Color,"Blue, Green"
11,variation,WOO-HOODIE-BLUE,Hoodie - Blue,1,,,45,,8,,id:10,Color,Blue
12,variation,WOO-HOODIE-GREEN,Hoodie - Green,1,,,45,39.5,3,,WOO-HOODIE,Color,Green
13,simple,WOO-BEANIE,Beanie,1,Knitted,<p>Knitted beanie.</p>,18.00,,20,"Clothing > Accessories, Sale",,,
"""

MAGENTO_CSV = """\
sku,store_view_code,attribute_set_code,product_type,categories,product_websites,name,description,short_description,weight,product_online,price,qty,additional_attributes,configurable_variations
MH01-XS,,Top,simple,Default Category/Men/Tops,base,Chaz Hoodie-XS,"<p>The Chaz hoodie.</p>
<p>Ribbed cuffs.</p>",,1.0000,1,52.0000,100.0000,"color=Gray,size=XS",
MH01-S,,Top,simple,Default Category/Men/Tops,base,Chaz Hoodie-S,"<p>The Chaz hoodie.</p>
<p>Ribbed cuffs.</p>",,1.0000,1,52.0000,100.0000,"color=Gray,size=S",
MH01,,Top,configurable,Default Category/Men/Tops,base,Chaz Hoodie,"<p>The Chaz hoodie, in ""heather"" gray.</p>
<p>Ribbed cuffs.</p>",Warm,1.0000,1,52.0000,0.0000,"material=Cotton,style=Pullover","sku=MH01-XS,size=XS|sku=MH01-S,size=S"
24-MB01,,Bag,simple,Default Category/Gear/Bags,base,Joust Duffle Bag,<p>A duffle.</p>,,0.5000,0,34.0000,100.0000,,
"""


def _example(name: str, tmp_path: Path, export: str, text: str) -> Settings:
    """``examples/<name>.toml`` as the README shows it, with this test's state and export."""
    data: dict[str, Any] = tomllib.loads((EXAMPLES / f"{name}.toml").read_text())
    (tmp_path / data["source"]["path"]).write_text(text, encoding="utf-8", newline="")
    data["api"] = {"base_url": "http://127.0.0.1:9", "api_key": "k-test"}
    data["state"] = {"path": str(tmp_path / "state.db")}
    return settings_from_dict(data, base_dir=tmp_path)


def _run(settings: Settings, remote: FakeRemote) -> RunSummary:
    return run_once(settings, adapters=Adapters(client=remote))  # the source from open_source


def _syncs_clean(settings: Settings, *, created: int) -> tuple[FakeRemote, RunSummary]:
    remote = FakeRemote()
    summary = _run(settings, remote)
    assert summary.exit_code == errors.EXIT_OK, summary.as_json()
    assert (summary.created, summary.rejected, summary.problems) == (created, 0, [])
    return remote, summary


def test_shopify_export_syncs_clean_and_image_rows_are_a_note(tmp_path: Path) -> None:
    settings = _example("shopify", tmp_path, "products_export.csv", SHOPIFY_CSV)
    with capture_logs() as logs:
        remote, summary = _syncs_clean(settings, created=6)
    assert "4 row(s) skipped: Variant SKU empty" in summary.notes
    skipped = [e for e in logs if e["event"] == "source.rows.skipped"]
    assert [e["count"] for e in skipped] == [4], "logged once per run, with the count"
    assert remote.keys() == sorted(
        ["LS-0001-S", "LS-0001-M", "WS-0002-A", "WS-0002-B", "CT-0003-N", "CT-0003-B"]
    )
    first = remote.by_key("LS-0001-S")[0]
    assert first["name"] == "Linen Shirt"
    assert first["description"] == (
        "<p>Breathable <strong>linen</strong>, cut loose.</p>\n<p>Washes at 40&deg;C.</p>"
    )
    assert Decimal(str(first["price"])) == Decimal("49.90")
    assert first["barcode"] == "04012345000016"
    second = remote.by_key("LS-0001-M")[0]
    assert (second["name"], second["handle"], second["option"]) == (
        "Linen Shirt",  # group_by = "Handle": the product's title on every variant
        "linen-shirt",
        "M",
    )
    assert second["barcode"] == "04012345000023"
    assert remote.by_key("WS-0002-A")[0]["description"] == (
        '<ul><li>Merino</li><li>Pack of "two"</li></ul>'
    )
    again = _run(settings, remote)
    assert (again.created, again.updated, again.exit_code) == (0, 0, errors.EXIT_OK)
    assert "4 row(s) skipped: Variant SKU empty" in again.notes


def test_without_skip_if_empty_image_rows_are_reported(tmp_path: Path) -> None:
    settings = _example("shopify", tmp_path, "products_export.csv", SHOPIFY_CSV)
    source = settings.source.model_copy(update={"skip_if_empty": []})
    summary = _run(settings.model_copy(update={"source": source}), FakeRemote())
    assert summary.created == 6
    assert summary.rejected == 4
    assert summary.exit_code != errors.EXIT_OK
    assert all("empty" in p["reason"] for p in summary.problems), summary.problems
    assert not any("row(s) skipped" in note for note in summary.notes)
    assert summary.gone_skipped  # rows without a key: which products they were is unknown


def test_woocommerce_export_syncs_clean(tmp_path: Path) -> None:
    settings = _example("woocommerce", tmp_path, "wc-product-export.csv", WOOCOMMERCE_CSV)
    remote, summary = _syncs_clean(settings, created=4)
    blue = remote.by_key("WOO-HOODIE-BLUE")[0]
    assert (blue["type"], blue["parent"], blue["stock"]) == ("variation", "id:10", 8)
    assert Decimal(str(blue["price"])) == Decimal(45)
    green = remote.by_key("WOO-HOODIE-GREEN")[0]
    assert Decimal(str(green["sale_price"])) == Decimal("39.5")
    assert remote.by_key("WOO-HOODIE")[0]["price"] is None, "a variable product has no price"
    assert remote.by_key("WOO-BEANIE")[0]["categories"] == "Clothing > Accessories, Sale"
    assert not any("skipped" in note for note in summary.notes)


def test_magento_export_syncs_clean(tmp_path: Path) -> None:
    settings = _example("magento", tmp_path, "catalog_product.csv", MAGENTO_CSV)
    remote, _ = _syncs_clean(settings, created=4)
    parent = remote.by_key("MH01")[0]
    assert parent["description"] == (
        '<p>The Chaz hoodie, in "heather" gray.</p>\n<p>Ribbed cuffs.</p>'
    )
    assert parent["variations"] == "sku=MH01-XS,size=XS|sku=MH01-S,size=S"
    assert parent["attributes"] == "material=Cotton,style=Pullover"
    assert Decimal(str(parent["price"])) == Decimal("52.0000")
    assert remote.by_key("24-MB01")[0]["online"] is False
    assert _run(settings, remote).updated == 0


class _Changes(IncrementalSource):
    """An incremental source whose changed records include a row with no key."""

    full_every = 7
    overlap_s = 60.0

    def __init__(self) -> None:
        self.asked: list[datetime] = []

    @property
    def incremental(self) -> bool:
        return True

    def records(self) -> Iterator[RawRecord | BadRecord]:
        yield RawRecord(line=1, fields={"sku": "A"})
        yield RawRecord(line=2, fields={"sku": ""})
        yield BadRecord(line=3, reason="line 3: undecodable")

    def records_since(self, since: datetime) -> Iterator[RawRecord | BadRecord]:
        self.asked.append(since)
        yield RawRecord(line=1, fields={"sku": "B", "name": "b"})
        yield RawRecord(line=2, fields={"name": "no key"})

    def describe(self) -> str:
        return "changes"


def test_the_incremental_capability_is_forwarded() -> None:
    inner = _Changes()
    source = skip_empty_rows(inner, ["sku"])
    assert isinstance(source, IncrementalSource)
    assert isinstance(source, SkipEmptyRows)
    assert (source.incremental, source.full_every, source.overlap_s) == (True, 7, 60.0)
    since = datetime(2026, 1, 1, tzinfo=UTC)
    assert [r.fields["sku"] for r in source.records_since(since)] == ["B"]  # type: ignore[index]
    assert inner.asked == [since]
    assert source.skipped == 1
    full = list(source.records())
    assert [type(r).__name__ for r in full] == ["RawRecord", "BadRecord"], "bad records pass"
    assert (source.skipped, source.describe()) == (1, "changes")


def test_a_source_that_cannot_filter_stays_plain_and_no_columns_means_no_wrapper() -> None:
    class Plain(Source):
        def records(self) -> Iterator[RawRecord | BadRecord]:
            yield RawRecord(line=1, fields={"a": " ", "b": None})
            yield RawRecord(line=2, fields={"a": "", "b": "x"})

        def describe(self) -> str:
            return "plain"

    plain = Plain()
    assert skip_empty_rows(plain, []) is plain
    wrapped = skip_empty_rows(plain, ["a", "b"])
    assert not isinstance(wrapped, IncrementalSource)
    assert [r.line for r in wrapped.records()] == [2], "skipped only when every column is empty"


def test_open_source_wraps_every_type_and_keeps_sql_incremental(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'erp.db'}"
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE products (sku TEXT, name TEXT, changed TEXT)"))
        conn.execute(
            sa.text(
                "INSERT INTO products VALUES ('A', 'a', '2026-01-02'), (NULL, 'x', '2026-01-02')"
            )
        )
    engine.dispose()
    settings = SqlSourceSettings(
        type="sql", url=url, table="products", updated_column="changed", skip_if_empty=["sku"]
    )
    source = open_source(settings)
    assert isinstance(source, IncrementalSource) and isinstance(source, SkipEmptyRows)
    assert source.incremental
    assert [r.fields["sku"] for r in source.records()] == ["A"]  # type: ignore[index]
    assert source.note() == "1 row(s) skipped: sku empty"


def test_a_blank_column_name_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="must not be empty"):
        SqlSourceSettings(type="sql", url="sqlite://", table="t", skip_if_empty=[" "])
    with pytest.raises(errors.ConfigError, match="skip_if_empty"):
        settings_from_dict(
            {
                "api": {"base_url": "http://127.0.0.1:9", "api_key": "k"},
                "source": {"type": "csv", "path": str(tmp_path / "c.csv"), "skip_if_empty": "x"},
                "state": {"path": str(tmp_path / "s.db")},
            }
        )
