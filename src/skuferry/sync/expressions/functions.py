"""The JMESPath functions skuferry adds to every mapping path: lookups and text helpers.

Registered with jmespath's own mechanism (a ``Functions`` subclass handed to the
interpreter through ``Options(custom_functions=...)``), so they sit beside the
standard ones (``join``, ``to_string``, ...) in any ``path``:

- ``lookup('table', value)``: the label ``[mapping.tables]`` gives the code;
  ``lookup('table', value, 'fallback')`` uses the fallback for a code the table
  lacks (so does a file table's ``default``). A code missing without one is a
  ``Refused`` problem naming the table and the code: the row is rejected.
- ``replace(text, regex, replacement)``, ``split(text, separator)``,
  ``trim(text)``, ``lower(text)``, ``upper(text)``, ``strip_prefix(text, prefix)``,
  ``concat(a, b, ...)``.

Every text helper takes a number as its text (``123`` -> ``"123"``) and returns
null for null, so an empty cell stays empty and a ``required`` field still
reports it; ``concat`` skips nulls. Argument types are checked here and not by
jmespath, because sources yield ``Decimal`` numbers jmespath does not know.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, TypeVar, cast

import jmespath
import jmespath.functions
import jmespath.visitor

from skuferry import canonical
from skuferry.sync.expressions.numbers import float_text

_ANY: dict[str, Any] = {"types": []}  # checked by the functions themselves
_F = TypeVar("_F", bound=Callable[..., Any])
# jmespath is untyped: its decorator, typed as what it is (it returns the function itself)
signature = cast("Callable[..., Callable[[_F], _F]]", jmespath.functions.signature)


class Refused(Exception):  # noqa: N818 - a row's problem, not a program error
    """A function refused its input; the message is the rejection's reason."""


class Table:
    """One ``[mapping.tables]`` table: code -> label, and what a missing code gives."""

    __slots__ = ("default", "entries", "name")

    def __init__(self, name: str, entries: Mapping[str, Any], default: Any = None) -> None:
        self.name = name
        self.entries = dict(entries)
        self.default = default  # None: a missing code is refused

    def digest(self) -> str:
        """What the table holds, for record digests: a changed table re-maps every row."""
        return canonical.digest({"entries": self.entries, "default": self.default})


def text_of(value: Any, function: str) -> str | None:
    """``value`` as text for a text function: numbers as written, null as None."""
    if value is None or type(value) is str:
        return value
    if type(value) is bool:
        return "true" if value else "false"
    if isinstance(value, int | Decimal):
        return str(value)
    if type(value) is float and math.isfinite(value):
        return float_text(value)
    kind = "an object" if isinstance(value, dict) else "a list" if isinstance(value, list) else ""
    raise Refused(f"{function}() needs text, not {kind or type(value).__name__}")


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise Refused(f"replace(): {pattern!r} is not a regular expression ({exc})") from None


class SkuferryFunctions(jmespath.functions.Functions):  # type: ignore[misc]
    """The standard JMESPath functions plus skuferry's (see the module docstring)."""

    def __init__(self, tables: Mapping[str, Table] | None = None) -> None:
        self.tables = dict(tables or {})

    @signature(_ANY, {"types": [], "variadic": True})
    def _func_lookup(self, name: Any, *args: Any) -> Any:
        if len(args) > 2:
            raise Refused("lookup() takes a table, a value and at most one fallback")
        table = self.tables.get(name) if type(name) is str else None
        if table is None:
            known = ", ".join(sorted(self.tables)) or "none"
            raise Refused(f"lookup(): no table {name!r} in [mapping.tables] (tables: {known})")
        value = args[0]
        if value is None:
            return None
        code = text_of(value, "lookup") or ""
        found = table.entries.get(code.strip())
        if found is not None:
            return found
        if len(args) > 1:
            return args[1]
        if table.default is not None:
            return table.default
        raise Refused(f"the code {code!r} is not in table {table.name!r}")

    @signature(_ANY, _ANY, _ANY)
    def _func_replace(self, text: Any, pattern: Any, replacement: Any) -> Any:
        value = text_of(text, "replace")
        if value is None:
            return None
        if type(pattern) is not str or type(replacement) is not str:
            raise Refused("replace() needs a regular expression and a replacement as text")
        return _regex(pattern).sub(replacement, value)

    @signature(_ANY, _ANY)
    def _func_split(self, text: Any, separator: Any) -> Any:
        value = text_of(text, "split")
        if value is None:
            return None
        if type(separator) is not str or not separator:
            raise Refused("split() needs a separator that is not empty")
        return value.split(separator)

    @signature(_ANY)
    def _func_trim(self, text: Any) -> Any:
        value = text_of(text, "trim")
        return None if value is None else value.strip()

    @signature(_ANY)
    def _func_lower(self, text: Any) -> Any:
        value = text_of(text, "lower")
        return None if value is None else value.lower()

    @signature(_ANY)
    def _func_upper(self, text: Any) -> Any:
        value = text_of(text, "upper")
        return None if value is None else value.upper()

    @signature(_ANY, _ANY)
    def _func_strip_prefix(self, text: Any, prefix: Any) -> Any:
        value = text_of(text, "strip_prefix")
        if value is None:
            return None
        if type(prefix) is not str:
            raise Refused("strip_prefix() needs the prefix as text")
        return value.removeprefix(prefix)

    @signature({"types": [], "variadic": True})
    def _func_concat(self, *parts: Any) -> Any:
        texts = [text_of(part, "concat") for part in parts]
        return "".join(text for text in texts if text is not None)


def compiler(tables: Mapping[str, Table] | None = None) -> Callable[[str], Callable[[Any], Any]]:
    """A function compiling a path into ``search(record)``, with these tables' lookups.

    One interpreter serves every path: it keeps no state between calls (building one
    per search was most of a simple path's cost).
    """
    options = jmespath.visitor.Options(custom_functions=SkuferryFunctions(tables))
    interpreter = jmespath.visitor.TreeInterpreter(options)

    def compile_path(expression: str) -> Callable[[Any], Any]:
        parsed = jmespath.compile(expression).parsed
        names = _field_chain(parsed)
        if names is not None:
            return functools.partial(_dig, names)  # a.b.c: the same answer, without the walk
        return functools.partial(interpreter.visit, parsed)

    return compile_path


def _field_chain(node: dict[str, Any]) -> tuple[str, ...] | None:
    """The names of a path that is only fields (``pim.name``, ``"@id"``); else None."""
    if node["type"] == "field":
        return (node["value"],)
    if node["type"] == "subexpression":
        names: list[str] = []
        for child in node["children"]:
            found = _field_chain(child)
            if found is None:
                return None
            names.extend(found)
        return tuple(names)
    return None


def _dig(names: tuple[str, ...], value: Any) -> Any:
    """JMESPath's field access along ``names``: null as soon as a step is not an object."""
    for name in names:
        if not isinstance(value, dict):
            return None
        value = value.get(name)
    return value
