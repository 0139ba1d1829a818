"""``where`` filters (``[source] where``, a ``[[join]]``'s ``where``): keep, skip, or hold.

A record the expression does not hold true for is skipped (its product counts as one
that left the source). That must not happen because the *export* changed, nor because
a partner could not be found: a skip is a decision that rests on absence, so it is
taken only on fields that are there.

- When the column a filter reads is renamed or dropped, JMESPath reads null for it in
  every record, and every product would look filtered out, so gone. So the fields the
  expression reads from the record (``status``, ``@.status``, ``parent.status``) must
  be there: a record that lacks one is not skipped but refused (``Lacking``), and its
  product is held.
- A field read through a ``[[join]]`` (``pim.enabled``) of a record without a partner
  in that join is not null but unknown: nothing says what the partner would have held.
  The record is refused (``Unpartnered``), and its product is held.

Which fields an expression reads is found on its syntax tree, whatever the spelling:
``x``, ``@.x``, ``"x"``, ``@ | x``, inside functions, comparisons, ``&&``, ``!``,
multi-selects and the subject of an index or projection (``tags[0]``: ``tags``). What a
projection or ``&expr`` reads of each element is not a field of the record.

A field read only as the left side of ``||`` may be missing (or unpartnered):
``status || 'draft'`` says what a record without it means. A field under a null that is
not a join (``parent.status`` with ``parent`` null) is null, not lacking.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import jmespath

Reader = Callable[[dict[str, Any]], Any]
Chain = tuple[str, ...]  # a field path from the record: ("pim", "enabled")

# node types whose children are all evaluated against the same value, and used whole
_USES_ALL = frozenset(
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
# node types whose first child is evaluated against the value and used whole; the others
# run on each element of its result (never a field of the record)
_ON_ELEMENTS = frozenset(
    {"projection", "value_projection", "filter_projection", "index_expression", "flatten"}
)


class Lacking(Exception):  # noqa: N818 - a record's problem, not a program error
    """The record lacks a field the filter reads; ``str()`` is the reason."""

    def __init__(self, field: str) -> None:
        self.field = field
        super().__init__(
            f"reads {field!r}, which this record lacks (a renamed or dropped column?); "
            "held, not skipped"
        )


class Unpartnered(Exception):  # noqa: N818 - a record's problem, not a program error
    """The filter reads a field through a join in which the record has no partner."""

    def __init__(self, field: str, join: str) -> None:
        self.field = field
        self.join = join
        super().__init__(
            f"reads {field!r}, but this record has no partner in join {join!r}, so its "
            f"value is unknown; held, not skipped (write {field} || <value> to say what a "
            "missing partner means)"
        )


def truthy(value: Any) -> bool:
    """JMESPath's truth: false, null, "", [] and {} are false; 0 is true."""
    return not (value is None or value is False or value in ("", [], {}))


class Where:
    """A compiled filter: ``keeps(fields)`` is True, False, or raises ``Lacking`` /
    ``Unpartnered`` (or the path's own errors: ``Refused``, ``JMESPathError``).

    ``joins``: the names under which records carry their join partners (null: none).
    """

    def __init__(
        self, expression: str, compile_path: Callable[[str], Reader], joins: Collection[str] = ()
    ) -> None:
        self.text = expression
        self._search = compile_path(expression)
        self.needs: list[Chain] = reads(expression)
        self._joins = frozenset(joins)

    def keeps(self, fields: dict[str, Any]) -> bool:
        for chain in self.needs:
            if len(chain) > 1 and chain[0] in self._joins and _null(fields, chain[0]):
                raise Unpartnered(".".join(chain), chain[0])
            if _lacks(fields, chain):
                raise Lacking(".".join(chain))
        return truthy(self._search(fields))


def reads(expression: str) -> list[Chain]:
    """The field paths ``expression`` needs from the record, sorted; ``||``'s left sides
    not among them (see the module docstring)."""
    found: list[Chain] = []
    _use(jmespath.compile(expression).parsed, (), found)
    return sorted({chain for chain in found if chain})


def _use(node: dict[str, Any], base: Chain | None, found: list[Chain]) -> None:
    """Evaluate ``node`` against ``base`` and note its value's path as read (if it is one)."""
    chain = _value(node, base, found)
    if chain is not None:
        found.append(chain)


def _value(node: dict[str, Any], base: Chain | None, found: list[Chain]) -> Chain | None:
    """The path from the record that ``node``'s value is, evaluated against ``base`` (a path
    from the record, or None: a value made along the way); what it reads on the way goes to
    ``found``."""
    kind = node["type"]
    children: list[dict[str, Any]] = [c for c in node.get("children", []) if isinstance(c, dict)]
    if kind == "field":
        return None if base is None else (*base, str(node["value"]))
    if kind in ("current", "identity"):
        return base
    if kind in ("subexpression", "pipe"):  # each part reads the value of the one before
        at = base
        for child in children:
            at = _value(child, at, found)
        return at
    if kind == "or_expression":  # the left side's own path may be missing: a fallback
        left, right = children
        _value(left, base, found)
        _use(right, base, found)
    elif kind in _USES_ALL:
        for child in children:
            _use(child, base, found)
    elif kind in _ON_ELEMENTS and children:
        _use(children[0], base, found)
        for child in children[1:]:
            _use(child, None, found)
    elif kind == "expref":  # &expr: evaluated on each element a function hands it
        for child in children:
            _use(child, None, found)
    # literal, index, slice: nothing read from the record
    return None


def _null(fields: dict[str, Any], name: str) -> bool:
    return name in fields and fields[name] is None


def _lacks(fields: dict[str, Any], chain: Chain) -> bool:
    value: Any = fields
    for name in chain:
        if not isinstance(value, dict):
            return False  # null (or not an object): the path reads null, it lacks nothing
        if name not in value:
            return True
        value = value[name]
    return False


__all__ = ["Lacking", "Unpartnered", "Where", "reads", "truthy"]
