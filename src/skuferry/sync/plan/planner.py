"""The planner: source records x mirror -> actions. Pure: no I/O, no clock.

``plan()`` streams a whole catalog through the rule (``decide``), rejects bad records
and duplicate keys, and finally decides for keys that left the source (``leaving``):
GONE, or ARCHIVE under ``[gone] action = "patch"``. An ARCHIVED product that is back
is RESTOREd. Each record is paired with its key's mirror row first (``pairing``), and
the keys seen are kept compact (``seen``).

Held, not gone: a product whose row is present but cannot be read or mapped
keeps its last state. Its REJECT changes nothing in the mirror, and its key
counts as seen, so it is not GONE either. A bad row whose product cannot be
told for sure (no readable key, or fields that may be shifted) could be any
product: a full pull with such a row decides nothing gone (``Tally``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

from skuferry.completeness import Ledger
from skuferry.models import Action, BadRecord, Kind, MirrorRow, Product, RawLines, was_mapped
from skuferry.sync.plan.numbered import numbered
from skuferry.sync.plan.pairing import LineReader, Record, pair
from skuferry.sync.plan.rule import decide, leaving
from skuferry.sync.plan.seen import RECOGNISED, Seen
from skuferry.sync.plan.tally import Tally, absence_proven

if TYPE_CHECKING:
    from skuferry.sync.map.mapper import Mapper

__all__ = ["PAYLOAD_CACHE_SIZE", "LineReader", "Tally", "decide", "leaving", "plan"]

# A key repeated in the source is named with the field that differs when the
# first payload is still at hand; a bounded cache keeps memory flat.
PAYLOAD_CACHE_SIZE = 4096
_REJECTED_IN_RUN = ""  # seen-digest marker: this key is rejected for the rest of the run


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
      with ``archiving`` (the digest of the ``[gone] patch``, see ``GonePolicy``)
      such keys with a remote id are ARCHIVEd instead (see ``leaving``). Not
      when ``tally.unsure``: a row that could be any product was rejected, so
      the pull is reported incomplete to the ledger, and ``tally.gone_skipped``
      is set when that alone stopped the gone decisions.

    ``mirror``: the state file's rows (``MirrorLookup``, numbered by rowid), or any
    mapping of key to row, numbered in its own order (``numbered``).

    ``ledger``: the run's completeness ledger, which the pull reported its verdict to
    by the time the records are exhausted. Without one, a ledger holding one verdict
    for the records is made from ``full``.

    ``seen`` (key -> (digest, first line)) may be a disk-backed mapping for huge
    catalogs; it is filled as the records stream by, with what the bit of a key's
    mirror row cannot tell (see ``Seen``).

    ``resend``: keys whose refused data are sent again (see ``decide``).

    Raw source records need a ``mapper``: one whose record digest equals the one a
    SYNCED row holds beside its digest is UNCHANGED without being mapped (see
    ``was_mapped``); every other one is mapped here.

    ``recognised``: a bitmap the planner sizes and fills in place. A product
    recognised by its record digest is then not yielded at all: the bit of its mirror
    row is set instead (``PlanStore.recognised`` counts them; a later REJECT of the
    key still overrules it). A million UNCHANGED actions cost more than the rest of
    a quiet plan.

    ``lines``: ``records`` may hold ``RawLines`` of this reader (the line route). A
    line whose digest the row holds is recognised as its record would be by
    record digest, unparsed; any other line is parsed and planned as a record.
    ``learn(slot, record digest, line digest)`` is told of each line that was parsed
    and then recognised by record digest, so that the mirror can learn its digest.
    """
    seen = {} if seen is None else seen
    tally = Tally() if tally is None else tally
    recent: OrderedDict[str, dict[str, Any]] = OrderedDict()
    rows = numbered(mirror)
    marks = Seen(seen, rows, recognised)
    for record, row, slot in pair(records, rows, mapper, marks, lines=lines, learn=learn):
        if isinstance(record, BadRecord):
            reason = record.reason
            if not record.no_product and (record.key is None or record.guessed):
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
            else:  # recognised: pairing found the row SYNCED with this record digest
                marks.unchanged(record.key, slot, record.digest, record.line)
                yield Action(Kind.UNCHANGED, record.key, record, line=record.line)
            continue
        first_digest, first_line = earlier
        if first_digest == RECOGNISED:  # the first was recognised: it holds the mirror's digest
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
    if not absence_proven(ledger, tally, full=full):
        return
    for key, row in marks.unseen(mirror_keys):
        kind = leaving(row, archiving=archiving)
        if kind is not None:
            yield Action(kind, key, remote_id=row.remote_id)


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
