"""The planner: source records x mirror -> actions. Pure: no I/O, no clock.

``decide()`` is the rule for one product against what the mirror knows;
``plan()`` streams a whole catalog through it, rejects bad records and
duplicate keys, and finally decides for keys that left the source
(``leaving()``): GONE, or ARCHIVE under ``[gone] action = "patch"``. An
ARCHIVED product that is back is RESTOREd.

Held, not gone: a product whose row is present but cannot be read or mapped
keeps its last state. Its REJECT changes nothing in the mirror, and its key
counts as seen, so it is not GONE either. A bad row whose product cannot be
told for sure (no readable key, or fields that may be shifted) could be any
product: a full pull with such a row decides nothing gone (``Tally``).

Who may POST without a lookup: only a create whose absence on the remote is
known, i.e. a full remote walk was recorded (``walked``) and nothing about the
key says "it may be there" (an open intent, a PENDING or DUPLICATE row).
"""

from __future__ import annotations

import array
import dataclasses
import itertools
from collections import OrderedDict
from collections.abc import (
    Callable,
    Collection,
    Iterable,
    Iterator,
    Mapping,
    MutableMapping,
    Sequence,
)
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from skuferry.completeness import Ledger, Reader
from skuferry.models import (
    UNMAPPED,
    Action,
    BadRecord,
    Kind,
    MirrorRow,
    Product,
    RawLines,
    RawRecord,
    State,
    was_mapped,
)

if TYPE_CHECKING:
    from skuferry.sync.map.mapper import Mapper

Record = Product | BadRecord | RawRecord
# What a chunk holds: records, and lines of a line reader not parsed yet (their text).
_Item = Record | str
# A mirror row the planner may recognise: (key, slot, digest, fingerprint, line digest).
Hit = tuple[str, int, str, str, bytes | None]


@runtime_checkable
class BatchedMirror(Protocol):
    """A mirror asked per batch of keys (the state file's, ``state/reads.MirrorLookup``)."""

    def get_many(self, keys: Sequence[str]) -> dict[str, MirrorRow]: ...


@runtime_checkable
class SlottedMirror(BatchedMirror, Protocol):
    """A batched mirror that numbers its rows (slot 0 is never a row): see ``_Seen``."""

    def slots(self) -> int:
        """One more than the highest row number."""
        ...

    def recognisable(self, keys: Sequence[str]) -> dict[str, Hit]:
        """key -> (key, slot, digest, fingerprint, line digest) of the SYNCED rows without
        an open intent (line digest: None until learnt, see ``LineReader``)."""
        ...

    def slotted(self, keys: Sequence[str]) -> dict[str, tuple[int, MirrorRow]]:
        """key -> (slot, row) of the keys the mirror knows."""
        ...

    def unseen(self, seen: bytes | bytearray) -> Iterator[MirrorRow]:
        """The rows whose bit in ``seen`` is clear."""
        ...


class LineReader(Protocol):
    """A source read line by line (``sync/plan/lines.py``): its ``RawLines`` are recognised by
    their text when the mirror holds the line digest, and parsed otherwise."""

    def keys(self, block: RawLines) -> list[str | None]:
        """The key each line's record has, as ``Mapper.key_reader`` reads it."""
        ...

    def digester(self) -> Callable[[str, str], bytes]:
        """digest(fingerprint, text): a line's digest, bound to the row's fingerprint."""
        ...

    def parse(self, line: int, text: str) -> list[RawRecord | BadRecord]:
        """Exactly the records the source yields for this line."""
        ...


# Rows in these states may stand for a product already on the remote that the
# mirror cannot point to: a create must look it up before it may POST.
_MAY_EXIST = frozenset({State.PENDING, State.DUPLICATE, State.REMOTE_ONLY})
# States whose ``digest`` is what the remote holds and where nothing was left in
# doubt, so an equal source digest means nothing to send.
_IN_STEP_WHEN_EQUAL = frozenset({State.SYNCED, State.DRIFT, State.GONE})

