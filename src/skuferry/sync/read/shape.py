"""The read stage learns the source's shape as the records stream by, and reports its
verdict to the run's ledger: the one place a run's decisions ask (``completeness``).

``ShapeWatch.watched`` wraps the records the plan reads. It looks at every record of the
first ``shape.SAMPLE`` (after them, only the fields not yet seen giving a value): for each
mapped field, whether its column or path gave a value; the key's format; the header of
a source that has one. The contract is judged by ``shape.decide`` (the one rule), twice:

- once the header is read, before the first record reaches the plan: a mapped column
  the header lacks, the key's column first;
- once the records are exhausted (the pull's own verdict is in the ledger by then):
  every rule, a path or a record's field that gives nothing in a whole pull included.

A broken contract is reported to the ledger (``Reader.SHAPE``), recorded in the state
(what ``status`` and ``explain`` show), and ends the pull with ``ShapeChanged`` (exit 2)
before the plan is finished, so nothing is written and nothing is marked gone. A shape
that holds is reported so too, and the state learns it once the run commits.

The plan stage asks the same watch about keys (``judge_keys``), once the plan names the
products it would create: keys that equal vanished ones after an obvious normalisation
are refused naming three pairs; a change of the keys' format alone (``decide``) is held
until then, so that the pairs, when there are any, are what the refusal names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import jmespath.exceptions

from skuferry import logs
from skuferry.completeness import Ledger, Reader
from skuferry.errors import ShapeChanged
from skuferry.models import RawLines, RawRecord
from skuferry.shape import (
    SAMPLE,
    Change,
    FieldRead,
    FieldShape,
    KeyCounter,
    Shape,
    ShapeVerdict,
    decide,
    renamed_keys,
    renamed_message,
)
from skuferry.sources.base import Source
from skuferry.sync.expressions.functions import Refused

log = logs.get("skuferry.sync.engine")

_Item = TypeVar("_Item")
MAX_NAMES = 200  # the top-level names of records without a header, kept for messages
_SEARCH_ERRORS = (Refused, jmespath.exceptions.JMESPathError)

Refuse = Callable[[Shape | None, ShapeVerdict], None]


def _gives(one: _Field, fields: dict[str, object]) -> bool:
    """Whether ``one`` reads a value in a record's ``fields`` (a header's column: a cell
    that is not empty; a path or a record's field: anything but nothing or null)."""
    read = one.read
    if read.search is None:
        value = fields.get(read.name)
        return value is not None and (one.record_based or value != "")
    try:
        return read.search(fields) is not None
    except _SEARCH_ERRORS:
        return False  # the mapping says why, for this record


class Mapped(Protocol):
    """What the watch asks of the mapping (``Mapper``): what each field reads, the key."""

    @property
    def reads(self) -> list[FieldRead]: ...

    @property
    def passes_through(self) -> bool: ...

    @property
    def key_field(self) -> str: ...

    def key_of(self, record: RawRecord) -> str | None: ...

    def key_reader(self) -> Callable[[RawRecord], str | None]: ...


@dataclass
class _Field:
    read: FieldRead
    record_based: bool  # judged by the records (a path, or a source without a header)
    given: int = 0
    looked: int = 0


