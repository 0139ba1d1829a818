"""Named keys: the records of a few products (``sync --only``, ``retry``, hooks, lanes).

A source that can fetch items by key (``[source] item_url``: ``by_key`` and
``fetch_items``) is asked for those keys only, one request each; any other is
read whole and filtered by key, which still writes only those products. The
keys the source did not yield are ``missing`` once the records are consumed.

Such a pull proves nothing about the keys it did not ask for: the planner gets
``full=False`` (no gone decisions) and the watermark of incremental pulls stays
where it was.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Protocol, runtime_checkable

from skuferry import canonical
from skuferry.models import BadRecord, RawRecord
from skuferry.sources.base import Source


@runtime_checkable
class ByKey(Protocol):
    """A source that can read single items by key."""

    @property
    def by_key(self) -> bool: ...

    def fetch_items(self, keys: Iterable[str]) -> Iterator[RawRecord | BadRecord]: ...


def read_keys(path: Path) -> list[str]:
    """``--keys-from FILE``: one key a line; blank lines and ``#`` comments skipped."""
    keys: list[str] = []
    for raw in path.read_text(encoding="utf-8-sig").splitlines():
        line = canonical.key(raw)
        if line and not line.startswith("#"):
            keys.append(line)
    return keys


def unique(keys: Iterable[str]) -> list[str]:
    """The keys as skuferry stores them (``canonical.key``: NFC), in their first order,
    each once: ``sync --only``, ``retry`` and the lanes name products through it."""
    return list(dict.fromkeys(k for k in map(canonical.key, keys) if k))


class KeyReader(Protocol):
    """What reads a record's product key: the mapping, which knows the key field."""

    def key_of(self, record: RawRecord) -> str | None: ...


class NamedPull:
    """The records of ``keys`` from ``source``; ``missing`` after they were consumed."""

    def __init__(self, keys: Iterable[str], mapper: KeyReader) -> None:
        self.keys = unique(keys)
        self._wanted = frozenset(self.keys)
        self._mapper = mapper
        self._found: set[str] = set()
        self.fetched_by_key = False

    def records(self, source: Source) -> Iterator[RawRecord | BadRecord]:
        if isinstance(source, ByKey) and source.by_key:
            self.fetched_by_key = True
            stream: Iterable[RawRecord | BadRecord] = source.fetch_items(self.keys)
        else:
            stream = source.records()
        for record in stream:
            key = self._key(record)
            if key is None or key not in self._wanted:
                continue
            self._found.add(key)
            yield record

    def _key(self, record: RawRecord | BadRecord) -> str | None:
        if isinstance(record, BadRecord):
            return None if record.key is None else canonical.key(record.key)
        return self._mapper.key_of(record)

    @property
    def missing(self) -> list[str]:
        """The keys the source did not hold (known once the records are consumed)."""
        return [k for k in self.keys if k not in self._found]