# A key repeated in the source is named with the field that differs when the
# first payload is still at hand; a bounded cache keeps memory flat.
PAYLOAD_CACHE_SIZE = 4096
LOOKAHEAD = 500  # records per batched mirror lookup
FAST_LOOKAHEAD = 2000  # ... of a mirror that numbers its rows (see _with_rows)
_REJECTED_IN_RUN = ""  # seen-digest marker: this key is rejected for the rest of the run
_RECOGNISED = "\x00recognised"  # seen-digest marker: the mirror's digest (see _Seen)
# The payload of a product recognised by its fingerprint and never mapped: only
# its key and digest are known, and an unchanged product needs nothing more.
_UNMAPPED = UNMAPPED  # see models.was_mapped (the plan store reads it too)


@dataclasses.dataclass
class Tally:
    """What ``plan()`` found out on the way that the run's summary reports."""

    # Rejected rows whose product cannot be told for sure: no readable key, or a key
    # read from fields that may be shifted. Any of them stops a full pull's gone decisions.
    unsure: int = 0
    gone_skipped: bool = False  # a full pull decided nothing gone because of them


def decide(
    product: Product, row: MirrorRow | None, *, walked: bool, resend: bool = False
) -> Action:
    """What to do with ``product`` given the mirror's ``row`` for its key.

    ``row.digest`` is the digest last confirmed on the remote, except for a
    REJECTED row, where it is the digest the API (or mapping) refused.
    ``resend`` (``skuferry retry``): data the API refused are sent again, by the
    same rules as a change (an update, or a create after a lookup when needed).
    """

    def create(*, lookup: bool = False) -> Action:
        return Action(
            Kind.CREATE,
            product.key,
            product,
            line=product.line,
            lookup_first=lookup or not walked,
        )

    def update(remote_id: str) -> Action:
        return Action(Kind.UPDATE, product.key, product, remote_id=remote_id, line=product.line)

    def unchanged() -> Action:
        remote_id = row.remote_id if row else None
        return Action(Kind.UNCHANGED, product.key, product, remote_id=remote_id, line=product.line)

    if row is None:
        return create()
    if row.intent_digest is not None:
        return create(lookup=True)  # a POST may have landed: resolve by lookup, never re-POST blind
    if row.state is State.REJECTED:
        if row.digest == product.digest and not resend:
            return Action(
                Kind.STILL_REJECTED, product.key, product, line=product.line, reason=row.last_error
            )
        return update(row.remote_id) if row.remote_id else create()
    if row.state is State.DUPLICATE:
        return create(lookup=True)  # the engine re-checks the remote before anything else
    if row.state is State.ARCHIVED and row.remote_id is not None:
        # Back in the source: the remote holds (or may hold) the [gone] patch, so whatever
        # the digest it is restored, unless this very data was refused as a restore.
        if row.digest == product.digest and not resend:
            return Action(
                Kind.STILL_REJECTED, product.key, product, line=product.line, reason=row.last_error
            )
        return Action(
            Kind.RESTORE, product.key, product, remote_id=row.remote_id, line=product.line
        )
    if row.remote_id is not None:
        if row.state in _IN_STEP_WHEN_EQUAL and row.digest == product.digest:
            return unchanged()
        return update(row.remote_id)
    return create(lookup=row.state in _MAY_EXIST)


