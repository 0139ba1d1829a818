"""A product in pieces, end to end as a user runs it (the CLI, a config file, the sandbox):
variants nested in a record, continuation rows, joined files, lookups, filters and checks.
Fixtures are our own, shaped like the real exports (Shopify, PrestaShop, WooCommerce WXR,
an ERP's ``;`` CSV beside a PIM's JSON Lines)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from skuferry.sandbox import Sandbox
from skuferry.sources.change_token import RACY_S
from tests.integration.conftest import KEY, WORKSPACE

pytestmark = pytest.mark.integration

Run = Callable[..., subprocess.CompletedProcess[str]]


def _config(tmp_path: Path, url: str, body: str) -> Path:
    path = tmp_path / "skuferry.toml"
    path.write_text(
        f'[api]\nbase_url = "{url}"\napi_key = "{KEY}"\n\n{body}\n'
        '[state]\npath = "state/skuferry.db"\n',
        encoding="utf-8",
    )
    path.chmod(0o600)
    return path


def _sync(run_cli: Run, config: Path, *args: str, code: int = 0) -> dict[str, Any]:
    result = run_cli("sync", "--json", "--config", str(config), *args)
    assert result.returncode == code, result.stdout + result.stderr
    summary: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return summary


def _settle(*paths: Path) -> None:
    """Wait until ``paths`` are older than the racy window: a file changed within it has no
    change token, so its join is read again."""
    newest = max(max(p.stat().st_mtime, p.stat().st_ctime) for p in paths)
    if (age := time.time() - newest) < RACY_S:
        time.sleep(RACY_S - age + 0.1)


def _writes(sandbox: Sandbox) -> int:
    return sandbox.stats().requests_by_key[KEY].get("write", 0)


def _by_sku(sandbox: Sandbox) -> dict[str, dict[str, Any]]:
    return {str(p["sku"]): p for p in sandbox.products(WORKSPACE)}


def _write_csv(path: Path, header: list[str], rows: list[list[str]], delimiter: str = ",") -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.writer(f, delimiter=delimiter)
        out.writerow(header)
        out.writerows(rows)


# --- Shopify: variants nested in a JSON product, and the CSV export's continuation rows ----


def _shopify_product(pid: int, title: str, variants: list[tuple[str, str, str]]) -> dict[str, Any]:
    return {
        "id": pid,
        "title": title,
        "vendor": "Northwind Outfitters",
        "status": "active",
        "body_html": f"<p>{title}</p>",
        "variants": [
            {
                "id": pid * 100 + n,
                "product_id": pid,
                "sku": sku,
                "price": price,
                "barcode": barcode,
                "option1": size,
                "inventory_quantity": 5 * n,
            }
            for n, (sku, price, barcode) in enumerate(variants, 1)
            for size in [["S", "M", "L", "XL"][n - 1]]
        ],
    }


SHOPIFY_JSON_MAPPING = """
[mapping]
key = "sku"
each = "variants"
[mapping.fields]
sku = { path = "sku" }
name = { path = "parent.title", required = true }
vendor = { path = "parent.vendor" }
size = { path = "option1" }
price = { path = "price", type = "decimal" }
barcode = { path = "barcode", check = "gtin" }
stock = { path = "inventory_quantity", type = "integer" }
"""


def test_shopify_json_export_one_product_per_variant_and_a_second_run_writes_nothing(
    sandbox: Sandbox, tmp_path: Path, run_cli: Run
) -> None:
    products = [
        _shopify_product(
            1,
            "Linen shirt",
            [("LS-S", "39.00", "0850064060010"), ("LS-M", "39.00", "4006381333931")],
        ),
        _shopify_product(2, "Wool cap", [("WC-1", "19.90", "96385074")]),
        _shopify_product(3, "Gift card", []),  # no variants: no product, a note
    ]
    (tmp_path / "products.jsonl").write_text(
        "".join(json.dumps(p) + "\n" for p in products), encoding="utf-8"
    )
    config = _config(
        tmp_path,
        sandbox.url,
        '[source]\ntype = "jsonl"\npath = "products.jsonl"\n' + SHOPIFY_JSON_MAPPING,
    )

    first = _sync(run_cli, config)

    assert first["created"] == 3 and first["rejected"] == 0
    remote = _by_sku(sandbox)
    assert remote["LS-M"]["name"] == "Linen shirt", "the parent's title"
    assert remote["LS-M"]["barcode"] == "4006381333931"
    assert remote["LS-M"]["size"] == "M"
    assert remote["WC-1"]["price"] == Decimal("19.90")
    assert remote["WC-1"]["vendor"] == "Northwind Outfitters"
    assert any("no item at [mapping] each" in note for note in first["notes"])
    writes = _writes(sandbox)
    second = _sync(run_cli, config)
    assert second["unchanged"] == 3 and second["created"] == second["updated"] == 0
    assert _writes(sandbox) == writes, "a second run writes nothing"

    shown = run_cli("check", "--sample", "2", "--config", str(config))
    assert shown.returncode == 0, shown.stderr
    assert "record 1 (line 1), item 2, as read from the source:" in shown.stdout
    assert '"parent": {' in shown.stdout, "the unnested record shows its parent"


def test_a_bad_variant_names_record_and_item_and_is_held(
    sandbox: Sandbox, tmp_path: Path, run_cli: Run
) -> None:
    good = [("LS-S", "39.00", "0850064060010"), ("LS-M", "39.00", "4006381333931")]
    path = tmp_path / "products.jsonl"
    path.write_text(json.dumps(_shopify_product(1, "Linen shirt", good)) + "\n", encoding="utf-8")
    config = _config(
        tmp_path,
        sandbox.url,
        '[source]\ntype = "jsonl"\npath = "products.jsonl"\n' + SHOPIFY_JSON_MAPPING,
    )
    assert _sync(run_cli, config)["created"] == 2
    bad = [("LS-S", "45.00", "0850064060010"), ("LS-M", "45.00", "4006381333932")]
    path.write_text(json.dumps(_shopify_product(1, "Linen shirt", bad)) + "\n", encoding="utf-8")

    summary = _sync(run_cli, config, code=1)

    assert summary["rejected"] == 1 and summary["updated"] == 1 and summary["gone"] == 0
    (problem,) = summary["problems"]
    assert problem["key"] == "LS-M"
    assert problem["reason"] == (
        "products.jsonl record 1 (line 1), item 2, path 'barcode': "
        "'4006381333932' is not a GTIN (wrong check digit)"
    )
    assert _by_sku(sandbox)["LS-M"]["price"] == Decimal("39.00"), "held: not updated"


SHOPIFY_CSV_HEADER = [
    "Handle",
    "Title",
    "Body (HTML)",
    "Vendor",
    "Option1 Name",
    "Option1 Value",
    "Variant SKU",
    "Variant Price",
    "Variant Barcode",
    "Image Src",
]
SHOPIFY_CSV_ROWS = [
    ["linen-shirt", "Linen shirt", "<p>Cool</p>", "Northwind", "Size", "S", "LS-S", "39.00",
     "'0850064060010", "https://cdn.example/ls1.jpg"],
    ["linen-shirt", "", "", "", "", "M", "LS-M", "39.00", "'4006381333931", ""],
    ["linen-shirt", "", "", "", "", "L", "LS-L", "41.00", "'0036000291452", ""],
    ["linen-shirt", "", "", "", "", "", "", "", "", "https://cdn.example/ls2.jpg"],
    ["wool-cap", "Wool cap", "<p>Warm</p>", "Northwind", "Title", "Default Title", "WC-1",
     "19.90", "'96385074", "https://cdn.example/wc.jpg"],
    ["wool-cap", "", "", "", "", "", "", "", "", "https://cdn.example/wc2.jpg"],
]  # fmt: skip


def test_shopify_csv_continuation_and_image_only_rows_with_the_shipped_example(
    sandbox: Sandbox, tmp_path: Path, run_cli: Run
) -> None:
    # every column the shipped example maps is in the export (a column a mapping reads and
    # the header lacks stops the run: issue 37), as in a real Shopify export
    header = [*SHOPIFY_CSV_HEADER, "Variant Compare At Price", "Variant Inventory Qty"]
    rows = [[*row, "", "7" if row[6] else ""] for row in SHOPIFY_CSV_ROWS]
    _write_csv(tmp_path / "products_export.csv", header, rows)
    example = (Path(__file__).parents[2] / "examples" / "shopify.toml").read_text("utf-8")
    example = example.replace('base_url = "http://127.0.0.1:8765"', f'base_url = "{sandbox.url}"')
    example = example.replace("[api]\n", f'[api]\napi_key = "{KEY}"  # the test\'s key\n', 1)
    example = example.replace("/tmp/skuferry-example-shopify.db", "state/skuferry.db")
    config = tmp_path / "shopify.toml"
    config.write_text(example, encoding="utf-8")
    config.chmod(0o600)

    first = _sync(run_cli, config)

    assert first["created"] == 4 and first["rejected"] == 0 and first["skipped"] == 2
    remote = _by_sku(sandbox)
    assert {sku: p["name"] for sku, p in remote.items()} == {
        "LS-S": "Linen shirt",
        "LS-M": "Linen shirt",
        "LS-L": "Linen shirt",
        "WC-1": "Wool cap",
    }, "every variant has its product's title"
    assert remote["LS-L"]["vendor"] == "Northwind"
    assert remote["LS-M"]["barcode"] == "4006381333931", "the apostrophe is gone, zeros stay"
    assert remote["LS-L"]["barcode"] == "0036000291452"
    writes = _writes(sandbox)
    assert _sync(run_cli, config)["unchanged"] == 4
    assert _writes(sandbox) == writes


# --- PrestaShop: product.xml attributes joined to langs/en/product.xml, a CSV lookup -------

PRESTA_PRODUCTS = """<?xml version="1.0"?>
<entity_product>
  <fields id="name">
    <field name="id_category_default" relation="category"/>
  </fields>
  <entities>
    <product id="Hummingbird_tshirt" id_category_default="3" reference="demo_1"
             price="23.900000" ean13="4006381333931" quantity="300"/>
    <product id="Mountain_mug" id_category_default="8" reference="demo_12"
             price="11.900000" ean13="" quantity="120"/>
    <product id="Fox_notebook" id_category_default="8" reference="demo_8"
             price="12.900000" ean13="" quantity="80"/>
  </entities>
