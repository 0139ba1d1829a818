"""The mapping: source record -> product payload, with a reason for every row it refuses."""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skuferry import canonical
from skuferry.config.schema import FieldSpec, MappingSettings
from skuferry.errors import ConfigError
from skuferry.models import BadRecord, Product, RawRecord
from skuferry.sync.map.mapper import Mapper, map_records


def _mapper(
    column_type: str = "string", *, required: bool = False, key_type: str = "string"
) -> Mapper:
    """sku <- ItemNo (the key), value <- Value with the given type."""
    return Mapper(
        MappingSettings(
            key="sku",
            fields={
                "sku": FieldSpec(column="ItemNo", type=key_type),
                "value": FieldSpec(column="Value", type=column_type, required=required),
            },
        ),
        source_name="products.csv",
    )


def _product(result: Product | BadRecord) -> Product:
    assert isinstance(result, Product), result
    return result


def _bad(result: Product | BadRecord) -> BadRecord:
    assert isinstance(result, BadRecord), result
    return result


def _value(mapper: Mapper, value: Any) -> Any:
    return _product(mapper.map(RawRecord(7, {"ItemNo": "A-1", "Value": value}))).payload["value"]


def _rejection(mapper: Mapper, value: Any, line: int = 12) -> str:
    bad = _bad(mapper.map(RawRecord(line, {"ItemNo": "A-1", "Value": value})))
    assert bad.line == line
    assert bad.key == "A-1", "a field rejection carries the key"
    assert f"line {line}" in bad.reason and "column 'Value'" in bad.reason, bad.reason
    return bad.reason


# -- a typed mapping, end to end -----------------------------------------------------------

CATALOG = MappingSettings(
    key="sku",
    fields={
        "sku": "ItemNo",
        "name": "Description",
        "price": FieldSpec(column="UnitPrice", type="decimal"),
        "stock": FieldSpec(column="Qty", type="integer"),
        "active": FieldSpec(column="Active", type="boolean"),
        "attributes": FieldSpec(column="Attrs", type="json"),
    },
)


def test_typed_mapping_builds_the_payload() -> None:
    record = RawRecord(
        3,
        {
            "ItemNo": " A-1 ",
            "Description": "Anvil, 50 kg ",
            "UnitPrice": "19.90",
            "Qty": " 12 ",
            "Active": "Yes",
            "Attrs": '{"colour": "black", "weight": 50.00}',
            "Unmapped": "dropped",
        },
    )
    product = _product(Mapper(CATALOG).map(record))
    assert product.key == "A-1"
    assert product.line == 3
    assert product.payload == {
        "sku": "A-1",
        "name": "Anvil, 50 kg ",
        "price": Decimal("19.90"),
        "stock": 12,
        "active": True,
        "attributes": {"colour": "black", "weight": Decimal("50.00")},
    }
    assert canonical.dumps(product.payload) == (
        '{"active":true,"attributes":{"colour":"black","weight":50.00},'
        '"name":"Anvil, 50 kg ","price":19.90,"sku":"A-1","stock":12}'
    )
    assert product.digest == canonical.digest(product.payload)


def test_csv_text_and_json_values_map_to_the_same_digest() -> None:
    mapper = Mapper(CATALOG)
    from_csv = mapper.map(
        RawRecord(2, {"ItemNo": "A-1", "Description": "Anvil", "UnitPrice": "19.90",
                      "Qty": "12", "Active": "true", "Attrs": "[1, 2]"})
    )  # fmt: skip
    from_jsonl = mapper.map(
        RawRecord(9, {"ItemNo": "A-1", "Description": "Anvil", "UnitPrice": Decimal("19.90"),
                      "Qty": 12, "Active": True, "Attrs": [1, 2]})
    )  # fmt: skip
    assert _product(from_csv).digest == _product(from_jsonl).digest


def test_a_changed_value_changes_the_digest() -> None:
    mapper = Mapper(CATALOG)
    base = {"ItemNo": "A-1", "Description": "Anvil", "UnitPrice": "19.90"}
    one = _product(mapper.map(RawRecord(2, base)))
    for column, other in [("UnitPrice", "19.9"), ("Description", "Anvil "), ("ItemNo", "A-2")]:
        changed = _product(mapper.map(RawRecord(2, {**base, column: other})))
        assert changed.digest != one.digest, column


