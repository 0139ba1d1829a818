"""The mapping's second language: JMESPath paths, constants, defaults, locale numbers, floats.

Fixtures are shaped like the real formats (real-formats.md): an Akeneo product with
``values`` per locale and scope and a multi-currency price, Google Merchant-style nested
JSON Lines, a German ERP export (``1.234,50``), floats from SQL ``REAL`` and XLSX cells.
"""

from __future__ import annotations

import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skuferry import canonical
from skuferry.config.load import settings_from_dict
from skuferry.config.schema import FieldSpec, JsonlSourceSettings, MappingSettings
from skuferry.errors import ConfigError
from skuferry.models import BadRecord, RawRecord
from skuferry.sources.dispatch import open_source
from skuferry.sync.expressions.numbers import float_text, shortest
from skuferry.sync.map.mapper import Mapper, map_records
from tests.unit.sync.map.test_mapping import _bad, _product


def _mapper(source_name: str = "catalog", **fields: str | FieldSpec) -> Mapper:
    return Mapper(MappingSettings(key="sku", fields=fields), source_name=source_name)


# -- Akeneo: values per locale and scope, prices per currency ----------------------------------


def akeneo_product(identifier: str, *, eur: str | None = "849.50") -> dict[str, Any]:
    """An Akeneo REST product (``_embedded.items[*]``), our own data."""
    prices = [{"amount": "899.00", "currency": "USD"}]
    if eur is not None:
        prices.append({"amount": eur, "currency": "EUR"})
    return {
        "identifier": identifier,
        "enabled": True,
        "family": "tools",
        "categories": ["anvils", "forge"],
        "parent": None,
        "values": {
            "name": [
                {"locale": "de_DE", "scope": None, "data": "Amboss"},
                {"locale": "en_US", "scope": None, "data": "Anvil"},
            ],
            "description": [
                {"locale": "en_US", "scope": "ecommerce", "data": "<p>Forged steel</p>"},
                {"locale": "en_US", "scope": "print", "data": "Forged steel."},
            ],
            "price": [{"locale": None, "scope": None, "data": prices}],
            "weight": [
                {"locale": None, "scope": None, "data": {"amount": "50.0000", "unit": "KILOGRAM"}}
            ],
        },
        "_links": {"self": {"href": f"https://pim.example/api/rest/v1/products/{identifier}"}},
    }


AKENEO = MappingSettings(
    key="sku",
    fields={
        "sku": FieldSpec(path="identifier"),
        "name": FieldSpec(path="values.name[0].data"),
        "name_en": FieldSpec(path="values.name[?locale=='en_US'].data | [0]", required=True),
        "description": FieldSpec(
            path="values.description[?locale=='en_US' && scope=='ecommerce'].data | [0]"
        ),
        "price": FieldSpec(
            path="values.price[0].data[?currency=='EUR'].amount | [0]", type="decimal"
        ),
        "weight_kg": FieldSpec(path="values.weight[0].data.amount", type="decimal"),
        "categories": FieldSpec(path="categories", type="json"),
        "active": FieldSpec(path="enabled", type="boolean"),
        "currency": FieldSpec(value="EUR"),
    },
)


def test_akeneo_values_are_reached_by_paths() -> None:
    product = _product(Mapper(AKENEO).map(RawRecord(1, akeneo_product("079685"))))
    assert product.key == "079685", "a leading-zero identifier stays text"
    assert product.payload == {
        "sku": "079685",
        "name": "Amboss",
        "name_en": "Anvil",
        "description": "<p>Forged steel</p>",
        "price": Decimal("849.50"),
        "weight_kg": Decimal("50.0000"),
        "categories": ["anvils", "forge"],
        "active": True,
        "currency": "EUR",
    }
    assert '"price":849.50' in canonical.dumps(product.payload), "the digits as the PIM gave"


def test_a_path_that_finds_nothing_is_empty_then_required_and_default_decide() -> None:
    no_eur = akeneo_product("A-2", eur=None)
    assert _product(Mapper(AKENEO).map(RawRecord(2, no_eur))).payload["price"] is None
    with_default = MappingSettings(
        key="sku",
        fields={
            **(AKENEO.fields or {}),
            "price": FieldSpec(
                path="values.price[0].data[?currency=='EUR'].amount | [0]",
                type="decimal",
                default="0.00",
            ),
        },
    )
    assert _product(Mapper(with_default).map(RawRecord(2, no_eur))).payload["price"] == (
        Decimal("0.00")
    )
    nameless = akeneo_product("A-3")
    nameless["values"]["name"] = [{"locale": "de_DE", "scope": None, "data": "Amboss"}]
    bad = _bad(Mapper(AKENEO, source_name="pim").map(RawRecord(7, nameless)))
    assert bad.key == "A-3"
    assert bad.reason == (
        "pim line 7, path \"values.name[?locale=='en_US'].data | [0]\": "
        "is required but the path finds nothing"
    )


