"""Source record -> product payload: field names, types, and per-row rejections.

Pure: no I/O. A ``Mapper`` is built once from ``[mapping]``; every per-field
converter is chosen in ``__init__`` so that ``map()`` does only the work each
row needs (it runs once per source row, a million times on a big catalog).

A row the mapping cannot turn into a product becomes a ``BadRecord`` whose
reason names the line and the column, and carries the key when it is known.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Iterator
from decimal import Decimal
from typing import Any, NoReturn

from skuferry import canonical
from skuferry.config.load import FieldSpec, MappingSettings
from skuferry.errors import ConfigError
from skuferry.models import BadRecord, Product, RawRecord

_MISSING: Any = object()


class _Absent:
    """Stands for a column a record lacks, in fingerprints (repr is stable across runs)."""

    def __repr__(self) -> str:
        return "<absent>"


_MISSING_MARK = _Absent()
FINGERPRINT_VERSION = "skuferry-map-1"  # bump when map() changes what it makes of a value

# The JSON number grammar: a decimal column accepts exactly what could be sent as a JSON
# number verbatim. One precompiled fullmatch measured faster than a partition-based check.
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")

_BOOLEANS = {
    "true": True, "false": False, "1": True, "0": False,
    "yes": True, "no": False, "y": True, "n": False,
}  # fmt: skip

_KEY_TYPES = ("string", "integer", "decimal")


class _RefusedError(Exception):
    """A value a converter refuses; the message is the tail of the rejection reason."""


Converter = Callable[[Any], Any]


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


# canonical.loads semantics, but NaN/Infinity are refused: canonical.dumps cannot write them.
_decode_json = json.JSONDecoder(parse_float=Decimal, parse_constant=_no_constant).decode


def _show(value: Any) -> str:
    """A value as quoted in a reason: text in quotes, JSON values as JSON, both shortened."""
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:40] + "...")
    text = canonical.dumps(value)
    return text if len(text) <= 40 else text[:40] + "..."


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "a JSON object"
    if isinstance(value, list):
        return "a JSON array"
    if isinstance(value, bool):
        return "a boolean"
    return "a number" if isinstance(value, int | Decimal) else type(value).__name__


def _to_string(value: Any) -> Any:
    if type(value) is str:
        return value
    if isinstance(value, int | Decimal):  # bool is an int: JSON true -> "true"
        return canonical.dumps(value)
    raise _RefusedError(f"{_kind(value)} is not text")


def _to_integer(value: Any) -> Any:
    if type(value) is str:
        text = value.strip()
        if not text:
            return None
        digits = text[1:] if text[0] in "+-" else text
        if digits.isdigit() and digits.isascii():
            try:
                return int(text)
            except ValueError:  # more digits than int() converts (sys.int_max_str_digits)
                pass
        raise _RefusedError(f"{_show(value)} is not an integer")
    if type(value) is int:
        return value
    raise _RefusedError(f"{_show(value)} is not an integer")


def _to_decimal(value: Any) -> Any:
    if type(value) is str:
        text = value.strip()
        if not text:
            return None
        if _JSON_NUMBER.fullmatch(text) is not None:
            return Decimal(text)  # keeps the digits as written: "19.90" stays 19.90
        raise _RefusedError(f"{_show(value)} is not a decimal number")
    if type(value) is int or (type(value) is Decimal and value.is_finite()):
        return value
    raise _RefusedError(f"{_show(value)} is not a decimal number")


def _to_boolean(value: Any) -> Any:
    if type(value) is str:
        text = value.strip()
        if not text:
            return None
        found = _BOOLEANS.get(text.lower())
        if found is not None:
            return found
    elif type(value) is bool:
        return value
    elif type(value) is int and value in (0, 1):
        return value == 1
    raise _RefusedError(f"{_show(value)} is not a boolean (true/false, yes/no, y/n, 1/0)")


def _to_json(value: Any) -> Any:
    if type(value) is not str:
        return value  # already a JSON value (a JSON Lines source)
    if not value.strip():
        return None
    try:
        return _decode_json(value)
    except json.JSONDecodeError as exc:
        reason = f"{exc.msg} at character {exc.pos + 1}"
        raise _RefusedError(f"{_show(value)} is not valid JSON ({reason})") from None
    except (ValueError, RecursionError) as exc:
        raise _RefusedError(f"{_show(value)} is not valid JSON ({exc})") from None


_TYPED: dict[str, Converter] = {
    "integer": _to_integer,
    "decimal": _to_decimal,
    "boolean": _to_boolean,
    "json": _to_json,
}
_CONVERTERS: dict[str, Converter] = {"string": _to_string, **_TYPED}


def _key_text(value: Any) -> str | None:
    """The key as stripped text; None when the value cannot be a key (bool, object, ...)."""
    if type(value) is str:
        return value.strip()
    if type(value) is int or type(value) is Decimal:
        return str(value)
    return None


class Mapper:
    """Turns a ``RawRecord`` into a ``Product`` (or a ``BadRecord`` saying why not)."""

    def __init__(self, settings: MappingSettings, *, source_name: str = "source") -> None:
        self._key_field = settings.key
        self._source_name = source_name
        # (target, column, converter or None for a string, required), the key field
        # excluded: it is done first. None is a string field, handled inline in map().
        self._plan: list[tuple[str, str, Converter | None, bool]] | None = None
        self._key_column = settings.key
        self._key_convert: Converter = _to_string
        # Fingerprints cover the mapping itself, so a changed [mapping] re-maps every row.
        self._seed = f"{FINGERPRINT_VERSION}|{settings.model_dump_json()}|"
        self._columns: list[str] | None = None  # None: pass-through, every column counts
        if settings.fields is None:
            return  # pass-through: every column as read
        specs = {
            target: spec if isinstance(spec, FieldSpec) else FieldSpec(column=spec)
            for target, spec in settings.fields.items()
        }
        key_spec = specs.pop(settings.key, None)
        if key_spec is None:
            raise ConfigError(
                [f"at 'mapping.key': {settings.key!r} is not a field of [mapping.fields] "
                 f"(fields: {', '.join(settings.fields) or 'none'})"]
            )  # fmt: skip
        if key_spec.type not in _KEY_TYPES:
            raise ConfigError(
                [f"at 'mapping.fields.{settings.key}': the key cannot have type {key_spec.type!r} "
                 f"(use one of {', '.join(_KEY_TYPES)})"]
            )  # fmt: skip
        self._key_column = key_spec.column
        self._key_convert = _CONVERTERS[key_spec.type]
        self._plan = [
            (target, spec.column, _TYPED.get(spec.type), spec.required)
            for target, spec in specs.items()
        ]
        self._columns = [self._key_column, *(column for _, column, _, _ in self._plan)]

    @property
    def key_field(self) -> str:
        """The target field that is the natural key."""
        return self._key_field

    def key_of(self, record: RawRecord) -> str | None:
        """The key ``map()`` would give this record (None when it has none), without mapping."""
        return _key_text(record.fields.get(self._key_column, _MISSING)) or None

    def fingerprint(self, record: RawRecord) -> str:
        """A hash of the values this mapping reads, and of the mapping itself.

        Equal fingerprints mean ``map()`` returns the same product, so a row whose
        fingerprint the mirror holds next to a confirmed digest needs no mapping.
        ``repr`` is deterministic for the values sources yield (str, int, Decimal,
        bool, None, lists and dicts in source order) and escapes lone surrogates.
        """
        fields = record.fields
        if self._columns is None:
            data = repr(sorted(fields.items()))
        else:
            get = fields.get
            data = repr([get(column, _MISSING_MARK) for column in self._columns])
        return hashlib.blake2b((self._seed + data).encode(), digest_size=16).hexdigest()

    def map(self, record: RawRecord) -> Product | BadRecord:
        fields = record.fields
        line = record.line
        column = self._key_column
        raw_key = fields.get(column, _MISSING)
        key = _key_text(raw_key)
        if not key:
            return self._bad_key(line, raw_key)

        plan = self._plan
        if plan is None:  # pass-through
            payload: dict[str, Any] = dict(fields)
            if type(raw_key) is str:
                payload[column] = key
            return Product(key, payload, canonical.digest(payload), line, self.fingerprint(record))

        payload = {}
        get = fields.get
        try:
            payload[self._key_field] = self._key_convert(key)
            # ``column`` stays the one being converted, so the except below names it.
            for target, column, convert, required in plan:
                value = get(column)
                if value is None:  # absent, or JSON null
                    if required:
                        gap = "missing" if column not in fields else "empty"
                        return self._bad(line, column, f"is required but {gap}", key)
                    payload[target] = None
                    continue
                if convert is not None:
                    value = convert(value)
                elif type(value) is not str:  # a string field: text is kept as read
                    value = _to_string(value)
                if required and (value is None or (type(value) is str and not value.strip())):
                    return self._bad(line, column, "is required but empty", key)
                payload[target] = value
        except _RefusedError as exc:
            return self._bad(line, column, str(exc), key)
        return Product(key, payload, canonical.digest(payload), line, self.fingerprint(record))

    def _bad(self, line: int, column: str, problem: str, key: str | None) -> BadRecord:
        where = f"{self._source_name} line {line}, column {column!r}"
        return BadRecord(line, f"{where}: {problem}", key)

    def _bad_key(self, line: int, raw_key: Any) -> BadRecord:
        name = self._key_field
        if raw_key is _MISSING:
            problem = f"the key {name!r} is missing"
        elif raw_key is None or type(raw_key) is str:
            problem = f"the key {name!r} is empty"
        else:
            problem = f"the key {name!r} must be text or a number, not {_kind(raw_key)}"
        return self._bad(line, self._key_column, problem, None)


def map_records(
    records: Iterable[RawRecord | BadRecord], mapper: Mapper
) -> Iterator[Product | BadRecord]:
    """Map a source's stream; records the source already rejected pass through as they are."""
    for record in records:
        yield record if isinstance(record, BadRecord) else mapper.map(record)