def test_the_key_field_and_the_source_name() -> None:
    mapper = Mapper(CATALOG, source_name="products.csv")
    assert mapper.key_field == "sku"
    bad = _bad(mapper.map(RawRecord(12, {"ItemNo": "A-1", "UnitPrice": "12,50"})))
    assert bad == BadRecord(
        12,
        "products.csv line 12, column 'UnitPrice': '12,50' is not a decimal number",
        "A-1",
        stage="map",  # skuferry rejected: the mapping refused it, not the reader
    )


# -- the key ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"Value": "x"}, "the key 'sku' is missing"),
        ({"ItemNo": ""}, "the key 'sku' is empty"),
        ({"ItemNo": "   "}, "the key 'sku' is empty"),
        ({"ItemNo": None}, "the key 'sku' is empty"),
        ({"ItemNo": True}, "the key 'sku' must be text or a number, not a boolean"),
        ({"ItemNo": {"a": 1}}, "the key 'sku' must be text or a number, not a JSON object"),
    ],
)
def test_a_missing_or_empty_key_is_rejected(fields: dict[str, Any], problem: str) -> None:
    bad = _bad(_mapper().map(RawRecord(4, fields)))
    assert bad == BadRecord(
        4, f"products.csv line 4, column 'ItemNo': {problem}", None, stage="map"
    )


def test_the_key_is_stripped_and_stays_in_the_payload() -> None:
    product = _product(_mapper().map(RawRecord(2, {"ItemNo": "\t A-1  ", "Value": " v "})))
    assert product.key == "A-1"
    assert product.payload == {"sku": "A-1", "value": " v "}


def test_a_numeric_key_from_json_becomes_text_for_the_key() -> None:
    product = _product(_mapper().map(RawRecord(2, {"ItemNo": 1042, "Value": "v"})))
    assert product.key == "1042"
    assert product.payload["sku"] == "1042"


def test_an_integer_key_is_typed_in_the_payload() -> None:
    mapper = _mapper(key_type="integer")
    product = _product(mapper.map(RawRecord(2, {"ItemNo": " 1042 ", "Value": "v"})))
    assert (product.key, product.payload["sku"]) == ("1042", 1042)
    bad = _bad(mapper.map(RawRecord(5, {"ItemNo": "A-1", "Value": "v"})))
    assert bad.reason == "products.csv line 5, column 'ItemNo': 'A-1' is not an integer"


# -- pass-through ----------------------------------------------------------------------


def test_without_fields_every_column_passes_through() -> None:
    mapper = Mapper(MappingSettings(key="sku"))
    fields = {"sku": " A-1 ", "name": " Anvil ", "price": Decimal("19.90"), "tags": ["x"]}
    product = _product(mapper.map(RawRecord(2, fields)))
    assert product.key == "A-1"
    assert product.payload == {"sku": "A-1", "name": " Anvil ", "price": Decimal("19.90"),
                               "tags": ["x"]}  # fmt: skip
    assert fields["sku"] == " A-1 ", "the record itself is not changed"
    assert mapper.key_field == "sku"


def test_pass_through_still_needs_the_key() -> None:
    bad = _bad(Mapper(MappingSettings(key="sku")).map(RawRecord(8, {"name": "Anvil"})))
    assert bad.reason == "source line 8, column 'sku': the key 'sku' is missing"


# -- conversions -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [("as read ", "as read "), ("", ""), (12, "12"), (Decimal("19.90"), "19.90"), (True, "true")],
)
def test_string(value: Any, expected: str) -> None:
    assert _value(_mapper("string"), value) == expected


@pytest.mark.parametrize("value", [{"a": 1}, [1]])
def test_string_refuses_json_structures(value: Any) -> None:
    assert "is not text" in _rejection(_mapper("string"), value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("12", 12), (" 12 ", 12), ("-3", -3), ("+4", 4), (12, 12), ("", None), (Decimal("7.0"), 7)],
)
def test_integer(value: Any, expected: int | None) -> None:
    assert _value(_mapper("integer"), value) == expected