def test_a_path_value_of_the_wrong_kind_names_the_path() -> None:
    record = akeneo_product("A-4")
    bad = _bad(
        _mapper(
            sku=FieldSpec(path="identifier"),
            w=FieldSpec(path="values.weight[0].data", type="decimal"),
        ).map(RawRecord(3, record))
    )
    assert bad.reason.startswith("catalog line 3, path 'values.weight[0].data': ")
    assert bad.reason.endswith("is not a decimal number")


def test_a_key_path_that_finds_nothing_is_a_missing_key() -> None:
    bad = _bad(_mapper(sku=FieldSpec(path="identifier"), n="name").map(RawRecord(4, {"n": "x"})))
    assert bad == BadRecord(
        4, "catalog line 4, path 'identifier': the key 'sku' is missing", stage="map"
    )


def test_paths_work_on_flat_rows_too() -> None:
    mapper = _mapper(sku=FieldSpec(path='"Variant SKU"'), name=FieldSpec(path="Title"))
    product = _product(mapper.map(RawRecord(2, {"Variant SKU": "TEE-S", "Title": "Tee"})))
    assert product.payload == {"sku": "TEE-S", "name": "Tee"}


# -- Google Merchant-style nested JSON Lines, read by the jsonl source ------------------------

MERCHANT_JSONL = """\
{"offerId": "00042", "title": "Kettle", "priceInfo": {"price": "39.90", "currency": "EUR"}, \
"attributes": [{"key": "color", "value": "red"}]}
{"offerId": 1043, "title": "Toaster", "priceInfo": {"price": "24.5", "currency": "EUR"}}
{"offerId": "00044", "title": "Mug", "priceInfo": {"price": 7.25, "currency": "EUR"}}
"""


def test_merchant_jsonl_nested_prices_and_attributes(tmp_path: Path) -> None:
    path = tmp_path / "offers.jsonl"
    path.write_text(MERCHANT_JSONL, encoding="utf-8")
    source = open_source(JsonlSourceSettings(type="jsonl", path=path))
    mapper = _mapper(
        sku=FieldSpec(path="offerId"),
        name=FieldSpec(path="title"),
        price=FieldSpec(path="priceInfo.price", type="decimal"),
        color=FieldSpec(path="attributes[?key=='color'].value | [0]", default="none"),
    )
    products = [_product(item) for item in map_records(source.records(), mapper)]
    assert [(p.key, p.payload["price"], p.payload["color"]) for p in products] == [
        ("00042", Decimal("39.90"), "red"),
        ("1043", Decimal("24.5"), "none"),
        ("00044", Decimal("7.25"), "none"),
    ]


# -- locale numbers ------------------------------------------------------------------------------


def _german(kind: str = "decimal", **options: Any) -> Mapper:
    options.setdefault("decimal", ",")
    options.setdefault("thousands", ".")
    return _mapper(
        "export.csv", sku="Artikelnummer", price=FieldSpec(column="Preis", type=kind, **options)
    )


def _price(mapper: Mapper, value: Any) -> Any:
    record = RawRecord(2, {"Artikelnummer": "079685", "Preis": value})
    return _product(mapper.map(record)).payload["price"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1.234,50", "1234.50"),
        ("1.234.567,891", "1234567.891"),
        ("1234,50", "1234.50"),
        ("12,5", "12.5"),
        ("0,05", "0.05"),
        (" -1.234,50 ", "-1234.50"),
        ("999", "999"),
        ("1.000", "1000"),
    ],
)
def test_german_decimals_are_parsed_exactly(text: str, expected: str) -> None:
    value = _price(_german(), text)
    assert type(value) is Decimal and str(value) == expected, "no float on the way"


@pytest.mark.parametrize(
    ("options", "text", "expected"),
    [
        ({"thousands": " "}, "1 234,50", "1234.50"),
        ({"thousands": " "}, "1\u00a0234,50", "1234.50"),  # no-break space (French)
        ({"thousands": " "}, "1\u202f234,50", "1234.50"),  # narrow no-break space
        ({"decimal": ".", "thousands": "'"}, "1'234.50", "1234.50"),  # Swiss
        ({"decimal": ".", "thousands": ","}, "1,234.50", "1234.50"),
        ({"thousands": None}, "1234,5", "1234.5"),
    ],
)
def test_other_separators(options: dict[str, Any], text: str, expected: str) -> None:
    assert str(_price(_german(**options), text)) == expected


