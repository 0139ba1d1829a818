"""Source record -> product payload: field names, types, and per-row rejections.

Pure: no I/O. A ``Mapper`` is built once from ``[mapping]``; every per-field
converter is chosen in ``__init__`` so that ``map()`` does only the work each
row needs (it runs once per source row, a million times on a big catalog).

A field is read from a ``column``, a JMESPath ``path`` (compiled once; nested
records such as Akeneo's ``values``), or is a constant ``value``. Numbers may be
written with locale separators (``decimal``/``thousands``);
floats from SQL and XLSX count by their shortest round-trip text.

A row the mapping cannot turn into a product becomes a ``BadRecord`` whose
reason names the line and the column (or path), and carries the key when it is known.
"""

from __future__ import annotations

import hashlib
import json
import math
import operator
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from decimal import Decimal
from typing import Any, NoReturn

import jmespath.exceptions

from skuferry import canonical
from skuferry.config.schema import FieldSpec, MappingSettings
from skuferry.errors import ConfigError
from skuferry.models import BadRecord, Product, RawRecord
from skuferry.sync.expressions.functions import Refused, Table, compiler
from skuferry.sync.expressions.numbers import LocaleFormat, float_decimal, float_text
from skuferry.sync.expressions.tables import load_tables
from skuferry.sync.map.checks import Check, checks_of, spreadsheet_mangled

_MISSING: Any = object()


class _Absent:
    """Stands for a column a record lacks, in fingerprints (repr is stable across runs)."""

    def __repr__(self) -> str:
        return "<absent>"


_MISSING_MARK = _Absent()
_UNSET: Any = object()  # a field without a default
FINGERPRINT_VERSION = "skuferry-map-2"  # bump when map() changes what it makes of a value

# The JSON number grammar: a decimal column accepts exactly what could be sent as a JSON
# number verbatim. One precompiled fullmatch measured faster than a partition-based check.
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")

_BOOLEANS = {
    "true": True, "false": False, "1": True, "0": False,
    "yes": True, "no": False, "y": True, "n": False,
}  # fmt: skip

_KEY_TYPES = ("string", "integer", "decimal")
_SURROGATE = re.compile("[\ud800-\udfff]")  # an undecodable byte read with surrogateescape


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
    if isinstance(value, float):
        return repr(value)  # also nan and inf, which JSON cannot write
    text = canonical.dumps(value)
    return text if len(text) <= 40 else text[:40] + "..."


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "a JSON object"
    if isinstance(value, list):
        return "a JSON array"
    if isinstance(value, bool):
        return "a boolean"
    return "a number" if isinstance(value, int | Decimal | float) else type(value).__name__


def _to_string(value: Any) -> Any:
    if type(value) is str:
        return value
    if isinstance(value, int | Decimal):  # bool is an int: JSON true -> "true"
        return canonical.dumps(value)
    if type(value) is float and math.isfinite(value):
        return float_text(value)  # an XLSX number cell 12346.0 -> "12346"
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
    if type(value) is float and value.is_integer():  # SQL REAL, XLSX numbers
        return int(value)
    # a JSON 7.0 (Odoo's quantities are floats); 7.5 is refused as before
    if type(value) is Decimal and value.is_finite() and value == value.to_integral_value():
        return int(value)
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
    if type(value) is float and math.isfinite(value):
        return float_decimal(value)  # 21.35, never 21.350000000000001
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


def _locale_converter(spec: FieldSpec) -> Converter:
    """A decimal/integer converter for text written like ``1.234,50``; numbers as usual."""
    fraction = spec.type == "decimal"
    number: Converter = _to_decimal if fraction else _to_integer
    style = LocaleFormat(spec.decimal, spec.thousands)
    match = style.pattern(fraction=fraction).fullmatch
    plain = style.plain
    expected = (
        f"{'a decimal number' if fraction else 'an integer'} {style.describe(fraction=fraction)}"
    )

    def convert(value: Any) -> Any:
        if type(value) is not str:
            return number(value)  # already a number (JSON, SQL, XLSX): no separators to read
        text = value.strip()
        if not text:
            return None
        if match(text) is None:
            raise _RefusedError(f"{_show(value)} is not {expected}")
        return Decimal(plain(text)) if fraction else int(plain(text))

    return convert


