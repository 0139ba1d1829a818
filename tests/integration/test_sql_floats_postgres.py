"""Float columns on a real PostgreSQL server: ``real`` (32-bit) and ``double precision``.

A Northwind-style table, our own rows; the values are floats when they reach the
mapping, which sends their shortest text. The server is the one
``test_postgres_source.py`` starts (skipped when PostgreSQL is not installed).
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from skuferry.config.schema import FieldSpec, MappingSettings
from skuferry.models import Product, RawRecord
from skuferry.sync.map.mapper import Mapper, map_records
from tests.integration.test_postgres_source import Postgres, postgres

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
__all__ = ["postgres"]  # the server fixture, shared with test_postgres_source.py

MAPPING = MappingSettings(
    key="sku",
    fields={
        "sku": "product_id",
        "price": FieldSpec(column="unit_price", type="decimal"),
        "list_price": FieldSpec(column="list_price", type="decimal"),
        "stock": FieldSpec(column="units_in_stock", type="integer"),
    },
)


def test_real_and_double_columns_map_to_their_shortest_decimals(postgres: Postgres) -> None:
    postgres.execute(
        "CREATE TABLE nw_products (product_id integer, unit_price real, "
        "list_price double precision, units_in_stock real)",
        "INSERT INTO nw_products VALUES (1, 18, 18, 39), (2, 21.35, 21.35, 17), "
        "(3, 0.1, 3.4986000000000002, 0), (4, 123456.79, 0.0345, 120)",
    )
    source = postgres.source(query="SELECT * FROM nw_products ORDER BY product_id")
    first = next(r for r in source.records() if isinstance(r, RawRecord))
    assert type(first.fields["unit_price"]) is float, "floats, not decimals, reach the mapping"
    results = list(map_records(source.records(), Mapper(MAPPING, source_name="nw")))
    assert all(isinstance(r, Product) for r in results), results
    rows = [(r.key, r.payload["price"], r.payload["list_price"], r.payload["stock"])
            for r in results if isinstance(r, Product)]  # fmt: skip
    assert rows == [
        ("1", Decimal("18.0"), Decimal("18.0"), 39),
        ("2", Decimal("21.35"), Decimal("21.35"), 17),
        ("3", Decimal("0.1"), Decimal("3.4986"), 0),
        ("4", Decimal("123456.79"), Decimal("0.0345"), 120),
    ]
    assert [str(row[1]) for row in rows] == ["18.0", "21.35", "0.1", "123456.79"]
