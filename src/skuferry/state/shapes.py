"""The source's shape as the state keeps it: the ``shapes`` table (``skuferry.shape``).

Rows, newest last:

- ``learned``: the shape of a whole pull whose shape held; the contract of the next pull.
  A pull whose shape is the one learnt already updates that row (its counts, its run)
  instead of adding one, so the table grows only when the shape changes;
- ``accepted``: a shape accepted on purpose (``skuferry accept-shape``); the contract
  from then on, as a learnt one;
- ``refused``: the shape of a pull refused for it, with the changes that broke the
  contract: what ``status`` and ``explain`` say holds the products back until the
  export is fixed or the shape is accepted.

``read_status(conn)`` is the public reading (``ShapeStatus``): the contract, when and by
which run it was learnt or accepted, and the refusal that holds the source back, if
one does. ``Mirror.shape_status()`` is the same on an open mirror.

A state file written before shapes were kept has no row: its contract is what it last
sent (``sent_fields``: the fields it sent with a value), so a column renamed in the
very run that first meets this release is still caught.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass

from skuferry import canonical
from skuferry.shape import Change, Shape, ShapeVerdict
from skuferry.state.statefile import StateFile

KEEP = 50  # shape rows kept: the contract and the changes before it
SENT_SAMPLE = 500  # rows whose last sent fields tell an old state's contract


@dataclass(frozen=True, slots=True)
class Refusal:
    """A pull refused for its shape: which run, when, and what broke."""

    run_id: int | None
    at: float
    shape: Shape | None
    changes: tuple[Change, ...]

    @property
    def breaking(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.breaking)


@dataclass(frozen=True, slots=True)
class ShapeStatus:
    """The state's word on the source's shape."""

    learned: Shape | None  # the contract (None: nothing learnt yet)
    learned_at: float | None = None
    learned_run: int | None = None
    accepted: bool = False  # the contract was accepted on purpose, not learnt
    refused: Refusal | None = None  # the newest refusal, when newer than the contract

    @property
    def held(self) -> bool:
        """A pull was refused for its shape since the contract was learnt: the source's
        products are held (nothing written) until the export is fixed or it is accepted."""
        return self.refused is not None


def read_status(conn: sqlite3.Connection) -> ShapeStatus:
    """The contract and the refusal holding the source back, from an open state file."""
    try:
        rows = conn.execute(
            "SELECT id, run_id, at, status, shape, changes FROM shapes "
            "WHERE id >= coalesce((SELECT max(id) FROM shapes "
            "WHERE status IN ('learned', 'accepted')), 0) ORDER BY id"
        ).fetchall()
    except sqlite3.OperationalError:  # a file older than the table (a read-only dry run)
        return ShapeStatus(None)
    status = ShapeStatus(None)
    for _id, run_id, at, kind, text, changes in rows:
        if kind in ("learned", "accepted"):
            status = ShapeStatus(Shape.from_json(text), at, run_id, accepted=kind == "accepted")
        else:
            refusal = Refusal(run_id, at, Shape.from_json(text), _changes(changes))
            status = ShapeStatus(
                status.learned, status.learned_at, status.learned_run, status.accepted, refusal
            )
    return status


def _changes(text: str | None) -> tuple[Change, ...]:
    try:
        return tuple(Change(**c) for c in json.loads(text or "[]"))
    except (ValueError, TypeError):
        return ()


def _digest(shape: Shape) -> str:
    """What makes one shape another: the header, what each field reads and whether it is
    there, gone or giving, and the key's format by feature (not the counts)."""
    key = shape.key
    data = {
        "header": shape.header,
        "fields": [
            (f.target, f.kind, f.name, f.present, f.gone, f.given > 0) for f in shape.fields
        ],
        "key": [
            key.keys >= 1,
            *(
                (n == key.keys, n == 0)
                for n in (key.leading_zeros, key.digits, key.upper, key.lower)
            ),
        ],
    }
    return hashlib.blake2b(canonical.dumps(data).encode(), digest_size=16).hexdigest()


