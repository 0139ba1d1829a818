"""Exports shaped like the real ones (``shared/real-formats.md``), our own data, for ``init``.

Each ``Export`` writes its file(s) into a folder and knows what a first sync of the
config ``init --yes`` proposes must put on the CMS: every valid product with the right
values (``expected``, the payloads by key) and nothing for the rows that are truly bad
(``refused``: their keys, or lines for rows without one).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from skuferry.sandbox.catalog_files import bmecat, bmecat_article, write_xlsx
from skuferry.sync.map.checks import gtin_valid


def gtin(body: str) -> str:
    """``body`` (7, 11, 12 or 13 digits) with its GTIN check digit appended."""
    for digit in "0123456789":
        if gtin_valid(body + digit):
            return body + digit
    raise AssertionError(body)  # pragma: no cover


def wrong_check(code: str) -> str:
    return code[:-1] + str((int(code[-1]) + 1) % 10)


@dataclass
class Export:
    """One export: how to write it, and what the CMS must hold after the first sync."""

    name: str
    write: Callable[[Path], Path]  # -> what --from names
    expected: dict[str, dict[str, Any]]
    refused: set[str] = field(default_factory=set)  # keys (or "line N") of the bad rows


def _csv_text(rows: list[list[str]], *, delimiter: str, newline: str = "\n") -> str:
    out = io.StringIO()
    csv.writer(out, delimiter=delimiter, lineterminator=newline).writerows(rows)
    return out.getvalue()


# --- a German ERP: ';', a BOM, CRLF, 1.234,50, leading-zero keys ----------------------

_DE_GROUPS = ("Elektrowerkzeuge", "Handwerkzeuge", "Messwerkzeuge", "Zubehör")
_DE_MAKERS = ("Werkzeugbau Muster GmbH", "Präzision & Söhne", "Bohrwerk Nord")


def _german_rows() -> tuple[list[list[str]], dict[str, dict[str, Any]], set[str]]:
    header = [
        "Artikelnummer", "Bezeichnung", "Langtext", "VK-Preis", "EK-Preis", "Bestand",
        "EAN", "Hersteller", "Warengruppe", "Gewicht", "Lagerort", "Geändert am",
    ]  # fmt: skip
    rows = [header]
    expected: dict[str, dict[str, Any]] = {}
    for i in range(1, 31):
        key = f"{i * 37:06d}"
        cents = 1990 + i * 123457 % 250000
        price = f"{cents // 100:,}".replace(",", ".") + f",{cents % 100:02d}"
        stock = (i * 97) % 2400
        stock_text = f"{stock:,}".replace(",", ".")
        ean = gtin(f"400638{i:06d}")
        weight = f"{i % 7},{(i * 13) % 100:02d}"
        name = f"Akku-Schrauber {i} V" if i % 3 else f'Bit-Satz "Profi" {i}-tlg.'
        text = f"Mit Koffer; {i} Bits\r\n2 Akkus" if i % 5 == 0 else f"Robust, {i} Stufen"
        rows.append([
            key, name, text, price, "9,99", stock_text, ean, _DE_MAKERS[i % 3],
            _DE_GROUPS[i % 4], weight, f"R{i % 4}-{i:02d}", f"{i % 28 + 1:02d}.11.2026 04:13",
        ])  # fmt: skip
        expected[key] = {
            "sku": key,
            "name": name,
            "description": text,
            "price": Decimal(str(cents / 100)).quantize(Decimal("0.01")),
            "stock": stock,
            "ean": ean,
            "brand": _DE_MAKERS[i % 3],
            "category": _DE_GROUPS[i % 4],
            "weight": Decimal(weight.replace(",", ".")),
        }
    # two truly bad rows: an EAN whose check digit is wrong, a price that is no number
    bad_ean = wrong_check(gtin("400638999991"))
    rows.append(["009991", "Defekt EAN", "", "5,00", "1,00", "3", bad_ean,
                 _DE_MAKERS[0], _DE_GROUPS[0], "0,10", "R0-99", "01.11.2026 04:13"])  # fmt: skip
    rows.append(["009992", "Preis fehlt", "", "a. A.", "1,00", "3", gtin("400638999992"),
                 _DE_MAKERS[0], _DE_GROUPS[0], "0,10", "R0-99", "01.11.2026 04:13"])  # fmt: skip
    return rows, expected, {"009991", "009992"}


def write_german(folder: Path) -> Path:
    rows, _, _ = _german_rows()
    path = folder / "Artikel.csv"
    path.write_bytes(b"\xef\xbb\xbf" + _csv_text(rows, delimiter=";", newline="\r\n").encode())
    return path


def german() -> Export:
    _, expected, refused = _german_rows()
    return Export("german-erp-csv", write_german, expected, refused)


def write_german_gz(folder: Path) -> Path:
    plain = write_german(folder)
    path = folder / "Artikel.csv.gz"
    path.write_bytes(gzip.compress(plain.read_bytes()))
    plain.unlink()
    return path


def german_gz() -> Export:
    _, expected, refused = _german_rows()
    return Export("german-erp-csv-gz", write_german_gz, expected, refused)


# --- a French export: ';', 12,50, cp1252, no-break spaces in thousands --------------------


def _french_rows() -> tuple[list[list[str]], dict[str, dict[str, Any]]]:
    header = ["Référence", "Désignation", "Prix TTC", "Quantité", "Code EAN", "Marque",
              "Catégorie", "Poids (kg)", "Date de mise à jour"]  # fmt: skip
    rows = [header]
    expected = {}
    for i in range(1, 26):
        ref = f"FR-{i:04d}"
        cents = 1250 + i * 98765 % 180000
        euros = f"{cents // 100:,}".replace(",", "\u00a0")
        price = f"{euros},{cents % 100:02d}"
        name = f"Théière émaillée n°{i}" if i % 2 else f"Crêpière {i} cm"
        ean = gtin(f"376000{i:06d}")
        rows.append([ref, name, price, str(i * 3), ean, "Maison Dupré", "Cuisine",
                     f"0,{i:02d}5", f"2026-11-{i % 28 + 1:02d} 10:{i:02d}:00"])  # fmt: skip
        expected[ref] = {
            "sku": ref,
            "name": name,
            "price": Decimal(cents) / 100,
            "stock": i * 3,
            "ean": ean,
            "brand": "Maison Dupré",
            "category": "Cuisine",
            "weight": Decimal(f"0.{i:02d}5"),
        }
    return rows, expected


def write_french(folder: Path) -> Path:
    rows, _ = _french_rows()
    path = folder / "articles.csv"
    path.write_bytes(_csv_text(rows, delimiter=";", newline="\r\n").encode("cp1252"))
    return path


def french() -> Export:
    _, expected = _french_rows()
    return Export("french-csv-cp1252", write_french, expected)


# --- WooCommerce: variable products and their variations -----------------------------------

_WOO_HEADER = [
    "ID", "Type", "SKU", "Name", "Published", "Is featured?", "Visibility in catalog",
    "Short description", "Description", "Tax status", "In stock?", "Stock",
    "Backorders allowed?", "Weight (kg)", "Sale price", "Regular price", "Categories",
    "Tags", "Images", "Parent", "Position", "Attribute 1 name", "Attribute 1 value(s)",
]  # fmt: skip


def _woo_rows() -> tuple[list[list[str]], dict[str, dict[str, Any]]]:
    rows = [_WOO_HEADER]
    expected: dict[str, dict[str, Any]] = {}
    ident = 200
    for p in range(1, 6):
        ident += 1
        parent_id = ident
        sku = f"HOODIE-{p:02d}"
        name = f"Hoodie {p}"
        description = f"<p>Warm hoodie {p}.</p>\n<p>Brushed inside &amp; out.</p>"
        rows.append([str(parent_id), "variable", sku, name, "1", "0", "visible", "Cosy.",
                     description, "taxable", "1", "", "0", "0.5", "", "",
                     "Clothing > Hoodies", "warm", "", "", "0", "Size", "S, M, L"])  # fmt: skip
        expected[sku] = {
            "sku": sku, "name": name, "type": "variable", "parent": None,
            "description": description, "short_description": "Cosy.", "price": None,
            "sale_price": None, "stock": None, "categories": "Clothing > Hoodies",
        }  # fmt: skip
        for n, size in enumerate(("S", "M", "L"), start=1):
            ident += 1
            vsku = f"{sku}-{size}"
            vname = f"{name} - {size}"
            sale = "39.00" if size == "L" else ""
            rows.append([str(ident), "variation", vsku, vname, "1", "0", "visible", "", "",
                         "taxable", "1", str(p * n), "0", "", sale, f"{44 + p}.90", "", "", "",
                         f"id:{parent_id}", str(n), "Size", size])  # fmt: skip
            expected[vsku] = {
                "sku": vsku, "name": vname, "type": "variation", "parent": f"id:{parent_id}",
                "description": None, "short_description": None,
                "price": Decimal(f"{44 + p}.90"), "sale_price": Decimal(sale) if sale else None,
                "stock": p * n, "categories": None,
            }  # fmt: skip
    ident += 1
    rows.append([str(ident), "simple", "MUG-01", "Enamel mug", "1", "0", "visible", "",
                 "<p>A mug.</p>", "taxable", "1", "40", "0", "0.3", "", "12.50",
                 "Kitchen", "", "", "", "0", "", ""])  # fmt: skip
    expected["MUG-01"] = {
        "sku": "MUG-01", "name": "Enamel mug", "type": "simple", "parent": None,
        "description": "<p>A mug.</p>", "short_description": None,
        "price": Decimal("12.50"), "sale_price": None, "stock": 40, "categories": "Kitchen",
    }  # fmt: skip
    return rows, expected


def write_woocommerce(folder: Path) -> Path:
    rows, _ = _woo_rows()
    path = folder / "wc-product-export-28-11-2026.csv"
    path.write_bytes(b"\xef\xbb\xbf" + _csv_text(rows, delimiter=",").encode())
    return path


def woocommerce() -> Export:
    _, expected = _woo_rows()
    return Export("woocommerce-csv", write_woocommerce, _present(expected))


# --- Shopify: variants under one handle, image-only rows, Excel's apostrophe -----------------

_SHOPIFY_HEADER = [
    "Handle", "Title", "Body (HTML)", "Vendor", "Product Category", "Type", "Tags",
    "Published", "Option1 Name", "Option1 Value", "Variant SKU", "Variant Grams",
    "Variant Inventory Qty", "Variant Price", "Variant Compare At Price", "Variant Barcode",
    "Image Src", "Image Position", "Status",
]  # fmt: skip


def _shopify_rows() -> tuple[list[list[str]], dict[str, dict[str, Any]]]:
    rows = [_SHOPIFY_HEADER]
    expected: dict[str, dict[str, Any]] = {}
    for p in range(1, 5):
        handle = f"wool-scarf-{p}"
        title = f"Wool scarf {p}"
        body = f"<p>Merino, {p * 10} cm wide.</p>"
        for n, colour in enumerate(("Grey", "Navy", "Rust"), start=1):
            first = n == 1
            sku = f"WS-{p:02d}-{colour[:3].upper()}"
            barcode = gtin(f"0850064{p:02d}{n:02d}0")[-12:] if p % 2 else gtin(f"04012345{p}{n}00")
            barcode = barcode if gtin_valid(barcode) else gtin(barcode[:-1])
            price = f"{29 + p}.{n}0"
            compare = "49.00" if first else ""
            rows.append([
                handle, title if first else "", body if first else "",
                "Fernweh" if first else "", "", "", "", "true" if first else "",
                "Colour" if first else "", colour, sku, "120", str(p + n), price, compare,
                "'" + barcode, f"https://cdn.example.test/{handle}-{n}.jpg", str(n),
                "active" if first else "",
            ])  # fmt: skip
            expected[sku] = {
                "sku": sku, "name": title, "handle": handle, "option": colour,
                "description": body, "vendor": "Fernweh", "price": Decimal(price),
                "compare_at_price": Decimal(compare) if compare else None,
                "barcode": barcode, "stock": p + n,
            }  # fmt: skip
        rows.append([handle] + [""] * 15 + [f"https://cdn.example.test/{handle}-x.jpg", "4", ""])
    return rows, expected


def write_shopify(folder: Path) -> Path:
    rows, _ = _shopify_rows()
    path = folder / "products_export_1.csv"
    path.write_text(_csv_text(rows, delimiter=","), encoding="utf-8")
    return path


def shopify() -> Export:
    _, expected = _shopify_rows()
    return Export("shopify-csv", write_shopify, _present(expected))


# --- Magento 2: catalog_product.csv, multi-line descriptions, a store view's rows ------------

_MAGENTO_HEADER = [
    "sku", "store_view_code", "attribute_set_code", "product_type", "categories",
    "product_websites", "name", "description", "short_description", "weight",
    "product_online", "tax_class_name", "visibility", "price", "special_price", "url_key",
    "qty", "is_in_stock", "additional_attributes", "configurable_variations",
]  # fmt: skip


def _magento_rows() -> tuple[list[list[str]], dict[str, dict[str, Any]]]:
    rows = [_MAGENTO_HEADER]
    expected: dict[str, dict[str, Any]] = {}
    for p in range(1, 4):
        simples = [f"TEA-{p}-{c}" for c in ("RED", "BLU")]
        for sku, colour in zip(simples, ("Red", "Blue"), strict=True):
            desc = f"<p>Teapot {p}, {colour.lower()}.</p>\n<p>Cast iron.</p>"
            rows.append([sku, "", "Default", "simple", "Default Category/Kitchen", "base",
                         f"Teapot {p} - {colour}", desc, "", f"{p}.2000", "1", "Taxable Goods",
                         "Not Visible Individually", f"{30 + p}.0000", "", sku.lower(),
                         "25.0000", "1", f"color={colour}", ""])  # fmt: skip
            expected[sku] = {
                "sku": sku, "name": f"Teapot {p} - {colour}", "type": "simple",
                "description": desc, "short_description": None,
                "price": Decimal(f"{30 + p}.0000"), "weight": Decimal(f"{p}.2000"),
                "online": True, "categories": "Default Category/Kitchen",
                "variations": None, "attributes": f"color={colour}",
            }  # fmt: skip
        variations = "|".join(
            f"sku={s},color={c}" for s, c in zip(simples, ("Red", "Blue"), strict=True)
        )
        parent = f"TEA-{p}"
        rows.append([parent, "", "Default", "configurable", "Default Category/Kitchen", "base",
                     f"Teapot {p}", f"<p>Teapot {p}.</p>", "Cast iron", "", "1", "Taxable Goods",
                     "Catalog, Search", f"{30 + p}.0000", "", parent.lower(), "0.0000", "1", "",
                     variations])  # fmt: skip
        expected[parent] = {
            "sku": parent, "name": f"Teapot {p}", "type": "configurable",
            "description": f"<p>Teapot {p}.</p>", "short_description": "Cast iron",
            "price": Decimal(f"{30 + p}.0000"), "weight": None, "online": True,
            "categories": "Default Category/Kitchen", "variations": variations, "attributes": None,
        }  # fmt: skip
        # the German store view repeats the sku with a translated name
        rows.append([parent, "de", "Default", "configurable", "", "", f"Teekanne {p}", "", "", "",
                     "", "", "", "", "", "", "", "", "", ""])  # fmt: skip
    return rows, expected


def write_magento(folder: Path) -> Path:
    rows, _ = _magento_rows()
    path = folder / "catalog_product.csv"
    path.write_text(_csv_text(rows, delimiter=","), encoding="utf-8")
    return path


def magento() -> Export:
    _, expected = _magento_rows()
    return Export("magento-csv", write_magento, _present(expected))


# --- an XLSX a buyer keeps: instructions first, a title row above the header --------------


def _xlsx_rows() -> tuple[list[list[Any]], dict[str, dict[str, Any]]]:
    rows: list[list[Any]] = [["Artikelliste Sommer 2026, Stand 28.11.2026"], []]
    rows.append(["Art.-Nr.", "Artikelbezeichnung", "Preis", "Menge", "EAN", "Marke", "Bemerkung"])
    expected = {}
    for i in range(1, 21):
        key = f"{i:05d}"
        price = round(4.5 + i * 1.35, 2)
        ean = gtin(f"429000{i:06d}")
        rows.append([key, f"Gartenschere Modell {i}", price, i * 4, ean, "Grünzeug",
                     "" if i % 4 else "Auslaufartikel"])  # fmt: skip
        expected[key] = {
            "sku": key,
            "name": f"Gartenschere Modell {i}",
            "price": Decimal(repr(price)),
            "stock": i * 4,
            "ean": ean,
            "brand": "Grünzeug",
        }
    return rows, expected


def write_xlsx_export(folder: Path) -> Path:
    rows, _ = _xlsx_rows()
    instructions = [["So pflegen Sie diese Liste"], ["1. Nur Spalten B bis F ändern"]]
    path = folder / "Sortiment.xlsx"
    write_xlsx(path, {"Anleitung": instructions, "Artikel": rows})
    return path


def xlsx() -> Export:
    _, expected = _xlsx_rows()
    return Export("xlsx-title-row", write_xlsx_export, expected)


# --- a JSON Lines feed, Google Merchant-style -------------------------------------------------


def _jsonl_records() -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    records = []
    expected = {}
    for i in range(1, 21):
        offer = f"offer-{i:03d}"
        record: dict[str, Any] = {
            "offerId": offer,
            "title": f"Trail runner {i}",
            "description": f"Light trail shoe, drop {i % 8} mm.",
            "brand": "Fernweh",
            "gtin": gtin(f"401234{i:06d}"),
            "priceInfo": {"price": f"{89 + i}.95", "currency": "EUR"},
            "imageLink": f"https://cdn.example.test/run-{i}.jpg",
            "attributes": [{"name": "colour", "value": "teal"}],
        }
        if i % 3:
            record["productTypes"] = ["Shoes > Trail"]
        records.append(record)
        expected[offer] = {
            "sku": offer,
            "name": record["title"],
            "description": record["description"],
            "price": Decimal(f"{89 + i}.95"),
            "ean": record["gtin"],
            "brand": "Fernweh",
            "image_url": record["imageLink"],
        }
    return records, expected


def write_jsonl(folder: Path) -> Path:
    records, _ = _jsonl_records()
    path = folder / "feed.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), "utf-8")
    return path


def jsonl() -> Export:
    _, expected = _jsonl_records()
    return Export("jsonl-feed", write_jsonl, expected)


# --- BMEcat 1.2 -------------------------------------------------------------------------------


def _bmecat_articles() -> tuple[list[str], dict[str, dict[str, Any]], set[str]]:
    articles = []
    expected = {}
    for i in range(1, 16):
        aid = f"0{i:05d}"
        ean = gtin(f"400638{i + 500:06d}")
        price = f"{i * 3}.{i:02d}"
        articles.append(
            bmecat_article(aid, f"Spiralbohrer HSS {i} mm", ean=ean, price=price,
                           features=[("Durchmesser", f"{i} mm")], long=f"DIN 338, {i} mm")
        )  # fmt: skip
        expected[aid] = {
            "sku": aid,
            "name": f"Spiralbohrer HSS {i} mm",
            "description": f"DIN 338, {i} mm",
            "ean": ean,
            "brand": "Werkzeugbau Muster GmbH",
            "price": Decimal(price),
        }
    bad = gtin("400638000999")
    articles.append(bmecat_article("099999", "Falsche EAN", ean=wrong_check(bad), price="1.00"))
    return articles, expected, {"099999"}


def write_bmecat(folder: Path) -> Path:
    articles, _, _ = _bmecat_articles()
    path = folder / "katalog_bmecat.xml"
    path.write_text(bmecat(articles), encoding="utf-8")
    return path


def bmecat_export() -> Export:
    _, expected, refused = _bmecat_articles()
    return Export("bmecat-xml", write_bmecat, expected, refused)


def _present(expected: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The payloads without the fields a mapping leaves out when empty (None: not sent)."""
    return {k: {f: v for f, v in p.items() if v is not None} for k, p in expected.items()}


FILE_EXPORTS: tuple[Callable[[], Export], ...] = (
    german,
    german_gz,
    french,
    woocommerce,
    shopify,
    magento,
    xlsx,
    jsonl,
    bmecat_export,
)
