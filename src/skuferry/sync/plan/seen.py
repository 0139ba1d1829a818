"""The keys a plan has seen, kept compact: one bit per mirror row, a table for the rest.

A million keys the mirror knows cost a bit and a line number each (4.1 MB) instead of
a table row each. The same bitmaps tell the plan store which rows were recognised
unchanged without an action, and the gone pass which rows no record named.
"""

from __future__ import annotations

import array
import itertools
from collections.abc import Iterable, Iterator, MutableMapping

from skuferry.models import MirrorRow
from skuferry.sync.plan import numbered
from skuferry.sync.plan.bits import Bits

RECOGNISED = "\x00recognised"  # a seen digest: the mirror's own (the first row was recognised)


class Seen:
    """The keys ``plan()`` has seen: key -> (digest, first line).

    A key the mirror knows is marked by the bit of its slot and its first line in an
    array. Only what the bit cannot tell goes to ``table`` (the caller's ``seen``): the
    digest of a first row that was mapped, a key rejected in this run, keys the mirror
    does not know (slot 0). A first row recognised by its record digest needs no entry:
    its digest is the mirror's (``RECOGNISED``).

    ``recognised``: the plan store's bitmap, sized here and filled in place. With it, a
    key's first row recognised unchanged is marked there and gets no action at all.
    """

    def __init__(
        self,
        table: MutableMapping[str, tuple[str, int]],
        mirror: numbered.SlottedMirror,
        recognised: bytearray | None = None,
    ) -> None:
        self.table = table
        self._mirror = mirror
        self.size = mirror.slots()
        self.bits = Bits.sized(self.size)
        self.lines = array.array("I", bytes(4 * self.size))  # "I": 4 bytes on every platform
        self._recognised: Bits | None = None
        if recognised is not None:
            recognised[:] = bytes(len(self.bits.data))
            self._recognised = Bits(recognised)

    @property
    def recognising(self) -> bool:
        """Whether a row recognised unchanged is marked instead of yielded as an action."""
        return self._recognised is not None

    def slot(self, slot: int) -> int:
        """The slot as this plan knows it: 0 for a row added since the plan began."""
        return slot if slot < self.size else 0

    def get(self, key: str, slot: int) -> tuple[str, int] | None:
        if slot and slot not in self.bits:
            return None
        found = self.table.get(key)
        if found is None and slot:
            return RECOGNISED, self.lines[slot]
        return found

    def put(self, key: str, slot: int, digest: str, line: int) -> None:
        if slot and self.bits.claim(slot):
            self.lines[slot] = line
        self.table[key] = (digest, line)

    def unchanged(self, key: str, slot: int, digest: str, line: int) -> None:
        """A first row recognised by its record digest and yielded: its bit alone when it
        has a slot."""
        if not slot:
            self.table[key] = (digest, line)
            return
        self.bits.add(slot)
        self.lines[slot] = line

    def first_recognised(self, slot: int, line: int) -> bool:
        """A row recognised unchanged, dealt with without an action when it is its key's
        first (``recognised``): its slot marked seen and recognised. False when it needs
        an action after all: not its key's first row, a slot added since the plan began,
        or no ``recognised`` bitmap."""
        recognised = self._recognised
        if recognised is None or slot >= self.size:
            return False
        # once per unchanged row of a quiet run: the bit tests written out, no calls
        seen, at, bit = self.bits.data, slot >> 3, 1 << (slot & 7)
        if seen[at] & bit:
            return False
        seen[at] |= bit
        recognised.data[at] |= bit
        self.lines[slot] = line
        return True

    def unseen(self, mirror_keys: Iterable[str] | None) -> Iterator[tuple[str, MirrorRow]]:
        """The mirror's keys and rows whose key was not seen (``mirror_keys``: of those keys)."""
        if mirror_keys is None:
            for row in self._mirror.unseen(self._bits_with_gaps()):
                yield row.key, row
            return
        keys = iter(mirror_keys)
        while chunk := list(itertools.islice(keys, numbered.LOOKAHEAD)):
            found = self._mirror.slotted(chunk)
            for key in chunk:
                hit = found.get(key)
                if hit is not None and self.get(key, self.slot(hit[0])) is None:
                    yield key, hit[1]

    def _bits_with_gaps(self) -> bytearray:
        """The bitmap with slot 0 (never a row) and the bits past ``size`` marked, so that
        they are not asked for."""
        gaps = Bits(bytearray(self.bits.data))
        gaps.add(0)
        for slot in range(self.size, 8 * len(gaps.data)):
            gaps.add(slot)
        return gaps.data
