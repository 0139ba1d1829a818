"""The on-disk index of one ``[[join]]`` source: its records by key, kept between runs.

Each join gets its own SQLite file in the state file's scratch folder
(``<state>.scratch/join-<name>.sqlite``, 0600: it holds catalog data), so a
million-row join costs disk, not memory. Beside the records it keeps the
*signature* of the source it was built from (its change token): when the
source's signature is the same on the next run, the index is used as it is and
the source is not read again. It keeps the source's feed digest too (what the reading
read, ``Source.feed_digest``), so a run that reuses it knows the join's content as
the run that built it did.

A rebuild writes a new file and renames it over the old one, so a run that fails
halfway leaves the last good index (and its signature) in place. The first record
of a key wins; later ones are counted as duplicates, with the first example kept
for the run's note. Keys are stored, and looked up, as ``canonical.key`` makes them
(Unicode NFC): a partner whose key is spelled in another form is the same partner.

Records the join could not use (unreadable, without a key, refused by its filter)
are kept too, as what they say about the partners they may have been: the key,
when it could be read for sure (``held_many``), else a count (``BuildFacts.unkeyed``),
and the first one's line and reason. A join with any such record is not complete:
a primary record whose partner is missing is held rather than given the join's
default (the pieces stream). These facts are kept in the index, so a run that reuses
it says the same as the run that built it.

An index also counts the records its source gave (``BuildFacts.read``): a source that
gave none is an empty export, refused like an empty primary source.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skuferry import canonical, files

# the file's layout: an index of another is rebuilt (3: verdicts, 4: NFC keys, 5: the
# source's feed digest)
LAYOUT = "5"
BATCH = 5000  # records per insert batch while building
LOOKUP = 500  # keys per lookup query (well under SQLite's variable limit)


@dataclass(frozen=True, slots=True)
class BuildFacts:
    """What building the index found (kept in the index, so every run can report it)."""

    records: int = 0
    duplicates: int = 0
    duplicate_example: str | None = None  # "'K' on lines 3 and 9"
    unreadable: int = 0  # records the source could not read, or without a key
    unreadable_line: int | None = None  # the first of them
    unreadable_reason: str | None = None
    unkeyed: int = 0  # of those, the ones whose key is not known: any partner may be one
    read: int = 0  # every record the source gave, its filter's skips included

    @property
    def unreadable_example(self) -> str | None:
        """The first record the join could not use: "line N: reason"."""
        if self.unreadable_line is None:
            return None
        return f"line {self.unreadable_line}: {self.unreadable_reason}"


# (key, line, fields as JSON, True) of a usable record; (key or None, line, reason, False)
# of one the join could not use; (None, line, "", None) of one its filter left out
Entry = tuple[str | None, int, str, bool | None]


def scratch_dir(state_path: Path) -> Path:
    """The state file's scratch folder (created 0700 when missing)."""
    return files.private_dir(state_path.with_name(state_path.name + ".scratch"))


