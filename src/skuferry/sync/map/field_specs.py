"""A ``[mapping.fields]`` entry compiled once: where it reads, its checks, the join its
path reads, its constant or default converted, and what the key may not be.

A problem with the mapping itself is a line of the ``ConfigError`` the mapper raises,
named by its dotted key (``mapping.fields.price.default``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from skuferry.config.schema import FieldSpec
from skuferry.sync.map.checks import Check, checks_of, spreadsheet_mangled
from skuferry.sync.map.converters import (
    Converter,
    RefusedError,
    as_written,
    converter_of,
    to_string,
)

_KEY_TYPES = ("string", "integer", "decimal")
_HEAD = re.compile(r'\s*"?([A-Za-z_][A-Za-z0-9_]*)')

# One planned field: (target, where (for reasons), column or None, compiled path search
# or None, converter or None for a string, check (required or has a default), default,
# checks on the converted value, join the path reads or None, the values
# that count as missing besides null: [source] empty_values, () for none).
FieldPlan = tuple[
    str,
    str,
    str | None,
    Callable[[Any], Any] | None,
    Converter | None,
    bool,
    Any,
    tuple[Check, ...],
    str | None,
    tuple[Any, ...],
]


def where_of(spec: FieldSpec) -> str:
    return f"column {spec.column!r}" if spec.path is None else f"path {spec.path!r}"


def field_checks(spec: FieldSpec) -> tuple[Check, ...]:
    """The field's checks; a text field also refuses numbers a spreadsheet mangled."""
    found = checks_of(spec, converter_of(spec) or to_string)
    if spec.type == "string" and spec.check is None:
        found.insert(0, spreadsheet_mangled)
    return tuple(found)


def join_of(spec: FieldSpec, joins: frozenset[str]) -> str | None:
    """The join a path field reads (its first name is a ``[[join]]`` name), else None."""
    head = _HEAD.match(spec.path) if spec.path is not None else None
    return head.group(1) if head is not None and head.group(1) in joins else None


def key_problems(name: str, spec: FieldSpec) -> list[str]:
    where = f"at 'mapping.fields.{name}'"
    if spec.type not in _KEY_TYPES:
        return [f"{where}: the key cannot have type {spec.type!r} "
                f"(use one of {', '.join(_KEY_TYPES)})"]  # fmt: skip
    if spec.value is not None:
        return [f"{where}: the key cannot be a constant value (every product needs its own)"]
    if spec.default is not None:
        return [f"{where}: the key cannot have a default (every product needs its own)"]
    return []


def constant_of(target: str, spec: FieldSpec, problems: list[str]) -> Any:
    """A ``value`` converted once: by its ``type`` when given, else as TOML wrote it."""
    if "type" not in spec.model_fields_set:
        return as_written(spec.value)
    return _converted(spec.value, spec, f"mapping.fields.{target}.value", problems)


def default_of(target: str, spec: FieldSpec, problems: list[str]) -> Any:
    return _converted(spec.default, spec, f"mapping.fields.{target}.default", problems)


def _converted(value: Any, spec: FieldSpec, dotted: str, problems: list[str]) -> Any:
    try:
        return (converter_of(spec) or to_string)(value)
    except RefusedError as exc:
        problems.append(f"at '{dotted}': {exc}")
        return None
