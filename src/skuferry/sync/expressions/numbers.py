"""Numbers as sources write them: locale separators and binary floats, read exactly.

Pure text handling, no float arithmetic on the way: ``1.234,50`` becomes the
text ``1234.50`` and then a ``Decimal``; a float becomes its shortest
round-trip text (``repr``), so ``21.35`` stays ``21.35`` and never turns into
``21.350000000000001`` (nor, from a 32-bit column, ``21.350000381469727``).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from decimal import Decimal

# A space as thousands separator also matches the no-break spaces French and Swiss
# exports write (U+00A0, U+202F): they look the same in every spreadsheet.
_SPACES = " \u00a0\u202f"


def float_text(value: float) -> str:
    """The shortest text that reads back as ``value``, without a trailing ``.0``."""
    if value.is_integer() and abs(value) <= _EXACT_INTEGERS:
        return str(int(value))  # 12346.0 (an XLSX number cell) is the key "12346"
    return shortest(value)


def float_decimal(value: float) -> Decimal:
    """``value`` as the Decimal of its shortest round-trip text: 21.35 -> Decimal('21.35')."""
    return Decimal(shortest(value))


def shortest(value: float) -> str:
    """``repr(value)``; or, for a 32-bit float widened to 64 bits, its own shortest text.

    PostgreSQL ``real`` and MySQL ``FLOAT`` columns hold 32-bit floats; a driver hands
    over 21.35f as the double 21.350000381469727. A double whose shortest text needs
    more than the 9 digits any 32-bit float needs, yet is exactly a 32-bit float, is
    such a value (a computed double lands on that grid about once in 2**29): it is
    written as the 32-bit float would be, ``21.35``.
    """
    text = repr(value)
    if _significant_digits(text) <= _FLOAT32_DIGITS or not _is_float32(value):
        return text
    for digits in range(1, _FLOAT32_DIGITS + 1):
        short = f"{value:.{digits}g}"
        if _float32(float(short)) == value:
            return short
    return text  # pragma: no cover - 9 digits always round-trip a 32-bit float


_FLOAT32_DIGITS = 9
_EXACT_INTEGERS = 2**53  # beyond, a float's integer digits are noise: 1e+16 stays "1e+16"
_F32 = struct.Struct("<f")


def _float32(value: float) -> float:
    result: float = _F32.unpack(_F32.pack(value))[0]
    return result


def _is_float32(value: float) -> bool:
    try:
        return _float32(value) == value
    except OverflowError:  # beyond the 32-bit range
        return False


def _significant_digits(text: str) -> int:
    mantissa = text.lstrip("-").split("e")[0].replace(".", "")
    return len(mantissa.lstrip("0"))


@dataclass(frozen=True, slots=True)
class LocaleFormat:
    """How a column writes numbers: the decimal mark and an optional thousands separator."""

    decimal: str = "."
    thousands: str | None = None

    def pattern(self, *, fraction: bool) -> re.Pattern[str]:
        """Sign, digits grouped by threes (or not grouped at all), optional fraction."""
        mark = re.escape(self.decimal)
        if self.thousands is None:
            whole = "(?:0|[1-9][0-9]*)"
        else:
            sep = f"[{re.escape(_SPACES)}]" if self.thousands == " " else re.escape(self.thousands)
            whole = f"(?:0|[1-9][0-9]{{0,2}}(?:{sep}[0-9]{{3}})+|[1-9][0-9]*)"
        tail = f"(?:{mark}[0-9]+)?" if fraction else ""
        return re.compile(f"-?{whole}{tail}")

    def example(self, *, fraction: bool) -> str:
        """The format as an operator recognises it: ``1.234,56``."""
        text = "1" + (self.thousands or "") + "234"
        return text + (self.decimal + "56" if fraction else "")

    def describe(self, *, fraction: bool) -> str:
        """``written like 1.234,56 (decimal ",", thousands ".")``, for rejection reasons."""
        parts = [f'decimal "{self.decimal}"'] if fraction else []
        parts.append(
            f'thousands "{self.thousands}"' if self.thousands else "no thousands separator"
        )
        return f"written like {self.example(fraction=fraction)} ({', '.join(parts)})"

    def plain(self, text: str) -> str:
        """Text the pattern matched, as a plain number: ``1.234,50`` -> ``1234.50``."""
        if self.thousands == " ":
            text = text.translate({ord(c): None for c in _SPACES})
        elif self.thousands is not None:
            text = text.replace(self.thousands, "")
        return text.replace(self.decimal, ".") if self.decimal != "." else text