@pytest.mark.parametrize(
    ("text", "expected"), [("1.234", 1234), ("12", 12), ("-2.000.000", -2000000), ("", None)]
)
def test_german_integers(text: str, expected: int | None) -> None:
    assert _price(_german("integer"), text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "1,234.50",
        "12.50",
        "1.23,5",
        "12,",
        ",5",
        "1..234,5",
        "1.234,5.0",
        "1e3",
        "abc",
        "1 234,50",
        "+5",
    ],
)
def test_a_number_not_in_the_declared_format_is_rejected_with_line_column_and_format(
    text: str,
) -> None:
    bad = _bad(_german().map(RawRecord(9, {"Artikelnummer": "079685", "Preis": text})))
    assert bad.key == "079685"
    assert bad.reason == (
        f"export.csv line 9, column 'Preis': {text!r} is not a decimal number "
        'written like 1.234,56 (decimal ",", thousands ".")'
    )


def test_an_integer_needs_only_its_thousands_separator() -> None:
    mapper = _mapper(sku="s", n=FieldSpec(column="n", type="integer", thousands="."))
    assert _product(mapper.map(RawRecord(1, {"s": "A", "n": "12.345"}))).payload["n"] == 12345


def test_an_integer_with_a_fraction_is_rejected_with_the_format() -> None:
    bad = _bad(_german("integer").map(RawRecord(3, {"Artikelnummer": "1", "Preis": "1.234,5"})))
    assert bad.reason == (
        "export.csv line 3, column 'Preis': '1.234,5' is not an integer "
        'written like 1.234 (thousands ".")'
    )


def test_numbers_that_are_already_numbers_pass_a_locale_field() -> None:
    mapper = _german()
    assert _price(mapper, Decimal("12.50")) == Decimal("12.50")
    assert _price(mapper, 7) == 7
    assert str(_price(mapper, 21.35)) == "21.35"


def test_the_default_format_is_unchanged() -> None:
    bad = _bad(
        _mapper("p.csv", sku="s", p=FieldSpec(column="p", type="decimal")).map(
            RawRecord(5, {"s": "A", "p": "12,50"})
        )
    )
    assert bad.reason == "p.csv line 5, column 'p': '12,50' is not a decimal number"


# -- floats from SQL REAL/DOUBLE and XLSX number cells -------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (18.0, "18.0"),
        (21.35, "21.35"),
        (3.4986000000000002, "3.4986"),  # the same float as 3.4986
        (21.350000381469727, "21.35"),  # a 32-bit 21.35 (PostgreSQL real) read as a double
        (0.10000000149011612, "0.1"),  # the same for 0.1
        (123456.7890625, "123456.79"),  # a 32-bit float keeps only what 32 bits hold
        (0.3333333333333333, "0.3333333333333333"),  # a computed double keeps its digits
        (0.0345, "0.0345"),
        (-2.5, "-2.5"),
        (1e16, "1E+16"),
    ],
)
def test_a_float_is_a_decimal_by_its_shortest_round_trip_text(value: float, text: str) -> None:
    price = _price(
        _mapper(sku="Artikelnummer", price=FieldSpec(column="Preis", type="decimal")), value
    )
    assert type(price) is Decimal and str(price) == text
    widened = struct.unpack("<f", struct.pack("<f", float(text)))[0]
    assert value in (float(text), widened), "the shortest text of the (32- or 64-bit) float"


@pytest.mark.parametrize(("value", "expected"), [(18.0, 18), (-3.0, -3), (1e15, 10**15)])
def test_an_integral_float_is_an_integer(value: float, expected: int) -> None:
    stock = _price(
        _mapper(sku="Artikelnummer", price=FieldSpec(column="Preis", type="integer")), value
    )
    assert type(stock) is int and stock == expected


@pytest.mark.parametrize(
    ("kind", "value", "problem"),
    [
        ("integer", 2.5, "2.5 is not an integer"),
        ("decimal", float("nan"), "is not a decimal number"),
        ("decimal", float("inf"), "is not a decimal number"),
        ("integer", float("inf"), "is not an integer"),
    ],
)
def test_floats_that_do_not_fit_are_rejected(kind: str, value: float, problem: str) -> None:
    mapper = _mapper(sku="s", v=FieldSpec(column="v", type=kind))
    assert problem in _bad(mapper.map(RawRecord(4, {"s": "A", "v": value}))).reason


