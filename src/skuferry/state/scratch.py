"""The run's scratch space, and the one way to read a table back: keyset pages.

Scratch tables (the plan store, the remote index, the seen table) are TEMP
tables of the mirror's connection, handed out by ``Mirror.plan_store()``,
``Mirror.remote_index()`` and ``Mirror.seen_table()``: they never touch the state
file (a dry run stays read-only) and vanish with the connection.

Every long read goes through ``keyset``: pages fetched whole, the next one
starting after the last row's ordering columns. A statement left open across
the writer's commits would pin this connection's read snapshot of the state
file, and its next ``BEGIN IMMEDIATE`` would fail with "database is locked" as
soon as another connection (the budget) has written.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

PAGE = 1000  # rows per keyset page


def keyset(
    conn: sqlite3.Connection,
    select: str,
    *,
    order: Sequence[str] = ("key",),
    where: str = "",
    args: Sequence[Any] = (),
    page: int = PAGE,
) -> Iterator[tuple[Any, ...]]:
    """Stream ``select`` (``SELECT ... FROM ...``) in ``order``, one page at a time.

    The ``order`` columns must be unique together and be the first columns of
    ``select``, in that order: each next page starts after the last row's values.
    """
    width = len(order)
    columns = ", ".join(order)
    after = f"{columns} > ?" if width == 1 else f"({columns}) > ({', '.join('?' * width)})"
    first = f"{select} {'WHERE ' + where if where else ''} ORDER BY {columns} LIMIT {page}"
    more = (
        f"{select} WHERE {'(' + where + ') AND ' if where else ''}{after} "
        f"ORDER BY {columns} LIMIT {page}"
    )
    batch = conn.execute(first, list(args)).fetchall()
    while batch:
        yield from batch
        if len(batch) < page:
            return
        batch = conn.execute(more, [*args, *batch[-1][:width]]).fetchall()


def slot_pages(bits: bytes | bytearray, *, marked: bool, page: int = PAGE) -> Iterator[list[int]]:
    """The slots (row ids) whose bit is set (``marked``) or clear in ``bits``, in pages.

    Bit ``s & 7`` of byte ``s >> 3`` stands for slot ``s``: the planner marks the
    mirror's rows by rowid this way (its seen keys, ``Bits``), a million rows in 125 kB.
    Whole bytes that hold nothing wanted are skipped in one comparison each.
    """
    skip = 0x00 if marked else 0xFF
    wanted: list[int] = []
    flip = 0x00 if marked else 0xFF
    for at, byte in enumerate(bits):
        if byte == skip:
            continue
        ones = byte ^ flip
        base = at << 3
        wanted.extend(base + b for b in range(8) if ones & (1 << b))
        if len(wanted) >= page:
            yield wanted
            wanted = []
    if wanted:
        yield wanted
