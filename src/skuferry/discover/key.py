"""The key: a column unique and non-empty in the sample, article numbers first.

A candidate must hold a value in every sampled record, each one different (compared
as skuferry stores keys: stripped, NFC; a whole number the way the mapper writes it),
and no fraction (a price can be unique too). Among candidates a name that means
"article number" in one of the six languages wins, then code-like values (no spaces,
short) over text; an EAN can identify a product but an article number is preferred.
Two candidates the sample cannot tell apart are a question; a column named like a key
that fails the test is said, with the reason.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from skuferry import canonical
from skuferry.discover import values as v
from skuferry.discover.columns import meaning
from skuferry.discover.model import Column, KeyCandidate, Question
from skuferry.discover.words import FIELDS, KEY, name_score, plain
from skuferry.sync.expressions.numbers import float_text

_ID_NAMES = ("id", "nr", "no", "number", "code", "nummer", "numero", "numéro")


def key_text(value: Any) -> str | None:
    """A value as a key, the way the mapper makes one (None: it cannot be a key)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        return canonical.key(value) or None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return float_text(value) if value.is_integer() else None
    return None


def problem_of(column: Column, count: int) -> str | None:
    """Why ``column`` cannot be the key (None: it can)."""
    keys = [key_text(value) for value in column.values]
    empty = sum(1 for k in keys if k is None)
    if empty:
        return f"empty in {empty} of {count} records"
    twice = [k for k, n in Counter(keys).items() if n > 1]
    if twice:
        return f"not unique: {twice[0]!r} appears {Counter(keys)[twice[0]]} times"
    numbers = v.numbers(column.values)
    if numbers is not None and numbers.fraction:
        return "holds numbers with a fraction (a price or a measure)"
    return None


def candidates(columns: Sequence[Column], count: int) -> tuple[list[KeyCandidate], list[str]]:
    """The columns that could be the key, best first, and what was said of the others."""
    found: list[KeyCandidate] = []
    said: list[str] = []
    for column in columns:
        named = name_score(KEY, meaning(column))
        problem = problem_of(column, count) if count else "no records"
        if problem is not None:
            if named >= 2:
                said.append(f"{column.name!r} is named like a key but is {problem}: not proposed")
            continue
        found.append(_scored(column, named, count))
    found.sort(key=lambda c: -c.score)
    return found, said


def _scored(column: Column, named: int, count: int) -> KeyCandidate:
    reasons = [f"unique and non-empty in all {count} records"]
    score = {3: 10.0, 2: 8.0, 0: 0.0, -1: -3.0}[named]
    label = meaning(column)
    if named >= 2:
        reasons.append(f"its name means article number ({label!r})")
    elif plain(label) in _ID_NAMES or plain(label).endswith(" id"):
        score += 4
        reasons.append("its name is an identifier's")
    texts = v.texts(column.values)
    other = next((f for f in FIELDS if name_score(f, label) >= 2), None) if named < 2 else None
    if other is not None:
        score -= 4
        reasons.append(f"but its name means {other}")
    if v.links(column.values) > 0.5:
        score -= 6
        reasons.append("but its values are links")
    spaced = v.words_share(column.values)
    if spaced > 0.3:
        score -= 6
        reasons.append("but its values are words (a name?)")
    elif texts and v.mean_length(column.values) > 40:
        score -= 3
        reasons.append("but its values are long")
    else:
        score += 2
    gtins = v.gtins(column.values)
    if gtins.total and gtins.valid == gtins.total:
        score -= 1
        reasons.append(
            "its values are GTINs (an EAN identifies a product, an article number is preferred)"
        )
    zeros = v.leading_zeros(column.values)
    if zeros:
        reasons.append(f"leading zeros kept as text ({zeros[0]!r})")
    return KeyCandidate(column, score, "; ".join(reasons))


def question(found: Sequence[KeyCandidate]) -> Question | None:
    """Two candidates the sample cannot tell apart, or none with a key's name among several."""
    if len(found) < 2:
        return None
    best, second = found[0], found[1]
    named = best.score >= 8
    if best.score - second.score > 1 and named:
        return None
    options = tuple((c.column.name, c.why) for c in found[:5])
    text = (
        f"two columns could be the key: {best.column.name!r} and {second.column.name!r}"
        if named
        else f"no column is named like an article number; {len(found)} are unique and non-empty"
    )
    return Question("key", text + ". Which identifies a product on both sides?", options, 0)
