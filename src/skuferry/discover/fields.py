"""Columns -> the product's fields: by name (``words``) and by content (``values``), typed
in the style the values are written in.

Each field takes the column whose name means it best and whose values fit it (a price
must be numbers, an EAN must be GTINs, an image a link); a GTIN or an image link is
recognised by its values alone too. A proposed type is tried on every sampled value
with the mapper's own converter and checks (``refusals``), so what the proposal says a
row would be refused for is what a sync would refuse it for.

What the sample cannot decide becomes a ``Question``: two columns named alike for one
field, a column of numbers named like nothing (price or stock?), times without a zone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from skuferry.config.schema import FieldSpec
from skuferry.discover import values as v
from skuferry.discover.columns import context, meaning
from skuferry.discover.model import Column, FieldChoice, Question, Sure
from skuferry.discover.words import FIELDS, name_score
from skuferry.sync.map.converters import RefusedError, converter_of, to_string
from skuferry.sync.map.field_specs import field_checks

NUMERIC = ("price", "stock", "weight")


@dataclass(frozen=True, slots=True)
class Fit:
    """A column's fit for a field: the spec it would be read by, and why."""

    target: str
    column: Column
    score: int  # 30 / 20: named so (exactly / in part); 5: by its values alone
    spec: dict[str, Any]
    why: str
    notes: tuple[str, ...] = ()


def decimal_hint(columns: Sequence[Column], *, delimiter: str | None = None) -> str | None:
    """The decimal mark the file's numbers prove (``1.234,50`` proves ``,``), if any.

    A semicolon-separated file leans to the decimal comma (German and French exports)
    when no column proves either."""
    votes = {".": 0, ",": 0}
    for column in columns:
        numbers = v.numbers(column.values)
        if numbers is None or numbers.typed or not numbers.sure:
            continue
        if numbers.decimal == "," or numbers.thousands is not None or numbers.fraction:
            votes[numbers.decimal] += 1
    if votes[","] != votes["."]:
        return "," if votes[","] > votes["."] else "."
    return "," if delimiter == ";" else None


def refusals(column: Column, spec: dict[str, Any]) -> list[tuple[Any, str]]:
    """The sampled values the mapper would refuse under ``spec``, with its reason."""
    try:
        field = FieldSpec(**{**spec, "column": "x", "path": None})
    except ValueError:
        return []
    convert = converter_of(field) or to_string
    checks = field_checks(field)
    out = []
    for value in v.present(column.values):
        try:
            converted = convert(value)
        except RefusedError as exc:
            out.append((value, str(exc)))
            continue
        for check in checks:
            if converted is not None and (problem := check(converted)) is not None:
                out.append((value, problem))
                break
    return out


def numeric(
    target: str, column: Column, hint: str | None
) -> tuple[dict[str, Any], str, list[str]] | None:
    """The spec that reads ``column``'s numbers as ``target`` (stock: an integer when the
    values are whole), why, and what to say; None when the values are not mostly numbers
    (its name says what it is, so most of them is enough: the others are refused rows)."""
    numbers = v.numbers(column.values, hint=hint, mostly=v.MOSTLY_NAMED)
    if numbers is None:
        return None
    spec: dict[str, Any] = {"type": "decimal"}
    notes = []
    why = "numbers"
    if target == "stock":
        if numbers.fraction:
            notes.append(
                f"{column.name!r} holds fractions: stock proposed as a decimal, not an integer"
            )
        elif numbers.zeros and not numbers.typed:
            notes.append(
                f"{column.name!r} writes whole numbers with a fraction of zeros (like 25.0000), "
                "which an integer field refuses: stock proposed as a decimal"
            )
        else:
            spec["type"] = "integer"
            why = "whole numbers"
    if not numbers.typed and (numbers.decimal != "." or numbers.thousands):
        if spec["type"] == "decimal" and numbers.decimal != ".":
            spec["decimal"] = numbers.decimal
        if numbers.thousands:
            spec["thousands"] = numbers.thousands
        why += f" {numbers.style(fraction=spec['type'] == 'decimal')}"
    elif numbers.typed:
        why += " (typed in the source)"
    elif (
        spec["type"] == "decimal"
        and hint == ","
        and not any("." in t for t in v.texts(column.values))
    ):
        spec["decimal"] = ","  # whole numbers in the sample, in a file of decimal commas
        why += ', the file\'s decimal mark ","'

    if numbers.outliers:
        shown = ", ".join(repr(o) for o in numbers.outliers)
        notes.append(
            f"{column.name!r}: {shown} is no number written like the others: "
            "its row is refused, with the line"
            if len(numbers.outliers) == 1
            else f"{column.name!r}: {shown} are no numbers written like the others: "
            "their rows are refused, with their lines"
        )
    if numbers.ambiguous:
        shown = ", ".join(repr(a) for a in numbers.ambiguous)
        style = numbers.style(fraction=spec["type"] == "decimal")
        notes.append(
            f"{column.name!r}: {shown} could be read in two ways; read {style}"
            + (
                ", as the file's other numbers are written"
                if numbers.sure
                else ": nothing in the sample tells, check the payloads"
            )
        )
    return spec, why, notes


