"""The mirror's bookkeeping of runs and named values: the ``runs`` and ``meta`` tables.

A run is opened before it sends anything and closed with its status, exit code and
summary (what ``status`` lists). ``meta`` holds named values that outlive a run:
when the remote was last walked in full, when the API last answered, the keys
another process handed to the running run, the paces learnt.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from skuferry.state.statefile import StateFile

API_CONTACT_META = "api.last_contact"  # unix time of the last run the API answered
LANE_META = "lane."  # meta rows "lane.<key>": keys another process handed to the running run
# (read and written only by RunBook's handed-keys methods below: the protocol's one home)


class RunBook(StateFile):
    """Runs opened and closed, and the ``meta`` names read and set."""

    def walked(self) -> bool:
        return self.get_meta("walked_at") is not None

    def start_run(self, *, kind: str | None = None, undoes: int | None = None) -> int:
        """Open a run (``kind`` "undo": the undo of run ``undoes``); the history's rows this
        connection writes from now on carry its id."""
        with self._write() as conn:
            cur = conn.execute(
                "INSERT INTO runs (started_at, status, kind, undoes) VALUES (?, 'running', ?, ?)",
                (self._clock(), kind, undoes),
            )
            self.run_id = int(cur.lastrowid or 0)
            return self.run_id

    def note_run_token(self, token: str | None) -> None:
        """The skip token of the source this connection's run reads (what an undo of it
        refuses again); nothing outside a run."""
        if self.run_id is None or token is None:
            return
        with self._write() as conn:
            conn.execute("UPDATE runs SET token = ? WHERE id = ?", (token, self.run_id))

    def note_run_feed(self, feed: str | None) -> None:
        """The feed this connection's run read, by its content (``runs.feed``: what an undo
        of it refuses again, token or not); nothing outside a run or when not known."""
        if self.run_id is None or feed is None:
            return
        with self._write() as conn:
            conn.execute("UPDATE runs SET feed = ? WHERE id = ?", (feed, self.run_id))

    def finish_run(
        self, run_id: int, *, status: str, exit_code: int, summary: dict[str, Any]
    ) -> None:
        with self._write() as conn:
            conn.execute(
                "UPDATE runs SET finished_at = ?, status = ?, exit_code = ?, summary = ? "
                "WHERE id = ?",
                (self._clock(), status, exit_code, json.dumps(summary, default=str), run_id),
            )

    def run_row(self, run_id: int) -> dict[str, Any] | None:
        """One run's row (``kind``, ``undoes``, ``token``, ``feed`` with it), its summary
        parsed."""
        names = (
            "id", "started_at", "finished_at", "status", "exit_code", "summary",
            "kind", "undoes", "token", "feed",
        )  # fmt: skip
        found = self._conn.execute(
            f"SELECT {', '.join(names)} FROM runs WHERE id = ?",  # noqa: S608 - fixed names
            (run_id,),
        ).fetchone()
        if found is None:
            return None
        row = dict(zip(names, found, strict=True))
        row["summary"] = json.loads(row["summary"]) if row["summary"] else None
        return row

    def undos_of(self, run_id: int) -> list[dict[str, Any]]:
        """The undo runs of run ``run_id``, newest first (id, status)."""
        rows = self._conn.execute(
            "SELECT id, status FROM runs WHERE kind = 'undo' AND undoes = ? ORDER BY id DESC",
            (run_id,),
        ).fetchall()
        return [{"id": int(i), "status": str(status)} for i, status in rows]

    def resume_run(self, run_id: int) -> None:
        """Open an unfinished run again (an undo cut short, run again): its writes go on
        under its id."""
        with self._write() as conn:
            conn.execute(
                "UPDATE runs SET status = 'running', finished_at = NULL WHERE id = ?", (run_id,)
            )
        self.run_id = run_id

    def last_runs(self, n: int = 5) -> list[dict[str, Any]]:
        """The last ``n`` runs, newest first, their summary parsed (for ``status``)."""
        runs = list(
            self.db.table("runs").rows_where(
                select="id, started_at, finished_at, status, exit_code, summary",
                order_by="id DESC",
                limit=n,
            )
        )
        for run in runs:
            run["summary"] = json.loads(run["summary"]) if run["summary"] else None
        return runs

    def set_meta(self, name: str, value: str | None) -> None:
        self.set_metas({name: value})

    def set_metas(self, values: Mapping[str, str | None]) -> None:
        """Set several names in one transaction; ``None`` removes a name (absent = unknown)."""
        with self._write() as conn:
            for name, value in values.items():
                if value is None:
                    conn.execute("DELETE FROM meta WHERE name = ?", (name,))
                else:
                    conn.execute(
                        "INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", (name, value)
                    )

    def last_api_contact(self) -> float | None:
        """When a run last talked to the API successfully (unix time), if ever."""
        value = self.get_meta(API_CONTACT_META)
        try:
            return float(value) if value is not None else None
        except ValueError:
            return None

    def record_api_contact(self, at: float | None = None) -> None:
        """The API answered this run's requests (the auth check counts from here)."""
        self.set_meta(API_CONTACT_META, repr(self._clock() if at is None else at))

    def get_meta(self, name: str) -> str | None:
        found = self._conn.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return None if found is None else str(found[0])

    def metas(self, prefix: str) -> list[tuple[str, str]]:
        """``(rest of name, value)`` of every meta row whose name starts with ``prefix``."""
        rows = self._conn.execute(
            "SELECT name, value FROM meta WHERE substr(name, 1, ?) = ? ORDER BY name",
            (len(prefix), prefix),
        ).fetchall()
        return [(str(name)[len(prefix) :], str(value)) for name, value in rows]

    # --- keys handed to the run holding the lock (``sync --only`` beside a run) -------
    # A ``sync --only`` that finds the lock held leaves its keys here; the run holding it
    # (its urgent lane, or an idle daemon) takes them. These four are the protocol.

    def hand_keys(self, keys: Iterable[str]) -> None:
        """Queue ``keys`` for the run holding the lock, or the next run."""
        at = repr(self._clock())
        self.set_metas({LANE_META + key: at for key in keys})

    def handed_keys(self) -> list[str]:
        """The keys handed and not taken yet, in key order."""
        return [key for key, _at in self.metas(LANE_META)]

    def take_handed_keys(self) -> list[str]:
        """The keys handed, removed in the same transaction: each is taken once.

        A run asks once a second while it waits for its budget, and almost never finds
        one: a look at the primary key's index first, the write transaction only then."""
        prefix = len(LANE_META)
        lane = (LANE_META, LANE_META[:-1] + chr(ord(LANE_META[-1]) + 1))  # the names' range
        found = "SELECT name FROM meta WHERE name >= ? AND name < ?"
        if self._conn.execute(found + " LIMIT 1", lane).fetchone() is None:
            return []
        with self._write() as conn:
            rows = conn.execute(found + " ORDER BY name", lane).fetchall()
            names = [str(name) for (name,) in rows]
            conn.executemany("DELETE FROM meta WHERE name = ?", [(n,) for n in names])
        return [name[prefix:] for name in names]

    def withdraw_handed_keys(self, keys: Iterable[str]) -> None:
        """Take ``keys`` back (the process that handed them runs them itself)."""
        self.set_metas({LANE_META + key: None for key in keys})
