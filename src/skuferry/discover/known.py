"""The exports and APIs the presets know, recognised by their columns, and their mappings.

Each ``Known`` is one system's export (a Shopify, WooCommerce, Magento, PrestaShop or
Akeneo CSV, a BMEcat file) or API answer (the ``[source] preset`` systems: Akeneo,
Shopify, Business Central, Odoo, WooCommerce, Magento): the columns that give it away,
and the mapping its worked example uses (``examples/*.toml``,
``examples/connectors/*.toml``; a test holds them equal, so the example a user reads
is the proposal ``init`` makes). A field whose column the sample lacks is left out.

What only the records can tell is worked out from them (``refine``): the locale and
currency of Akeneo's values, the price type of a BMEcat file, the store views of a
Magento export. Pure: no I/O.
"""

from __future__ import annotations

import fnmatch
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Fields = tuple[tuple[str, dict[str, Any], str], ...]  # (target, spec, comment)
Refine = Callable[[Sequence[dict[str, Any]]], tuple[dict[str, dict[str, Any]], list[str]]]


@dataclass(frozen=True)
class Known:
    """One system's export or API answer, and the mapping proposed for it."""

    name: str  # the preset's name, or the format's (bmecat)
    title: str  # "a Shopify products export"
    types: tuple[str, ...]  # the source types it comes as
    needs: tuple[str, ...]  # top-level columns that must all be there
    fields: Fields
    key: str = "sku"
    mapping: Mapping[str, Any] = field(default_factory=dict)  # group_by, inherit
    source: Mapping[str, Any] = field(default_factory=dict)  # skip_if_empty, record
    doc: str = ""  # where the user reads more
    notes: tuple[str, ...] = ()
    refine: Refine | None = None  # specs and notes only the records tell

    def matches(self, source_type: str, names: set[str], record: str | None = None) -> bool:
        if source_type not in self.types:
            return False
        if "record" in self.source and self.source["record"] != record:
            return False
        return all(any(fnmatch.fnmatchcase(n, need) for n in names) for need in self.needs)

    def proposal(
        self, names: Sequence[str], records: Sequence[dict[str, Any]]
    ) -> tuple[list[tuple[str, dict[str, Any], str]], list[str]]:
        """The fields whose columns the sample has (``column`` alternatives and globs
        resolved), refined by the records; and the notes."""
        present = list(names)
        refined, notes = self.refine(records) if self.refine is not None else ({}, [])
        out = []
        for target, given, comment in self.fields:
            spec = dict(refined.get(target, given))
            column = spec.get("column")
            if isinstance(column, tuple):  # alternatives or globs: the first present
                found = next(
                    (n for pattern in column for n in present if fnmatch.fnmatchcase(n, pattern)),
                    None,
                )
                if found is None:
                    continue
                spec["column"] = found
            elif isinstance(column, str) and column not in present:
                continue
            reads = spec.pop("reads", None)
            if reads is not None and reads not in present:
                continue
            out.append((target, spec, comment))
        return out, [*self.notes, *notes]


def _first_seen(
    records: Sequence[dict[str, Any]], get: Callable[[dict[str, Any]], Any]
) -> list[Any]:
    seen: Counter[Any] = Counter()
    for record in records:
        for value in get(record) or ():
            if value is not None:
                seen[value] += 1
    return [v for v, _ in seen.most_common()]


