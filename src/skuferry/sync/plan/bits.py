"""A bitmap of slots (the mirror's row numbers), changed in place.

A million rows fit in 125 kB: the planner marks the rows it has seen, and those it
recognised unchanged, one bit each.
"""

from __future__ import annotations


class Bits:
    """A bitmap of slots over ``data``, changed in place: bit ``slot & 7`` of byte
    ``slot >> 3`` stands for slot ``slot`` (as the state's slot pages read it)."""

    __slots__ = ("data",)

    def __init__(self, data: bytearray) -> None:
        self.data = data

    @classmethod
    def sized(cls, size: int) -> Bits:
        """Clear bits for slots ``0 .. size - 1``."""
        return cls(bytearray((size + 7) >> 3))

    def __contains__(self, slot: int) -> bool:
        return bool(self.data[slot >> 3] & (1 << (slot & 7)))

    def add(self, slot: int) -> None:
        self.data[slot >> 3] |= 1 << (slot & 7)

    def claim(self, slot: int) -> bool:
        """Set the slot's bit; whether it was clear until now."""
        at, bit = slot >> 3, 1 << (slot & 7)
        if self.data[at] & bit:
            return False
        self.data[at] |= bit
        return True
