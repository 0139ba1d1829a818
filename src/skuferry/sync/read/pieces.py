"""A product in pieces: the record stream between the source and the mapping.

In this order, for every source type:

1. ``[mapping] group_by``: within consecutive records sharing the group value, an
   empty cell takes the value of the group's first record (only the ``inherit``
   columns when given). Shopify's variant rows get their product's Title.
2. ``[mapping] each``: every element of the list the path finds becomes one record;
   the enclosing record is its ``parent``. A problem names both: "record 12 (line
   40), item 3".
3. ``[[join]]``: the partner of each record, found in the join's index by the
   record's ``on`` value, is added under the join's name. A missing partner is null
   (so the mapping gives the join's fields their ``default``) only when the run's
   ledger says the join's pull was complete (``Ledger.may_default``, the one place
   that decides it); else the partner is unknown and the record is held instead:
   refused, naming its product's key, the join and the record the partner may be,
   so its product keeps its last state rather than being sent without the join.
4. ``[source] where``: a record the filter does not hold true for is skipped and
   counted; its product is then one that left the source (``[gone]`` applies). A
   record lacking a field the filter reads, or reading one through a join in which
   it has no partner, is refused (held), not skipped (``where``): a renamed
   column or a lost partner must not make a product gone. When no record has the
   field, the pull fails (``SourceError``) naming the file and the field.

The records leave here exactly as the mapping's paths read them (and as
``skuferry check --sample`` shows them), so record digests cover inherited, nested
and joined values alike.
"""

from __future__ import annotations

import itertools
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import jmespath.exceptions

from skuferry import logs
from skuferry.completeness import Ledger
from skuferry.config.schema import MappingSettings, Settings
from skuferry.errors import SourceError
from skuferry.models import BadRecord, RawRecord
from skuferry.sources.base import IncrementalSource, IncrementalWrapper, Source, WrappedSource
from skuferry.sources.dispatch import open_source
from skuferry.state.joins import scratch_dir
from skuferry.sync.expressions.functions import Refused, Table, compiler
from skuferry.sync.expressions.tables import load_tables
from skuferry.sync.read.joins import Join, Reader, column_or_path, decode, key_text, open_joins
from skuferry.sync.read.where import Lacking, Unpartnered, Where

log = logs.get(__name__)

CHUNK = 500  # records per batched join lookup

Records = Iterator[RawRecord | BadRecord]


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