</entity_product>
"""
PRESTA_NAMES = """<?xml version="1.0"?>
<entity_product>
  <product id="Hummingbird_tshirt">
    <name>Hummingbird printed t-shirt</name>
    <description>&lt;p&gt;Regular fit&lt;/p&gt;</description>
  </product>
  <product id="Mountain_mug">
    <name>Mountain fox mug</name>
    <description>&lt;p&gt;Ceramic&lt;/p&gt;</description>
  </product>
</entity_product>
"""


def test_prestashop_xml_pair_joined_on_id_with_a_category_lookup_from_csv(
    sandbox: Sandbox, tmp_path: Path, run_cli: Run
) -> None:
    (tmp_path / "langs" / "en").mkdir(parents=True)
    (tmp_path / "product.xml").write_text(PRESTA_PRODUCTS, encoding="utf-8")
    (tmp_path / "langs" / "en" / "product.xml").write_text(PRESTA_NAMES, encoding="utf-8")
    _write_csv(tmp_path / "categories.csv", ["id", "label"], [["3", "Men"], ["8", "Home"]])
    config = _config(
        tmp_path,
        sandbox.url,
        """
[source]
type = "xml"
path = "product.xml"
record = "product"

[[join]]
name = "en"
type = "xml"
path = "langs/en/product.xml"
record = "product"
key = "@id"
on = "@id"