def _converter(spec: FieldSpec) -> Converter | None:
    """The field's converter; None for a string field (handled inline in map())."""
    if spec.type in ("decimal", "integer") and (spec.decimal != "." or spec.thousands):
        return _locale_converter(spec)
    return _TYPED.get(spec.type)


def _as_written(value: Any) -> Any:
    """A constant ``value`` without a ``type``: as TOML wrote it, a float as a decimal."""
    return float_decimal(value) if type(value) is float else value


def _picker(columns: list[str]) -> Callable[[Mapping[str, Any]], list[Any]]:
    """The values of ``columns`` as a list, in one C call; KeyError when one is missing."""
    if not columns:
        return lambda fields: []
    if len(columns) == 1:
        one = operator.itemgetter(columns[0])
        return lambda fields: [one(fields)]
    many = operator.itemgetter(*columns)
    return lambda fields: list(many(fields))


def _key_text(value: Any) -> str | None:
    """The key as skuferry stores it (``canonical.key``: stripped, NFC); None when the value
    cannot be a key (bool, object, ...)."""
    if type(value) is str:
        return canonical.key(value)
    if type(value) is int or type(value) is Decimal:
        return str(value)
    if type(value) is float and math.isfinite(value):
        return float_text(value)  # a numeric cell: 12346.0 -> "12346"
    return None


