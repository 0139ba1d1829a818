"""A PrestaShop webservice's product list, whose change times are local wall-clock time.

Written from PrestaShop's webservice documentation (devdocs.prestashop-project.org,
"Webservice > Tutorials > Advanced use > Additional list parameters"): JSON with
``output_format=JSON``, all fields with ``display=full``, a filter on a date field
needs ``date=1`` and is written ``filter[date_upd]=>[2026-11-26 04:13:17]`` (after),
``<[...]`` (before) or ``[from,to]`` (an interval, ends included); the key goes as
``ws_key`` in the query (or as the Basic user). ``date_upd`` is written
``YYYY-MM-DD HH:MM:SS`` in the shop's own time zone, with no zone in the value.

    GET /api/products?output_format=JSON&display=full&date=1[&filter[date_upd]=>[...]]

The shop's clock is ``utc_offset`` hours from UTC (default -5, a shop in New York in
winter): each change is stamped with that wall-clock time. One page holds the whole
list (a test catalog is small; PrestaShop's ``limit=offset,count`` is one parameter).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from skuferry.sandbox.pims.base import ApiServer, Request, Response, run_main

WS_KEY = "PSKEY7Q9ZL2M4X8C1V6B3N5J0H2G4F6D"  # a test value, 32 characters like a real key
STAMP = "%Y-%m-%d %H:%M:%S"
_AFTER = re.compile(r"^>\[(?P<at>[^\]]+)\]$")
_BEFORE = re.compile(r"^<\[(?P<at>[^\]]+)\]$")
_BETWEEN = re.compile(r"^\[(?P<start>[^,\]]+),(?P<end>[^\]]+)\]$")


class PrestaShopServer(ApiServer):
    """Products keyed by ``reference``, stamped ``date_upd`` on the shop's wall clock."""

    name = "prestashop"

    def __init__(
        self,
        products: list[dict[str, Any]],
        *,
        utc_offset: float = -5,
        clock: Callable[[], datetime] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self.products = products
        self.offset = timedelta(hours=utc_offset)
        self._clock = clock or (lambda: datetime.now(UTC))

    def local_now(self) -> datetime:
        """The shop's wall clock: UTC plus the offset, with no zone (as it writes it)."""
        return (self._clock() + self.offset).replace(tzinfo=None, microsecond=0)

    def change(self, reference: str, **fields: Any) -> dict[str, Any]:
        """An edit in the back office: the fields set, ``date_upd`` stamped now."""
        with self.lock:
            product = next(p for p in self.products if p["reference"] == reference)
            product.update(fields, date_upd=self.local_now().strftime(STAMP))
            return dict(product)

    def error_body(self, status: int) -> Any:
        return {"errors": [{"code": status, "message": f"injected {status}"}]}

    def handle(self, request: Request) -> Response:
        if request.path.rstrip("/") != "/api/products":
            return Response(404, {"errors": [{"code": 404, "message": "Resource not found"}]})
        if request.arg("ws_key") != WS_KEY:
            return Response(
                401, {"errors": [{"code": 17, "message": "Authentication key is empty"}]}
            )
        wanted = request.arg("filter[date_upd]")
        with self.lock:
            products = [dict(p) for p in self.products]
        if wanted is not None:
            if request.arg("date") != "1":
                message = "The 'date' parameter is required to filter on a date field"
                return Response(400, {"errors": [{"code": 33, "message": message}]})
            keep = _date_filter(wanted)
            if keep is None:
                return Response(400, {"errors": [{"code": 34, "message": f"bad filter {wanted}"}]})
            products = [p for p in products if keep(_held(p["date_upd"]))]
        self.count("products")
        return Response(200, {"products": products} if products else [])


def _stamp(text: str) -> datetime:
    return datetime.strptime(text, STAMP)


def _held(text: str) -> datetime:
    """A stored ``date_upd``; MySQL's zero date sorts before every other."""
    try:
        return _stamp(text)
    except ValueError:
        return datetime.min


def _date_filter(text: str) -> Callable[[datetime], bool] | None:
    """PrestaShop's ``>[t]``, ``<[t]`` and ``[a,b]`` on wall-clock times; None: malformed."""
    try:
        if match := _AFTER.match(text):
            after = _stamp(match["at"])
            return lambda when: when > after
        if match := _BEFORE.match(text):
            before = _stamp(match["at"])
            return lambda when: when < before
        if match := _BETWEEN.match(text):
            start, end = _stamp(match["start"]), _stamp(match["end"])
            return lambda when: start <= when <= end
    except ValueError:
        return None
    return None


def make_products(n: int, *, updated: datetime) -> list[dict[str, Any]]:
    """``n`` products, each stamped an hour after the one before, the last at ``updated``."""
    return [
        {
            "id": i + 1,
            "reference": f"P-{i + 1:03d}",
            "name": f"Cabinet hinge {i + 1}",
            "price": f"{Decimal(100 + i) + Decimal('0.7'):.6f}",  # PrestaShop's six decimals
            "active": "1",
            "date_add": "2026-01-15 09:30:00",
            "date_upd": (updated - timedelta(hours=n - 1 - i)).strftime(STAMP),
        }
        for i in range(n)
    ]


def main(argv: list[str] | None = None) -> None:
    def build(args: argparse.Namespace) -> tuple[ApiServer, dict[str, Any]]:
        server = PrestaShopServer([], host=args.host, port=args.port)
        server.products = make_products(args.products, updated=server.local_now())
        return server, {"ws_key": WS_KEY, "since_format": STAMP}

    run_main(argv, description="A PrestaShop-like product list", default_port=8787, build=build)


if __name__ == "__main__":
    main()
