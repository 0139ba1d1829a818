"""A field's value to its type (``string``, ``integer``, ``decimal``, ``boolean``, ``json``),
or the reason it is refused.

Numbers may be written with locale separators (``decimal``/``thousands``); floats from
SQL and XLSX count by their shortest round-trip text. A converter is chosen once per
field and runs once per row, so each is a plain function of the value.

What a converter makes of a value is part of what a row's record digest stands for: a
change here is a change of the mapping's output, and bumps the mapper's
``RECORD_DIGEST_VERSION`` so that every row is mapped again.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any, NoReturn

from skuferry import canonical
from skuferry.config.schema import FieldSpec
from skuferry.sync.expressions.numbers import LocaleFormat, float_decimal, float_text

# The JSON number grammar: a decimal column accepts exactly what could be sent as a JSON
# number verbatim. One precompiled fullmatch measured faster than a partition-based check.
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")

_BOOLEANS = {
    "true": True, "false": False, "1": True, "0": False,
    "yes": True, "no": False, "y": True, "n": False,
}  # fmt: skip


class RefusedError(Exception):
    """A value a converter refuses; the message is the tail of the rejection reason."""


Converter = Callable[[Any], Any]


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


# canonical.loads semantics, but NaN/Infinity are refused: canonical.dumps cannot write them.
_decode_json = json.JSONDecoder(parse_float=Decimal, parse_constant=_no_constant).decode


def _show(value: Any) -> str:
    """A value as quoted in a reason: text in quotes, JSON values as JSON, both shortened."""
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:40] + "...")
    if isinstance(value, float):
        return repr(value)  # also nan and inf, which JSON cannot write
    text = canonical.dumps(value)
    return text if len(text) <= 40 else text[:40] + "..."


def kind_of(value: Any) -> str:
    if isinstance(value, dict):
        return "a JSON object"
    if isinstance(value, list):
        return "a JSON array"
    if isinstance(value, bool):
        return "a boolean"
    return "a number" if isinstance(value, int | Decimal | float) else type(value).__name__


def to_string(value: Any) -> Any:
    if type(value) is str:
        return value
    if isinstance(value, int | Decimal):  # bool is an int: JSON true -> "true"
        return canonical.dumps(value)
    if type(value) is float and math.isfinite(value):
        return float_text(value)  # an XLSX number cell 12346.0 -> "12346"
    raise RefusedError(f"{kind_of(value)} is not text")


def _to_integer(value: Any) -> Any:
    if type(value) is str:
        text = value.strip()
        if not text:
            return None
        digits = text[1:] if text[0] in "+-" else text
        if digits.isdigit() and digits.isascii():
            try:
                return int(text)
            except ValueError:  # more digits than int() converts (sys.int_max_str_digits)
                pass
        raise RefusedError(f"{_show(value)} is not an integer")
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():  # SQL REAL, XLSX numbers
        return int(value)
    # a JSON 7.0 (Odoo's quantities are floats); 7.5 is refused as before
    if type(value) is Decimal and value.is_finite() and value == value.to_integral_value():
        return int(value)
    raise RefusedError(f"{_show(value)} is not an integer")


def _to_decimal(value: Any) -> Any:
    if type(value) is str:
        text = value.strip()
        if not text:
            return None
        if _JSON_NUMBER.fullmatch(text) is not None:
            return Decimal(text)  # keeps the digits as written: "19.90" stays 19.90
        raise RefusedError(f"{_show(value)} is not a decimal number")
    if type(value) is int or (type(value) is Decimal and value.is_finite()):
        return value
    if type(value) is float and math.isfinite(value):
        return float_decimal(value)  # 21.35, never 21.350000000000001
    raise RefusedError(f"{_show(value)} is not a decimal number")


def _to_boolean(value: Any) -> Any:
    if type(value) is str:
        text = value.strip()
        if not text:
            return None
        found = _BOOLEANS.get(text.lower())
        if found is not None:
            return found
    elif type(value) is bool:
        return value
    elif type(value) is int and value in (0, 1):
        return value == 1
    raise RefusedError(f"{_show(value)} is not a boolean (true/false, yes/no, y/n, 1/0)")


def _to_json(value: Any) -> Any:
    if type(value) is not str:
        return value  # already a JSON value (a JSON Lines source)
    if not value.strip():
        return None
    try:
        return _decode_json(value)
    except json.JSONDecodeError as exc:
        reason = f"{exc.msg} at character {exc.pos + 1}"
        raise RefusedError(f"{_show(value)} is not valid JSON ({reason})") from None
    except (ValueError, RecursionError) as exc:
        raise RefusedError(f"{_show(value)} is not valid JSON ({exc})") from None


_TYPED: dict[str, Converter] = {
    "integer": _to_integer,
    "decimal": _to_decimal,
    "boolean": _to_boolean,
    "json": _to_json,
}


def _locale_converter(spec: FieldSpec) -> Converter:
    """A decimal/integer converter for text written like ``1.234,50``; numbers as usual."""
    fraction = spec.type == "decimal"
    number: Converter = _to_decimal if fraction else _to_integer
    style = LocaleFormat(spec.decimal, spec.thousands)
    match = style.pattern(fraction=fraction).fullmatch
    plain = style.plain
    expected = (
        f"{'a decimal number' if fraction else 'an integer'} {style.describe(fraction=fraction)}"
    )

    def convert(value: Any) -> Any:
        if type(value) is not str:
            return number(value)  # already a number (JSON, SQL, XLSX): no separators to read
        text = value.strip()
        if not text:
            return None
        if match(text) is None:
            raise RefusedError(f"{_show(value)} is not {expected}")
        return Decimal(plain(text)) if fraction else int(plain(text))

    return convert


def converter_of(spec: FieldSpec) -> Converter | None:
    """The field's converter; None for a string field (handled inline in map())."""
    if spec.type in ("decimal", "integer") and (spec.decimal != "." or spec.thousands):
        return _locale_converter(spec)
    return _TYPED.get(spec.type)


def as_written(value: Any) -> Any:
    """A constant ``value`` without a ``type``: as TOML wrote it, a float as a decimal."""
    return float_decimal(value) if type(value) is float else value
