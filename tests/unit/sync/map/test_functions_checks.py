"""Mapping functions (lookup and the text helpers) and field checks, one by one."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import jmespath
import pytest

from skuferry.config.schema import FieldSpec, MappingSettings, TableFile
from skuferry.errors import SourceError
from skuferry.models import BadRecord, Product, RawRecord
from skuferry.sync.expressions.functions import Table, compiler
from skuferry.sync.expressions.tables import load_tables
from skuferry.sync.map.checks import gtin_valid, spreadsheet_mangled
from skuferry.sync.map.mapper import Mapper

ONE_OF = '\'old\' is not one of "new", "used"'
GTIN = {"column": "v", "check": "gtin"}
CODE = {"column": "v", "pattern": "[A-Z]{2}-[0-9]+"}
LOST = "looks like a long number in scientific notation: the digits were lost in a spreadsheet"
TABLES = {"colours": Table("colours", {"1": "Red", "2": "Blue"})}


def _search(expression: str, record: dict[str, Any]) -> Any:
    return compiler(TABLES)(expression)(record)


@pytest.mark.parametrize(
    ("expression", "record", "expected"),
    [
        ("lookup('colours', c)", {"c": "1"}, "Red"),
        ("lookup('colours', c)", {"c": 2}, "Blue"),  # a number is looked up as its text
        ("lookup('colours', c)", {"c": Decimal("2")}, "Blue"),
        ("lookup('colours', c)", {}, None),  # an empty cell stays empty
        ("lookup('colours', c, 'Other')", {"c": "9"}, "Other"),
        ("replace(t, '[^0-9]', '')", {"t": "EAN: 40-12345"}, "4012345"),
        ("replace(t, '(\\w+) (\\w+)', '\\2 \\1')", {"t": "drill cordless"}, "cordless drill"),
        ("split(t, '|')", {"t": "a|b|c"}, ["a", "b", "c"]),
        ("split(t, ',')[1]", {"t": "x,y"}, "y"),
        ("trim(t)", {"t": "  drill \n"}, "drill"),
        ("lower(t)", {"t": "DRILL"}, "drill"),
        ("upper(t)", {"t": "drill"}, "DRILL"),
        ("concat(a, '-', b)", {"a": "AB", "b": 12}, "AB-12"),
        ("concat(a, '-', b)", {"a": "AB"}, "AB-"),  # null parts are skipped
        ("strip_prefix(t, '\\'')", {"t": "'0850064060010"}, "0850064060010"),
        ("strip_prefix(t, 'x')", {"t": "abc"}, "abc"),
        ("trim(t)", {"t": None}, None),
    ],
)
def test_functions(expression: str, record: dict[str, Any], expected: Any) -> None:
    assert _search(expression, record) == expected


def _mapper(tables: dict[str, Any] | None = None, **spec: Any) -> Mapper:
    fields: dict[str, str | FieldSpec] = {"sku": "SKU", "value": FieldSpec(**spec)}
    return Mapper(MappingSettings(fields=fields, tables=tables or {}), source_name="p.csv")


def _reason(result: Product | BadRecord) -> str:
    assert isinstance(result, BadRecord), result
    assert result.key == "A1", "the product is known: it is held, not archived"
    return result.reason


def test_a_code_missing_from_a_table_is_a_rejection_naming_table_and_code() -> None:
    mapper = _mapper({"colours": {"1": "Red"}}, path="lookup('colours', Colour)")
    ok = mapper.map(RawRecord(2, {"SKU": "A1", "Colour": "1"}))
    assert isinstance(ok, Product) and ok.payload["value"] == "Red"
    reason = _reason(mapper.map(RawRecord(3, {"SKU": "A1", "Colour": "7"})))
    path = "path \"lookup('colours', Colour)\""
    assert reason == f"p.csv line 3, {path}: the code '7' is not in table 'colours'"


def test_an_unknown_table_and_a_type_error_are_rejections_not_crashes() -> None:
    unknown = _mapper(path="lookup('sizes', Size)").map(RawRecord(2, {"SKU": "A1", "Size": "M"}))
    assert "no table 'sizes'" in _reason(unknown)
    wrong = _mapper(path="length(n)").map(RawRecord(2, {"SKU": "A1", "n": 5}))
    assert "the path failed" in _reason(wrong)


def test_a_file_table_reads_key_and_value_columns_and_its_default(tmp_path: Path) -> None:
    path = tmp_path / "categories.csv"
    path.write_text("id,label\n3,Men\n4,Women\n3,Duplicate\n", encoding="utf-8")
    spec = TableFile(file=path, key="id", value="label", default="Other")
    table = load_tables({"categories": spec})["categories"]
    assert table.entries == {"3": "Men", "4": "Women"}, "the first row of a code wins"
    mapper = _mapper({"categories": spec}, path="lookup('categories', cat)")
    result = mapper.map(RawRecord(2, {"SKU": "A1", "cat": "99"}))
    assert isinstance(result, Product) and result.payload["value"] == "Other"
    with pytest.raises(SourceError, match="no column 'name'"):
        load_tables({"c": TableFile(file=path, key="id", value="name")})


def test_a_changed_table_changes_every_fingerprint() -> None:
    record = RawRecord(2, {"SKU": "A1", "c": "1"})
    red = _mapper({"colours": {"1": "Red"}}, path="lookup('colours', c)")
    rouge = _mapper({"colours": {"1": "Rouge"}}, path="lookup('colours', c)")
    assert red.record_digest(record) != rouge.record_digest(record)


@pytest.mark.parametrize(
    ("digits", "valid"),
    [
        ("4006381333931", True),  # GTIN-13
        ("4006381333932", False),
        ("96385074", True),  # GTIN-8
        ("036000291452", True),  # GTIN-12 (UPC-A)
        ("10036000291459", True),  # GTIN-14
        ("400638133393", False),  # 12 digits, wrong check
        ("40063813339", False),  # 11 digits
        ("4006381333931x", False),
    ],
)
def test_gtin_check_digit(digits: str, valid: bool) -> None:
    assert gtin_valid(digits) is valid


@pytest.mark.parametrize(
    ("spec", "value", "problem"),
    [
        (GTIN, "4006381333932", "'4006381333932' is not a GTIN (wrong check digit)"),
        (GTIN, "12345", "'12345' is not a GTIN (5 digits; GTINs have 8, 12, 13 or 14)"),
        (CODE, "ab-1", "'ab-1' does not match '[A-Z]{2}-[0-9]+'"),
        ({"column": "v", "type": "decimal", "min": 0}, "-1.5", "-1.5 is less than the minimum 0"),
        ({"column": "v", "type": "integer", "max": 10}, "11", "11 is more than the maximum 10"),
        ({"column": "v", "max_length": 3}, "abcd", "is 4 characters long, more than 3"),
        ({"column": "v", "one_of": ["new", "used"]}, "old", ONE_OF),
        ({"column": "v"}, "3.65275E+11", f"'3.65275E+11' {LOST}"),
        ({"column": "v"}, "1,76701E+15", f"'1,76701E+15' {LOST}"),
        ({"column": "v", "check": "gtin"}, "3.65275E+11", f"'3.65275E+11' {LOST}"),
    ],
)  # fmt: skip
def test_failed_checks_reject_naming_line_field_and_reason(
    spec: dict[str, Any], value: str, problem: str
) -> None:
    result = _mapper(**spec).map(RawRecord(7, {"SKU": "A1", "v": value}))
    assert _reason(result) == f"p.csv line 7, column 'v': {problem}"


@pytest.mark.parametrize(
    ("spec", "value"),
    [
        ({"column": "v", "check": "gtin"}, "4006381333931"),
        ({"column": "v", "pattern": "[A-Z]{2}-[0-9]+"}, "AB-1"),
        ({"column": "v", "type": "decimal", "min": 0, "max": 10}, "10.00"),
        ({"column": "v", "max_length": 3}, "abc"),
        ({"column": "v", "one_of": ["new", "used"]}, "used"),
        ({"column": "v", "type": "integer", "one_of": [1, 2]}, "2"),
        ({"column": "v", "type": "decimal", "one_of": [0.1, 0.25]}, "0.10"),  # not the float
        ({"column": "v", "one_of": [1, 2]}, "2"),  # a text field compares as text
        ({"column": "v", "check": "gtin"}, ""),  # empty: required decides, not the check
        ({"column": "v"}, "Model E+ 2"),  # text with E+ that is not a number
    ],
)
def test_passing_checks(spec: dict[str, Any], value: str) -> None:
    assert isinstance(_mapper(**spec).map(RawRecord(7, {"SKU": "A1", "v": value})), Product)


def test_a_spreadsheet_mangled_key_is_rejected() -> None:
    result = _mapper(column="v").map(RawRecord(2, {"SKU": "4.00638E+12", "v": "x"}))
    assert isinstance(result, BadRecord) and "lost in a spreadsheet" in result.reason
    assert spreadsheet_mangled("4E+12") is not None
    assert spreadsheet_mangled("4012345678901") is None


@pytest.mark.parametrize(
    "spec",
    [
        {"column": "v", "min": 1},  # a text field has no bounds
        {"column": "v", "type": "json", "pattern": "x"},
        {"column": "v", "pattern": "("},
    ],
)
def test_check_settings_that_cannot_apply_are_config_errors(spec: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"min and max|apply to text|not a regular expression"):
        FieldSpec(**spec)


@pytest.mark.parametrize("expression", ["a", "a.b", '"Variant SKU"', "a.b.c", "parent.title"])
@pytest.mark.parametrize(
    "record",
    [
        {},
        {"a": None},
        {"a": "text"},
        {"a": [1, 2]},
        {"a": {"b": {"c": Decimal("1.5")}}},
        {"a": {"b": 0}},
        {"Variant SKU": "LS-1", "parent": {"title": "Shirt"}},
        {"parent": "not an object"},
    ],
)
def test_plain_field_paths_answer_as_jmespath_does(expression: str, record: dict[str, Any]) -> None:
    assert compiler()(expression)(record) == jmespath.search(expression, record)
