"""Source record -> product payload: its key, its record digest, and per-row rejections.

Pure: no I/O. A ``Mapper`` is built once from ``[mapping]``; every per-field
converter is chosen in ``__init__`` so that ``map()`` does only the work each
row needs (it runs once per source row, a million times on a big catalog).

A field is read from a ``column``, a JMESPath ``path`` (compiled once; nested
records such as Akeneo's ``values``), or is a constant ``value``; each value is
then converted to the field's type.

A row the mapping cannot turn into a product becomes a ``BadRecord`` whose
reason names the line and the column (or path), and carries the key when it is known.
"""

from __future__ import annotations

import hashlib
import math
import operator
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from decimal import Decimal
from typing import Any

import jmespath.exceptions

from skuferry import canonical
from skuferry.config.schema import FieldSpec, MappingSettings
from skuferry.errors import ConfigError
from skuferry.models import BadRecord, Product, RawRecord
from skuferry.shape import FieldRead
from skuferry.sync.expressions.functions import Refused, Table, compiler
from skuferry.sync.expressions.numbers import float_text
from skuferry.sync.expressions.tables import load_tables
from skuferry.sync.map.checks import Check, spreadsheet_mangled
from skuferry.sync.map.converters import Converter, RefusedError, converter_of, kind_of, to_string
from skuferry.sync.map.field_specs import (
    FieldPlan,
    constant_of,
    default_of,
    field_checks,
    join_of,
    key_problems,
    where_of,
)

_MISSING: Any = object()


class _Absent:
    """Stands for a column a record lacks, in record digests (repr is stable across runs)."""

    def __repr__(self) -> str:
        return "<absent>"


_MISSING_MARK = _Absent()
_UNSET: Any = object()  # a field without a default
_LEAVE: Any = object()  # a field accepted as gone: absent from a record, it is left out

RECORD_DIGEST_VERSION = "skuferry-map-2"  # bump when map() changes what it makes of a value

_SURROGATE = re.compile("[\ud800-\udfff]")  # an undecodable byte read with surrogateescape


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


_SEARCH_ERRORS = (Refused, jmespath.exceptions.JMESPathError)