[mapping]
key = "sku"
[mapping.tables]
categories = { file = "categories.csv", key = "id", value = "label" }
[mapping.fields]
sku = "@reference"
name = { path = "en.name", required = true }
description = { path = "en.description" }
category = { path = "lookup('categories', \\"@id_category_default\\")" }
price = { column = "@price", type = "decimal" }
stock = { column = "@quantity", type = "integer" }
""",
    )

    _settle(tmp_path / "langs" / "en" / "product.xml")  # else it has no signature yet
    summary = _sync(run_cli, config, code=1)

    assert summary["created"] == 2 and summary["rejected"] == 1
    remote = _by_sku(sandbox)
    assert remote["demo_1"]["name"] == "Hummingbird printed t-shirt"
    assert remote["demo_1"]["description"] == "<p>Regular fit</p>"
    assert remote["demo_1"]["category"] == "Men", "looked up in categories.csv"
    assert remote["demo_12"]["category"] == "Home"
    assert remote["demo_12"]["price"] == Decimal("11.900000")
    (problem,) = summary["problems"]
    assert problem["key"] == "demo_8", "no English name: a required field, rejected"
    assert "no 'en' record matches this one" in problem["reason"]
    assert summary["joins"] == {"en": "read"}
    again = _sync(run_cli, config, "--full", code=1)  # the primary read: not skipped
    assert again["joins"] == {"en": "reused"}, "the unchanged join file is not read again"
    assert again["unchanged"] == 2


# --- ERP ; CSV joined to a PIM JSON Lines file ------------------------------------------------


def _erp(path: Path, rows: list[tuple[str, str, str]]) -> None:
    _write_csv(path, ["Artikelnummer", "VK-Preis", "Bestand"], [list(r) for r in rows], ";")


def _pim(path: Path, names: dict[str, str]) -> None:
    path.write_text(
        "".join(
            json.dumps({"sku": sku, "name": name, "description": f"<p>{name}</p>"}) + "\n"
            for sku, name in names.items()
        ),
        encoding="utf-8",
    )


ERP_PIM = """
[source]
type = "csv"
path = "erp.csv"
delimiter = ";"

