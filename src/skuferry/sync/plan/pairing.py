"""Pairing: each source record with the mirror's row for its key, mapped unless recognised.

The mirror is asked once per ``LOOKAHEAD`` records (one-row lookups were most of a
no-op run's time): first which of their keys a source row with an equal record digest
leaves unchanged (``recognisable``), whose records are recognised with one hash each,
neither mapped nor given a ``MirrorRow``; then the rest in full (``slotted``). Each
record comes with its key's slot, 0 for none (a key the mirror does not know, or a row
added after the plan began).

A source read line by line hands over lines of text (``RawLines``): a line whose digest
the row holds is recognised as its record would be by record digest, unparsed; any other
line is read into its records, which go the records' way.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Protocol

from skuferry.models import UNMAPPED, BadRecord, MirrorRow, Product, RawLines, RawRecord
from skuferry.sync.plan import numbered

if TYPE_CHECKING:
    from skuferry.sync.map.mapper import Mapper
    from skuferry.sync.plan.numbered import Hit, SlottedMirror
    from skuferry.sync.plan.seen import Seen

Record = Product | BadRecord | RawRecord
# What a chunk holds: records, and lines of a line reader not parsed yet (their text).
_Item = Record | str
# A record as paired: mapped (or recognised), with its key's row when looked up, and slot.
Paired = tuple[Product | BadRecord, MirrorRow | None, int]


class LineReader(Protocol):
    """A source read line by line (the line route): its ``RawLines`` are recognised by
    their text when the mirror holds the line digest, and parsed otherwise."""

    def keys(self, block: RawLines) -> list[str | None]:
        """The key each line's record has, as ``Mapper.key_reader`` reads it."""
        ...

    def digester(self) -> Callable[[str, str], bytes]:
        """digest(record digest, text): a line's digest, bound to the row's record digest."""
        ...

    def parse(self, line: int, text: str) -> list[RawRecord | BadRecord]:
        """Exactly the records the source yields for this line."""
        ...


def pair(  # noqa: PLR0915 - one loop, kept whole for its speed
    records: Iterable[Record | RawLines],
    mirror: SlottedMirror,
    mapper: Mapper | None,
    seen: Seen,
    *,
    lines: LineReader | None = None,
    learn: Callable[[int, str, bytes], None] | None = None,
) -> Iterator[Paired]:
    """Each record, mapped unless recognised, with the mirror's row for its key and its slot.

    With ``seen.recognising``, the first record of a key recognised by its record digest
    is dealt with here, in source order: its slot is marked seen and recognised, and
    nothing is yielded (see ``plan``). Otherwise a recognised record is yielded as a
    product never mapped (``models.was_mapped``) without a row. ``learn(slot,
    record digest, line digest)`` is told of each line parsed and then recognised by
    record digest.
    """
    record_digest = mapper.record_digester() if mapper is not None else None
    key_of = mapper.key_reader() if mapper is not None else None
    first_recognised = seen.first_recognised
    digest: Callable[[str, str], bytes] | None = None
    for chunk, keys, numbers in _chunks(records, mapper, lines):
        wanted = [k for k in keys if k is not None]
        quick: dict[str | None, Hit] = mirror.recognisable(wanted)  # type: ignore[assignment]
        # No key twice in the chunk (one C call to tell): then a recognised key whose slot
        # is not marked is its first record, whatever precedes it in the chunk, and is
        # dealt with right here. Otherwise source order decides, in the second loop.
        at_once = seen.recognising and len(set(wanted)) == len(wanted)
        if lines is not None and digest is None:
            digest = lines.digester()  # a chunk holds records: the header has been read
        # (item, key, the row's hit when recognised, the line it starts on)
        left: list[tuple[_Item, str | None, Hit | None, int]] = []
        rest: list[str] = []
        for item, key, number in zip(chunk, keys, numbers):  # noqa: B905 - numbers may be endless
            # (record, its key, the line it was parsed from when that may be learnt)
            todo: Iterable[tuple[Record, str | None, str | None]]
            if type(item) is str:
                # A line, unparsed: recognised by its digest, or read into its records.
                hit = quick.get(key)  # None for a line without a key
                # hit: (key, slot, digest, record digest, line digest or None)
                if hit is not None and digest(hit[3], item) == hit[4]:  # type: ignore[misc]
                    # the line the row was recognised from: unchanged
                    if not (at_once and first_recognised(hit[1], number)):
                        left.append((item, key, hit, number))
                    continue
                parsed: list[tuple[Record, str | None, str | None]] = []
                for got in lines.parse(number, item):  # type: ignore[union-attr]
                    read = (
                        key_of(got)
                        if key_of is not None and type(got) is RawRecord
                        else _key(got, mapper)
                    )
                    if read is not None and read != key:
                        at_once = False  # cannot happen (the reader's key is map()'s): be safe
                    parsed.append((got, read, item if read == key else None))
                todo = parsed
            else:
                todo = ((item, key, None),)  # type: ignore[assignment]  # a record
            for record, read, text in todo:
                if read is not None:
                    hit = quick.get(read)
                    if (
                        hit is not None
                        and record_digest is not None
                        and type(record) is RawRecord
                        and record_digest(record) == hit[3]
                    ):
                        if text is not None and learn is not None and digest is not None:
                            learn(hit[1], hit[3], digest(hit[3], text))  # next time: by its line
                        # seen, and unchanged: no action at all
                        if not (at_once and first_recognised(hit[1], record.line)):
                            left.append((record, read, hit, record.line))
                        continue
                    rest.append(read)
                left.append((record, read, None, 0))
        found: dict[str, tuple[int, MirrorRow]] = mirror.slotted(rest) if rest else {}
        for item, key, hit, line in left:
            if hit is not None and key is not None:
                if first_recognised(hit[1], line):
                    continue  # the key's first record: seen, and unchanged, without an action
                product = Product(key, UNMAPPED, hit[2], line, hit[3])
                yield product, None, seen.slot(hit[1])
                continue
            slot, row = found.get(key, (0, None)) if key is not None else (0, None)
            paired = _joined(item, key, mapper)  # type: ignore[arg-type]  # a record
            if isinstance(paired, BadRecord):
                yield paired, None, seen.slot(slot)
                continue
            if paired.key != key:  # cannot happen: key_of() is map()'s key
                slot, row = mirror.slotted([paired.key]).get(paired.key, (0, None))
            yield paired, row, seen.slot(slot)