def _is_empty(value: Any, empties: tuple[Any, ...]) -> bool:
    """``value`` is one of ``empties`` by type and value (``0`` is not ``false``)."""
    kind = type(value)
    return any(type(e) is kind and e == value for e in empties)


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
        gone: Iterable[str] = (),
    ) -> None:
        """``empty_values``: ``[source] empty_values``, values read like a missing one
        (Odoo's ``false``): the field's default and required apply. A field of type
        ``boolean`` keeps them: ``false`` is a value there.

        ``gone``: fields whose column or path the source no longer gives, a change of
        shape accepted on purpose (``shape``). A record that gives them nothing leaves
        them out of its product: the CMS keeps its value (``[mapping] send_nulls`` sends
        null instead). Neither their ``default`` nor ``required`` applies: a default is
        for an empty cell in a column that is there, never for a column that is gone."""
        self._key_field = settings.key
        tables = load_tables(settings.tables) if tables is None else tables
        compile_path = compiler(tables)

        def search_of(spec: FieldSpec) -> Callable[[Any], Any] | None:
            return None if spec.path is None else compile_path(spec.path)

        joined = frozenset(joins)
        self._source_name = source_name
        # None: pass-through. Else one FieldPlan per target, the key field excluded (done first)
        # and constants too (they are in ``_constants``, converted once).
        self._plan: list[FieldPlan] | None = None
        self._constants: dict[str, Any] = {}
        self._key_column = settings.key
        self._key_search: Callable[[Any], Any] | None = None
        self._key_where = f"column {settings.key!r}"
        self._key_convert: Converter = to_string
        empties = tuple(empty_values)
        left = frozenset(gone)
        self._seed = _seed(settings, tables, empties, left)
        self._seeded: hashlib.blake2b | None = None  # the seed hashed, at the first record digest
        self._key_checks: tuple[Check, ...] = (spreadsheet_mangled,)
        self._reads: list[FieldRead] = []
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
        problems = key_problems(settings.key, key_spec)
        self._plan = []
        for target, spec in specs.items():
            if spec.value is not None:
                self._constants[target] = constant_of(target, spec, problems)
                continue
            default = _UNSET if spec.default is None else default_of(target, spec, problems)
            if target in left:
                default = _LEAVE
            check = (spec.required or default is not _UNSET) and default is not _LEAVE
            empty = () if spec.type == "boolean" else empties
            self._plan.append(
                (
                    target,
                    where_of(spec),
                    spec.column,
                    search_of(spec),
                    converter_of(spec),
                    check,
                    default,
                    field_checks(spec),
                    join_of(spec, joined),
                    empty,
                )
            )
        if problems:
            raise ConfigError(problems)
        self._key_column = key_spec.column or ""
        self._key_search = search_of(key_spec)
        self._key_where = where_of(key_spec)
        self._key_convert = converter_of(key_spec) or to_string
        self._key_checks = field_checks(key_spec) if key_spec.type == "string" else ()
        fields = [(key_spec.column, self._key_search)] + [(f[2], f[3]) for f in self._plan]
        self._reads = [
            FieldRead(
                target,
                *(("column", spec.column or "") if spec.path is None else ("path", spec.path)),
                self._key_search if target == settings.key else search_of(spec),
                join_of(spec, joined),
            )
            for target, spec in [(settings.key, key_spec), *specs.items()]
            if spec.value is None  # a constant reads nothing
        ]
        self._columns = [c for c, search in fields if search is None and c is not None]
        self._pick = _picker(self._columns)
        self._searches = [search for _, search in fields if search is not None]

    @property
    def seed(self) -> str:
        """What every record digest hashes before a record's values: the mapping, the digests
        of its tables, ``empty_values`` (the line route binds line digests to it too)."""
        return self._seed

    @property
    def reads(self) -> list[FieldRead]:
        """What each mapped field reads, the key first; empty for a pass-through mapping."""
        return self._reads

    @property
    def passes_through(self) -> bool:
        """No ``[mapping.fields]``: every column of a record as read."""
        return self._plan is None

    @property
    def key_column(self) -> str:
        """The column the key is read from ("" when a path reads it)."""
        return self._key_column if self._key_search is None else ""

    @property
    def reads_columns_only(self) -> bool:
        """True when the key and every digested value are columns read as they are
        (no path): a record's record digest is then a function of its own fields alone."""
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

    def record_digester(self) -> Callable[[RawRecord], str]:
        """``record digest`` as one function, fast for columns read as they are (no path)."""
        if self._columns is None or self._searches:
            return self.record_digest
        copy, pick, slow = self._seeded_hash().copy, self._pick, self.record_digest

        def record_digest(record: RawRecord) -> str:
            try:
                data = repr(pick(record.fields))
            except KeyError:
                return slow(record)
            hashed = copy()
            hashed.update(data.encode())
            return str(hashed.hexdigest())

        return record_digest

    def record_digest(self, record: RawRecord) -> str:
        """A hash of the values this mapping reads, and of the mapping itself.

        Equal record digests mean ``map()`` returns the same product, so a row whose
        record digest the mirror holds next to a confirmed digest needs no mapping.
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
            return Product(
                key, payload, canonical.digest(payload), line, self.record_digest(record)
            )

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
                    if default is _LEAVE:
                        continue  # gone from the source: left alone on the CMS
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
                    value = to_string(value)
                if check and (value is None or (type(value) is str and not value.strip())):
                    if default is _UNSET:
                        return self._bad(line, where, "is required but empty", key, label)
                    value = default
                if checks and value is not None and (type(value) is not str or value.strip()):
                    for run_check in checks:  # an empty value: `required` decides
                        if (problem := run_check(value)) is not None:
                            return self._bad(line, where, problem, key, label)
                payload[target] = value
        except RefusedError as exc:
            return self._bad(line, where, str(exc), key, label)
        except _SEARCH_ERRORS as exc:
            return self._bad(line, where, _refusal(exc), key, label)
        return Product(key, payload, canonical.digest(payload), line, self.record_digest(record))

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
            problem = f"the key {name!r} must be text or a number, not {kind_of(raw_key)}"
        return self._bad(line, self._key_where, problem, None, label)


def _seed(
    settings: MappingSettings,
    tables: Mapping[str, Table],
    empties: tuple[Any, ...],
    gone: frozenset[str],
) -> str:
    """What every record digest hashes first (``Mapper.seed``).

    Record digests cover the mapping itself, so a changed [mapping] re-maps every row.
    Unset options are left out: they mean their default, and an option added in a later
    release then does not re-map every row once. A file table counts by what it holds: a
    new label re-maps the rows that use it. ``empty_values`` and the fields accepted as
    gone change what map() makes of a record, so they count when set.
    """
    held = ",".join(f"{name}={table.digest()}" for name, table in sorted(tables.items()))
    seed = f"{RECORD_DIGEST_VERSION}|{settings.model_dump_json(exclude_unset=True)}|{held}|"
    if empties:
        seed += f"empty={canonical.dumps(list(empties))}|"
    if gone:  # a field gone leaves its products' payloads
        seed += f"gone={canonical.dumps(sorted(gone))}|"
    return seed


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


def map_records(
    records: Iterable[RawRecord | BadRecord], mapper: Mapper
) -> Iterator[Product | BadRecord]:
    """Map a source's stream; records the source already rejected pass through as they are."""
    for record in records:
        yield record if isinstance(record, BadRecord) else mapper.map(record)