def plan(
    records: Iterable[Record | RawLines],
    mirror: Mapping[str, MirrorRow],
    *,
    walked: bool,
    mirror_keys: Iterable[str] | None = None,
    seen: MutableMapping[str, tuple[str, int]] | None = None,
    mapper: Mapper | None = None,
    full: bool = True,
    archiving: str | None = None,
    tally: Tally | None = None,
    resend: Collection[str] = (),
    recognised: bytearray | None = None,
    lines: LineReader | None = None,
    learn: Callable[[int, str, bytes], None] | None = None,
    ledger: Ledger | None = None,
) -> Iterator[Action]:
    """Stream the actions that bring the remote in step with ``records``.

    The LAST action yielded for a key supersedes every earlier one: consumers
    keep one action per key (a dict, or a table keyed by key) and act only once
    the plan is exhausted. This is how a duplicate key found late in the source
    turns an already planned write into a REJECT; once a key conflicts it stays
    rejected for the run. REJECTs of records without a key have ``key=None``
    and are kept by line instead.

    - a BadRecord -> REJECT(key, line, reason), the key read by the ``mapper``
      from the fields a source could read (``Mapper.key_of_bad``): the product
      is held (the REJECT changes nothing in the mirror, and the key counts as
      seen). One whose product cannot be told for sure is counted in
      ``tally.unsure``;
    - a key repeated with the same digest -> the repeat is ignored; with a
      different digest (or as a bad record) -> REJECT for the key, naming both
      lines and, when known, a differing field;
    - after the records, when absence is proven (``ledger.may_mark_gone()``: the
      pull reported itself complete; an incremental pull holds only the changed
      records, so absence proves nothing there): GONE for each key of
      ``mirror_keys`` (default: the mirror's keys) that was not seen and is in
      the source as far as the mirror knows (not GONE already, not REMOTE_ONLY);
      with ``archiving`` (the digest of the ``[gone] patch``, see ``gone.py``)
      such keys with a remote id are ARCHIVEd instead (see ``leaving``). Not
      when ``tally.unsure``: a row that could be any product was rejected, so
      the pull is reported incomplete to the ledger, and ``tally.gone_skipped``
      is set when that alone stopped the gone decisions.

    ``ledger``: the run's completeness ledger (``completeness.py``), which the pull
    reported its verdict to by the time the records are exhausted. Without one, a
    ledger holding one verdict for the records is made from ``full``.

    ``seen`` (key -> (digest, first line)) may be a disk-backed mapping for
    huge catalogs; it is filled as the records stream by.

    ``resend``: keys whose refused data are sent again (see ``decide``).

    Raw source records need a ``mapper``: one whose fingerprint equals the one a
    SYNCED row holds beside its digest is UNCHANGED without being mapped (see
    ``was_mapped``); every other one is mapped here.

    ``recognised``: a bitmap the planner sizes and fills in place. With a mirror that
    numbers its rows (``_Seen``), a product recognised by its fingerprint is then not
    yielded at all: the bit of its mirror row is set instead (``PlanStore.recognised``
    counts them; a later REJECT of the key still overrules it). A million UNCHANGED
    actions cost more than the rest of a quiet plan.

    ``lines``: ``records`` may hold ``RawLines`` of this reader (``sync/plan/lines.py``). With
    a mirror that numbers its rows, a line whose digest the row holds is recognised as
    its record would be by fingerprint, unparsed; any other line is parsed and planned
    as a record. ``learn(slot, fingerprint, line digest)`` is told of each line that was
    parsed and then recognised by fingerprint, so that the mirror can learn its digest.
    """
    seen = {} if seen is None else seen
    tally = Tally() if tally is None else tally
    recent: OrderedDict[str, dict[str, Any]] = OrderedDict()
    marks = _Seen(seen, mirror)
    if recognised is not None:
        recognised[:] = bytes((marks.size + 7) >> 3)
    stream = _with_rows(records, mirror, mapper, marks, recognised, lines, learn)
    for record, row, slot in stream:
        if isinstance(record, BadRecord):
            reason = record.reason
            if record.key is None or record.guessed:
                tally.unsure += 1
            if record.key is not None:
                earlier = marks.get(record.key, slot)
                if earlier is not None and earlier[0] != _REJECTED_IN_RUN:
                    reason = (
                        f"duplicate key {record.key!r}: line {record.line} repeats "
                        f"line {earlier[1]}: {reason}"
                    )
                first = earlier[1] if earlier else record.line
                marks.put(record.key, slot, _REJECTED_IN_RUN, first)
            yield Action(
                Kind.REJECT, record.key, reason=reason, line=record.line, stage=record.stage
            )
            continue
        earlier = marks.get(record.key, slot)
        if earlier is None:
            if was_mapped(record):
                marks.put(record.key, slot, record.digest, record.line)
                _remember(recent, record)
                yield decide(record, row, walked=walked, resend=record.key in resend)
            else:  # recognised: _with_rows checked the row is SYNCED with this fingerprint
                marks.recognised(record.key, slot, record.digest, record.line)
                yield Action(Kind.UNCHANGED, record.key, record, line=record.line)
            continue
        first_digest, first_line = earlier
        if first_digest == _RECOGNISED:  # the first was recognised: it holds the mirror's digest
            first_digest = row.digest if row is not None and row.digest else record.digest
        if first_digest in (record.digest, _REJECTED_IN_RUN):
            continue  # an exact repeat, or a key already rejected in this run
        marks.put(record.key, slot, _REJECTED_IN_RUN, first_line)
        yield Action(
            Kind.REJECT,
            record.key,
            line=record.line,
            reason=_conflict_reason(record, first_line, recent.get(record.key)),
            stage="check",  # each row reads and maps; together they contradict each other
        )
    if not _absence_proven(ledger, tally, full=full):
        return
    for key, row in marks.unseen(mirror_keys):
        kind = leaving(row, archiving=archiving)
        if kind is not None:
            yield Action(kind, key, remote_id=row.remote_id)