def test_keys_from_numeric_cells_are_text_without_a_trailing_zero() -> None:
    mapper = _mapper(sku="Artikelnummer", ean="EAN")
    product = _product(mapper.map(RawRecord(2, {"Artikelnummer": 12346.0, "EAN": 4006381333931.0})))
    assert (product.key, product.payload) == ("12346", {"sku": "12346", "ean": "4006381333931"})
    assert mapper.key_of(RawRecord(2, {"Artikelnummer": 12346.0})) == "12346"
    assert mapper.key_of(RawRecord(2, {"Artikelnummer": 12.5})) == "12.5"


@pytest.mark.parametrize("field", ["ItemNo", FieldSpec(path="ItemNo")])
def test_leading_zeros_of_text_keys_are_kept(field: str | FieldSpec) -> None:
    mapper = _mapper(sku=field, ean="EAN")
    product = _product(mapper.map(RawRecord(2, {"ItemNo": " 079685 ", "EAN": "04596710520787"})))
    assert (product.key, product.payload) == ("079685", {"sku": "079685", "ean": "04596710520787"})


# -- constants and defaults ----------------------------------------------------------------------


def test_constants_are_sent_as_written_or_by_their_type() -> None:
    mapper = _mapper(
        sku="s",
        currency=FieldSpec(value="EUR"),
        tax=FieldSpec(value=0.19),
        visible=FieldSpec(value=True),
        price=FieldSpec(value="19.90", type="decimal"),
        tags=FieldSpec(value=["new", 2]),
    )
    product = _product(mapper.map(RawRecord(1, {"s": "A"})))
    assert product.payload == {
        "sku": "A",
        "currency": "EUR",
        "tax": Decimal("0.19"),
        "visible": True,
        "price": Decimal("19.90"),
        "tags": ["new", 2],
    }


@pytest.mark.parametrize("cell", [None, "", "  "])
def test_a_default_fills_an_empty_or_missing_cell(cell: str | None) -> None:
    mapper = _mapper(
        sku="s",
        stock=FieldSpec(column="q", type="integer", default=0),
        unit=FieldSpec(column="u", default="C62"),
    )
    fields = {"s": "A", "q": cell, "u": cell}
    assert _product(mapper.map(RawRecord(1, fields))).payload == {
        "sku": "A",
        "stock": 0,
        "unit": "C62",
    }
    assert _product(mapper.map(RawRecord(1, {"s": "A"}))).payload["unit"] == "C62"


def test_a_default_is_converted_once_by_the_field_type() -> None:
    mapper = _mapper(sku="s", p=FieldSpec(column="p", type="decimal", decimal=",", default="0,00"))
    assert str(_product(mapper.map(RawRecord(1, {"s": "A"}))).payload["p"]) == "0.00"


# -- configuration errors ------------------------------------------------------------------------

BASE = {
    "api": {"base_url": "http://127.0.0.1:1", "api_key": "k"},
    "source": {"type": "csv", "path": "catalog.csv"},
}


def _problems(fields: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        settings_from_dict({**BASE, "mapping": {"fields": {"sku": "SKU", **fields}}})
    return caught.value.problems


@pytest.mark.parametrize(
    ("field", "problem"),
    [
        (
            {"path": "values.price[0"},
            "at 'mapping.fields.price.path': not a valid JMESPath "
            "expression: incomplete expression at character 15",
        ),
        (
            {"path": "values price"},
            "at 'mapping.fields.price.path': not a valid JMESPath "
            "expression: Unexpected token: price at character 8",
        ),
        (
            {"column": "P", "path": "p"},
            "at 'mapping.fields.price': set exactly one of column, "
            "path or value (found column and path)",
        ),
        (
            {"type": "decimal"},
            "at 'mapping.fields.price': set exactly one of column, path or value",
        ),
        (
            {"column": "P", "decimal": ","},
            "at 'mapping.fields.price': decimal and thousands "
            "apply to type 'decimal' or 'integer' only",
        ),
        (
            {"column": "P", "type": "decimal", "decimal": ",", "thousands": ","},
            "at 'mapping.fields.price': thousands and decimal must differ (set decimal = \".\")",
        ),
        (
            {"column": "P", "type": "decimal", "thousands": "_"},
            "at 'mapping.fields.price.thousands': "
            """must be one of ".", ",", "'" or " " (a space)""",
        ),
        (
            {"value": 1, "default": 2},
            "at 'mapping.fields.price': default has no use beside a constant value",
        ),
        ({"colum": "P"}, "at 'mapping.fields.price.colum': unknown key; did you mean 'column'?"),
    ],
)
def test_config_errors_name_the_field(field: dict[str, Any], problem: str) -> None:
    assert _problems({"price": field}) == [f"<dict>: {problem}"]


def test_constants_and_defaults_that_do_not_convert_are_config_errors() -> None:
    with pytest.raises(ConfigError) as caught:
        _mapper(
            sku="s",
            p=FieldSpec(value="abc", type="decimal"),
            q=FieldSpec(column="q", type="integer", default="many"),
        )
    assert caught.value.problems == [
        "at 'mapping.fields.p.value': 'abc' is not a decimal number",
        "at 'mapping.fields.q.default': 'many' is not an integer",
    ]


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        (FieldSpec(value="A"), "cannot be a constant"),
        (FieldSpec(column="s", default="A"), "cannot have a default"),
    ],
)
def test_the_key_is_read_from_each_record(spec: FieldSpec, problem: str) -> None:
    with pytest.raises(ConfigError, match=rf"at 'mapping\.fields\.sku': the key {problem}"):
        _mapper(sku=spec)