@dataclass
class ShapeWatch:
    """What one pull shows of the source's shape (see the module docstring)."""

    source: Source  # the source as read: its header, its name
    mapper: Mapped
    learned: Shape | None  # the contract (None: nothing learnt yet)
    ledger: Ledger
    accept: str = "skuferry accept-shape"  # how the refusal names the way to accept
    refused: Refuse | None = None  # records a refusal in the state (None: a dry run)
    judging: bool = True  # False: accept-shape reads the shape, it never refuses it
    headed: bool = True  # the records are the header's rows (not unnested by `each`)
    keys_of: Callable[[RawLines], list[str | None]] | None = None  # the line route's keys
    verdict: ShapeVerdict | None = None
    seen: Shape | None = None
    _keys_changed: ShapeVerdict | None = None  # the keys' format broke: judged with the plan
    _fields: list[_Field] = field(default_factory=list)
    _keys: KeyCounter = field(default_factory=KeyCounter)
    _names: dict[str, int] = field(default_factory=dict)  # no header: name -> records giving it
    _records: int = 0
    _header: tuple[str, ...] | None = None

    @property
    def where(self) -> str:
        return self.source.name

    # -- the stream ---------------------------------------------------------------------
    def watched(self, records: Iterable[_Item]) -> Iterator[_Item]:
        """``records`` as they come, the shape learnt from them; see the module docstring."""
        key_of = self.mapper.key_reader()
        it = iter(records)
        first = True
        for item in it:
            if first:
                first = False
                self._start()
            if isinstance(item, RawRecord):
                self._see(item, key_of)
            elif isinstance(item, RawLines) and self.keys_of is not None and not self._keys.full:
                for key in self.keys_of(item):
                    if key:
                        self._keys.add(key)
            yield item
            if self._records >= SAMPLE and self._keys.full:
                break  # the sample is taken: from here on, only what no record gave yet
        if first:
            self._start()
        yield from self._unfound(it)
        self._finish()

    def _unfound(self, it: Iterator[_Item]) -> Iterator[_Item]:
        """The records after the sample: only the fields (and, for a pass-through mapping
        of records without a header, the learnt names) that gave no value yet are looked
        for, until each has; then the records pass untouched."""
        fields = [one for one in self._fields if not one.given]
        learned = self.learned.fields if self.learned is not None else ()
        names = [f.name for f in learned if self._passing() and not self._names.get(f.name)]
        if not fields and not names:
            yield from it
            return
        for item in it:
            if isinstance(item, RawRecord):
                found = item.fields
                for one in fields:
                    join = one.read.join
                    if join is not None and found.get(join) is None:
                        continue  # no partner: the join's completeness decides
                    one.looked += 1
                    if _gives(one, found):
                        one.given += 1
                for name in names:
                    if found.get(name) is not None:
                        self._names[name] = 1
                fields = [one for one in fields if not one.given]
                names = [name for name in names if not self._names.get(name)]
                if not fields and not names:
                    yield item
                    yield from it
                    return
            yield item

    def _passing(self) -> bool:
        return self.mapper.passes_through and self._header is None

    def _start(self) -> None:
        """The header is read: the columns the mapping reads must be in it."""
        header = self.source.header if self.headed else None
        self._header = header
        self._fields = [
            _Field(read, record_based=header is None or read.kind == "path")
            for read in self.mapper.reads
        ]
        if header is not None and self.judging:
            early = decide(self.learned, self._shape(whole=False), key=self.mapper.key_field)
            if not early.holds:
                self._refuse(early)

    def _see(self, record: RawRecord, key_of: Callable[[RawRecord], str | None]) -> None:
        fields = record.fields
        self._records += 1
        sampling = self._records <= SAMPLE
        if sampling:
            key = key_of(record)
            if key:
                self._keys.add(key)
            if self._header is None:
                names = self._names
                for name, value in fields.items():
                    if value is not None and (name in names or len(names) < MAX_NAMES):
                        names[name] = names.get(name, 0) + 1
        for one in self._fields:
            if not sampling and one.given:
                continue
            read = one.read
            if read.join is not None and fields.get(read.join) is None:
                continue  # no partner: the join's completeness decides (not the shape)
            one.looked += 1
            if _gives(one, fields):
                one.given += 1

    def _finish(self) -> None:
        self.seen = self._shape(whole=self.ledger.whole_pull())
        verdict = decide(self.learned, self.seen, key=self.mapper.key_field)
        self.verdict = verdict
        if not self.judging:
            return
        if verdict.holds:
            self.ledger.complete(Reader.SHAPE, self.where)
            for change in verdict.changes:
                log.info("sync.shape.changed", source=self.where, change=change.text)
            return
        if all(c.kind == "keys" for c in verdict.breaking):
            self._keys_changed = verdict  # the plan names the keys first (``judge_keys``)
            return
        self._refuse(verdict)

    # -- what was seen ------------------------------------------------------------------
    def _shape(self, *, whole: bool) -> Shape:
        header = self._header
        fields = [self._field_shape(one, header) for one in self._fields]
        if self.mapper.passes_through:
            fields = self._columns(header)
        return Shape(
            source=self.where,
            header=header,
            fields=tuple(fields),
            key=self._keys.format(),
            records=self._records,
            whole=whole,
            names=() if header is not None else tuple(self._names),
        )

    @staticmethod
    def _field_shape(one: _Field, header: tuple[str, ...] | None) -> FieldShape:
        read = one.read
        if one.record_based:
            kind = "path" if read.kind == "path" else "column"
            present = one.given > 0
        else:
            kind, present = "column", header is not None and read.name in header
        return FieldShape(read.target, kind, read.name, one.given, one.looked, present)  # type: ignore[arg-type]

    def _columns(self, header: tuple[str, ...] | None) -> list[FieldShape]:
        """A pass-through mapping reads every column: the header's (or the records' names),
        and the learnt ones no longer there."""
        names = list(header) if header is not None else list(self._names)
        learned = [f.name for f in self.learned.fields] if self.learned is not None else []
        looked = min(self._records, SAMPLE)
        found = []
        for name in dict.fromkeys([*names, *learned]):
            if header is not None:
                there = name in header
                found.append(
                    FieldShape(name, "column", name, looked if there else 0, looked, there)
                )
            else:
                given = self._names.get(name, 0)
                found.append(FieldShape(name, "path", name, given, looked, given > 0))
        return found

    # -- refusing ------------------------------------------------------------------------
    def _refuse(self, verdict: ShapeVerdict) -> None:
        seen = self.seen or self._shape(whole=False)
        first = verdict.breaking[0].text
        self.ledger.incomplete(Reader.SHAPE, self.where, first)
        for change in verdict.breaking:
            log.warning("sync.shape.refused", source=self.where, change=change.text)
        if self.refused is not None:
            self.refused(seen, verdict)
        raise ShapeChanged(verdict.message(self.where, accept=self.accept))

    def judge_keys(self, created: list[str], vanished: Callable[[], Iterable[str]]) -> None:
        """Once planned: refuse products about to be created under keys that equal
        ``vanished`` ones after an obvious normalisation (``shape.renamed_keys``), whatever
        the ``[gone]`` action and ``--force``; else a change of the keys' format the
        records showed. Both are shape verdicts of the run."""
        if not self.judging:
            return
        pairs = list(renamed_keys(vanished(), created)) if created else []
        if not pairs:
            if self._keys_changed is not None:
                self._refuse(self._keys_changed)
            return
        text = renamed_message(pairs, len(pairs), accept=self.accept)
        verdict = ShapeVerdict((Change(None, text.split(": nothing was written")[0], True),))
        self.ledger.incomplete(Reader.SHAPE, self.where, verdict.breaking[0].text)
        log.warning("sync.shape.refused", source=self.where, change=verdict.breaking[0].text)
        if self.refused is not None:
            self.refused(self.seen, verdict)
        raise ShapeChanged(text)