def _absence_proven(ledger: Ledger | None, tally: Tally, *, full: bool) -> bool:
    """Whether the records just planned prove a product gone by its absence (the ledger's
    rule); rows whose product cannot be told for sure are reported there first."""
    if ledger is None:
        ledger = Ledger()
        if full:
            ledger.complete(Reader.SOURCE, "records")
        else:
            ledger.incomplete(Reader.SOURCE, "records", "not a full pull")
    proven = ledger.may_mark_gone()
    if tally.unsure:
        ledger.incomplete(
            Reader.SOURCE,
            "rejected rows",
            f"{tally.unsure} rejected row(s) whose product cannot be told for sure",
        )
    if ledger.may_mark_gone():
        return True
    tally.gone_skipped = proven and tally.unsure > 0  # the rows alone stopped them
    return False


class _Seen:
    """The keys ``plan()`` has seen: key -> (digest, first line), kept compact.

    With a mirror that numbers its rows (``slots()``, see ``state/reads.py``), a key
    the mirror knows is marked by one bit of its slot, and its first line in an array:
    a million keys cost 4.1 MB instead of a table row each. Only what the bit
    cannot tell goes to ``table`` (the caller's ``seen``): the digest of a first row
    that was mapped, a key rejected in this run, keys the mirror does not know. A first
    row recognised by its fingerprint needs no entry: its digest is the mirror's
    (``_RECOGNISED``). The GONE pass then reads the rows whose bit is clear.
    Without slots every key goes to ``table``, as before.
    """

    def __init__(
        self, table: MutableMapping[str, tuple[str, int]], mirror: Mapping[str, MirrorRow]
    ) -> None:
        self.table = table
        self._mirror = mirror
        self.slotted = mirror if isinstance(mirror, SlottedMirror) else None
        self.size = self.slotted.slots() if self.slotted is not None else 0
        self.bits = bytearray((self.size + 7) >> 3)
        self.lines = array.array("I", bytes(4 * self.size))  # "I": 4 bytes on every platform

    def get(self, key: str, slot: int) -> tuple[str, int] | None:
        if slot and not self.bits[slot >> 3] & (1 << (slot & 7)):
            return None
        found = self.table.get(key)
        if found is None and slot:
            return _RECOGNISED, self.lines[slot]
        return found

    def put(self, key: str, slot: int, digest: str, line: int) -> None:
        if slot and not self.bits[slot >> 3] & (1 << (slot & 7)):
            self.bits[slot >> 3] |= 1 << (slot & 7)
            self.lines[slot] = line
        self.table[key] = (digest, line)

    def recognised(self, key: str, slot: int, digest: str, line: int) -> None:
        """A first row recognised by its fingerprint: its bit alone when it has a slot."""
        if not slot:
            self.table[key] = (digest, line)
            return
        self.bits[slot >> 3] |= 1 << (slot & 7)
        self.lines[slot] = line

    def unseen(self, mirror_keys: Iterable[str] | None) -> Iterator[tuple[str, MirrorRow]]:
        """The mirror's keys and rows whose key was not seen (``mirror_keys``: of those keys)."""
        mirror, slotted = self._mirror, self.slotted
        if slotted is not None and mirror_keys is None:
            for row in slotted.unseen(self._bits_with_gaps()):
                yield row.key, row
            return
        keys = iter(mirror if mirror_keys is None else mirror_keys)
        while chunk := list(itertools.islice(keys, LOOKAHEAD)):
            if slotted is not None:
                found = slotted.slotted(chunk)
                for key in chunk:
                    hit = found.get(key)
                    if hit is not None and self.get(key, hit[0]) is None:
                        yield key, hit[1]
                continue
            for key in chunk:
                if key in self.table:
                    continue
                known = mirror.get(key)
                if known is not None:
                    yield key, known

    def _bits_with_gaps(self) -> bytearray:
        """The bitmap with slot 0 (never a row) and the bits past ``size`` marked, so that
        they are not asked for."""
        bits = bytearray(self.bits)
        if bits:
            bits[0] |= 1
            bits[-1] |= 0xFF & ~((1 << (self.size - 8 * (len(bits) - 1))) - 1)
        return bits