def _chunks(
    records: Iterable[Record | RawLines],
    mapper: Mapper | None,
    lines: LineReader | None,
) -> Iterator[tuple[list[_Item], list[str | None], Iterable[int]]]:
    """The records in chunks of about ``LOOKAHEAD``: (items, their keys, the line numbers
    of the lines among them). A line of ``RawLines`` stays its text (a ``str``), keyed by
    the reader; a record is keyed as ``map()`` keys it."""
    key_of = mapper.key_reader() if mapper is not None else None
    if lines is None:
        it = iter(records)
        while chunk := list(itertools.islice(it, numbered.LOOKAHEAD)):
            # RawLines without their reader: _key refuses them
            keys = [
                key_of(r) if key_of is not None and type(r) is RawRecord else _key(r, mapper)
                for r in chunk
            ]
            yield chunk, keys, itertools.repeat(0)  # type: ignore[misc]  # records only
        return
    items: list[_Item] = []
    keys = []
    numbers: list[int] = []
    for record in records:
        if type(record) is RawLines:
            texts = record.texts
            items.extend(texts)
            keys.extend(lines.keys(record))
            numbers.extend(range(record.start, record.start + len(texts)))
        else:
            items.append(record)  # type: ignore[arg-type]  # not RawLines
            keys.append(
                key_of(record)
                if key_of is not None and type(record) is RawRecord
                else _key(record, mapper)
            )
            numbers.append(0)
        if len(items) >= numbered.LOOKAHEAD:
            yield items, keys, numbers
            items, keys, numbers = [], [], []
    if items:
        yield items, keys, numbers


def _joined(item: Record, key: str | None, mapper: Mapper | None) -> Product | BadRecord:
    """The record as the planner takes it: mapped, a bad one with its key."""
    if isinstance(item, BadRecord):
        return item if key == item.key else dataclasses.replace(item, key=key)
    if isinstance(item, Product):
        return item
    if mapper is None:
        raise TypeError("plan() needs a mapper for raw source records")
    return mapper.map(item)


def _key(record: Record | RawLines, mapper: Mapper | None) -> str | None:
    if type(record) is RawLines:  # lines of a source read line by line, without its reader
        raise TypeError("plan() needs the line reader of RawLines (lines=...)")
    if isinstance(record, Product):
        return record.key
    if isinstance(record, BadRecord):
        return mapper.key_of_bad(record) if mapper is not None else record.key
    if isinstance(record, RawRecord) and mapper is not None:
        return mapper.key_of(record)
    return None
