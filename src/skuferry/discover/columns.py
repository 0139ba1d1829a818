"""Records -> columns: a flat row's cells, or a nested record's leaves as JMESPath paths.

A flat record (CSV, XLSX) is a column per header name, read as ``column = "..."``. A
nested one (JSON Lines, an API's items, an XML element) is a column per leaf, read as
``path = "..."``: members by name, the first element of a list of objects (``[0]``).
XML repeats an element as a list only when it repeats: where a member is a list in one
record and a single object in another, the path reads either
(``[ARTICLE_PRICE][] | [0].PRICE_AMOUNT``). A list of plain values is one leaf.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from skuferry.discover.framing import member
from skuferry.discover.model import Column

MAX_DEPTH = 6
MAX_LEAVES = 400
_FIRST = object()  # a path step: the first element of a list of objects

Steps = tuple[Any, ...]  # member names and _FIRST


def flat(records: Sequence[dict[str, Any]]) -> bool:
    """Every value of every record is a plain value (a row of a CSV or a sheet)."""
    return all(not isinstance(v, dict | list) for r in records for v in r.values())


def columns(records: Sequence[dict[str, Any]]) -> list[Column]:
    """The sample's columns, in the order the records first show them."""
    if flat(records):
        names: dict[str, None] = {}
        for record in records:
            names.update(dict.fromkeys(record))
        return [Column(n, None, tuple(r.get(n) for r in records)) for n in names]
    lists = _list_steps(records)
    seen: dict[Steps, None] = {}
    for record in records:
        for steps, _ in _leaves(record, (), lists):
            if len(seen) >= MAX_LEAVES:
                break
            seen.setdefault(steps, None)
    out = []
    for steps in seen:
        values = tuple(_get(r, steps) for r in records)
        path = jmespath_of(steps, lists)
        name = _label(steps)
        top = len(steps) == 1 and isinstance(steps[0], str)
        out.append(Column(name, None if top else path, values))
    return out


def _list_steps(records: Sequence[dict[str, Any]]) -> dict[Steps, bool]:
    """Member paths holding a list of objects somewhere: True when elsewhere a single object."""
    kinds: dict[Steps, set[str]] = {}

    def visit(value: Any, steps: Steps, depth: int) -> None:
        if depth > MAX_DEPTH:
            return
        if isinstance(value, dict):
            for name, inner in value.items():
                at = (*steps, name)
                if isinstance(inner, list) and inner and all(isinstance(i, dict) for i in inner):
                    kinds.setdefault(at, set()).add("list")
                    visit(inner[0], (*at, _FIRST), depth + 1)
                elif isinstance(inner, dict):
                    kinds.setdefault(at, set()).add("object")
                    visit(inner, at, depth + 1)

    for record in records:
        visit(record, (), 0)
    return {steps: "object" in found for steps, found in kinds.items() if "list" in found}


def _leaves(value: Any, steps: Steps, lists: dict[Steps, bool]) -> Iterator[tuple[Steps, Any]]:
    if len(steps) > MAX_DEPTH * 2:
        return
    if isinstance(value, dict):
        for name, inner in value.items():
            at = (*steps, name)
            if at in lists:
                first = inner[0] if isinstance(inner, list) and inner else inner
                if isinstance(first, dict):
                    yield from _leaves(first, (*at, _FIRST), lists)
            elif isinstance(inner, dict):
                yield from _leaves(inner, at, lists)
            else:
                yield at, inner


def _get(record: Any, steps: Steps) -> Any:
    value = record
    for step in steps:
        if step is _FIRST:
            if isinstance(value, list):
                value = value[0] if value else None
            # a single object where others hold a list: itself
        elif isinstance(value, dict):
            value = value.get(step)
        else:
            return None
        if value is None:
            return None
    return value


def jmespath_of(steps: Steps, lists: dict[Steps, bool]) -> str:
    """The JMESPath that reads ``steps`` from a record (see the module's docstring)."""
    expr = ""
    done: Steps = ()
    for step in steps:
        if step is _FIRST:
            if lists.get(done):  # a list here, a single object elsewhere: read either
                expr = f"[{expr}][] | [0]"
            else:
                expr += "[0]"
        else:
            expr = f"{expr}.{member(step)}" if expr else member(step)
        done = (*done, step)
    return expr


_GENERIC = {"data", "value", "values", "amount", "#text", "text", "href", "node", "content"}


def _label(steps: Steps) -> str:
    """How a leaf is named to the user: its member names, dotted, lists as ``[0]``."""
    text = ""
    for step in steps:
        text += "[0]" if step is _FIRST else (f".{step}" if text else str(step))
    return text


def meaning(column: Column) -> str:
    """The name a leaf's meaning is read from: its last member that is not a generic word
    (Akeneo's ``values.name[0].data`` means ``name``; XML's ``@reference`` ``reference``)."""
    if column.path is None:
        return column.name
    parts = [p for p in column.name.replace("[0]", "").split(".") if p]
    for part in reversed(parts):
        if part.lower().lstrip("@#") not in _GENERIC and not _locale(part):
            return part.lstrip("@")
    return parts[-1] if parts else column.name


def context(column: Column) -> str:
    """A leaf's whole place as words (``pricing.gross`` -> ``pricing gross``), for a name
    whose last member alone says little."""
    parts = column.name.replace("[0]", "").split(".")
    return " ".join(p for p in parts if p.lower().lstrip("@#") not in _GENERIC and not _locale(p))


def _locale(part: str) -> bool:
    return len(part) == 5 and part[2] == "_" and part[:2].islower() and part[3:].isupper()