def leaving(row: MirrorRow, *, archiving: str | None) -> Kind | None:
    """What to do with a key the source no longer holds; None: nothing (already dealt with).

    Without ``archiving`` a product in the source becomes GONE. With it, a
    product the remote holds under a known id is ARCHIVEd once, also one marked
    GONE before archiving was turned on; an ARCHIVED row stays as it is (unless
    its archive is in doubt: ``row.digest == archiving``, sent again), and so
    does one whose archive the API refused (REJECTED, ``row.digest ==
    archiving``) until the patch changes. A create in doubt (open intent), a
    DUPLICATE or a product never created is only marked GONE. A PENDING row
    without a remote id (its product answered 404: it may be re-created on the
    CMS) stays PENDING, so its return looks the key up before any POST.
    """
    in_doubt = row.state is State.ARCHIVED and archiving is not None and row.digest == archiving
    refused = row.state is State.REJECTED and archiving is not None and row.digest == archiving
    lost_id = row.state is State.PENDING and row.remote_id is None and row.intent_digest is None
    if refused or lost_id or (row.state in (State.ARCHIVED, State.REMOTE_ONLY) and not in_doubt):
        return None
    can_archive = (
        archiving is not None
        and row.remote_id is not None
        and row.intent_digest is None
        and row.state is not State.DUPLICATE
    )
    if can_archive:
        return Kind.ARCHIVE
    return Kind.GONE if row.state.in_source else None


def _with_rows(  # noqa: PLR0917 - plan()'s own arguments, passed on
    records: Iterable[Record | RawLines],
    mirror: Mapping[str, MirrorRow],
    mapper: Mapper | None,
    marks: _Seen,
    recognised: bytearray | None,
    lines: LineReader | None = None,
    learn: Callable[[int, str, bytes], None] | None = None,
) -> Iterator[tuple[Product | BadRecord, MirrorRow | None, int]]:
    """Each record, mapped unless recognised, with the mirror's row for its key and its slot.

    A mirror with ``get_many(keys)`` (the SQLite mirror) is asked once per
    ``LOOKAHEAD`` records instead of once per record: one-row lookups were most
    of a no-op run's time. Other Mappings are asked key by key.

    A mirror that numbers its rows (``marks.size`` > 0, see ``_Seen``) is asked per
    ``FAST_LOOKAHEAD`` records, first which of their keys a source row with an equal
    fingerprint leaves unchanged (``recognisable``): those records are recognised
    with one hash each, neither mapped nor given a ``MirrorRow``; the rest are looked
    up in full (``slotted``). The slot is the key's row number in the mirror, 0 for
    none (a key the mirror does not know, or a row added after the plan began).
    """
    if marks.slotted is not None and marks.size:
        yield from _with_slots(records, marks.slotted, mapper, marks, recognised, lines, learn)
        return
    get_many = mirror.get_many if isinstance(mirror, BatchedMirror) else None
    it = _parsed(records, lines)  # without slots, every line is read into its records
    while chunk := list(itertools.islice(it, 1 if get_many is None else LOOKAHEAD)):
        keys = [_key(r, mapper) for r in chunk]  # once per record: key_of() is not free
        wanted = [k for k in keys if k is not None]
        found: Mapping[str, MirrorRow] = (
            get_many(wanted)
            if get_many is not None
            else {k: row for k in wanted if (row := mirror.get(k)) is not None}
        )
        for item, key in zip(chunk, keys, strict=True):
            row = found.get(key) if key is not None else None
            product = _joined(item, key, row, mapper)
            if isinstance(product, BadRecord):
                yield product, None, 0
                continue
            if product.key != key:
                row = mirror.get(product.key)  # cannot happen: key_of() is map()'s key
            yield product, row, 0