# One planned field: (target, where (for reasons), column or None, compiled path search
# or None, converter or None for a string, check (required or has a default), default,
# checks on the converted value, join the path reads or None, the values
# that count as missing besides null: [source] empty_values, () for none).
_Field = tuple[
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
_SEARCH_ERRORS = (Refused, jmespath.exceptions.JMESPathError)
_HEAD = re.compile(r'\s*"?([A-Za-z_][A-Za-z0-9_]*)')


def _is_empty(value: Any, empties: tuple[Any, ...]) -> bool:
    """``value`` is one of ``empties`` by type and value (``0`` is not ``false``)."""
    kind = type(value)
    return any(type(e) is kind and e == value for e in empties)


def _where(spec: FieldSpec) -> str:
    return f"column {spec.column!r}" if spec.path is None else f"path {spec.path!r}"


def _field_checks(spec: FieldSpec) -> tuple[Check, ...]:
    """The field's checks; a text field also refuses numbers a spreadsheet mangled."""
    found = checks_of(spec, _converter(spec) or _to_string)
    if spec.type == "string" and spec.check is None:
        found.insert(0, spreadsheet_mangled)
    return tuple(found)


def _join_of(spec: FieldSpec, joins: frozenset[str]) -> str | None:
    """The join a path field reads (its first name is a ``[[join]]`` name), else None."""
    head = _HEAD.match(spec.path) if spec.path is not None else None
    return head.group(1) if head is not None and head.group(1) in joins else None


class Mapper:
    """Turns a ``RawRecord`` into a ``Product`` (or a ``BadRecord`` saying why not)."""

    def __init__(
        self,
        settings: MappingSettings,
        *,
        source_name: str = "source",
        tables: Mapping[str, Table] | None = None,
        joins: Iterable[str] = (),
        empty_values: Iterable[Any] = (),
    ) -> None:
        """``empty_values``: ``[source] empty_values``, values read like a missing one
        (Odoo's ``false``): the field's default and required apply. A field of type
        ``boolean`` keeps them: ``false`` is a value there."""
        self._key_field = settings.key
        tables = load_tables(settings.tables) if tables is None else tables
        compile_path = compiler(tables)

        def search_of(spec: FieldSpec) -> Callable[[Any], Any] | None:
            return None if spec.path is None else compile_path(spec.path)

        joined = frozenset(joins)
        self._source_name = source_name
        # None: pass-through. Else one _Field per target, the key field excluded (done first)
        # and constants too (they are in ``_constants``, converted once).
        self._plan: list[_Field] | None = None
        self._constants: dict[str, Any] = {}
        self._key_column = settings.key
        self._key_search: Callable[[Any], Any] | None = None
        self._key_where = f"column {settings.key!r}"
        self._key_convert: Converter = _to_string
        # Fingerprints cover the mapping itself, so a changed [mapping] re-maps every row.
        # Unset options are left out: they mean their default, and an option added in a
        # later release then does not re-map every row once.
        # A file table counts by what it holds: a new label re-maps the rows that use it.
        held = ",".join(f"{name}={table.digest()}" for name, table in sorted(tables.items()))
        self._seed = f"{FINGERPRINT_VERSION}|{settings.model_dump_json(exclude_unset=True)}|{held}|"
        self._seeded: hashlib.blake2b | None = None  # the seed hashed, at the first fingerprint
        self._key_checks: tuple[Check, ...] = (spreadsheet_mangled,)
        empties = tuple(empty_values)
        if empties:  # they change what map() makes of a value
            self._seed += f"empty={canonical.dumps(list(empties))}|"
        self._columns: list[str] | None = None  # None: pass-through, every column counts
        self._pick: Callable[[Mapping[str, Any]], list[Any]] = _picker([])
        self._searches: list[Callable[[Any], Any]] = []  # path fields: their results count
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
        problems = _key_problems(settings.key, key_spec)
        self._plan = []
        for target, spec in specs.items():
            if spec.value is not None:
                self._constants[target] = _constant(target, spec, problems)
                continue
            default = _UNSET if spec.default is None else _default(target, spec, problems)
            check = spec.required or default is not _UNSET
            empty = () if spec.type == "boolean" else empties
            self._plan.append(
                (
                    target,
                    _where(spec),
                    spec.column,
                    search_of(spec),
                    _converter(spec),
                    check,
                    default,
                    _field_checks(spec),
                    _join_of(spec, joined),
                    empty,
                )
            )
        if problems:
            raise ConfigError(problems)
        self._key_column = key_spec.column or ""
        self._key_search = search_of(key_spec)
        self._key_where = _where(key_spec)
        self._key_convert = _converter(key_spec) or _to_string
        self._key_checks = _field_checks(key_spec) if key_spec.type == "string" else ()
        fields = [(key_spec.column, self._key_search)] + [(f[2], f[3]) for f in self._plan]
        self._columns = [c for c, search in fields if search is None and c is not None]
        self._pick = _picker(self._columns)
        self._searches = [search for _, search in fields if search is not None]

    @property
    def seed(self) -> str:
        """What every fingerprint hashes before a record's values: the mapping, the digests
        of its tables, ``empty_values`` (the line route binds line digests to it too)."""
        return self._seed

    @property
    def key_column(self) -> str:
        """The column the key is read from ("" when a path reads it)."""
        return self._key_column if self._key_search is None else ""

    @property
    def reads_columns_only(self) -> bool:
        """True when the key and every fingerprinted value are columns read as they are
        (no path): a record's fingerprint is then a function of its own fields alone."""
        return self._key_search is None and not self._searches

    @property
    def key_field(self) -> str:
        """The target field that is the natural key."""
        return self._key_field

    def key_of(self, record: RawRecord) -> str | None:
        """The key ``map()`` would give this record (None when it has none), without mapping."""
        try:
            return _key_text(self._raw_key(record.fields)) or None
        except _SEARCH_ERRORS:
            return None  # map() says why

    def key_reader(self) -> Callable[[RawRecord], str | None]:
        """``key_of`` as one function, fast for a key read from a column of text."""
        if self._key_search is not None:
            return self.key_of
        column, slow, canonical_key = self._key_column, self.key_of, canonical.key

        def key_of(record: RawRecord) -> str | None:
            value = record.fields.get(column)
            if type(value) is str:
                text = value.strip()  # the common ASCII key: no call per row
                return (text if text.isascii() else canonical_key(text)) or None
            return slow(record)

        return key_of

    def key_of_bad(self, record: BadRecord) -> str | None:
        """The key of a record that could not be read or mapped, when it can be told.

        The mapper's own rejections carry it; a source's hand over the ``fields`` they
        could read for sure, and the key is read from those as ``map()`` would read it.
        A key holding an undecodable byte (a lone surrogate) is no key: which product
        it names cannot be told.
        """
        if record.key is not None:
            return canonical.key(record.key) or None  # a source's own, maybe not yet NFC
        if record.fields is None:
            return None
        fields = record.fields if isinstance(record.fields, dict) else dict(record.fields)
        key = _key_text(self._raw_key(fields))
        if not key or _SURROGATE.search(key):
            return None
        return key

    def _raw_key(self, fields: dict[str, Any]) -> Any:
        search = self._key_search
        if search is None:
            return fields.get(self._key_column, _MISSING)
        found = search(fields)
        return _MISSING if found is None else found

    def fingerprinter(self) -> Callable[[RawRecord], str]:
        """``fingerprint`` as one function, fast for columns read as they are (no path)."""
        if self._columns is None or self._searches:
            return self.fingerprint
        copy, pick, slow = self._seeded_hash().copy, self._pick, self.fingerprint

        def fingerprint(record: RawRecord) -> str:
            try:
                data = repr(pick(record.fields))
            except KeyError:
                return slow(record)
            hashed = copy()
            hashed.update(data.encode())
            return str(hashed.hexdigest())

        return fingerprint

    def fingerprint(self, record: RawRecord) -> str:
        """A hash of the values this mapping reads, and of the mapping itself.

        Equal fingerprints mean ``map()`` returns the same product, so a row whose
        fingerprint the mirror holds next to a confirmed digest needs no mapping.
        ``repr`` is deterministic for the values sources yield (str, int, float,
        Decimal, bool, None, lists and dicts in source order) and escapes lone
        surrogates. A path field counts by what its path finds.
        """
        fields = record.fields
        if self._columns is None:
            data = repr(sorted(fields.items()))
        else:
            try:  # every column present, the common case: one C call
                values = self._pick(fields)
            except KeyError:
                get = fields.get
                values = [get(column, _MISSING_MARK) for column in self._columns]
            for search in self._searches:
                try:
                    values.append(search(fields))
                except _SEARCH_ERRORS as exc:  # a code missing from a table: the reason counts
                    values.append(f"<refused: {exc}>")
            data = repr(values)
        hashed = self._seeded_hash().copy()
        hashed.update(data.encode())
        return hashed.hexdigest()

    def _seeded_hash(self) -> hashlib.blake2b:
        """The blake2b state after the seed: a copy of it hashes only a row's values (the
        same digest as hashing seed + values, a third of the time per row)."""
        if self._seeded is None:
            self._seeded = hashlib.blake2b(self._seed.encode(), digest_size=16)
        return self._seeded

    def map(self, record: RawRecord) -> Product | BadRecord:
        fields = record.fields
        line = record.line
        label = record.label
        try:
            raw_key = self._raw_key(fields)
        except _SEARCH_ERRORS as exc:
            return self._bad(line, self._key_where, _refusal(exc), None, label)
        key = _key_text(raw_key)
        if not key:
            return self._bad_key(line, raw_key, label)
        for key_check in self._key_checks:
            if (problem := key_check(raw_key)) is not None:
                return self._bad(line, self._key_where, problem, key, label)

        plan = self._plan
        if plan is None:  # pass-through
            payload: dict[str, Any] = dict(fields)
            if type(raw_key) is str:
                payload[self._key_column] = key
            return Product(key, payload, canonical.digest(payload), line, self.fingerprint(record))

        get = fields.get
        where = self._key_where
        try:
            payload = {self._key_field: self._key_convert(key)}
            if self._constants:
                payload.update(self._constants)
            # ``where`` stays the field being converted, so the except below names it.
            for target, where, column, search, convert, check, default, checks, join, empty in plan:
                value = get(column) if search is None else search(fields)  # type: ignore[arg-type]
                if empty and value is not None and _is_empty(value, empty):
                    value = None  # [source] empty_values: Odoo's false for "no barcode"
                if value is None:  # absent, JSON null, or a path that finds nothing
                    if default is not _UNSET:
                        value = default
                    elif check:  # required
                        gap = _gap(column, fields, join)
                        return self._bad(line, where, gap, key, label)
                    payload[target] = value
                    continue
                if convert is not None:
                    value = convert(value)
                elif type(value) is not str:  # a string field: text is kept as read
                    value = _to_string(value)
                if check and (value is None or (type(value) is str and not value.strip())):
                    if default is _UNSET:
                        return self._bad(line, where, "is required but empty", key, label)
                    value = default
                if checks and value is not None and (type(value) is not str or value.strip()):
                    for run_check in checks:  # an empty value: `required` decides
                        if (problem := run_check(value)) is not None:
                            return self._bad(line, where, problem, key, label)
                payload[target] = value
        except _RefusedError as exc:
            return self._bad(line, where, str(exc), key, label)
        except _SEARCH_ERRORS as exc:
            return self._bad(line, where, _refusal(exc), key, label)
        return Product(key, payload, canonical.digest(payload), line, self.fingerprint(record))

    def _bad(
        self, line: int, where: str, problem: str, key: str | None, label: str | None = None
    ) -> BadRecord:
        at = label or f"line {line}"
        return BadRecord(line, f"{self._source_name} {at}, {where}: {problem}", key, stage="map")

    def _bad_key(self, line: int, raw_key: Any, label: str | None = None) -> BadRecord:
        name = self._key_field
        if raw_key is _MISSING:
            problem = f"the key {name!r} is missing"
        elif raw_key is None or type(raw_key) is str:
            problem = f"the key {name!r} is empty"
        else:
            problem = f"the key {name!r} must be text or a number, not {_kind(raw_key)}"
        return self._bad(line, self._key_where, problem, None, label)


def _refusal(exc: Exception) -> str:
    if isinstance(exc, Refused):
        return str(exc)
    return f"the path failed: {exc}"  # e.g. a standard function given the wrong type


def _gap(column: str | None, fields: dict[str, Any], join: str | None = None) -> str:
    if join is not None and fields.get(join) is None:
        return f"is required but no {join!r} record matches this one (see [[join]] {join!r})"
    if column is None:
        return "is required but the path finds nothing"
    return f"is required but {'missing' if column not in fields else 'empty'}"


def _key_problems(name: str, spec: FieldSpec) -> list[str]:
    where = f"at 'mapping.fields.{name}'"
    if spec.type not in _KEY_TYPES:
        return [f"{where}: the key cannot have type {spec.type!r} "
                f"(use one of {', '.join(_KEY_TYPES)})"]  # fmt: skip
    if spec.value is not None:
        return [f"{where}: the key cannot be a constant value (every product needs its own)"]
    if spec.default is not None:
        return [f"{where}: the key cannot have a default (every product needs its own)"]
    return []


def _constant(target: str, spec: FieldSpec, problems: list[str]) -> Any:
    """A ``value`` converted once: by its ``type`` when given, else as TOML wrote it."""
    if "type" not in spec.model_fields_set:
        return _as_written(spec.value)
    return _converted(spec.value, spec, f"mapping.fields.{target}.value", problems)


def _default(target: str, spec: FieldSpec, problems: list[str]) -> Any:
    return _converted(spec.default, spec, f"mapping.fields.{target}.default", problems)


def _converted(value: Any, spec: FieldSpec, dotted: str, problems: list[str]) -> Any:
    try:
        return (_converter(spec) or _to_string)(value)
    except _RefusedError as exc:
        problems.append(f"at '{dotted}': {exc}")
        return None


def map_records(
    records: Iterable[RawRecord | BadRecord], mapper: Mapper
) -> Iterator[Product | BadRecord]:
    """Map a source's stream; records the source already rejected pass through as they are."""
    for record in records:
        yield record if isinstance(record, BadRecord) else mapper.map(record)
