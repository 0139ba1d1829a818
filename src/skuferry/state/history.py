"""A product's history: what each write did to it, recorded with its journal.

One row per write that went out (a create, an update, a restore, an archive): the run,
when, the kind, each field's value before (as skuferry last sent or read it) and the
value sent, the mirror's row before (state, digest, record digest), and the outcome.
The row is written by ``record`` inside the journal's own transaction, committed before
the request leaves (outcome ``sent``), and its outcome is set by ``close`` inside the
transaction that commits what came back. A write killed on the wire, or whose answer
was lost and never settled, keeps ``sent`` (or ``unknown``): its values may be on the
CMS, which ``undo`` reads by id before it trusts either.

A key has at most one open row, its latest: a new write of the key closes an earlier
open one as ``unknown`` first, and every outcome closes the key's open row. A write
that turns out never to have gone out (a stop, a refused credential, a read that
showed nothing to write) leaves no row.

Kept for ``[state] history_days`` and at most ``history_max_rows`` rows, pruned a whole
run at a time (never half a run, which ``undo`` could not take back), oldest first, in
small transactions: SQLite reuses the freed pages, so the file does not grow without
bound and is never rewritten.

``HistoryBook`` is the mirror's part that reads it (``explain``, ``undo``, the page)
and prunes it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from skuferry import canonical
from skuferry.state.scratch import keyset
from skuferry.state.statefile import StateFile

# Outcomes
SENT = "sent"  # journalled and sent: no answer yet (or killed, or the answer lost)
OK = "ok"  # applied
REFUSED = "refused"  # the CMS refused it (4xx): not applied
FAILED = "failed"  # not applied (5xx, 429, gone on the CMS, updates off): retried
UNKNOWN = "unknown"  # the answer was lost and nothing settled it: it may have landed
OUTCOMES = (SENT, OK, REFUSED, FAILED, UNKNOWN)

PRUNED_META = "history.pruned_through"  # the last run whose history was pruned
PRUNED_ID_META = "history.pruned_id"  # every row before this id is pruned (but open ones)
PRUNE_BATCH = 5000  # rows deleted per transaction: a run waits at most this long for the lock
RUNS_KEPT = 100  # the runs table keeps at least this many rows (``status`` lists the last)

_COLUMNS = "id, run_id, key, kind, at, outcome, status, error, remote_id, before, after, prior"


@dataclass(frozen=True, slots=True)
class Entry:
    """One write of one product, as the history holds it."""

    id: int
    run_id: int | None
    key: str
    kind: str
    at: float
    outcome: str
    status: int | None
    error: str | None
    remote_id: str | None
    before: dict[str, Any] | None  # each field's value before; a field not in it: not known
    after: dict[str, Any]  # each field's value sent
    prior: dict[str, Any] | None  # the mirror's row before: state, digest, record_digest

    @classmethod
    def of(cls, row: tuple[Any, ...]) -> Entry:
        before, after, prior = (None if v is None else canonical.loads(v) for v in row[9:12])
        run_id, key, kind, at, outcome, status, error, remote_id = row[1:9]
        return cls(
            id=row[0],
            run_id=run_id,
            key=key,
            kind=kind,
            at=at,
            outcome=outcome,
            status=status,
            error=error,
            remote_id=remote_id,
            before=before,
            after=after or {},
            prior=prior,
        )

    @property
    def landed(self) -> bool | None:
        """True: applied; False: not applied; None: not known (it may be on the CMS)."""
        if self.outcome == OK:
            return True
        if self.outcome in (REFUSED, FAILED):
            return False
        return None


def record(
    conn: sqlite3.Connection,
    *,
    key: str,
    run_id: int | None,
    kind: str,
    at: float,
    after: Mapping[str, Any],
    row: tuple[Any, ...] | None,
    before: Mapping[str, Any] | None = None,
) -> None:
    """The write of ``key`` as journalled, in the journal's transaction (``conn``).

    ``after``: the fields sent; ``row``: the key's products row before, as
    ``(state, digest, source_fingerprint, sent, remote_id)`` (None: no row), whose ``sent``
    gives each field's value before; ``before``: values read on the CMS, over those. An
    earlier open row of the key is closed ``unknown``.
    """
    close(conn, key, UNKNOWN, error="a later write of the product went out first")
    read = before
    before = None
    prior: dict[str, Any] | None = None
    remote_id: str | None = None
    if row is not None:
        state, digest, fingerprint, sent, remote_id = row
        prior = {"state": state, "digest": digest, "record_digest": fingerprint}
        if sent is not None:
            last = canonical.loads(sent)
            before = {name: last[name] for name in after if name in last}
    if read:
        before = {**(before or {}), **{k: v for k, v in read.items() if k in after}}
    conn.execute(
        "INSERT INTO history (run_id, key, kind, at, outcome, remote_id, before, after, prior) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            run_id,
            key,
            kind,
            at,
            SENT,
            remote_id,
            None if before is None else canonical.dumps(before),
            canonical.dumps(dict(after)),
            None if prior is None else json.dumps(prior),
        ),
    )


def close(
    conn: sqlite3.Connection,
    key: str,
    outcome: str | None,
    *,
    status: int | None = None,
    error: str | None = None,
    remote_id: str | None = None,
    change: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None,
) -> None:
    """The outcome of the key's open row, if it has one, in the caller's transaction.

    ``outcome`` None: the write never went out (the row goes). ``change``: (before, after)
    as the write learnt them on the wire (it read the product first), over the journal's.
    """
    found = conn.execute(
        "SELECT id, outcome FROM history WHERE key = ? ORDER BY id DESC LIMIT 1", (key,)
    ).fetchone()
    if found is None or found[1] != SENT:
        return
    if outcome is None:
        conn.execute("DELETE FROM history WHERE id = ?", (found[0],))
        return
    sets = "outcome = ?, status = ?, error = ?, remote_id = coalesce(?, remote_id)"
    args: list[Any] = [outcome, status, error, remote_id]
    if change is not None:
        sets += ", before = ?, after = ?"
        args += [canonical.dumps(dict(change[0])), canonical.dumps(dict(change[1]))]
    conn.execute(f"UPDATE history SET {sets} WHERE id = ?", [*args, found[0]])  # noqa: S608 - ours


class HistoryBook(StateFile):
    """The history read (a product's story, a run's changes) and pruned."""

    def history_of(self, key: str, *, limit: int = 20) -> list[Entry]:
        """The last ``limit`` writes of ``key``, newest first."""
        rows = self._conn.execute(
            f"SELECT {_COLUMNS} FROM history WHERE key = ? ORDER BY id DESC LIMIT ?",  # noqa: S608
            (key, limit),
        ).fetchall()
        return [Entry.of(row) for row in rows]

    def run_entries(self, run_id: int, keys: list[str] | None = None) -> Iterator[Entry]:
        """Every write of run ``run_id`` (of ``keys`` only, when given), by key then id."""
        if keys is not None:
            for key in sorted(set(keys)):
                rows = self._conn.execute(
                    f"SELECT {_COLUMNS} FROM history WHERE run_id = ? AND key = ? ORDER BY id",  # noqa: S608
                    (run_id, key),
                ).fetchall()
                yield from (Entry.of(row) for row in rows)
            return
        for row in keyset(
            self._conn,
            f"SELECT key, id, {_COLUMNS} FROM history",  # noqa: S608 - ours
            order=("key", "id"),
            where="run_id = ?",
            args=(run_id,),
        ):
            yield Entry.of(row[2:])

    def run_page(
        self,
        run_id: int,
        *,
        after: str | None = None,
        search: str | None = None,
        kind: str | None = None,
        outcome: str | None = None,
        limit: int = 50,
    ) -> list[Entry]:
        """One page of a run's writes by key (the page's listing): those after key ``after``,
        whose key contains ``search``, of ``kind`` and ``outcome`` when given."""
        where: list[str] = ["run_id = ?"]
        args: list[Any] = [run_id]
        if after is not None:
            where.append("key > ?")
            args.append(after)
        if search:
            where.append("instr(lower(key), lower(?)) > 0")
            args.append(search)
        if kind:
            where.append("kind = ?")
            args.append(kind)
        if outcome:
            where.append("outcome = ?")
            args.append(outcome)
        rows = self._conn.execute(
            f"SELECT {_COLUMNS} FROM history WHERE {' AND '.join(where)} "  # noqa: S608 - ours
            "ORDER BY key, id LIMIT ?",
            [*args, limit],
        ).fetchall()
        return [Entry.of(row) for row in rows]

    def run_products(self, run_id: int) -> int:
        """How many products run ``run_id`` wrote."""
        found = self._conn.execute(
            "SELECT count(DISTINCT key) FROM history WHERE run_id = ?", (run_id,)
        ).fetchone()
        return int(found[0])

    def run_counts(self, run_id: int) -> dict[str, dict[str, int]]:
        """A run's writes counted by kind, then outcome."""
        counts: dict[str, dict[str, int]] = {}
        for kind, outcome, n in self._conn.execute(
            "SELECT kind, outcome, count(*) FROM history WHERE run_id = ? GROUP BY kind, outcome",
            (run_id,),
        ):
            counts.setdefault(kind, {})[outcome] = int(n)
        return counts

    def history_pruned_through(self) -> int:
        """The last run whose history was pruned (0: none)."""
        return int(self._meta_value(PRUNED_META) or 0)

    def _meta_value(self, name: str) -> str | None:
        found = self._conn.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return None if found is None else str(found[0])

    def prune_history(self, *, now: float | None = None, days: int, max_rows: int) -> int:
        """Forget the runs older than ``days`` and, oldest first, the runs beyond
        ``max_rows`` rows of history (the newest run stays whole, whatever its size); the
        rows deleted. Whole runs only, in transactions of ``PRUNE_BATCH`` rows. A write
        still open (its answer lost, never settled) keeps its row: it may be on the CMS.
        ``now``: the mirror's clock by default (the one the runs' times are taken on)."""
        conn = self._conn
        now = self._clock() if now is None else now
        cutoff = conn.execute(
            "SELECT max(id) FROM runs WHERE started_at < ? AND finished_at IS NOT NULL",
            (now - days * 86400.0,),
        ).fetchone()[0]
        through = max(int(cutoff or 0), self.history_pruned_through())
        start = int(self._meta_value(PRUNED_ID_META) or 0)  # every row before it is pruned
        last = conn.execute("SELECT max(id) FROM history").fetchone()[0]
        if last is not None and last - start + 1 > max_rows:
            # the run of the row that would be the first kept; the runs before it go
            edge = conn.execute(
                "SELECT run_id FROM history WHERE id >= ? ORDER BY id LIMIT 1",
                (last - max_rows + 1,),
            ).fetchone()
            if edge is not None and edge[0] is not None:
                through = max(through, int(edge[0]) - 1)
        if through <= self.history_pruned_through():
            return 0
        # rows are in run order (one run at a time): the runs up to ``through`` are the rows
        # before the first row of a later run
        later = conn.execute(
            "SELECT id FROM history WHERE id >= ? AND run_id > ? ORDER BY id LIMIT 1",
            (start, through),
        ).fetchone()
        end = int(later[0]) if later is not None else int(last or 0) + 1
        deleted = 0
        while start < end:
            upto = min(end, start + PRUNE_BATCH)
            with self._write() as conn:
                deleted += conn.execute(
                    "DELETE FROM history WHERE id >= ? AND id < ? AND outcome != ?",
                    (start, upto, SENT),
                ).rowcount
                conn.execute(
                    "INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)",
                    (PRUNED_ID_META, str(upto)),
                )
            start = upto
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)",
                (PRUNED_META, str(through)),
            )
            # the runs themselves, but the last few (``status`` and the page list them)
            conn.execute(
                "DELETE FROM runs WHERE id <= ? AND id <= (SELECT max(id) FROM runs) - ?",
                (cutoff or 0, RUNS_KEPT),
            )
        return deleted
