"""Dead letters: the products the last runs left rejected or failed, and why.

One row per key (``slot``), or per source line for a record without a key
(``'#<line>'``), in the ``dead_letters`` table (schema migration 5). Each says
which stage refused the product (``models.STAGES``: read, map, check, api), the
reason, for the API its HTTP status and message, the source and line, and when
it was first and last seen. ``first_seen`` survives as long as the product stays
refused, whatever the reason becomes.

Who writes: the mirror's journal (``Mirror.record_rejected`` and the like) for
the ``api`` and ``check`` stages, in the same transaction as the product's row,
and the engine after planning for the stages before (``note_plan``). A product
back in step, or gone from the source, loses its letter.

The writers run inside the caller's transaction (``Mirror._write``): none
commits. ``listing`` reads through sqlite-utils (``Mirror.db``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from skuferry.models import STAGES

if TYPE_CHECKING:
    import sqlite_utils

# The stages the planner decides; what a whole pull did not refuse again is over.
PLAN_STAGES = ("read", "map", "check")
_PLAN_STAGES_SQL = "(" + ", ".join(f"'{s}'" for s in PLAN_STAGES) + ")"
_COLUMNS = "key, stage, reason, status, message, source, line, first_seen, last_seen"


@dataclass(frozen=True, slots=True)
class DeadLetter:
    key: str | None
    stage: str
    reason: str
    status: int | None
    message: str | None
    source: str | None
    line: int | None
    first_seen: float
    last_seen: float

    def as_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "stage": self.stage,
            "reason": self.reason,
            "status": self.status,
            "message": self.message,
            "source": self.source,
            "line": self.line,
            "first_seen": _iso(self.first_seen),
            "last_seen": _iso(self.last_seen),
        }


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


def put(
    conn: sqlite3.Connection,
    *,
    key: str | None,
    stage: str,
    reason: str,
    now: float,
    status: int | None = None,
    message: str | None = None,
    source: str | None = None,
    line: int | None = None,
) -> None:
    """Record (or refresh) one letter; ``first_seen`` is kept while the slot stays refused."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}")
    slot = key if key is not None else f"#{line}"
    conn.execute(
        f"INSERT INTO dead_letters (slot, {_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?) "  # noqa: S608 - constant
        "ON CONFLICT(slot) DO UPDATE SET reason = excluded.reason, "
        # the same stage seen again without the API's details (a plan that finds the data
        # still refused) keeps them
        "status = CASE WHEN excluded.stage = stage THEN coalesce(excluded.status, status) "
        "ELSE excluded.status END, "
        "message = CASE WHEN excluded.stage = stage THEN coalesce(excluded.message, message) "
        "ELSE excluded.message END, stage = excluded.stage, "
        "source = coalesce(excluded.source, source), line = coalesce(excluded.line, line), "
        "last_seen = excluded.last_seen",
        (slot, key, stage, reason, status, message, source, line, now, now),
    )


def clear(conn: sqlite3.Connection, keys: Iterable[str]) -> None:
    conn.executemany("DELETE FROM dead_letters WHERE slot = ?", ((k,) for k in keys))


def clear_plan_stages(conn: sqlite3.Connection, keys: Iterable[str]) -> None:
    """Keys the plan found valid: a read, map or check refusal of them is over."""
    sql = f"DELETE FROM dead_letters WHERE slot = ? AND stage IN {_PLAN_STAGES_SQL}"  # noqa: S608
    conn.executemany(sql, ((k,) for k in keys))


def expire_plan_stages(conn: sqlite3.Connection, *, before: float) -> int:
    """After a whole pull: read, map and check refusals it did not see again are over."""
    before_changes = conn.total_changes
    conn.execute(
        f"DELETE FROM dead_letters WHERE stage IN {_PLAN_STAGES_SQL} AND last_seen < ?",  # noqa: S608
        (before,),
    )
    return conn.total_changes - before_changes


def any_plan_stage(conn: sqlite3.Connection) -> bool:
    sql = f"SELECT 1 FROM dead_letters WHERE stage IN {_PLAN_STAGES_SQL} LIMIT 1"  # noqa: S608
    return conn.execute(sql).fetchone() is not None


def name_source(conn: sqlite3.Connection, source: str) -> None:
    """Letters written by the journal (API stage) get the run's source name."""
    conn.execute("UPDATE dead_letters SET source = ? WHERE source IS NULL", (source,))


def listing(db: sqlite_utils.Database, keys: Sequence[str] | None = None) -> list[DeadLetter]:
    """Every letter (or those of ``keys``), by stage in the order products meet them, then key.

    A read for a person (``skuferry rejected``, ``retry``), through sqlite-utils."""
    stages = " ".join(f"WHEN '{s}' THEN {i}" for i, s in enumerate(STAGES))
    where = None if keys is None else f"key IN ({', '.join('?' * len(keys))})"
    found = db.table("dead_letters").rows_where(
        where,
        list(keys or ()),
        select=_COLUMNS,
        order_by=f"CASE stage {stages} END, key, line",
    )
    return [DeadLetter(**row) for row in found]


def counts_by_stage(conn: sqlite3.Connection) -> dict[str, int]:
    """Letters per stage, every stage present (0 when none): the metric's labels."""
    found = dict(conn.execute("SELECT stage, count(*) FROM dead_letters GROUP BY stage"))
    return {stage: int(found.get(stage, 0)) for stage in STAGES}


def oldest(conn: sqlite3.Connection) -> tuple[int, DeadLetter | None]:
    """How many letters there are, and the one refused longest (``skuferry status``)."""
    (count,) = conn.execute("SELECT count(*) FROM dead_letters").fetchone()
    sql = f"SELECT {_COLUMNS} FROM dead_letters ORDER BY first_seen, key, line LIMIT 1"  # noqa: S608 - constant
    row = conn.execute(sql).fetchone()
    return int(count), DeadLetter(*row) if row is not None else None


def page(
    db: sqlite_utils.Database,
    *,
    text: str = "",
    stage: str = "",
    limit: int = 200,
    offset: int = 0,
) -> tuple[int, list[DeadLetter]]:
    """(how many match, one page of them): the letters whose key, reason, message or
    source holds ``text`` (any case), of ``stage`` when given, in ``listing``'s order.

    A read for a person (the operator's page): the filter runs in SQLite, so a page of a
    large list costs one page of rows, not the list."""
    where, args = [], []
    if text:
        like = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        where.append("(" + " OR ".join(f"{c} LIKE ? ESCAPE '\\'" for c in _SEARCHED) + ")")
        args.extend([like] * len(_SEARCHED))
    if stage:
        where.append("stage = ?")
        args.append(stage)
    clause = " AND ".join(where) or None
    table = db.table("dead_letters")
    total = table.count_where(clause, args) if clause else table.count
    stages = " ".join(f"WHEN '{s}' THEN {i}" for i, s in enumerate(STAGES))
    found = table.rows_where(
        clause,
        args,
        select=_COLUMNS,
        order_by=f"CASE stage {stages} END, key, line",
        limit=limit,
        offset=offset,
    )
    return int(total), [DeadLetter(**row) for row in found]


_SEARCHED = ("key", "reason", "message", "source")
