"""The mirror as the planner asks it: rows numbered by slot, read in batches.

The state file's rows are numbered already (the rowid, ``MirrorLookup``): the planner
marks a seen key by one bit of its slot and asks for rows a batch of keys at a time.
Any other mapping of key to ``MirrorRow`` (a test's dict, a model of the mirror) is
numbered here in its own order (``numbered``), so that one pairing path serves both.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol, runtime_checkable

from skuferry.lifecycle import recognisable
from skuferry.models import MirrorRow
from skuferry.sync.plan.bits import Bits

LOOKAHEAD = 2000  # keys per batched lookup (SQLite allows 32766 variables)
# A mirror row the planner may recognise: (key, slot, digest, record digest, line digest).
Hit = tuple[str, int, str, str, bytes | None]


@runtime_checkable
class SlottedMirror(Protocol):
    """A mirror that numbers its rows (slot 0 is never a row) and answers per batch of keys.

    A slot at or past ``slots()`` is a row added after the plan began: the planner
    treats it as no slot at all."""

    def slots(self) -> int:
        """One more than the highest row number."""
        ...

    def recognisable(self, keys: Sequence[str]) -> dict[str, Hit]:
        """key -> (key, slot, digest, record digest, line digest) of the rows that a source
        row with an equal record digest leaves unchanged (``lifecycle.recognisable``; line
        digest: None until learnt, see the line route). It may hold other keys too."""
        ...

    def slotted(self, keys: Sequence[str]) -> dict[str, tuple[int, MirrorRow]]:
        """key -> (slot, row) of the keys the mirror knows."""
        ...

    def unseen(self, seen: bytes | bytearray) -> Iterator[MirrorRow]:
        """The rows whose bit in ``seen`` is clear, in slot order."""
        ...


class Numbered:
    """A plain mapping of key to ``MirrorRow``, numbered in its own order from slot 1.

    The numbers are taken once, when made: a key added to the mapping later has no slot
    (its slot is ``slots()``), as a row the state file adds during a plan. It holds no
    line digests, so a raw line is always read into its records."""

    def __init__(self, rows: Mapping[str, MirrorRow]) -> None:
        self._rows = rows
        self._slots = {key: slot for slot, key in enumerate(rows, start=1)}
        self._size = len(self._slots) + 1

    def slots(self) -> int:
        return self._size

    def _slot(self, key: str) -> int:
        return self._slots.get(key, self._size)

    def recognisable(self, keys: Sequence[str]) -> dict[str, Hit]:
        found: dict[str, Hit] = {}
        for key in keys:
            row = self._rows.get(key)
            if row is None or not recognisable(row):
                continue
            digest, record_digest = row.digest, row.record_digest
            if digest is not None and record_digest is not None:  # as recognisable says
                found[key] = (key, self._slot(key), digest, record_digest, None)
        return found

    def slotted(self, keys: Sequence[str]) -> dict[str, tuple[int, MirrorRow]]:
        rows = self._rows
        return {key: (self._slot(key), row) for key in keys if (row := rows.get(key)) is not None}

    def unseen(self, seen: bytes | bytearray) -> Iterator[MirrorRow]:
        marked, rows = Bits(bytearray(seen)), self._rows
        for key, slot in self._slots.items():
            if slot < 8 * len(seen) and slot not in marked and (row := rows.get(key)) is not None:
                yield row


def numbered(mirror: Mapping[str, MirrorRow]) -> SlottedMirror:
    """The mirror as the planner asks it: itself when it numbers its rows already."""
    return mirror if isinstance(mirror, SlottedMirror) else Numbered(mirror)
