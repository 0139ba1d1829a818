"""The remote index: one sequential walk of ``GET /api/v1/products`` per need.

The API lists no lookup filter, so check-then-create reads the whole remote
catalog (1 read per 100 products) into a TEMP table of the mirror's
connection, indexed by natural key and by remote id. Products whose key field
is missing are counted and skipped: skuferry cannot have made them. Keys are
indexed as the mirror stores them (``canonical.key``: NFC), so a product whose
key the CMS holds in another Unicode form is found, not created again.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from skuferry import canonical, logs
from skuferry.state.scratch import keyset
from skuferry.state.transaction import transaction

log = logs.get(__name__)


class ProductPages(Protocol):
    """What the index reads from the CMS: the remote layer's ``RemoteApi`` has it.

    Declared here, not imported, so that the state layer never depends on the remote one.
    """

    def iter_pages(self, *, limit: int = 100) -> Iterator[tuple[int, int, list[dict[str, Any]]]]:
        """(page, pages, items) for pages 1..meta.pages, walked sequentially."""
        ...


class RemoteIndex:
    def __init__(self, conn: sqlite3.Connection, key_field: str) -> None:
        self._conn = conn
        self._key_field = key_field
        conn.execute("DROP TABLE IF EXISTS temp.remote_index")
        conn.execute(
            "CREATE TEMP TABLE remote_index (key TEXT, remote_id TEXT PRIMARY KEY, body TEXT)"
        )
        conn.execute("CREATE INDEX temp.remote_index_key ON remote_index(key)")
        self.products = 0
        self.pages = 0
        self.keyless = 0

    def load(
        self,
        client: ProductPages,
        *,
        page_size: int = 100,
        on_page: Callable[[int, int], None] | None = None,
    ) -> None:
        """Walk every page; raises whatever the client raises (a partial walk is no index)."""
        self._conn.execute("DELETE FROM remote_index")
        self.products = self.pages = self.keyless = 0
        for page, pages, items in client.iter_pages(limit=page_size):
            rows = []
            for item in items:
                rid, key = item.get("id"), item.get(self._key_field)
                text = "" if key is None else canonical.key(str(key))  # NFC, as the mirror's
                if rid is None or not text:
                    self.keyless += 1
                    continue
                rows.append((text, str(rid), canonical.dumps(item)))
            with transaction(self._conn, begin="BEGIN") as conn:
                conn.executemany("INSERT OR REPLACE INTO remote_index VALUES (?,?,?)", rows)
            self.products += len(rows)
            self.pages = page
            if on_page:
                on_page(page, pages)
        log.info("remote.walked", pages=self.pages, products=self.products, keyless=self.keyless)

    def find(self, key: str) -> list[tuple[str, dict[str, Any]]]:
        """Every remote product holding ``key``: (remote_id, body)."""
        rows = self._conn.execute(
            "SELECT remote_id, body FROM remote_index WHERE key = ? ORDER BY remote_id", [key]
        ).fetchall()
        return [(rid, canonical.loads(body)) for rid, body in rows]

    def by_id(self, remote_id: str) -> dict[str, Any] | None:
        row = self._conn.execute(
            "SELECT body FROM remote_index WHERE remote_id = ?", [remote_id]
        ).fetchone()
        return canonical.loads(row[0]) if row else None

    def pairs(self) -> Iterator[tuple[str, str]]:
        """Every (key, remote_id) found, streamed in keyset pages."""
        select = "SELECT remote_id, key FROM remote_index"
        for remote_id, key in keyset(self._conn, select, order=("remote_id",)):
            yield key, remote_id

    def close(self) -> None:
        self._conn.execute("DROP TABLE IF EXISTS temp.remote_index")
