"""``where`` filters (``[source] where``, a ``[[join]]``'s ``where``): keep, skip, or hold.

A record the expression does not hold true for is skipped (its product counts as one
that left the source). That must not happen because the *export* changed: when the
column a filter reads is renamed or dropped, JMESPath reads null for it in every
record, and every product would look filtered out, so gone. So the fields the
expression reads from the record (``status``, ``parent.status``, ``pim.enabled``) must
be there: a record that lacks one is not skipped but refused (``Lacking``), and its
product is held.

A field read only as the left side of ``||`` may be missing: ``status || 'draft'``
says what a record without it means. A field under a null (a join without a partner:
``pim.enabled`` with ``pim`` null) is null, not lacking.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import jmespath

Reader = Callable[[dict[str, Any]], Any]

# node types whose children are all evaluated against the same record
_SAME_RECORD = frozenset(
    {
        "comparator",
        "and_expression",
        "not_expression",
        "function_expression",
        "multi_select_list",
        "multi_select_dict",
        "key_val_pair",
    }
)
# node types whose first child is evaluated against the record, the rest against its result
_FIRST_ONLY = frozenset(
    {
        "subexpression",
        "index_expression",
        "projection",
        "value_projection",
        "filter_projection",
        "flatten",
        "pipe",
    }
)


class Lacking(Exception):  # noqa: N818 - a record's problem, not a program error
    """The record lacks a field the filter reads; ``str()`` is the reason."""

    def __init__(self, field: str) -> None:
        self.field = field
        super().__init__(
            f"reads {field!r}, which this record lacks (a renamed or dropped column?); "
            "held, not skipped"
        )


def truthy(value: Any) -> bool:
    """JMESPath's truth: false, null, "", [] and {} are false; 0 is true."""
    return not (value is None or value is False or value in ("", [], {}))


class Where:
    """A compiled filter: ``keeps(fields)`` is True, False, or raises ``Lacking`` (or the
    path's own errors: ``Refused``, ``JMESPathError``)."""

    def __init__(self, expression: str, compile_path: Callable[[str], Reader]) -> None:
        self.text = expression
        self._search = compile_path(expression)
        self.needs = sorted(set(_reads(jmespath.compile(expression).parsed)))

    def keeps(self, fields: dict[str, Any]) -> bool:
        for chain in self.needs:
            if _lacks(fields, chain):
                raise Lacking(".".join(chain))
        return truthy(self._search(fields))


def _chain(node: dict[str, Any]) -> tuple[str, ...] | None:
    """``a.b.c`` as ("a", "b", "c"); None when the node is not a plain field path."""
    if node["type"] == "field":
        return (str(node["value"]),)
    if node["type"] == "subexpression":
        parts: list[str] = []
        for child in node["children"]:
            found = _chain(child)
            if found is None:
                return None
            parts.extend(found)
        return tuple(parts)
    return None


def _reads(node: dict[str, Any]) -> Iterator[tuple[str, ...]]:
    """The field paths ``node`` reads from the record it is evaluated against."""
    chain = _chain(node)
    if chain is not None:
        yield chain
        return
    kind = node["type"]
    children: list[dict[str, Any]] = [c for c in node.get("children", []) if isinstance(c, dict)]
    if kind == "or_expression":  # the left side may be missing: the right side is its fallback
        left, right = children
        if _chain(left) is None:
            yield from _reads(left)
        yield from _reads(right)
    elif kind in _SAME_RECORD:
        for child in children:
            yield from _reads(child)
    elif kind in _FIRST_ONLY and children:
        yield from _reads(children[0])
    # literal, current, identity, expref, index, slice: nothing read from the record


def _lacks(fields: dict[str, Any], chain: tuple[str, ...]) -> bool:
    value: Any = fields
    for name in chain:
        if not isinstance(value, dict):
            return False  # null (or not an object): the path reads null, it lacks nothing
        if name not in value:
            return True
        value = value[name]
    return False