[[join]]
name = "pim"
type = "jsonl"
path = "pim.jsonl"
key = "sku"
on = "Artikelnummer"

[mapping]
key = "sku"
[mapping.fields]
sku = "Artikelnummer"
price = { column = "VK-Preis", type = "decimal", decimal = ",", thousands = "." }
stock = { column = "Bestand", type = "integer" }
name = { path = "pim.name", required = true }
description = { path = "pim.description" }
"""


def test_erp_csv_joined_to_pim_jsonl_a_changed_erp_file_syncs_stock_and_price_only(
    sandbox: Sandbox, tmp_path: Path, run_cli: Run
) -> None:
    erp, pim = tmp_path / "erp.csv", tmp_path / "pim.jsonl"
    _erp(erp, [("10001", "1.299,00", "5"), ("10002", "49,90", "12"), ("10003", "9,99", "0")])
    names = {"10001": "Cordless drill", "10002": "Jigsaw", "10003": "Drill bits"}
    _pim(pim, names)
    _settle(pim)
    config = _config(tmp_path, sandbox.url, ERP_PIM)
    first = _sync(run_cli, config)
    assert first["created"] == 3 and first["joins"] == {"pim": "read"}
    assert _by_sku(sandbox)["10001"]["price"] == Decimal("1299.00")

    # The ERP file changes two products; the PIM file is untouched: its index is reused.
    _erp(erp, [("10001", "1.199,00", "5"), ("10002", "49,90", "7"), ("10003", "9,99", "0")])
    sandbox.reset_stats()

    second = _sync(run_cli, config)

    assert second["joins"] == {"pim": "reused"}, "the PIM file was not read again"
    assert second["updated"] == 2 and second["unchanged"] == 1
    bodies = sorted((u["body"] for u in sandbox.updates_received()), key=str)
    assert {"price": Decimal("1199.00")} in bodies and {"stock": 7} in bodies
    assert all(set(b) <= {"price", "stock"} for b in bodies), "only stock and price"

    # The PIM file changes in place, same size, and gets its old mtime back (`cp -p`): its
    # ctime moved, so it is read again and the new names reach the CMS.
    before = pim.stat()
    _pim(pim, {"10001": "CORDLESS DRILL", "10002": "JIGSAW", "10003": "DRILL BITS"})
    os.utime(pim, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert pim.stat().st_size == before.st_size and pim.stat().st_ino == before.st_ino
    _settle(pim)
    renamed = _sync(run_cli, config)
    assert renamed["joins"] == {"pim": "read"} and renamed["updated"] == 3
    assert _by_sku(sandbox)["10001"]["name"] == "CORDLESS DRILL"

    # A real PIM change (a new mtime) is read, and a product the PIM lacks is held.
    _pim(pim, {"10001": "Cordless drill 18V", "10003": "DRILL BITS"})
    third = _sync(run_cli, config, code=1)
    assert third["joins"] == {"pim": "read"}
    assert third["updated"] == 1 and third["rejected"] == 1 and third["gone"] == 0
    assert _by_sku(sandbox)["10001"]["name"] == "Cordless drill 18V"
    (problem,) = third["problems"]
    assert problem["key"] == "10002" and "no 'pim' record matches" in problem["reason"]
    assert _by_sku(sandbox)["10002"]["name"] == "JIGSAW", "held as it was"


def test_a_duplicate_join_key_is_reported_once_and_the_first_record_wins(
    sandbox: Sandbox, tmp_path: Path, run_cli: Run
) -> None:
    _erp(tmp_path / "erp.csv", [("10001", "10,00", "1")])
    (tmp_path / "pim.jsonl").write_text(
        json.dumps({"sku": "10001", "name": "First"})
        + "\n"
        + json.dumps({"sku": "10001", "name": "Second"})
        + "\n",
        encoding="utf-8",
    )
    summary = _sync(run_cli, _config(tmp_path, sandbox.url, ERP_PIM))
    assert _by_sku(sandbox)["10001"]["name"] == "First"
    notes = [n for n in summary["notes"] if "repeat a key" in n]
    assert notes == [
        "join 'pim': 1 record(s) repeat a key (e.g. '10001' on lines 1 and 2); "
        "the first record of a key wins"
    ]


# --- WooCommerce WXR: products and variations among attachments, filtered by where ---------


def _wxr_item(post_id: int, post_type: str, title: str, meta: dict[str, str], **extra: str) -> str:
    metas = "".join(
        f"<wp:postmeta><wp:meta_key><![CDATA[{k}]]></wp:meta_key>"
        f"<wp:meta_value><![CDATA[{v}]]></wp:meta_value></wp:postmeta>"
        for k, v in meta.items()
    )
    status = extra.get("status", "publish")
    return (
        f"<item><title><![CDATA[{title}]]></title><wp:post_id>{post_id}</wp:post_id>"
        f"<wp:status><![CDATA[{status}]]></wp:status>"
        f"<wp:post_parent>{extra.get('parent', '0')}</wp:post_parent>"
        f"<wp:post_type><![CDATA[{post_type}]]></wp:post_type>{metas}</item>\n"
    )


VARIATION = "product_variation"


def _wxr(items: str) -> str:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<rss version="2.0" xmlns:wp="http://wordpress.org/export/1.2/" '
        'xmlns:content="http://purl.org/rss/1.0/modules/content/">\n'
        f"<channel><title>Shop</title><wp:wxr_version>1.2</wp:wxr_version>\n{items}"
        "</channel></rss>\n"
    )


def test_a_woocommerce_wxr_export_filtered_to_products_and_variations_exits_0(
    sandbox: Sandbox, tmp_path: Path, run_cli: Run
) -> None:
    items = [
        _wxr_item(10, "product", "Hoodie", {"_sku": "HD", "_regular_price": "45"}),
        _wxr_item(11, VARIATION, "Hoodie - Red", {"_sku": "HD-R", "_regular_price": "45"},
                  parent="10"),
        _wxr_item(12, VARIATION, "Hoodie - Blue", {"_sku": "HD-B", "_regular_price": "47"},
                  parent="10"),
        *[_wxr_item(100 + n, "attachment", f"hoodie-{n}.jpg", {"_wp_attached_file": "x.jpg"})
          for n in range(22)],
        _wxr_item(20, "product", "Beanie", {"_sku": "BN", "_regular_price": "18"}),
        _wxr_item(30, "page", "About us", {}),
    ]  # fmt: skip
    wxr = tmp_path / "export.xml"
    wxr.write_text(_wxr("".join(items)), encoding="utf-8")
    body = """