def _parsed(records: Iterable[Record | RawLines], lines: LineReader | None) -> Iterator[Record]:
    """``records`` with each line of ``RawLines`` read into its records."""
    for record in records:
        if type(record) is RawLines:
            if lines is None:
                raise TypeError("plan() needs the line reader of RawLines (lines=...)")
            for number, text in enumerate(record.texts, start=record.start):
                yield from lines.parse(number, text)
        else:
            yield record  # type: ignore[misc]  # not RawLines: the type() test above


def _chunks(
    records: Iterable[Record | RawLines],
    mapper: Mapper | None,
    lines: LineReader | None,
) -> Iterator[tuple[list[_Item], list[str | None], Iterable[int]]]:
    """The records in chunks of about ``FAST_LOOKAHEAD``: (items, their keys, the line
    numbers of the lines among them). A line of ``RawLines`` stays its text (a ``str``),
    keyed by the reader; a record is keyed as ``map()`` keys it."""
    key_of = mapper.key_reader() if mapper is not None else None
    if lines is None:
        it = iter(records)
        while chunk := list(itertools.islice(it, FAST_LOOKAHEAD)):
            keys = [
                key_of(r)  # no RawLines without a reader
                if key_of is not None and type(r) is RawRecord
                else _key(r, mapper)  # type: ignore[arg-type]
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
                else _key(record, mapper)  # type: ignore[arg-type]  # not RawLines
            )
            numbers.append(0)
        if len(items) >= FAST_LOOKAHEAD:
            yield items, keys, numbers
            items, keys, numbers = [], [], []
    if items:
        yield items, keys, numbers


def _with_slots(  # noqa: PLR0915, PLR0917 - one loop, kept whole for its speed
    records: Iterable[Record | RawLines],
    mirror: SlottedMirror,
    mapper: Mapper | None,
    marks: _Seen,
    recognised: bytearray | None,
    lines: LineReader | None,
    learn: Callable[[int, str, bytes], None] | None,
) -> Iterator[tuple[Product | BadRecord, MirrorRow | None, int]]:
    """``_with_rows`` for a mirror that numbers its rows.

    With ``recognised``, the first record of a key recognised by its fingerprint is
    dealt with here, in source order: its slot is marked seen (``marks``) and
    recognised, and nothing is yielded (see ``plan``). A line of ``RawLines`` whose
    digest the row holds (``LineReader``) is recognised the same way, unparsed; any
    other line is parsed and its records go the records' way.
    """
    slots = marks.size
    bits, seen_lines = marks.bits, marks.lines
    fingerprint = mapper.fingerprinter() if mapper is not None else None
    key_of = mapper.key_reader() if mapper is not None else None
    digest: Callable[[str, str], bytes] | None = None
    for chunk, keys, numbers in _chunks(records, mapper, lines):
        wanted = [k for k in keys if k is not None]
        quick: dict[str | None, Hit] = mirror.recognisable(wanted)  # type: ignore[assignment]
        # No key twice in the chunk (one C call to tell): then a recognised key whose slot
        # is not marked is its first record, whatever precedes it in the chunk, and is
        # dealt with right here. Otherwise source order decides, in the second loop.
        at_once = recognised is not None and len(set(wanted)) == len(wanted)
        marked = recognised if recognised is not None else bytearray()  # (at_once: the same)
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
                # hit: (key, slot, digest, fingerprint, line digest or None)
                if hit is not None and digest(hit[3], item) == hit[4]:  # type: ignore[misc]
                    slot = hit[1]  # the line the row was recognised from: unchanged
                    if at_once and slot < slots and not bits[slot >> 3] & (1 << (slot & 7)):
                        bits[slot >> 3] |= 1 << (slot & 7)
                        seen_lines[slot] = number
                        marked[slot >> 3] |= 1 << (slot & 7)
                        continue
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
                        and fingerprint is not None
                        and type(record) is RawRecord
                        and fingerprint(record) == hit[3]
                    ):
                        slot = hit[1]
                        if text is not None and learn is not None and digest is not None:
                            learn(slot, hit[3], digest(hit[3], text))  # next time: by its line
                        if at_once and slot < slots and not bits[slot >> 3] & (1 << (slot & 7)):
                            bits[slot >> 3] |= 1 << (slot & 7)  # seen, and unchanged:
                            seen_lines[slot] = record.line
                            marked[slot >> 3] |= 1 << (slot & 7)  # no action at all
                            continue
                        left.append((record, read, hit, record.line))
                        continue
                    rest.append(read)
                left.append((record, read, None, 0))
        found: dict[str, tuple[int, MirrorRow]] = mirror.slotted(rest) if rest else {}
        for item, key, hit, line in left:
            if hit is not None and key is not None:
                slot, known, mark = hit[1], hit[2], hit[3]
                if slot >= slots:
                    slot = 0  # a row added since the plan began
                elif recognised is not None and not bits[slot >> 3] & (1 << (slot & 7)):
                    bits[slot >> 3] |= 1 << (slot & 7)  # the key's first record: seen, and
                    seen_lines[slot] = line
                    recognised[slot >> 3] |= 1 << (slot & 7)  # unchanged, without an action
                    continue
                yield Product(key, _UNMAPPED, known, line, mark), None, slot
                continue
            slot, row = found.get(key, (0, None)) if key is not None else (0, None)
            product = _joined(item, key, row, mapper)  # type: ignore[arg-type]  # a record
            if isinstance(product, BadRecord):
                yield product, None, (slot if slot < slots else 0)
                continue
            if product.key != key:  # cannot happen: key_of() is map()'s key
                slot, row = mirror.slotted([product.key]).get(product.key, (0, None))
            yield product, row, (slot if slot < slots else 0)