# -- the record digest covers every option, and what paths find ------------------------------------


def _record_digest(record: RawRecord, **price: Any) -> str:
    price.setdefault("column", "p")
    price.setdefault("type", "decimal")
    return _mapper(sku="s", price=FieldSpec(**price)).record_digest(record)


@pytest.mark.parametrize(
    "changed",
    [
        {"column": None, "path": "p"},
        {"decimal": ","},
        {"decimal": ",", "thousands": "."},
        {"thousands": ","},
        {"default": "0"},
        {"required": True},
        {"type": "string"},
        {"column": None, "value": "1.5"},
    ],
)
def test_every_option_changes_the_fingerprint(changed: dict[str, Any]) -> None:
    record = RawRecord(2, {"s": "A", "p": "1.5"})
    assert _record_digest(record) == _record_digest(record)
    assert _record_digest(record, **changed) != _record_digest(record)


def test_a_constant_with_and_without_a_type_has_different_fingerprints() -> None:
    record = RawRecord(2, {"s": "A"})
    as_written = _mapper(sku="s", n=FieldSpec(value=1)).record_digest(record)
    typed = _mapper(sku="s", n=FieldSpec(value=1, type="string")).record_digest(record)
    assert as_written != typed


def test_a_path_field_counts_by_what_its_path_finds() -> None:
    mapper = Mapper(AKENEO)
    base = akeneo_product("A-1")
    record_digest = mapper.record_digest(RawRecord(1, base))
    unrelated = akeneo_product("A-1")
    unrelated["values"]["price"][0]["data"][0]["amount"] = "999.00"  # USD: not mapped
    unrelated["_links"] = {}
    assert mapper.record_digest(RawRecord(5, unrelated)) == record_digest
    cheaper = akeneo_product("A-1", eur="799.00")
    assert mapper.record_digest(RawRecord(1, cheaper)) != record_digest
    assert _product(mapper.map(RawRecord(1, base))).record_digest == record_digest


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_shortest_text_reads_back_as_the_float_or_its_32_bit_self(value: float) -> None:
    text = shortest(value)
    back = float(text)
    if back != value:  # only a widened 32-bit float is written by its 32-bit digits
        assert struct.unpack("<f", struct.pack("<f", back))[0] == value
    assert len(text) <= len(repr(value))


def test_a_huge_integral_float_as_text_keeps_its_exponent() -> None:
    assert (float_text(4006381333931.0), float_text(1e16)) == ("4006381333931", "1e+16")


def test_the_key_of_a_bad_record_is_read_from_its_sure_fields_as_map_would() -> None:
    mapper = _mapper(sku=FieldSpec(path="identifier.code"), name="name")
    cut_short = BadRecord(3, "p.jsonl line 3: not valid JSON", fields={"identifier": {"code": 7}})
    assert mapper.key_of_bad(cut_short) == "7"
    assert mapper.key_of_bad(BadRecord(3, "...", fields={"name": "Lamp"})) is None
    assert (
        mapper.key_of_bad(BadRecord(3, "...", fields={"identifier": {"code": "A\udce9"}})) is None
    )
    assert mapper.key_of_bad(BadRecord(3, "...")) is None  # nothing sure in it
    assert mapper.key_of_bad(BadRecord(3, "...", key="B-2")) == "B-2"  # the mapper's own