class ShapeBook(StateFile):
    """The shapes table read and written (one transaction each)."""

    def shape_status(self) -> ShapeStatus:
        return read_status(self._conn)

    def learned_shape(self) -> Shape | None:
        """The contract: the shape learnt or accepted last; else, for a state written
        before shapes were kept, the fields it last sent with a value; else None."""
        learned = self.shape_status().learned
        if learned is not None:
            return learned
        sent = self.sent_fields()
        return Shape.from_sent(sent) if sent else None

    def sent_fields(self, limit: int = SENT_SAMPLE) -> set[str]:
        """Fields that a sample of the products last sent held a value in."""
        found: set[str] = set()
        rows = self._conn.execute(
            "SELECT sent FROM products WHERE sent IS NOT NULL LIMIT ?", (limit,)
        )
        for (text,) in rows:
            try:
                sent = json.loads(text)
            except ValueError:
                continue
            if isinstance(sent, dict):
                found.update(k for k, v in sent.items() if v is not None and v != "")
        return found

    def learn_shape(self, shape: Shape, *, run_id: int | None, accepted: bool = False) -> None:
        """Keep ``shape`` as the contract: a new row when it differs from the last one
        (or is accepted), else the last row brought up to date."""
        digest = _digest(shape)
        status = "accepted" if accepted else "learned"
        with self._write() as conn:
            last = conn.execute(
                "SELECT id, digest FROM shapes WHERE status IN ('learned', 'accepted') "
                "ORDER BY id DESC LIMIT 1"
            ).fetchone()
            newest = conn.execute("SELECT max(id) FROM shapes").fetchone()[0]
            if not accepted and last is not None and last[1] == digest and last[0] == newest:
                conn.execute(
                    "UPDATE shapes SET run_id = ?, at = ?, shape = ? WHERE id = ?",
                    (run_id, self._clock(), shape.to_json(), last[0]),
                )
                return
            conn.execute(
                "INSERT INTO shapes (run_id, at, status, digest, shape) VALUES (?, ?, ?, ?, ?)",
                (run_id, self._clock(), status, digest, shape.to_json()),
            )
            _prune(conn)

    def refuse_shape(
        self, shape: Shape | None, verdict: ShapeVerdict, *, run_id: int | None
    ) -> None:
        """Record a pull refused for its shape (what ``status`` and ``explain`` show)."""
        text = shape.to_json() if shape is not None else "null"
        with self._write() as conn:
            conn.execute(
                "INSERT INTO shapes (run_id, at, status, shape, changes) "
                "VALUES (?, ?, 'refused', ?, ?)",
                (run_id, self._clock(), text, verdict.to_json()),
            )
            _prune(conn)

    def rename_keys(self, pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """Each (old, new) key pair: ``old``'s row, intent and dead letter become ``new``'s,
        its CMS id kept. Its record and line digests go, so the next run maps its row
        again and sends the new key. A pair whose ``new`` key has a row already is left.
        Returns the pairs renamed, in one transaction."""
        done: list[tuple[str, str]] = []
        with self._write() as conn:
            for old, new in pairs:
                if conn.execute("SELECT 1 FROM products WHERE key = ?", (new,)).fetchone():
                    continue
                cur = conn.execute(
                    "UPDATE products SET key = ?, source_fingerprint = NULL, "
                    "source_line_digest = NULL, updated_at = ? WHERE key = ?",
                    (new, self._clock(), old),
                )
                if not cur.rowcount:
                    continue
                conn.execute("UPDATE intents SET key = ? WHERE key = ?", (new, old))
                conn.execute("DELETE FROM dead_letters WHERE slot = ?", (new,))
                conn.execute(
                    "UPDATE dead_letters SET slot = ?, key = ? WHERE slot = ?", (new, new, old)
                )
                done.append((old, new))
        return done


def _prune(conn: sqlite3.Connection) -> None:
    conn.execute(
        "DELETE FROM shapes WHERE id <= (SELECT max(id) FROM shapes) - ? AND id < "
        "(SELECT max(id) FROM shapes WHERE status IN ('learned', 'accepted'))",
        (KEEP,),
    )
