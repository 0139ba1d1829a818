"""Field checks after conversion: ``check = "gtin"``, ``pattern``, ``min``/``max``,
``max_length``, ``one_of``, and the spreadsheet guard every text field gets.

Each check is a function of the converted value that returns None when the value
passes and the reason when it does not; the mapping turns a reason into the row's
rejection (file, line, field), and a rejected row holds its product. Null (an empty
cell without a default) is never checked: ``required`` says whether it may be empty.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from skuferry import canonical
from skuferry.config.schema import FieldSpec

Check = Callable[[Any], str | None]

GTIN_LENGTHS = (8, 12, 13, 14)
SPREADSHEET_REASON = "the digits were lost in a spreadsheet"
# Excel's display of a long number: 3.65275E+11, with a decimal comma 1,76701E+15, 4E+12
_SCIENTIFIC = re.compile(r"\s*[0-9]+(?:[.,][0-9]+)?[eE]\+[0-9]+\s*")


def gtin_valid(digits: str) -> bool:
    """Whether ``digits`` is a GTIN-8/12/13/14 whose last digit is its check digit."""
    if len(digits) not in GTIN_LENGTHS or not (digits.isdigit() and digits.isascii()):
        return False
    body = digits[:-1]
    # weights 3,1,3,1... from the rightmost digit of the body
    total = sum(int(d) * (3 if i % 2 == 0 else 1) for i, d in enumerate(reversed(body)))
    return (10 - total % 10) % 10 == int(digits[-1])


def spreadsheet_mangled(value: Any) -> str | None:
    """The reason when ``value`` is text that looks like Excel's scientific notation."""
    if type(value) is str and ("E+" in value or "e+" in value) and _SCIENTIFIC.fullmatch(value):
        shown = repr(value.strip())
        return f"{shown} looks like a long number in scientific notation: {SPREADSHEET_REASON}"
    return None


def _text(value: Any) -> str:
    return value if type(value) is str else canonical.dumps(value)


def _gtin(value: Any) -> str | None:
    if spreadsheet_mangled(value):
        return spreadsheet_mangled(value)
    digits = _text(value).strip()
    if not (digits.isdigit() and digits.isascii()):
        return f"{digits!r} is not a GTIN (digits only)"
    if len(digits) not in GTIN_LENGTHS:
        return f"{digits!r} is not a GTIN ({len(digits)} digits; GTINs have 8, 12, 13 or 14)"
    if not gtin_valid(digits):
        return f"{digits!r} is not a GTIN (wrong check digit)"
    return None


def checks_of(spec: FieldSpec, convert: Callable[[Any], Any] | None = None) -> list[Check]:
    """The checks ``spec`` asks for, in a fixed order (the first failure is reported).

    ``convert`` is the field's converter: ``one_of``'s values go through it too, so
    ``one_of = [0.1]`` on a decimal field compares as the decimal 0.1, not the float.
    """
    found: list[Check] = []
    if spec.check == "gtin":
        found.append(_gtin)
    if spec.pattern is not None:
        regex = re.compile(spec.pattern)
        pattern = spec.pattern

        def matches(value: Any) -> str | None:
            text = _text(value)
            return None if regex.fullmatch(text) else f"{text!r} does not match {pattern!r}"

        found.append(matches)
    if spec.max_length is not None:
        longest = spec.max_length

        def short(value: Any) -> str | None:
            size = len(_text(value))
            return None if size <= longest else f"is {size} characters long, more than {longest}"

        found.append(short)
    if spec.min is not None or spec.max is not None:
        found.append(_bounds(spec.min, spec.max))
    if spec.one_of is not None:
        allowed = [_converted(value, convert) for value in spec.one_of]
        shown = ", ".join(canonical.dumps(v) for v in allowed)

        def listed(value: Any) -> str | None:
            ok = any(value == a and (type(value) is bool) == (type(a) is bool) for a in allowed)
            return None if ok else f"{_text(value)!r} is not one of {shown}"

        found.append(listed)
    return found


def _converted(value: Any, convert: Callable[[Any], Any] | None) -> Any:
    if convert is None:
        return value
    try:
        return convert(value)
    except Exception:  # noqa: BLE001 - a value of another type simply never matches
        return value


def _bounds(low: Decimal | None, high: Decimal | None) -> Check:
    def within(value: Any) -> str | None:
        if type(value) is bool or not isinstance(value, int | Decimal | float):
            return None  # only numbers have bounds; the type already refused other values
        if low is not None and value < low:
            return f"{_text(value)} is less than the minimum {low}"
        if high is not None and value > high:
            return f"{_text(value)} is more than the maximum {high}"
        return None

    return within