def _joined(
    item: Record, key: str | None, row: MirrorRow | None, mapper: Mapper | None
) -> Product | BadRecord:
    """The record as the planner takes it: mapped unless recognised, a bad one with its key."""
    if isinstance(item, BadRecord):
        return item if key == item.key else dataclasses.replace(item, key=key)
    if isinstance(item, Product):
        return item
    if mapper is None:
        raise TypeError("plan() needs a mapper for raw source records")
    return _recognised(item, key, row, mapper) or mapper.map(item)


def _key(record: Record, mapper: Mapper | None) -> str | None:
    if isinstance(record, Product):
        return record.key
    if isinstance(record, BadRecord):
        return mapper.key_of_bad(record) if mapper is not None else record.key
    if isinstance(record, RawRecord) and mapper is not None:
        return mapper.key_of(record)
    return None


def _recognised(
    record: RawRecord, key: str | None, row: MirrorRow | None, mapper: Mapper
) -> Product | None:
    """The product as the mirror knows it, when the row proves the source did not change."""
    if (
        key is None
        or row is None
        or row.state is not State.SYNCED
        or row.intent_digest is not None
        or row.digest is None
        or row.fingerprint is None
    ):
        return None
    fingerprint = mapper.fingerprint(record)
    if fingerprint != row.fingerprint:
        return None
    return Product(key, _UNMAPPED, row.digest, record.line, fingerprint)


def _remember(recent: OrderedDict[str, dict[str, Any]], product: Product) -> None:
    recent[product.key] = product.payload
    if len(recent) > PAYLOAD_CACHE_SIZE:
        recent.popitem(last=False)


def _conflict_reason(
    product: Product, first_line: int, first_payload: dict[str, Any] | None
) -> str:
    reason = f"duplicate key {product.key!r}: line {product.line} differs from line {first_line}"
    if first_payload is None:
        return reason
    missing = object()
    fields = sorted(
        k
        for k in first_payload.keys() | product.payload.keys()
        if first_payload.get(k, missing) != product.payload.get(k, missing)
    )
    return f"{reason} ({', '.join(fields)})" if fields else reason