# What a column's values must be for a field, and what they add to its spec: each
# returns (score, spec, why, notes) or None when the values do not fit.
_Fitted = tuple[int, dict[str, Any], str, list[str]] | None


def fit(target: str, column: Column, *, hint: str | None) -> Fit | None:
    """How ``column`` would be read as ``target``, or None when its values do not fit."""
    named = name_score(target, meaning(column))
    if named == 0 and column.path is not None:  # its parents may say it: pricing.gross
        named = min(2, name_score(target, context(column)))
    if named < 0 or not v.present(column.values):
        return None
    score = {3: 30, 2: 20}.get(named, 0)
    if score and "[0]" in column.name:
        score -= 10  # a leaf of a list's first item: an attribute's name is no product name
    why = f"its name means {target}" if named else ""
    if target in NUMERIC:
        found = numeric(target, column, hint)
        fitted: _Fitted = None if found is None or not score else (score, *found)
    elif target == "ean":
        fitted = _ean(column, score)
    elif target == "image_url":
        fitted = _image(column, score)
    else:
        fitted = _text(target, column, score)
    if fitted is None:
        return None
    score, spec, what, notes = fitted
    why = "; ".join(part for part in (why if score >= 10 else "", what) if part)
    return Fit(target, column, score, spec, why, tuple(notes))


def _structured(column: Column) -> bool:
    return any(isinstance(x, dict | list) for x in v.present(column.values))


def _ean(column: Column, score: int) -> _Fitted:
    gtins = v.gtins(column.values)
    share = gtins.valid / gtins.total if gtins.total else 0.0
    if _structured(column) or (not score and (share < 0.9 or gtins.total < 2)):
        return None
    spec: dict[str, Any] = {}
    notes: list[str] = []
    why = "" if score else "by its values; "
    score = score or 5
    if share < 0.8:
        why += f"only {gtins.valid} of {gtins.total} are valid GTINs: no GTIN check"
        notes.append(f"{column.name!r} holds codes that are mostly not GTINs: sent as text")
        return score, spec, why, notes
    spec["check"] = "gtin"
    why += f"{gtins.valid} of {gtins.total} are GTINs with a valid check digit"
    if gtins.apostrophe:
        spec["path"] = f"strip_prefix({_expression(column)}, '\\'')"
        notes.append(f"{column.name!r}: Excel's apostrophe ('4012...) is stripped")
    bad = [*gtins.invalid, *gtins.mangled]
    if bad:
        notes.append(
            f"{column.name!r}: {', '.join(map(repr, bad))} do not pass the GTIN check: "
            "their rows are refused (and held) until the export is fixed"
        )
    return score, spec, why, notes


def _image(column: Column, score: int) -> _Fitted:
    if v.links(column.values) < 0.8:
        return None
    if not score:
        if v.images(column.values) < 0.9:
            return None
        return 5, {}, "by its values; links to images", []
    return score, {}, "links", []


def _text(target: str, column: Column, score: int) -> _Fitted:
    """name, description, brand, category, status: named so, and text (or flags, lists)."""
    if not score:
        return None
    structured = _structured(column)
    if target == "status":
        if structured:
            return None
        if v.flags(column.values):
            return score, {"type": "boolean"}, "flags (1/0, yes/no)", []
        return score, {}, "", []
    if target in ("category", "brand"):
        if structured:
            return score, {"type": "json"}, "lists, sent as JSON", []
        return score, {}, "", []
    if structured or v.numbers(column.values) is not None or v.links(column.values) > 0.5:
        return None
    if target == "description" and v.html(column.values) > 0.2:
        return score, {}, "HTML (passes through untouched)", []
    return score, {}, "", []


def _expression(column: Column) -> str:
    if column.path is not None:
        return column.path
    escaped = column.name.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


@dataclass(frozen=True)
class Fields:
    """The proposed fields, the columns left out, the questions and notes."""

    choices: tuple[FieldChoice, ...]
    used: frozenset[str]  # the names of the columns read
    questions: tuple[Question, ...]
    notes: tuple[str, ...]


def propose(
    columns: Sequence[Column], *, key: Column | None, hint: str | None, count: int
) -> Fields:
    """The product fields read from ``columns`` (the key's column left to the key)."""
    free = [c for c in columns if key is None or c.name != key.name]
    fits = [f for c in free for t in FIELDS if (f := fit(t, c, hint=hint)) is not None]
    fits.sort(key=lambda f: (-f.score, FIELDS.index(f.target)))
    taken: dict[str, Fit] = {}
    used: set[str] = set()
    for candidate in fits:
        if candidate.target in taken or candidate.column.name in used:
            continue
        taken[candidate.target] = candidate
        used.add(candidate.column.name)
    questions: list[Question] = []
    notes: list[str] = []
    for target, chosen in taken.items():
        rivals = [
            f
            for f in fits
            if f.target == target and f.score == chosen.score and f.column.name not in used
        ]
        if rivals and chosen.score >= 20:
            names = [chosen.column.name, *(r.column.name for r in rivals)]
            options = (
                *((n, f"read {target} from {n!r}") for n in names),
                ("none", f"leave {target} out"),
            )
            questions.append(
                Question(
                    f"field:{target}",
                    f"{len(names)} columns could be the {target}: " + ", ".join(map(repr, names)),
                    options,
                    0,
                )
            )
    _name_from_description(taken, notes)
    choices = [
        _choice(f, count) for f in sorted(taken.values(), key=lambda f: FIELDS.index(f.target))
    ]
    for f in taken.values():
        notes.extend(f.notes)
    used = {f.column.name for f in taken.values()}
    questions.extend(_numbers_unnamed(free, used, taken, hint))
    return Fields(tuple(choices), frozenset(used), tuple(questions), tuple(notes))


