"""What a column's values are: numbers in a locale's style, dates and their zone, GTINs,
links, HTML, flags. Pure functions of the sampled values.

Numbers are tried against each locale style with the mapper's own pattern
(``LocaleFormat``), so a style proposed here is one the mapping reads exactly. What
the values cannot tell apart (``1.234`` is 1234 in Germany and 1.234 elsewhere) is
said: ``Numbers.ambiguous`` holds the examples, and the file's other columns (``hint``)
decide, or the question stays open.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from skuferry.sync.expressions.numbers import LocaleFormat
from skuferry.sync.map.checks import gtin_valid, spreadsheet_mangled

# (decimal, thousands) in the order a plain reading is preferred
STYLES: tuple[tuple[str, str | None], ...] = (
    (".", None),
    (",", None),
    (",", "."),
    (".", ","),
    (",", " "),
    (".", " "),
    (".", "'"),
)
_PATTERNS = {style: LocaleFormat(*style).pattern(fraction=True) for style in STYLES}
_SEPARATORS = ".,' \u00a0\u202f"
_TAIL = re.compile(r"([.,])([0-9]+)$")
MOSTLY = 0.9  # a column is numbers when at least this share of its values are
# ... and a column whose name already says price or stock, when most of them are: a
# small sample's one "a. A." must not leave the prices out (its row is refused instead)
MOSTLY_NAMED = 0.5


def texts(values: Iterable[Any]) -> list[str]:
    """The values that are text and not blank, stripped."""
    return [v.strip() for v in values if isinstance(v, str) and v.strip()]


def present(values: Iterable[Any]) -> list[Any]:
    """The values that are there: not None, not blank text."""
    return [v for v in values if v is not None and not (isinstance(v, str) and not v.strip())]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class Numbers:
    """How a column writes numbers, if it holds numbers only."""

    decimal: str
    thousands: str | None
    fraction: bool  # some value has digits after the decimal mark (not only zeros)
    zeros: bool  # some whole value is written with a fraction of zeros (25.0000)
    typed: bool  # every value is a number already (JSON, XLSX): no separators to read
    ambiguous: tuple[str, ...] = ()  # values another style reads as another number
    sure: bool = True
    outliers: tuple[str, ...] = ()  # the few values that are no number in this style

    def style(self, *, fraction: bool = True) -> str:
        return LocaleFormat(self.decimal, self.thousands).describe(fraction=fraction)


def _marks(text: str) -> tuple[set[str], set[str]]:
    """The separators ``text`` proves decimal, and those it proves thousands."""
    decimal: set[str] = set()
    thousands: set[str] = set()
    seps = [c for c in text if c in _SEPARATORS]
    if not seps:
        return decimal, thousands
    kinds = {"\u00a0": " ", "\u202f": " "}
    seps = [kinds.get(c, c) for c in seps]
    last = seps[-1]
    for sep in set(seps):
        if seps.count(sep) > 1 or (sep != last):
            thousands.add(sep)
    tail = _TAIL.search(text)
    if tail and last in ".," and seps.count(last) == 1 and len(tail.group(2)) != 3:
        decimal.add(last)
    if len(set(seps)) > 1:
        decimal.add(last)
    return decimal, thousands


def numbers(
    values: Sequence[Any], *, hint: str | None = None, mostly: float = MOSTLY
) -> Numbers | None:
    """How ``values`` write numbers (None: they are not numbers, but for a few outliers).

    ``hint`` is the decimal mark the file's other columns prove, used when this
    column's values read as numbers in two styles (``1.234``); ``mostly`` the share of
    them that must read as numbers (and always more than half).
    """
    given = present(values)
    if not given:
        return None
    typed = [v for v in given if _is_number(v)]
    written = [v.strip() for v in given if isinstance(v, str)]
    if len(typed) + len(written) != len(given):
        return None  # a boolean, a list, an object
    if not written:
        fraction = any(not _whole(v) for v in typed)
        return Numbers(".", None, fraction=fraction, zeros=False, typed=True)
    counts = {s: sum(1 for t in written if _PATTERNS[s].fullmatch(t)) for s in STYLES}
    best = max(counts.values())
    if not best or best < mostly * len(written) or best * 2 <= len(written):
        return None  # text, with a number here and there
    viable = [s for s in STYLES if counts[s] == best]
    outliers = tuple(t for t in written if not _PATTERNS[viable[0]].fullmatch(t))
    written = [t for t in written if t not in outliers]
    proven_decimal: set[str] = set()
    proven_thousands: set[str] = set()
    for text in written:
        decimal, thousands = _marks(text)
        proven_decimal |= decimal
        proven_thousands |= thousands
    fitting = [
        (d, t)
        for d, t in viable
        if d not in proven_thousands
        and t not in proven_decimal
        and (not proven_decimal or d in proven_decimal)
        and (not proven_thousands or t in proven_thousands)
    ] or viable
    used = {c for t in written for c in t if c in _SEPARATORS}
    if not used:  # plain digits: every style reads them alike
        return _result((".", None), written, typed, ambiguous=(), sure=True, outliers=outliers)
    # the styles that read some value as another number than the chosen one would
    readings = {s: [_plain(s, t) for t in written] for s in fitting}
    distinct = {tuple(r) for r in readings.values()}
    if len(distinct) == 1:
        chosen = _simplest(fitting, used)
        return _result(chosen, written, typed, ambiguous=(), sure=True, outliers=outliers)
    by_hint = [s for s in fitting if s[0] == hint]
    chosen = _simplest(by_hint or fitting, used)
    others = [s for s in fitting if readings[s] != readings[chosen]]
    ambiguous = tuple(
        t
        for i, t in enumerate(written)
        if any(readings[o][i] != readings[chosen][i] for o in others)
    )[:3]
    return _result(
        chosen, written, typed, ambiguous=ambiguous, sure=bool(by_hint), outliers=outliers
    )


def _simplest(styles: list[tuple[str, str | None]], used: set[str]) -> tuple[str, str | None]:
    """The style with a thousands separator only if the values use one besides the mark."""
    for style in styles:
        decimal, thousands = style
        if thousands is None and used <= {decimal}:
            return style
    return styles[0]


def _plain(style: tuple[str, str | None], text: str) -> Decimal:
    return Decimal(LocaleFormat(*style).plain(text))


def _whole(value: Any) -> bool:
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, Decimal):
        return value == value.to_integral_value()
    return True


def _result(
    style: tuple[str, str | None],
    written: list[str],
    typed: list[Any],
    *,
    ambiguous: tuple[str, ...],
    sure: bool,
    outliers: tuple[str, ...] = (),
) -> Numbers:
    decimal, thousands = style
    fraction = zeros = False
    for text in written:
        number = _plain(style, text)
        if number != number.to_integral_value():
            fraction = True
        elif decimal in text.replace(thousands or "\0", ""):
            zeros = True
    fraction = fraction or any(not _whole(v) for v in typed)
    return Numbers(
        decimal,
        thousands,
        fraction=fraction,
        zeros=zeros,
        typed=False,
        ambiguous=ambiguous,
        sure=sure,
        outliers=outliers[:3],
    )


# --- dates -------------------------------------------------------------------------

_TIME = r"(?:[T ](?P<time>\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?))?"
_ZONE = r"(?P<zone>Z|[+-]\d{2}:?\d{2})?"
_DATE_SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("%Y-%m-%d", re.compile(rf"\d{{4}}-\d{{2}}-\d{{2}}{_TIME}{_ZONE}")),
    ("%d.%m.%Y", re.compile(rf"\d{{1,2}}\.\d{{1,2}}\.\d{{4}}{_TIME}")),
    ("slash", re.compile(rf"(?P<a>\d{{1,2}})/(?P<b>\d{{1,2}})/\d{{4}}{_TIME}")),
)


@dataclass(frozen=True, slots=True)
class Dates:
    """How a column writes dates: a strftime-like ``format``, whether times carry a zone."""

    format: str
    times: bool  # the values carry a time of day
    zone: bool  # ... with a zone (Z, +02:00)
    sure: bool = True  # False: day and month could be either way round (03/04/2026)

    def describe(self) -> str:
        text = self.format
        if self.times:
            text += " with a time " + ("and its zone" if self.zone else "but no zone")
        return text


def dates(values: Sequence[Any]) -> Dates | None:
    """The date format every value is written in (None: not all are dates)."""
    given = texts(values)
    if not given or len(given) != len(present(values)):
        return None
    for name, shape in _DATE_SHAPES:
        found = [shape.fullmatch(t) for t in given]
        if not all(found):
            continue
        matches = [m for m in found if m is not None]
        times = any(m.group("time") for m in matches)
        zone = "zone" in shape.groupindex and all(m.group("zone") for m in matches)
        fmt, sure = name, True
        if name == "slash":
            day_first = any(int(m.group("a")) > 12 for m in matches)
            month_first = any(int(m.group("b")) > 12 for m in matches)
            fmt = "%m/%d/%Y" if month_first and not day_first else "%d/%m/%Y"
            sure = day_first != month_first
        if not _valid(given, fmt):
            continue
        time_format = fmt + (" %H:%M" if times else "")
        return Dates(time_format if times else fmt, times=times, zone=zone, sure=sure)
    return None


def _valid(given: list[str], fmt: str) -> bool:
    for text in given[:50]:
        day = re.split(r"[T ]", text, maxsplit=1)[0]
        try:
            datetime.strptime(day, fmt)
        except ValueError:
            return False
    return True


# --- codes, links, text ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Gtins:
    """How many values are GTINs with a valid check digit, and what else is there."""

    total: int
    valid: int
    apostrophe: int  # written '4012345000016 (Excel's guard): valid once it is stripped
    mangled: tuple[str, ...]  # 4.00638E+12: the digits were lost in a spreadsheet
    invalid: tuple[str, ...]


def gtins(values: Sequence[Any]) -> Gtins:
    given = [v if isinstance(v, str) else _digits(v) for v in present(values)]
    valid = apostrophe = 0
    mangled: list[str] = []
    invalid: list[str] = []
    for value in given:
        text = value.strip()
        if spreadsheet_mangled(text):
            mangled.append(text)
            continue
        if text.startswith("'"):
            apostrophe += 1
            text = text[1:]
        if gtin_valid(text):
            valid += 1
        else:
            invalid.append(text)
    return Gtins(len(given), valid, apostrophe, tuple(mangled[:3]), tuple(invalid[:3]))


def _digits(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


_LINK = re.compile(r"https?://\S+$", re.IGNORECASE)
_IMAGE = re.compile(r"\.(?:jpe?g|png|gif|webp|avif|tiff?|bmp|svg)(?:\?\S*)?$", re.IGNORECASE)
_HTML = re.compile(r"<(?:p|br|div|ul|li|b|strong|em|span|h[1-6]|table)\b[^>]*>", re.IGNORECASE)


def share(values: Sequence[Any], test: Any) -> float:
    """The share of the present values ``test`` holds for (0 when none are present)."""
    given = present(values)
    if not given:
        return 0.0
    return sum(1 for v in given if isinstance(v, str) and test(v.strip())) / len(given)


def links(values: Sequence[Any]) -> float:
    return share(values, _LINK.match)


def images(values: Sequence[Any]) -> float:
    return share(values, lambda t: _LINK.match(t) and _IMAGE.search(t.split(",")[0].strip()))


def html(values: Sequence[Any]) -> float:
    return share(values, _HTML.search)


def mean_length(values: Sequence[Any]) -> float:
    given = [v for v in present(values) if isinstance(v, str)]
    return sum(len(v) for v in given) / len(given) if given else 0.0


def words_share(values: Sequence[Any]) -> float:
    """The share of text values holding a space (names do; codes rarely)."""
    return share(values, lambda t: " " in t)


def flags(values: Sequence[Any]) -> bool:
    """Every present value is a flag: a boolean, 0/1, or yes/no words of any case."""
    given = present(values)
    allowed = {"true", "false", "1", "0", "yes", "no", "y", "n"}
    return bool(given) and all(
        isinstance(v, bool)
        or (isinstance(v, int) and v in (0, 1))
        or (isinstance(v, str) and v.strip().lower() in allowed)
        for v in given
    )


def leading_zeros(values: Sequence[Any]) -> tuple[str, ...]:
    """Values written with leading zeros (``000123``): kept as text, never as numbers."""
    return tuple(
        v.strip()
        for v in present(values)
        if isinstance(v, str)
        and len(v.strip()) > 1
        and v.strip()[0] == "0"
        and v.strip()[1].isdigit()
    )[:3]


def shown(value: Any, limit: int = 30) -> str:
    """A value as an example in a comment: quoted text, cut to ``limit`` characters."""
    text = value if isinstance(value, str) else str(value)
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[:limit] + "...")
