"""Float columns (SQL ``REAL``/``DOUBLE``) through the sql source and the mapping, on SQLite.

A Northwind-style products table, our own rows: the price is ``REAL``, the stock a
``REAL`` holding whole numbers, the id an integer, the EAN text with a leading zero.
Before, every row was rejected ("18.0 is not a decimal number").
"""

from __future__ import annotations

import sqlite3
from decimal import Decimal
from pathlib import Path

from skuferry import canonical
from skuferry.config.schema import FieldSpec, MappingSettings, SqlSourceSettings
from skuferry.models import Product
from skuferry.sources.dispatch import open_source
from skuferry.sync.map.mapper import Mapper, map_records

ROWS = [
    (1, "Chai", 18.0, 39.0, "04006381333931"),
    (2, "Chang", 19.0, 17.0, "04006381333948"),
    (3, "Aniseed Syrup", 10.0, 13.0, None),
    (4, "Chef's Seasoning", 21.35, 53.0, "079685"),
    (5, "Gumbo Mix", 21.350000381469727, 0.0, "079686"),  # a 32-bit 21.35, widened
    (6, "Grandma's Spread", 3.4986000000000002, 120.0, "079687"),
]

MAPPING = MappingSettings(
    key="sku",
    fields={
        "sku": "product_id",
        "name": "product_name",
        "price": FieldSpec(column="unit_price", type="decimal"),
        "stock": FieldSpec(column="units_in_stock", type="integer"),
        "ean": "ean",
    },
)


def northwind(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        conn.execute(
            "CREATE TABLE products (product_id INTEGER PRIMARY KEY, product_name TEXT, "
            "unit_price REAL, units_in_stock REAL, ean TEXT)"
        )
        conn.executemany("INSERT INTO products VALUES (?, ?, ?, ?, ?)", ROWS)
        conn.commit()
    finally:
        conn.close()
    return f"sqlite:///{path}"


def test_real_columns_map_to_exact_decimals_and_integers(tmp_path: Path) -> None:
    url = northwind(tmp_path / "northwind.db")
    source = open_source(SqlSourceSettings(type="sql", url=url, table="products"))
    results = list(map_records(source.records(), Mapper(MAPPING, source_name="northwind")))
    assert all(isinstance(r, Product) for r in results), results
    products = {r.key: r.payload for r in results if isinstance(r, Product)}
    assert list(products) == ["1", "2", "3", "4", "5", "6"]
    assert [str(p["price"]) for p in products.values()] == [
        "18.0", "19.0", "10.0", "21.35", "21.35", "3.4986",
    ]  # fmt: skip
    assert all(type(p["price"]) is Decimal for p in products.values())
    assert [p["stock"] for p in products.values()] == [39, 17, 13, 53, 0, 120]
    assert products["4"]["ean"] == "079685", "text keeps its leading zero"
    assert products["3"]["ean"] is None
    assert canonical.dumps(products["4"]) == (
        '{"ean":"079685","name":"Chef\'s Seasoning","price":21.35,"sku":"4","stock":53}'
    )


def test_a_fractional_stock_is_rejected_naming_row_and_column(tmp_path: Path) -> None:
    db = tmp_path / "northwind.db"
    url = northwind(db)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE products SET units_in_stock = 2.5 WHERE product_id = 2")
    conn.close()
    source = open_source(SqlSourceSettings(type="sql", url=url, query="SELECT * FROM products"))
    results = list(map_records(source.records(), Mapper(MAPPING, source_name="northwind")))
    rejected = [r for r in results if not isinstance(r, Product)]
    assert [(r.key, r.reason) for r in rejected] == [
        ("2", "northwind line 2, column 'units_in_stock': 2.5 is not an integer")
    ]
    assert len(results) == len(ROWS), "the other rows still map"