@pytest.mark.parametrize(
    "value", ["12.5", "abc", "1_000", "1 2", "١٢", "12e1", Decimal("12.5"), True, "9" * 5000]
)
def test_integer_rejections(value: Any) -> None:
    assert "is not an integer" in _rejection(_mapper("integer"), value)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("19.90", "19.90"),
        (" 19.90 ", "19.90"),
        ("-0.50", "-0.50"),
        ("0", "0"),
        ("1e5", "1E+5"),
        ("2.5E-3", "0.0025"),
        (Decimal("4.50"), "4.50"),
        (7, "7"),
    ],
)
def test_decimal_keeps_the_digits(value: Any, text: str) -> None:
    product = _product(_mapper("decimal").map(RawRecord(2, {"ItemNo": "A-1", "Value": value})))
    assert canonical.dumps(product.payload) == f'{{"sku":"A-1","value":{text}}}'


@pytest.mark.parametrize(
    "value", ["1,5", "NaN", "nan", "inf", "-Infinity", "1e5x", "007", ".5", "5.", "+1", "1_0",
              "abc", True, {"a": 1}]
)  # fmt: skip
def test_decimal_rejections(value: Any) -> None:
    reason = _rejection(_mapper("decimal"), value)
    assert reason.endswith("is not a decimal number")


def test_decimal_rejection_quotes_the_text() -> None:
    assert _rejection(_mapper("decimal"), "12,50") == (
        "products.csv line 12, column 'Value': '12,50' is not a decimal number"
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("true", True), ("FALSE", False), ("1", True), ("0", False), (" Yes ", True),
        ("no", False), ("Y", True), ("n", False), (True, True), (False, False),
        (1, True), (0, False), ("", None),
    ],
)  # fmt: skip
def test_boolean(value: Any, expected: bool | None) -> None:
    assert _value(_mapper("boolean"), value) is expected


@pytest.mark.parametrize("value", ["maybe", "2", "t", 2, Decimal("1.0"), ["true"]])
def test_boolean_rejections(value: Any) -> None:
    assert "is not a boolean" in _rejection(_mapper("boolean"), value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('{"a": [1, 2.50]}', {"a": [1, Decimal("2.50")]}),
        ("42", 42),
        ('"text"', "text"),
        ({"a": 1}, {"a": 1}),
        ([1, "x"], [1, "x"]),
        (Decimal("1.10"), Decimal("1.10")),
        ("  ", None),
    ],
)
def test_json(value: Any, expected: Any) -> None:
    assert _value(_mapper("json"), value) == expected


def test_json_keeps_decimal_digits() -> None:
    product = _product(_mapper("json").map(RawRecord(2, {"ItemNo": "A", "Value": '{"p": 1.50}'})))
    assert canonical.dumps(product.payload) == '{"sku":"A","value":{"p":1.50}}'


@pytest.mark.parametrize("value", ["{not json", "[1, 2", "NaN", '{"p": Infinity}', "1 2"])
def test_json_rejections(value: str) -> None:
    assert "is not valid JSON" in _rejection(_mapper("json"), value)


# -- empty, missing, required ------------------------------------------------------------


@pytest.mark.parametrize("column_type", ["integer", "decimal", "boolean", "json"])
def test_an_empty_typed_cell_is_null(column_type: str) -> None:
    assert _value(_mapper(column_type), "") is None
    assert _value(_mapper(column_type), None) is None


@pytest.mark.parametrize("column_type", ["string", "integer", "decimal", "boolean", "json"])
def test_an_empty_required_cell_is_rejected(column_type: str) -> None:
    mapper = _mapper(column_type, required=True)
    assert _rejection(mapper, "").endswith("is required but empty")
    assert _rejection(mapper, " ").endswith("is required but empty")
    assert _rejection(mapper, None).endswith("is required but empty")


