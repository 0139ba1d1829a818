"""What each accepted PATCH/PUT of a product carried, so tests and the demo can show it.

Field ownership is judged by the wire: "the PATCH held only the price" is read
from here, not inferred from the store. Bodies are kept as received (decimals
exact), in arrival order, per workspace.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any


class ReceivedUpdates:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, list[dict[str, Any]]] = {}

    def add(self, workspace: str, *, method: str, record_id: str, body: Mapping[str, Any]) -> None:
        item = {"method": method, "id": record_id, "body": dict(body)}
        with self._lock:
            self._items.setdefault(workspace, []).append(item)

    def list(self, workspace: str) -> list[dict[str, Any]]:
        """``{"method": "PATCH"|"PUT", "id": "p_000001", "body": {...}}`` per update, oldest
        first (copies)."""
        with self._lock:
            return [{**i, "body": dict(i["body"])} for i in self._items.get(workspace, [])]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
