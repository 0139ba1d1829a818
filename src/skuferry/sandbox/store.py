"""In-memory records of the sandbox: per workspace, in insertion order, server ids.

Stored records are never mutated in place (an update stores a new dict), so a
list of references taken under the lock can be serialised outside it. Each record
keeps the time it was created (on the sandbox's clock), so a list that lags behind
writes shows only those created long enough ago: a prefix of the insertion order.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any


class Collection:
    """One resource kind (products, content items); ids look like ``p_000123``."""

    def __init__(
        self,
        *,
        prefix: str,
        key_field: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._prefix = prefix
        self._clock = clock
        self._times: dict[str, list[float]] = {}  # workspace -> creation time, as _order
        self._key_field = key_field
        self._lock = threading.Lock()
        self._next = 1
        self._records: dict[str, dict[str, dict[str, Any]]] = {}  # workspace -> id -> record
        self._order: dict[str, list[str]] = {}  # workspace -> ids in insertion order
        self._keys: dict[str, Counter[str]] = {}  # workspace -> key value -> records holding it

    def create(self, workspace: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        """Store a new record (any ``id`` in ``fields`` is replaced by the server's)."""
        with self._lock:
            return self._insert(workspace, fields)

    def create_many(
        self, workspace: str, items: Iterable[Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        with self._lock:
            return [self._insert(workspace, item) for item in items]

    def get(self, workspace: str, record_id: str) -> dict[str, Any] | None:
        with self._lock:
            return self._records.get(workspace, {}).get(record_id)

    def replace(
        self, workspace: str, record_id: str, fields: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """PUT: the record becomes ``fields``, keeping its id; None if unknown."""
        return self._update(workspace, record_id, fields, merge=False)

    def merge(
        self, workspace: str, record_id: str, fields: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """PATCH: top-level fields of ``fields`` overwrite, the rest stay; None if unknown."""
        return self._update(workspace, record_id, fields, merge=True)

    def page(self, workspace: str, *, page: int, limit: int) -> tuple[list[dict[str, Any]], int]:
        """Records of one page (1-based) and the total count."""
        with self._lock:
            order = self._order.get(workspace, [])
            records = self._records.get(workspace, {})
            start = (page - 1) * limit
            return [records[i] for i in order[start : start + limit]], len(order)

    def window(
        self, workspace: str, *, start: int, stop: int, created_by: float | None = None
    ) -> tuple[list[dict[str, Any]], int]:
        """Records ``start:stop`` of the list, counting only those created by ``created_by``
        (all when None), and how many that is."""
        with self._lock:
            order = self._order.get(workspace, [])
            listed = len(order)
            if created_by is not None:
                listed = bisect_right(self._times.get(workspace, []), created_by)
            records = self._records.get(workspace, {})
            start, stop = max(0, start), min(max(0, stop), listed)
            return [records[i] for i in order[start:stop]], listed

    def all(self, workspace: str) -> list[dict[str, Any]]:
        with self._lock:
            records = self._records.get(workspace, {})
            return [dict(records[i]) for i in self._order.get(workspace, [])]

    def counts(self) -> dict[str, int]:
        with self._lock:
            return {ws: len(ids) for ws, ids in self._order.items()}

    def duplicates(self) -> dict[str, dict[str, int]]:
        """Per workspace, the key values held by more than one record, with their counts."""
        with self._lock:
            found = {
                ws: {value: n for value, n in sorted(keys.items()) if n > 1}
                for ws, keys in self._keys.items()
            }
        return {ws: dups for ws, dups in found.items() if dups}

    def clear(self) -> None:
        with self._lock:
            self._records.clear()
            self._order.clear()
            self._keys.clear()
            self._times.clear()

    def _insert(self, workspace: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        record_id = f"{self._prefix}_{self._next:06d}"
        self._next += 1
        record = {**fields, "id": record_id}
        self._records.setdefault(workspace, {})[record_id] = record
        self._order.setdefault(workspace, []).append(record_id)
        times = self._times.setdefault(workspace, [])
        times.append(max(self._clock(), times[-1]) if times else self._clock())  # sorted
        self._count_key(workspace, record, +1)
        return record

    def _update(
        self, workspace: str, record_id: str, fields: Mapping[str, Any], *, merge: bool
    ) -> dict[str, Any] | None:
        with self._lock:
            records = self._records.get(workspace, {})
            old = records.get(record_id)
            if old is None:
                return None
            new = {**(old if merge else {}), **fields, "id": record_id}
            self._count_key(workspace, old, -1)
            self._count_key(workspace, new, +1)
            records[record_id] = new  # same key: insertion order is kept
            return new

    def _count_key(self, workspace: str, record: Mapping[str, Any], delta: int) -> None:
        if self._key_field is None:
            return
        value = record.get(self._key_field)
        if isinstance(value, str):
            keys = self._keys.setdefault(workspace, Counter())
            keys[value] += delta
            if keys[value] <= 0:
                del keys[value]