[source]
type = "xml"
path = "export.xml"
record = "item"
where = "(post_type == 'product' || post_type == 'product_variation') && status == 'publish'"

[gone]
action = "patch"
patch = { status = "archived" }

[safety]
max_gone_ratio = 1

[mapping]
key = "sku"
[mapping.fields]
sku = { path = "postmeta[?meta_key=='_sku'].meta_value | [0]" }
name = { column = "title", required = true }
price = { path = "postmeta[?meta_key=='_regular_price'].meta_value | [0]", type = "decimal" }
"""
    config = _config(tmp_path, sandbox.url, body)

    first = _sync(run_cli, config)

    assert first["created"] == 4 and first["rejected"] == 0
    assert first["skipped"] == 23, "22 attachments and a page: skipped, not rejected"
    assert set(_by_sku(sandbox)) == {"HD", "HD-R", "HD-B", "BN"}

    # The beanie is made a draft: filtered out, it is treated like a product that left.
    items[-2] = _wxr_item(20, "product", "Beanie", {"_sku": "BN"}, status="draft")
    wxr.write_text(_wxr("".join(items)), encoding="utf-8")
    second = _sync(run_cli, config)
    assert second["archived"] == 1 and second["skipped"] == 24 and second["rejected"] == 0
    assert _by_sku(sandbox)["BN"]["status"] == "archived"


# --- checks: GTIN, pattern and Excel-mangled values rejected, their products held ----------


def test_gtin_pattern_and_spreadsheet_mangled_values_are_rejected_and_held(
    sandbox: Sandbox, tmp_path: Path, run_cli: Run
) -> None:
    header = ["SKU", "Name", "EAN", "Code", "Price"]
    good = [
        ["A1", "Drill", "4006381333931", "DR-100", "10.00"],
        ["A2", "Saw", "0850064060010", "SW-200", "20.00"],
        ["A3", "Hammer", "96385074", "HM-300", "30.00"],
        ["A4", "Level", "0036000291452", "LV-400", "40.00"],
    ]
    catalog = tmp_path / "catalog.csv"
    _write_csv(catalog, header, good)
    body = """
