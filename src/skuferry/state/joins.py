"""The on-disk index of one ``[[join]]`` source: its records by key, kept between runs.

Each join gets its own SQLite file in the state file's scratch folder
(``<state>.scratch/join-<name>.sqlite``, 0600: it holds catalog data), so a
million-row join costs disk, not memory. Beside the records it keeps the
*signature* of the source it was built from (``sources/signature.py``): when the
source's signature is the same on the next run, the index is used as it is and
the source is not read again.

A rebuild writes a new file and renames it over the old one, so a run that fails
halfway leaves the last good index (and its signature) in place. The first record
of a key wins; later ones are counted as duplicates, with the first example kept
for the run's note.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from skuferry import files

BATCH = 5000  # records per insert batch while building
LOOKUP = 500  # keys per lookup query (well under SQLite's variable limit)


@dataclass(frozen=True, slots=True)
class BuildFacts:
    """What building the index found (kept in the index, so every run can report it)."""

    records: int = 0
    duplicates: int = 0
    duplicate_example: str | None = None  # "'K' on lines 3 and 9"
    unreadable: int = 0  # records the source could not read, or without a key
    unreadable_example: str | None = None


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
            if index.meta().get("signature") == signature:
                return index
            index.close()
        except sqlite3.DatabaseError:
            pass  # unreadable or from an older layout: rebuilt
        return None

    @classmethod
    def build(
        cls,
        path: Path,
        records: Iterable[tuple[str | None, int, str]],
        *,
        signature: str | None,
    ) -> JoinIndex:
        """Write ``records`` ((key, line, fields as JSON)) into a fresh index at ``path``.

        A record with the key None is one the source could not read or that has no
        key: it is counted as unreadable, its third item being the reason.
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
            facts = _fill(conn, records)
            meta = {"signature": signature or "", "facts": json.dumps(_facts_dict(facts))}
            conn.executemany("INSERT INTO meta VALUES (?, ?)", meta.items())
            conn.commit()
        finally:
            conn.close()
        fresh.replace(path)
        return cls(path)

    def meta(self) -> dict[str, str]:
        return dict(self._conn.execute("SELECT name, value FROM meta").fetchall())

    def facts(self) -> BuildFacts:
        raw = json.loads(self.meta().get("facts") or "{}")
        return BuildFacts(**raw)

    def get_many(self, keys: Sequence[str]) -> dict[str, str]:
        """The fields (JSON text) of each of ``keys`` the index holds."""
        found: dict[str, str] = {}
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), LOOKUP):
            part = unique[start : start + LOOKUP]
            marks = ",".join("?" * len(part))
            query = f"SELECT key, fields FROM rows WHERE key IN ({marks})"  # noqa: S608 - marks
            found.update(self._conn.execute(query, part).fetchall())
        return found

    def close(self) -> None:
        self._conn.close()


def _facts_dict(facts: BuildFacts) -> dict[str, object]:
    return {
        "records": facts.records,
        "duplicates": facts.duplicates,
        "duplicate_example": facts.duplicate_example,
        "unreadable": facts.unreadable,
        "unreadable_example": facts.unreadable_example,
    }


def _fill(conn: sqlite3.Connection, records: Iterable[tuple[str | None, int, str]]) -> BuildFacts:
    count = duplicates = unreadable = 0
    duplicate_example: str | None = None
    unreadable_example: str | None = None
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

    for key, line, fields in records:
        if key is None:
            unreadable += 1
            unreadable_example = unreadable_example or f"line {line}: {fields}"
            continue
        count += 1
        batch.append((key, line, fields))
        if len(batch) >= BATCH:
            flush()
    if batch:
        flush()
    return BuildFacts(count, duplicates, duplicate_example, unreadable, unreadable_example)


def _first_duplicate(conn: sqlite3.Connection, batch: list[tuple[str, int, str]]) -> str | None:
    for key, line, _ in batch:
        row = conn.execute("SELECT line FROM rows WHERE key = ?", (key,)).fetchone()
        if row is not None and row[0] != line:
            return f"{key!r} on lines {row[0]} and {line}"
    return None
