"""A small PIM-like JSON API on 127.0.0.1, for the http source's tests and the README demo.

One catalog, served under one path per pagination style:

    /page/products?page=N&limit=M      {"items": [...], "meta": {"page": N, "pages": P, ...}}
    /offset/products?offset=O&limit=M  {"items": [...], "total": T}
    /cursor/products?cursor=C&limit=M  {"data": [...], "next_cursor": "..." | null}
    /hal/products?page=N&limit=M       {"_embedded": {"items": [...]},
                                        "_links": {"next": {"href": "/hal/products?page=N+1..."}}}
                                       (a next link on every full page, as Akeneo links)
    /link/products?page=N&limit=M      [...]  and  Link: </link/products?page=N+1...>; rel="next"
    /woo/products?page=N&per_page=M    [...]  and  X-WP-Total, X-WP-TotalPages, Link (WooCommerce)
    /odata/products[?$count=true]      {"@odata.context": ..., "value": [...],
                                        ["@odata.count": T,] "@odata.nextLink": "http://..."}
                                       (OData v4 server-driven paging: the page size comes
                                        from ``Prefer: odata.maxpagesize=M``, default 100)

``PimServer(..., ends_early_at=K)`` is a broken API: page K and later come back
empty, and page K-1 links no further, while every total still counts the whole
catalog (a pull that trusted it would stop early in silence).

Every style also filters by change time, as PIMs do for incremental pulls:
``updated_since=<ISO 8601 | unix seconds>`` or Akeneo's
``search={"updated":[{"operator":">","value":"2026-11-22 09:00:00"}]}`` keep the
products whose ``updated`` field is later (products without one always match).

Run it by hand (examples/pim-http.toml points at it):

    python -m skuferry.sandbox.pim --port 8780 --from-file examples/catalog.csv --token demo-token

Tests start it in-process (``with PimServer(catalog) as pim:``), script faults
(``pim.faults.append(Fault(500, match="page=2"))``) and read ``pim.requests``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import csv
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

from skuferry import canonical
from skuferry.sandbox.threaded import ThreadedServer


class GeneratedCatalog(Sequence[dict[str, Any]]):
    """``n`` products made on demand, so a huge catalog costs no memory.

    All were last updated at ``updated``; ``touch`` changes some (a new name) later.
    """

    def __init__(self, n: int, *, updated: str = "2026-01-01T00:00:00+00:00") -> None:
        self.n = n
        self.updated = _when(updated)
        self.touched: dict[int, datetime] = {}

    def touch(self, indices: Sequence[int], when: datetime) -> None:
        for index in indices:
            self.touched[index] = when

    def changed_since(self, since: datetime) -> Sequence[dict[str, Any]]:
        """The products updated after ``since``, without building the others."""
        if since < self.updated:
            return self
        return [self[i] for i in sorted(self.touched) if self.touched[i] > since]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.n))]
        if not 0 <= index < self.n:
            raise IndexError(index)
        touched = self.touched.get(index)
        return {
            "sku": f"SKU-{index + 1:06d}",
            "name": f"Product {index + 1}" + (" (revised)" if touched else ""),
            "price": Decimal(index % 1000) + Decimal("0.99"),
            "stock": index % 37,
            "updated": (touched or self.updated).isoformat(),
        }


@dataclass
class Fault:
    """Answer ``status`` instead of the page, ``times`` times (None: always), for matching URLs."""

    status: int
    times: int | None = 1
    match: str = ""  # a substring of the request's path and query
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b'{"error": "injected"}'


@dataclass(frozen=True)
class Seen:
    path: str  # path and query
    authorization: str | None


class PimServer(ThreadedServer):
    """The API on a free port of 127.0.0.1 (or ``host``), served from a background thread."""

    def __init__(
        self,
        catalog: Sequence[Any] = (),
        *,
        token: str | None = None,
        basic: tuple[str, str] | None = None,
        port: int = 0,
        absolute_links: bool = False,
        host: str = "127.0.0.1",  # any of 127.0.0.0/8: a second origin on the same box
        ends_early_at: int | None = None,  # a broken API: no records from this page on
    ) -> None:
        self.catalog = catalog
        self.ends_early_at = ends_early_at
        self.token = token
        self.basic = basic
        self.absolute_links = absolute_links
        self.faults: list[Fault] = []
        self.requests: list[Seen] = []
        self.raw_pages: dict[str, bytes] = {}  # exact path+query -> body served instead
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer((host, port), _handler_for(self))
        self._httpd.daemon_threads = True

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def url(self, style: str) -> str:
        return f"{self.base_url}/{style}/products"

    # -- what the handler asks -----------------------------------------------------------

    def authorized(self, header: str | None) -> bool:
        if self.token is not None:
            return header == f"Bearer {self.token}"
        if self.basic is not None:
            raw = base64.b64encode(":".join(self.basic).encode()).decode()
            return header == f"Basic {raw}"
        return True

    def take_fault(self, target: str, authorization: str | None) -> Fault | None:
        """Record the request; the first fault it matches, used up by one."""
        with self._lock:
            self.requests.append(Seen(target, authorization))
            for fault in self.faults:
                if fault.match in target and (fault.times is None or fault.times > 0):
                    if fault.times is not None:
                        fault.times -= 1
                    return fault
        return None

    def changed(self, query: dict[str, str]) -> Sequence[Any]:
        """The catalog, filtered by ``updated_since`` or an Akeneo ``search`` when asked."""
        since: datetime | None = None
        if "updated_since" in query:
            since = _when(query["updated_since"])
        elif "search" in query:
            rule = json.loads(query["search"])["updated"][0]
            if rule["operator"] != ">":
                raise ValueError(f"unsupported operator {rule['operator']!r}")
            since = _when(rule["value"])
        if since is None:
            return self.catalog
        if isinstance(self.catalog, GeneratedCatalog):
            return self.catalog.changed_since(since)
        return [p for p in self.catalog if "updated" not in p or _when(p["updated"]) > since]

    def item(self, key: str) -> Any | None:
        """The product whose ``sku`` (or Akeneo ``identifier``) is ``key``, as a JSON object."""
        for product in self.catalog:
            if isinstance(product, dict) and key in (product.get("sku"), product.get("identifier")):
                return product
        return None

    def page(
        self,
        style: str,
        query: dict[str, str],
        headers: Mapping[str, str] | None = None,  # lower-case names
    ) -> tuple[Any, dict[str, str]]:
        """The body and extra headers of one page of ``style``."""
        catalog = self.changed(query)
        total = len(catalog)
        limit = max(1, int(query.get("per_page" if style == "woo" else "limit", "20")))
        if style == "odata":
            limit = _max_page_size((headers or {}).get("prefer", ""))
            start = int(query.get("$skiptoken", "0"))
        elif style in ("page", "hal", "link", "woo"):
            start = (max(1, int(query.get("page", "1"))) - 1) * limit
        elif style == "offset":
            start = int(query.get("offset", "0"))
        else:  # cursor: an opaque-looking token holding the next index
            cursor = query.get("cursor")
            start = int(base64.urlsafe_b64decode(cursor).decode()) if cursor else 0
        number = start // limit + 1
        items = list(catalog[start : start + limit])
        more = start + limit < total
        if style == "hal":  # Akeneo's search_after: a next link on every full page
            more = len(items) == limit
        if self.ends_early_at is not None:  # the broken API of the docstring
            items = [] if number >= self.ends_early_at else items
            more = more and number + 1 < self.ends_early_at
        pages = (total + limit - 1) // limit
        if style == "page":
            return {"items": items, "meta": {"page": number, "pages": pages, "total": total}}, {}
        if style == "offset":
            return {"items": items, "total": total}, {}
        if style == "cursor":
            token = base64.urlsafe_b64encode(str(start + limit).encode()).decode()
            return {"data": items, "next_cursor": token if more else None}, {}
        if style == "odata":
            body: dict[str, Any] = {
                "@odata.context": f"{self.base_url}/odata/$metadata#products",
                "value": items,
            }
            if query.get("$count") == "true":
                body["@odata.count"] = total
            if more:  # OData links are absolute
                body["@odata.nextLink"] = f"{self.base_url}/odata/products?" + urlencode(
                    {**query, "$skiptoken": start + limit}
                )
            return body, {}
        prefix = self.base_url if self.absolute_links else ""
        size = "per_page" if style == "woo" else "limit"
        nxt = f"{prefix}/{style}/products?page={number + 1}&{size}={limit}"
        if style == "hal":
            links = {"self": {"href": f"/hal/products?page={number}&limit={limit}"}}
            if more:
                links["next"] = {"href": nxt}
            return {"_embedded": {"items": items}, "_links": links}, {}
        extra = {"Link": f'<{nxt}>; rel="next"'} if more else {}
        if style == "woo":
            extra |= {"X-WP-Total": str(total), "X-WP-TotalPages": str(pages)}
        return items, extra


def _max_page_size(prefer: str) -> int:
    """``Prefer: odata.maxpagesize=N`` (among other preferences), else 100."""
    for part in prefer.split(","):
        name, _, value = part.strip().partition("=")
        if name.strip().lower() == "odata.maxpagesize" and value.strip().isdigit():
            return max(1, int(value))
    return 100


def _handler_for(server: PimServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out as two writes

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: tests read server.requests instead

        def do_GET(self) -> None:
            auth = self.headers.get("Authorization")
            fault = server.take_fault(self.path, auth)
            if fault is not None:
                return self._send(fault.status, fault.body, fault.headers)
            if not server.authorized(auth):
                return self._send(401, b'{"error": "unauthorized"}', {})
            if self.path in server.raw_pages:
                return self._send(200, server.raw_pages[self.path], {})
            parts = urlsplit(self.path)
            segments = parts.path.strip("/").split("/")
            if len(segments) == 3 and segments[1] == "products":  # one item: /<style>/products/KEY
                item = server.item(unquote(segments[2]))
                if item is None:
                    return self._send(404, b'{"error": "no such product"}', {})
                return self._send(200, json.dumps(item, default=_number).encode(), {})
            if (
                len(segments) != 2
                or segments[1] != "products"
                or segments[0] not in ("page", "offset", "cursor", "hal", "link", "woo", "odata")
            ):
                return self._send(404, b'{"error": "not found"}', {})
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            sent = {name.lower(): value for name, value in self.headers.items()}
            body, headers = server.page(segments[0], query, sent)
            return self._send(200, json.dumps(body, default=_number).encode(), headers)

        def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

    return Handler


def _when(text: str) -> datetime:
    """ISO 8601 (``T`` or a space; naive means UTC) or unix seconds."""
    if text.isdigit():
        return datetime.fromtimestamp(int(text), UTC)
    when = datetime.fromisoformat(text)
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _number(value: Any) -> float:
    # json's C encoder is fast enough for huge catalogs; repr(float) keeps "12.99" as 12.99.
    if isinstance(value, Decimal):
        return float(value)
    raise TypeError(f"cannot serialise {type(value).__name__}")


def load_catalog(path: Path) -> list[dict[str, Any]]:
    """Products from a CSV (header row) or JSON Lines file."""
    with path.open(encoding="utf-8", newline="") as fh:
        if path.suffix == ".csv":
            return [dict(row) for row in csv.DictReader(fh)]
        return [canonical.loads(line) for line in fh if line.strip()]


def main(argv: Sequence[str] | None = None, *, ready: Callable[[str], None] = print) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--port", type=int, default=8780)
    parser.add_argument("--products", type=int, default=250, help="generate N products")
    parser.add_argument("--from-file", type=Path, help="serve a CSV or JSONL file instead")
    parser.add_argument("--token", help="require Authorization: Bearer TOKEN")
    parser.add_argument("--ends-early-at", type=int, help="a broken API: no records from page N on")
    args = parser.parse_args(argv)
    catalog: Sequence[Any] = (
        load_catalog(args.from_file) if args.from_file else GeneratedCatalog(args.products)
    )
    pim = PimServer(catalog, token=args.token, port=args.port, ends_early_at=args.ends_early_at)
    ready(json.dumps({"pim": pim.base_url, "products": len(catalog)}))
    with contextlib.suppress(KeyboardInterrupt):
        pim.serve_forever()


if __name__ == "__main__":
    main()