def test_a_missing_column_is_null_unless_required() -> None:
    record = RawRecord(6, {"ItemNo": "A-1"})  # a short CSV row: the column is absent
    assert _product(_mapper("decimal").map(record)).payload == {"sku": "A-1", "value": None}
    bad = _bad(_mapper("decimal", required=True).map(record))
    assert bad == BadRecord(
        6, "products.csv line 6, column 'Value': is required but missing", "A-1", stage="map"
    )


# -- configuration ---------------------------------------------------------------------


def test_the_key_must_be_a_mapped_field() -> None:
    with pytest.raises(ConfigError, match=r"at 'mapping.key': 'sku' is not a field"):
        Mapper(MappingSettings(key="sku", fields={"id": "ItemNo"}))


def test_the_key_cannot_be_a_boolean_or_json() -> None:
    settings = MappingSettings(key="sku", fields={"sku": FieldSpec(column="S", type="boolean")})
    with pytest.raises(ConfigError, match=r"mapping\.fields\.sku"):
        Mapper(settings)


# -- map_records -------------------------------------------------------------------------


def test_map_records_maps_in_order_and_passes_source_rejections_through() -> None:
    unreadable = BadRecord(3, "products.csv line 3: 4 fields, the header has 3")
    out = list(
        map_records(
            [
                RawRecord(2, {"ItemNo": "A-1", "Value": "1"}),
                unreadable,
                RawRecord(4, {"ItemNo": "", "Value": "2"}),
            ],
            _mapper("integer"),
        )
    )
    assert [type(r) for r in out] == [Product, BadRecord, BadRecord]
    assert out[1] is unreadable
    assert isinstance(out[2], BadRecord) and "line 4" in out[2].reason


# -- the digest is the sha256 of the canonical JSON ------------------------------------------

_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False)
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@given(st.dictionaries(st.text(), _values, max_size=8))
def test_digest_is_sha256_of_sorted_compact_json(payload: dict[str, Any]) -> None:
    reference = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert canonical.dumps(payload) == reference
    product = _product(Mapper(MappingSettings(key="k")).map(RawRecord(1, {**payload, "k": "K"})))
    expected = json.dumps({**payload, "k": "K"}, sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False)  # fmt: skip
    assert product.digest == hashlib.sha256(expected.encode()).hexdigest()


# --- [source] empty_values (Odoo's false for an empty field) -----------------------------

ODOO = MappingSettings(
    key="sku",
    fields={
        "sku": FieldSpec(column="default_code"),
        "ean": FieldSpec(column="barcode"),
        "name": FieldSpec(column="name", required=True),
        "stock": FieldSpec(column="qty_available", type="integer", default=0),
        "active": FieldSpec(column="active", type="boolean"),
    },
)


def test_empty_values_count_as_missing_default_and_required_apply() -> None:
    mapper = Mapper(ODOO, empty_values=[False])
    row = {"default_code": "A-1", "barcode": False, "name": "Drill", "qty_available": False}
    product = _product(mapper.map(RawRecord(1, {**row, "active": False})))
    assert product.payload == {
        "sku": "A-1",
        "ean": None,
        "name": "Drill",
        "stock": 0,
        "active": False,
    }
    refused = mapper.map(RawRecord(2, {**row, "name": False}))
    assert isinstance(refused, BadRecord)
    assert "column 'name'" in refused.reason and "required" in refused.reason


def test_empty_values_match_by_type_so_zero_is_not_false() -> None:
    mapper = Mapper(ODOO, empty_values=[False])
    row = {"default_code": "A-1", "barcode": "4006381333931", "name": "Drill", "qty_available": 0}
    assert _product(mapper.map(RawRecord(1, row))).payload["stock"] == 0
    without = Mapper(ODOO)  # without empty_values, false is a value: "false" as text
    assert _product(without.map(RawRecord(1, {**row, "barcode": False}))).payload["ean"] == "false"


def test_empty_values_change_the_fingerprint() -> None:
    record = RawRecord(1, {"default_code": "A-1", "barcode": False, "name": "x"})
    assert Mapper(ODOO).record_digest(record) != Mapper(ODOO, empty_values=[False]).record_digest(
        record
    )