[source]
type = "csv"
path = "catalog.csv"

[mapping]
key = "sku"
[mapping.fields]
sku = "SKU"
name = "Name"
ean = { column = "EAN", check = "gtin" }
code = { column = "Code", pattern = "[A-Z]{2}-[0-9]{3}" }
price = { column = "Price", type = "decimal", min = 0 }
"""
    config = _config(tmp_path, sandbox.url, body)
    assert _sync(run_cli, config)["created"] == 4
    bad = [
        ["A1", "Drill", "4006381333932", "DR-100", "11.00"],  # wrong check digit
        ["A2", "Saw", "8.50064E+11", "SW-200", "21.00"],  # Excel lost the digits
        ["A3", "Hammer", "96385074", "hm300", "31.00"],  # not the pattern
        ["A4", "Level", "0036000291452", "LV-400", "41.00"],  # good: updated
    ]
    _write_csv(catalog, header, bad)

    summary = _sync(run_cli, config, code=1)

    assert summary["rejected"] == 3 and summary["updated"] == 1 and summary["gone"] == 0
    reasons = {p["key"]: p["reason"] for p in summary["problems"]}
    assert reasons == {
        "A1": "catalog.csv line 2, column 'EAN': '4006381333932' is not a GTIN (wrong check digit)",
        "A2": "catalog.csv line 3, column 'EAN': '8.50064E+11' looks like a long number in "
        "scientific notation: the digits were lost in a spreadsheet",
        "A3": "catalog.csv line 4, column 'Code': 'hm300' does not match '[A-Z]{2}-[0-9]{3}'",
    }
    remote = _by_sku(sandbox)
    assert [remote[k]["price"] for k in ("A1", "A2", "A3")] == [
        Decimal("10.00"),
        Decimal("20.00"),
        Decimal("30.00"),
    ], "held: the remote keeps the last good data"
    assert remote["A4"]["price"] == Decimal("41.00")
    status = run_cli("status", "--config", str(config))
    assert "not a GTIN" in status.stdout