def _akeneo(records: Sequence[dict[str, Any]]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    def locales(record: dict[str, Any]) -> list[Any]:
        names = (record.get("values") or {}).get("name") or []
        return [v.get("locale") for v in names if isinstance(v, dict)]

    def currencies(record: dict[str, Any]) -> list[Any]:
        prices = (record.get("values") or {}).get("price") or []
        first = prices[0].get("data") if prices and isinstance(prices[0], dict) else None
        return [p.get("currency") for p in first or [] if isinstance(p, dict)]

    specs: dict[str, dict[str, Any]] = {}
    notes = []
    seen = _first_seen(records, locales)
    if seen:
        locale = seen[0]
        path = f"values.name[?locale=='{locale}'].data | [0]"
        specs["name"] = {"path": path, "required": True, "reads": "values"}
        if len(seen) > 1:
            others = ", ".join(seen[1:4])
            notes.append(f"names in {locale} (also in {others}): change the locale in name's path")
    money = _first_seen(records, currencies)
    if money:
        currency = money[0]
        path = f"values.price[0].data[?currency=='{currency}'].amount | [0]"
        specs["price"] = {"path": path, "type": "decimal", "reads": "values"}
        if len(money) > 1:
            notes.append(
                f"prices in {currency} (also {', '.join(money[1:4])}): change price's path"
            )
    return specs, notes


def _bmecat(version: str) -> Refine:
    price_block, price = (
        ("ARTICLE_PRICE_DETAILS", "ARTICLE_PRICE")
        if version == "1.2"
        else ("PRODUCT_PRICE_DETAILS", "PRODUCT_PRICE")
    )

    def types(record: dict[str, Any]) -> list[Any]:
        block = record.get(price_block)
        blocks = block if isinstance(block, list) else [block]
        found = []
        for b in blocks:
            prices = b.get(price) if isinstance(b, dict) else None
            for p in prices if isinstance(prices, list) else [prices]:
                if isinstance(p, dict):
                    found.append(p.get("@price_type"))
        return found

    def refine(records: Sequence[dict[str, Any]]) -> tuple[dict[str, dict[str, Any]], list[str]]:
        seen = _first_seen(records, types)
        if not seen:
            return {}, []
        preferred = ("net_list", "gros_list", "net_customer", "nrp")
        kind = next((p for p in preferred if p in seen), seen[0])
        path = f"[{price_block}][].{price}[] | [?\"@price_type\"=='{kind}'] | [0].PRICE_AMOUNT"
        others = ", ".join(repr(s) for s in seen if s != kind) or "no other"
        notes = [f"the price is the {kind!r} price (the file also has {others})"]
        return {"price": {"path": path, "type": "decimal", "reads": price_block}}, notes

    return refine


_GTIN = {"check": "gtin"}
_SHOPIFY_BARCODE = "strip_prefix(\"Variant Barcode\", '\\'')"
_BMECAT_GTIN = '[PRODUCT_DETAILS.INTERNATIONAL_PID][] | [?"@type"==\'gtin\'] | [0]."#text"'

KNOWN: tuple[Known, ...] = (
    Known(
        "shopify",
        "a Shopify products export (CSV)",
        ("csv",),
        ("Handle", "Title", "Variant SKU"),
        (
            ("sku", {"column": "Variant SKU"}, "one product per variant"),
            ("name", {"column": "Title", "required": True}, "the product's title, on each variant"),
            ("handle", {"column": "Handle"}, "what a product's variants share"),
            ("option", {"column": "Option1 Value"}, "e.g. the size"),
            ("description", {"column": "Body (HTML)"}, "HTML passes through untouched"),
            ("vendor", {"column": "Vendor"}, ""),
            ("price", {"column": "Variant Price", "type": "decimal", "min": 0}, ""),
            ("compare_at_price", {"column": "Variant Compare At Price", "type": "decimal"}, ""),
            (
                "barcode",
                {"path": _SHOPIFY_BARCODE, **_GTIN, "reads": "Variant Barcode"},
                "text: leading zeros stay; Excel's apostrophe is stripped",
            ),
            ("stock", {"column": "Variant Inventory Qty", "type": "integer"}, ""),
        ),
        mapping={
            "group_by": "Handle",
            "inherit": ["Title", "Body (HTML)", "Vendor", "Option1 Name"],
        },
        source={"skip_if_empty": ["Variant SKU"]},
        doc="docs/presets/shopify.md",
        notes=(
            "variants: a product's rows share the Handle (group_by); its first row has the "
            "Title, the others take it from there (inherit)",
            "rows holding only an extra image (no Variant SKU) are skipped, not refused "
            "(skip_if_empty)",
        ),
    ),
    Known(
        "woocommerce",
        "a WooCommerce products export (CSV)",
        ("csv",),
        ("ID", "Type", "SKU", "Name", "Parent", "Regular price"),
        (
            ("sku", {"column": "SKU"}, ""),
            ("name", {"column": "Name", "required": True}, ""),
            ("type", {"column": "Type"}, "simple / variable / variation"),
            ("parent", {"column": "Parent"}, "a variation's variable product"),
            ("description", {"column": "Description"}, ""),
            ("short_description", {"column": "Short description"}, ""),
            ("price", {"column": "Regular price", "type": "decimal"}, ""),
            ("sale_price", {"column": "Sale price", "type": "decimal"}, ""),
            ("stock", {"column": "Stock", "type": "integer"}, ""),
            ("categories", {"column": "Categories"}, '"Clothing > Hoodies, Sale" as written'),
        ),
        doc="docs/presets/woocommerce.md",
        notes=(
            "variations: each variation row (Type variation, Parent id:NN or the parent's SKU) "
            "is a product of its own, beside its variable product",
        ),
    ),
    Known(
        "magento",
        "a Magento 2 catalog_product export (CSV)",
        ("csv",),
        ("sku", "store_view_code", "attribute_set_code", "product_type"),
        (
            ("sku", {"column": "sku"}, ""),
            ("name", {"column": "name", "required": True}, ""),
            ("type", {"column": "product_type"}, "simple / configurable / virtual ..."),
            ("description", {"column": "description"}, ""),
            ("short_description", {"column": "short_description"}, ""),
            ("price", {"column": "price", "type": "decimal"}, ""),
            ("weight", {"column": "weight", "type": "decimal"}, ""),
            ("online", {"column": "product_online", "type": "boolean"}, "1 / 0"),
            ("categories", {"column": "categories"}, ""),
            ("variations", {"column": "configurable_variations"}, "sku=..,size=..|.. as written"),
            ("attributes", {"column": "additional_attributes"}, ""),
        ),
        doc="docs/presets/magento.md",
        notes=(
            "variants: a configurable product lists its simple products in "
            "configurable_variations; each simple product is a row, and a product, of its own",
        ),
    ),
    Known(
        "prestashop",
        "a PrestaShop products export (CSV, back office)",
        ("csv",),
        ("ID", "Reference", "Name", "Quantity", "Status"),
        (
            ("sku", {"column": "Reference"}, ""),
            ("name", {"column": "Name", "required": True}, ""),
            ("category", {"column": ("Category", "Categories")}, ""),
            (
                "price",
                {"column": ("Price (tax excl.)", "Base price", "Price*"), "type": "decimal"},
                "",
            ),
            ("stock", {"column": "Quantity", "type": "integer"}, ""),
            ("status", {"column": "Status", "type": "boolean"}, "1 / 0"),
        ),
        doc="docs/presets/index.md",
    ),
    Known(
        "akeneo-csv",
        "an Akeneo products export (CSV)",
        ("csv",),
        ("sku", "categories", "enabled", "family"),
        (
            ("sku", {"column": "sku"}, ""),
            ("name", {"column": ("name-en_US", "name-*"), "required": True}, ""),
            ("description", {"column": ("description-en_US-ecommerce", "description-*")}, ""),
            ("price", {"column": ("price-EUR", "price-*"), "type": "decimal"}, ""),
            ("ean", {"column": "ean", **_GTIN}, ""),
            ("category", {"column": "categories"}, "codes, comma-separated"),
            ("active", {"column": "enabled", "type": "boolean"}, ""),
        ),
        doc="docs/connectors.md#akeneo",
    ),
    Known(
        "bmecat",
        "a BMEcat 1.2 catalog (XML)",
        ("xml",),
        ("SUPPLIER_AID",),
        (
            ("sku", {"column": "SUPPLIER_AID"}, "leading zeros stay"),
            (
                "name",
                {"path": "ARTICLE_DETAILS.DESCRIPTION_SHORT", "required": True,
                 "reads": "ARTICLE_DETAILS"},
                "",
            ),
            (
                "description",
                {"path": "ARTICLE_DETAILS.DESCRIPTION_LONG", "reads": "ARTICLE_DETAILS"},
                "",
            ),
            ("ean", {"path": "ARTICLE_DETAILS.EAN", **_GTIN, "reads": "ARTICLE_DETAILS"}, ""),
            (
                "brand",
                {"path": "ARTICLE_DETAILS.MANUFACTURER_NAME", "reads": "ARTICLE_DETAILS"},
                "",
            ),
            (
                "price",
                {"path": "ARTICLE_PRICE_DETAILS.ARTICLE_PRICE.PRICE_AMOUNT", "type": "decimal",
                 "reads": "ARTICLE_PRICE_DETAILS"},
                "",
            ),
        ),
        source={"record": "ARTICLE"},
        doc="docs/sources/xml.md",
        refine=_bmecat("1.2"),
    ),
    Known(
        "bmecat-2005",
        "a BMEcat 2005 catalog (XML)",
        ("xml",),
        ("SUPPLIER_PID",),
        (
            ("sku", {"column": "SUPPLIER_PID"}, "leading zeros stay"),
            (
                "name",
                {"path": "PRODUCT_DETAILS.DESCRIPTION_SHORT", "required": True,
                 "reads": "PRODUCT_DETAILS"},
                "",
            ),
            (
                "description",
                {"path": "PRODUCT_DETAILS.DESCRIPTION_LONG", "reads": "PRODUCT_DETAILS"},
                "",
            ),
            (
                "ean",
                {"path": _BMECAT_GTIN, **_GTIN, "reads": "PRODUCT_DETAILS"},
                "",
            ),
            (
                "brand",
                {"path": "PRODUCT_DETAILS.MANUFACTURER_NAME", "reads": "PRODUCT_DETAILS"},
                "",
            ),
        ),
        source={"record": "PRODUCT"},
        doc="docs/sources/xml.md",
        refine=_bmecat("2005"),
    ),
    # --- the APIs of [source] preset (examples/connectors/<name>.toml) ---
    Known(
        "akeneo",
        "Akeneo PIM's products (REST API)",
        ("http", "jsonl"),
        ("identifier", "values"),
        (
            ("sku", {"path": "identifier"}, ""),
            (
                "name",
                {"path": "values.name[?locale=='de_DE'].data | [0]", "required": True},
                "the name in the shop's locale; Akeneo keeps one value per locale",
            ),
            (
                "price",
                {"path": "values.price[0].data[?currency=='EUR'].amount | [0]", "type": "decimal"},
                "",
            ),
            ("stock", {"path": "values.stock[0].data", "type": "integer", "default": 0}, ""),
            ("ean", {"path": "values.ean[0].data"}, ""),
            ("active", {"path": "enabled", "type": "boolean"}, ""),
        ),
        doc="docs/connectors.md#akeneo",
        refine=_akeneo,
    ),
    Known(
        "shopify",
        "Shopify's product variants (GraphQL Admin API)",
        ("graphql", "jsonl"),
        ("sku", "inventoryQuantity", "product"),
        (
            ("sku", {"column": "sku"}, ""),
            ("name", {"path": "product.title", "required": True}, ""),
            ("price", {"column": "price", "type": "decimal"}, ""),
            ("stock", {"column": "inventoryQuantity", "type": "integer"}, ""),
            ("ean", {"column": "barcode"}, ""),
            ("status", {"path": "product.status"}, ""),
        ),
        doc="docs/connectors.md#shopify",
    ),
    Known(
        "business-central",
        "Business Central's items (API v2.0, OData)",
        ("http", "jsonl"),
        ("number", "displayName", "unitPrice"),
        (
            ("sku", {"column": "number"}, ""),
            ("name", {"column": "displayName", "required": True}, ""),
            ("price", {"column": "unitPrice", "type": "decimal"}, ""),
            ("stock", {"column": "inventory", "type": "integer"}, ""),
            ("ean", {"column": "gtin"}, ""),
            ("blocked", {"column": "blocked", "type": "boolean"}, ""),
        ),
        doc="docs/connectors.md#business-central",
    ),
    Known(
        "odoo",
        "Odoo's product.product records (JSON-2 API)",
        ("http", "jsonl"),
        ("default_code", "list_price"),
        (
            ("sku", {"column": "default_code"}, ""),
            ("name", {"column": "name", "required": True}, ""),
            ("price", {"column": "list_price", "type": "decimal"}, ""),
            ("stock", {"column": "qty_available", "type": "integer", "default": 0}, ""),
            ("ean", {"column": "barcode"}, ""),
            ("active", {"column": "active", "type": "boolean"}, ""),
        ),
        doc="docs/connectors.md#odoo",
    ),
    Known(
        "woocommerce",
        "WooCommerce's products (REST API v3)",
        ("http", "jsonl"),
        ("sku", "regular_price", "stock_quantity"),
        (
            ("sku", {"column": "sku"}, ""),
            ("name", {"column": "name", "required": True}, ""),
            ("price", {"column": "price", "type": "decimal"}, ""),
            ("stock", {"column": "stock_quantity", "type": "integer", "default": 0}, ""),
            ("ean", {"column": "global_unique_id"}, "GTIN, UPC, EAN or ISBN (WooCommerce 9.2+)"),
            ("status", {"column": "status"}, ""),
        ),
        doc="docs/connectors.md#woocommerce",
    ),
    Known(
        "magento",
        "Magento's products (REST API)",
        ("http", "jsonl"),
        ("sku", "attribute_set_id", "custom_attributes"),
        (
            ("sku", {"column": "sku"}, ""),
            ("name", {"column": "name", "required": True}, ""),
            ("price", {"column": "price", "type": "decimal"}, ""),
            (
                "stock",
                {"path": "extension_attributes.stock_item.qty", "type": "integer", "default": 0},
                "",
            ),
            ("ean", {"path": "custom_attributes[?attribute_code=='ean'].value | [0]"}, ""),
            ("status", {"column": "status", "type": "integer"}, ""),
        ),
        doc="docs/connectors.md#magento",
    ),
)  # fmt: skip

# The [source] preset systems whose API init can read, and the credential keys each
# example takes: secrets from the environment (never written), the rest from
# SKUFERRY_SOURCE__<KEY> or the prompt.
PRESET_CREDENTIALS: Mapping[str, Mapping[str, str]] = {
    "akeneo": {
        "client_id": "",
        "client_secret_env": "AKENEO_CLIENT_SECRET",
        "username": "",
        "password_env": "AKENEO_PASSWORD",
    },
    "shopify": {"token_env": "SHOPIFY_TOKEN"},
    "business-central": {"client_id": "", "client_secret_env": "BC_CLIENT_SECRET"},
    "odoo": {"token_env": "ODOO_API_KEY", "headers": ""},
    "woocommerce": {"username": "", "password_env": "WOO_SECRET"},
    "magento": {"token_env": "MAGENTO_TOKEN"},
}


def recognise(
    source_type: str, names: Sequence[str], *, record: str | None = None, preset: str | None = None
) -> Known | None:
    """The known export or API the sample's columns give away (``preset``: that one's API)."""
    have = set(names)
    for known in KNOWN:
        if preset is not None and known.name != preset:
            continue
        if known.matches(source_type, have, record):
            return known
    if preset is not None:  # the preset's API, whatever its answer looked like
        return next((k for k in KNOWN if k.name == preset and source_type in k.types), None)
    return None