class JoinIndex:
    """An open join index: ``get_many(keys)`` answers from disk."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)

    @classmethod
    def current(cls, path: Path, signature: str | None) -> JoinIndex | None:
        """The index at ``path`` when it was built from a source with this ``signature``."""
        if signature is None or not path.exists():
            return None
        try:
            index = cls(path)
            meta = index.meta()
            if meta.get("signature") == signature and meta.get("layout") == LAYOUT:
                return index
            index.close()
        except sqlite3.DatabaseError:
            pass  # unreadable or from an older layout: rebuilt
        return None

    @staticmethod
    def stored_signature(path: Path) -> str | None:
        """The signature the index at ``path`` was built with; None when there is none."""
        if not path.exists():
            return None
        try:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            try:
                row = conn.execute("SELECT value FROM meta WHERE name = 'signature'").fetchone()
            finally:
                conn.close()
        except sqlite3.DatabaseError:
            return None  # unreadable: rebuilt
        return str(row[0]) if row and row[0] else None

    @classmethod
    def build(
        cls,
        path: Path,
        records: Iterable[Entry],
        *,
        signature: str | None,
        content: Callable[[], str | None] = lambda: None,
    ) -> JoinIndex:
        """Write ``records`` (``Entry``: key, line, fields as JSON, usable) into a fresh
        index at ``path``.

        A record not usable (or without a key) is counted as unreadable, its third item
        being the reason; its key, when known, is kept for ``held_many``. One left out
        (usable None) is only counted as read. ``content``, asked once ``records`` were
        all taken: the source's feed digest (``Source.feed_digest``), kept beside them.
        """
        fresh = path.with_name(path.name + ".new")
        fresh.unlink(missing_ok=True)
        files.create_private(fresh)
        conn = sqlite3.connect(fresh)
        try:
            conn.execute("PRAGMA journal_mode=OFF")
            conn.execute("PRAGMA synchronous=OFF")  # a cache: a crash means a rebuild
            conn.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT)")
            conn.execute(
                "CREATE TABLE rows (key TEXT PRIMARY KEY, line INTEGER, fields TEXT) WITHOUT ROWID"
            )
            conn.execute(
                "CREATE TABLE bad (key TEXT PRIMARY KEY, line INTEGER, reason TEXT) WITHOUT ROWID"
            )
            facts = _fill(conn, records)
            meta = {
                "signature": signature or "",
                "layout": LAYOUT,
                "facts": json.dumps(_facts_dict(facts)),
                "content": content() or "",
            }
            conn.executemany("INSERT INTO meta VALUES (?, ?)", meta.items())
            conn.commit()
        finally:
            conn.close()
        fresh.replace(path)
        return cls(path)

    def meta(self) -> dict[str, str]:
        return dict(self._conn.execute("SELECT name, value FROM meta").fetchall())

    def content(self) -> str | None:
        """The feed digest of the source it was built from; None: not known."""
        return self.meta().get("content") or None

    def facts(self) -> BuildFacts:
        raw = json.loads(self.meta().get("facts") or "{}")
        return BuildFacts(**raw)

    def get_many(self, keys: Sequence[str]) -> dict[str, str]:
        """The fields (JSON text) of each of ``keys`` the index holds."""
        return {key: fields for key, fields in self._many("SELECT key, fields FROM rows", keys)}

    def held_many(self, keys: Sequence[str]) -> dict[str, tuple[int, str]]:
        """For each of ``keys`` whose record the join could not use: (its line, why)."""
        rows = self._many("SELECT key, line, reason FROM bad", keys)
        return {key: (int(line), str(reason)) for key, line, reason in rows}

    def _many(self, select: str, keys: Sequence[str]) -> list[Any]:
        """Rows by the caller's keys, looked up as stored (``canonical.key``).

        A row's first column is the key as the caller spelled it (one row per spelling).
        """
        found: list[Any] = []
        asked: dict[str, list[str]] = {}  # stored form -> the caller's spellings of it
        for key in keys:
            spellings = asked.setdefault(canonical.key(key), [])
            if key not in spellings:
                spellings.append(key)
        unique = list(asked)
        for start in range(0, len(unique), LOOKUP):
            part = unique[start : start + LOOKUP]
            marks = ",".join("?" * len(part))
            query = f"{select} WHERE key IN ({marks})"
            for stored, *rest in self._conn.execute(query, part).fetchall():
                found.extend((spelling, *rest) for spelling in asked[stored])
        return found

    def close(self) -> None:
        self._conn.close()


def _facts_dict(facts: BuildFacts) -> dict[str, object]:
    return {
        "records": facts.records,
        "duplicates": facts.duplicates,
        "duplicate_example": facts.duplicate_example,
        "unreadable": facts.unreadable,
        "unreadable_line": facts.unreadable_line,
        "unreadable_reason": facts.unreadable_reason,
        "unkeyed": facts.unkeyed,
        "read": facts.read,
    }


def _fill(conn: sqlite3.Connection, records: Iterable[Entry]) -> BuildFacts:
    count = duplicates = unreadable = unkeyed = read = 0
    duplicate_example: str | None = None
    first: tuple[int, str] | None = None  # the first record the join could not use
    batch: list[tuple[str, int, str]] = []

    def flush() -> None:
        nonlocal duplicates, duplicate_example
        before = conn.total_changes
        conn.executemany("INSERT OR IGNORE INTO rows VALUES (?, ?, ?)", batch)
        lost = len(batch) - (conn.total_changes - before)
        if lost:
            duplicates += lost
            if duplicate_example is None:
                duplicate_example = _first_duplicate(conn, batch)
        batch.clear()

    for raw_key, line, fields, usable in records:
        read += 1
        if usable is None:  # left out by the join's filter
            continue
        key = None if raw_key is None else canonical.key(raw_key) or None  # stored as NFC
        if key is None or not usable:
            unreadable += 1
            first = first or (line, fields)
            if key is None:
                unkeyed += 1
            else:  # the first reason of a key is kept
                conn.execute("INSERT OR IGNORE INTO bad VALUES (?, ?, ?)", (key, line, fields))
            continue
        count += 1
        batch.append((key, line, fields))
        if len(batch) >= BATCH:
            flush()
    if batch:
        flush()
    at, why = first if first else (None, None)
    return BuildFacts(count, duplicates, duplicate_example, unreadable, at, why, unkeyed, read)


def _first_duplicate(conn: sqlite3.Connection, batch: list[tuple[str, int, str]]) -> str | None:
    for key, line, _ in batch:
        row = conn.execute("SELECT line FROM rows WHERE key = ?", (key,)).fetchone()
        if row is not None and row[0] != line:
            return f"{key!r} on lines {row[0]} and {line}"
    return None