class Pieces(WrappedSource):
    """``inner``'s records grouped, unnested, joined and filtered (see the module docstring);
    what it says of itself (description, change token, feed digest) is ``inner``'s."""

    def __init__(
        self,
        inner: Source,
        mapping: MappingSettings,
        *,
        where: str | None = None,
        joins: list[Join] | None = None,
        tables: dict[str, Table] | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        super().__init__(inner)
        compile_path = compiler(tables)
        self._group = column_or_path(mapping.group_by, compile_path) if mapping.group_by else None
        self._inherit = tuple(mapping.inherit) if mapping.inherit is not None else None
        self._each = compile_path(mapping.each) if mapping.each else None
        self.joins = list(joins or [])
        names = [join.name for join in self.joins]
        self._where = Where(where, compile_path, names) if where else None
        self._where_text = where
        self.key_of: Callable[[RawRecord], str | None] = lambda _record: None
        self.skipped = 0  # records the filter left out in the last pull
        self.without_items = 0  # records whose `each` found no element
        self.lacking: dict[str, int] = {}  # records held: a field the filter reads -> count
        self._complete = 0
        self.unpartnered: dict[str, int] = {}  # records held: join name -> count
        self.unknown: dict[str, int] = {}  # held: a field `where` reads through a join -> count
        # the run's ledger (else one of its own): each join's verdict, asked per record
        self.ledger = ledger if ledger is not None else Ledger()
        for join in self.joins:
            join.report(self.ledger)

    def records(self) -> Records:
        return self._shape(self.inner.records())

    def notes(self) -> list[str]:
        """The summary's remarks on the last pull."""
        found: list[str] = []
        if self.skipped:
            found.append(f"{self.skipped} record(s) skipped: [source] where = {self._where_text}")
        if self.without_items:
            found.append(f"{self.without_items} record(s) had no item at [mapping] each")
        found.extend(
            f"{count} record(s) held: [source] where reads {name!r}, which they lack "
            "(a renamed or dropped column?)"
            for name, count in self.lacking.items()
        )
        found.extend(
            f"{count} record(s) held: [source] where reads {name!r}, and they have no "
            f"partner in join {name.split('.', 1)[0]!r}"
            for name, count in self.unknown.items()
        )
        for join in self.joins:
            found.extend(join.notes())
            if self.unpartnered.get(join.name):
                found.append(
                    f"{join.label}: {self.unpartnered[join.name]} record(s) held: their partner "
                    "is missing and may be one of the records the join could not read"
                )
        return found

    def _shape(self, records: Records) -> Records:
        self.skipped = self.without_items = 0
        self.lacking, self.unpartnered, self.unknown = {}, {}, {}
        self._complete = 0  # records that had every field `where` reads
        stream = records
        if self._group is not None:
            stream = self._grouped(stream, self._group)
        if self._each is not None:
            stream = self._unnested(stream, self._each)
        if self.joins:
            stream = self._joined(stream)
        if self._where is not None:
            stream = self._filtered(stream, self._where)
        yield from stream
        if self._where is not None:
            log.info("source.records.filtered", skipped=self.skipped)
            self._lost_column()

    def _lost_column(self) -> None:
        """Fail the pull when *no* record has a field ``where`` reads: the export's column
        is gone (renamed, dropped), not a few records' value. Raised at the end of the
        stream, before anything is written."""
        if self.lacking and not self._complete:
            name, count = next(iter(self.lacking.items()))
            raise SourceError(
                f"{self.name}: [source] where reads {name!r}, which none of the {count} "
                "record(s) it tested has (a renamed or dropped column?); nothing was synced: "
                "fix the export or the filter"
            )

    def _grouped(self, records: Records, group: Reader) -> Records:
        inherit = self._inherit
        current: Any = None
        first: dict[str, Any] = {}
        for record in records:
            if isinstance(record, BadRecord):
                yield record
                continue
            fields = record.fields
            value = group(fields)
            if _empty(value) or value != current:
                current, first = value, fields
                yield record
                continue
            names = first.keys() if inherit is None else inherit
            gaps = {
                n: first[n] for n in names if _empty(fields.get(n)) and not _empty(first.get(n))
            }
            yield RawRecord(record.line, {**fields, **gaps}, record.label) if gaps else record

    def _unnested(self, records: Records, each: Reader) -> Records:
        for number, record in enumerate(records, 1):
            if isinstance(record, BadRecord):
                yield record
                continue
            where = f"record {number} (line {record.line})"
            try:
                found = each(record.fields)
            except (Refused, jmespath.exceptions.JMESPathError) as exc:
                yield BadRecord(
                    record.line, f"{self.describe()} {where}: [mapping] each: {exc}", stage="map"
                )
                continue
            if isinstance(found, dict):
                found = [found]
            if not isinstance(found, list) or not found:
                if found is not None and not isinstance(found, list):
                    reason = f"[mapping] each found {type(found).__name__}, not a list"
                    yield BadRecord(
                        record.line, f"{self.describe()} {where}: {reason}", stage="map"
                    )
                else:
                    self.without_items += 1
                continue
            for item, element in enumerate(found, 1):
                label = f"{where}, item {item}"
                if not isinstance(element, dict):
                    reason = (
                        f"{self.describe()} {label}: an item must be an object, not {element!r}"
                    )
                    yield BadRecord(record.line, reason, stage="map")
                    continue
                yield RawRecord(record.line, {**element, "parent": record.fields}, label)

    def _joined(self, records: Records) -> Records:
        joins = self.joins
        it = iter(records)
        while chunk := list(itertools.islice(it, CHUNK)):
            raws = [r for r in chunk if isinstance(r, RawRecord)]
            # per join: each record's key (once), then the partners of the chunk in one query
            keys = [[key_text(join.on(r.fields)) for r in raws] for join in joins]
            found = [
                join.index.get_many([k for k in wanted if k is not None])
                for join, wanted in zip(joins, keys, strict=True)
            ]
            # a join not proven complete: which missing partners' records it could not use
            held = [
                {}
                if self.ledger.may_default(join.name)
                else join.index.held_many(
                    [k for k in wanted if k is not None and k not in partners]
                )
                for join, wanted, partners in zip(joins, keys, found, strict=True)
            ]
            position = 0
            for record in chunk:
                if isinstance(record, BadRecord):
                    yield record
                    continue
                joined = self._join_one(record, position, keys, found, held)
                position += 1
                yield joined

    def _join_one(
        self,
        record: RawRecord,
        position: int,
        keys: list[list[str | None]],
        found: list[dict[str, str]],
        held: list[dict[str, tuple[int, str]]],
    ) -> RawRecord | BadRecord:
        """``record`` with its partners; refused (held) when one is missing and the run's
        ledger does not let it be null (``Ledger.may_default``: the join was not complete)."""
        fields = dict(record.fields)
        for join, wanted, partners, doubtful in zip(self.joins, keys, found, held, strict=True):
            key = wanted[position]
            text = partners.get(key) if key is not None else None
            if text is None and key is not None and not self.ledger.may_default(join.name):
                self.unpartnered[join.name] = self.unpartnered.get(join.name, 0) + 1
                at = record.label or f"line {record.line}"
                # held: refused with its product's key, so it keeps its last state
                return BadRecord(
                    record.line,
                    f"{self.name} {at}: {join.unknown(key, doubtful)}",
                    self.key_of(record),
                    stage="map",
                )
            fields[join.name] = decode(text) if text is not None else None
        return RawRecord(record.line, fields, record.label)

    def _filtered(self, records: Records, keep: Where) -> Records:
        for record in records:
            if isinstance(record, BadRecord):
                yield record
                continue
            try:
                ok = keep.keeps(record.fields)
            except (Lacking, Unpartnered, Refused, jmespath.exceptions.JMESPathError) as exc:
                if isinstance(exc, Lacking):
                    self.lacking[exc.field] = self.lacking.get(exc.field, 0) + 1
                elif isinstance(exc, Unpartnered):  # the field's column is not in question
                    self.unknown[exc.field] = self.unknown.get(exc.field, 0) + 1
                else:
                    self._complete += 1
                at = record.label or f"line {record.line}"
                reason = f"{self.name} {at}: [source] where: {exc}"
                yield BadRecord(record.line, reason, self.key_of(record), stage="map")  # held
                continue
            self._complete += 1
            if ok:
                yield record
            else:
                self.skipped += 1


class IncrementalPieces(Pieces, IncrementalWrapper):
    """The same over a source that can pull changes only: that capability is kept."""

    inner: IncrementalSource

    def __init__(self, inner: IncrementalSource, mapping: MappingSettings, **options: Any) -> None:
        super().__init__(inner, mapping, **options)
        self.keep_window(inner)

    def _through(self, records: Records) -> Records:
        # the change times are the inner source's records', before any grouping or join
        return self._shape(records)


def assemble(
    source: Source,
    mapping: MappingSettings,
    *,
    where: str | None,
    joins: list[Join],
    tables: dict[str, Table] | None = None,
    ledger: Ledger | None = None,
) -> Source:
    """``source`` in pieces when the config asks for any of it; else ``source`` itself.

    Its joins report their verdicts to ``ledger`` (the run's), which decides whether a
    missing partner may be null; without one, a ledger of its own.
    """
    if not (mapping.group_by or mapping.each or joins or where):
        return source
    options: dict[str, Any] = {"where": where, "joins": joins, "tables": tables, "ledger": ledger}
    if isinstance(source, IncrementalSource):
        return IncrementalPieces(source, mapping, **options)
    return Pieces(source, mapping, **options)


def open_pieces(
    settings: Settings,
    stack: ExitStack,
    *,
    base: Source | None = None,
    readonly: bool = False,
    stop: threading.Event | None = None,
    ledger: Ledger | None = None,
    allow_empty: bool = False,
) -> tuple[Source, dict[str, Table]]:
    """The run's source as the mapping reads it, and the mapping's tables (read once).

    Join indexes live in the state file's scratch folder; a ``readonly`` run (dry
    run, ``check``) uses a current one there but builds a stale one in a temporary
    folder, so it writes nothing beside the state file. ``stop`` (the engine's stop
    event) ends the waits between retries of the source and of every join source.
    Each join reports its verdict to ``ledger`` (the run's); an empty one is refused
    unless ``allow_empty``.
    """
    tables = load_tables(settings.mapping.tables)
    source = base or open_source(settings.source, stop=stop)
    joins: list[Join] = []
    if settings.join:
        scratch = settings.state.path.with_name(settings.state.path.name + ".scratch")
        build_in = None
        if readonly:
            build_in = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="skuferry-")))
        else:
            scratch = scratch_dir(settings.state.path)
        joins = open_joins(
            settings.join, scratch, build_in=build_in, stop=stop, allow_empty=allow_empty
        )
        for join in joins:
            stack.callback(join.close)
    shaped = assemble(
        source,
        settings.mapping,
        where=settings.source.where,
        joins=joins,
        tables=tables,
        ledger=ledger,
    )
    return shaped, tables


def use_keys(source: Source, key_of: Callable[[RawRecord], str | None]) -> None:
    """Tell ``source`` the mapping's keys, so a record it refuses names its product."""
    if isinstance(source, Pieces):
        source.key_of = key_of


def pieces_notes(source: Source) -> list[str]:
    """The summary's notes on the last pull (none for a source not in pieces)."""
    return source.notes() if isinstance(source, Pieces) else []


def skipped(source: Source) -> int:
    """Records ``[source] where`` left out in the last pull."""
    return source.skipped if isinstance(source, Pieces) else 0


def join_tokens(source: Source) -> list[str | None] | None:
    """Each join's change token as it was opened (``Join.token``); None: no joins opened."""
    return [join.token for join in source.joins] if isinstance(source, Pieces) else None


def join_contents(source: Source) -> list[str | None]:
    """Each join's feed digest (its source's, as its index keeps it); none without joins."""
    return [join.content for join in source.joins] if isinstance(source, Pieces) else []


def joins_read(source: Source) -> dict[str, bool]:
    """Per join: whether its source was read in this run (False: its index was reused)."""
    return {join.name: join.read for join in source.joins} if isinstance(source, Pieces) else {}