def _name_from_description(taken: dict[str, Fit], notes: list[str]) -> None:
    """No column named like a name, but a short-text "description": it is the name."""
    description = taken.get("description")
    if "name" in taken or description is None:
        return
    column = description.column
    if v.mean_length(column.values) <= 80 and v.html(column.values) < 0.2:
        del taken["description"]
        taken["name"] = Fit(
            "name", column, description.score, {}, "short texts under a description's name"
        )
        notes.append(
            f"no column is named like a product name; {column.name!r} holds short texts: "
            "proposed as the name"
        )


def _choice(found: Fit, count: int) -> FieldChoice:
    column = found.column
    spec = {**column.spec(), **found.spec}
    if "path" in found.spec:
        spec.pop("column", None)
    sure: Sure = "sure" if found.score >= 30 else "likely"
    if found.target == "name":
        filled = len(v.present(column.values))
        if count and filled / count >= 0.95:
            spec["required"] = True
    return FieldChoice(found.target, _ordered(spec), found.why, sure, column.name)


_ORDER = ("column", "path", "value", "type", "decimal", "thousands", "check", "required", "default")


def _ordered(spec: dict[str, Any]) -> dict[str, Any]:
    return {k: spec[k] for k in sorted(spec, key=lambda k: _ORDER.index(k) if k in _ORDER else 99)}


def _numbers_unnamed(
    free: Sequence[Column], used: set[str], taken: dict[str, Fit], hint: str | None
) -> list[Question]:
    """A column of numbers whose name means nothing: price or stock? Asked, not guessed."""
    open_targets = [t for t in ("price", "stock") if t not in taken]
    if not open_targets:
        return []
    out = []
    for column in free:
        if column.name in used:
            continue
        numbers = v.numbers(column.values, hint=hint)
        if numbers is None or v.dates(column.values) is not None:
            continue
        gtins = v.gtins(column.values)
        if gtins.total and gtins.valid == gtins.total:
            continue
        kind = "numbers with a fraction" if numbers.fraction else "whole numbers"
        example = v.shown(v.present(column.values)[0])
        targets = (
            open_targets
            if not numbers.fraction
            else [t for t in open_targets if t != "stock"] or open_targets
        )
        options = tuple((t, f"read {t} from {column.name!r}") for t in targets)
        options += (("none", "leave it out"),)
        out.append(
            Question(
                f"column:{column.name}",
                f"{column.name!r} holds {kind} (e.g. {example}) and its name says nothing: "
                + " or ".join(targets)
                + "?",
                options,
                None,
            )
        )
    return out


def describe(column: Column, *, hint: str | None) -> str:
    """What a column left out holds, for its comment line."""
    given = v.present(column.values)
    if not given:
        return "empty in the sample"
    if any(isinstance(x, dict | list) for x in given):
        return "lists or objects"
    dates = v.dates(column.values)
    if dates is not None:
        return f"dates, {dates.describe()}, e.g. {v.shown(given[0])}"
    if v.flags(column.values):
        return "flags (1/0, yes/no)"
    numbers = v.numbers(column.values, hint=hint)
    if numbers is not None:
        what = "numbers" if numbers.fraction else "whole numbers"
        return f"{what}, e.g. {v.shown(given[0])}"
    if v.links(column.values) > 0.8:
        return f"links, e.g. {v.shown(given[0], 50)}"
    return f"text, e.g. {v.shown(given[0])}"


def zone_questions(columns: Sequence[Column]) -> list[Question]:
    """Times written without a zone: said, since nothing in the sample tells the zone."""
    out = []
    for column in columns:
        dates = v.dates(column.values)
        if dates is None or not dates.times or dates.zone:
            continue
        example = v.shown(v.present(column.values)[0])
        out.append(
            Question(
                "date",
                f"{column.name!r} holds times without a zone ({example}): they are the "
                "exporter's local time, which the file does not name; skuferry sends them "
                "as written (an incremental pull's window, if you set one up on them, "
                "reaches back an hour for the night the clocks change)",
            )
        )
        if not dates.sure:
            out.append(
                Question(
                    "date",
                    f"{column.name!r} writes dates as {dates.format}, but no value tells day "
                    "from month (03/04/2026): check with the exporter",
                )
            )
    return out
