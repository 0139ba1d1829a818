"""Incremental vs full pull of a 100k-product PIM, 100 changed: source requests and time.

    python -m bench.incremental [--products 100000] [--changed 100] [--page-size 100]

Both pulls read the stand-in PIM server (skuferry/sandbox/pim.py) over loopback through the
http source, page pagination with a total page count; the incremental one asks
``?updated_since=<watermark - 300 s>``. Each is run three times; the median is shown.
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import UTC, datetime, timedelta

from skuferry import logs
from skuferry.config.schema import HttpSourceSettings
from skuferry.sandbox.pim import GeneratedCatalog, PimServer
from skuferry.sources.http import HttpSource


def pull(
    pim: PimServer, settings: HttpSourceSettings, since: datetime | None
) -> tuple[int, int, float]:
    """(records, requests, seconds) of one pull."""
    pim.requests.clear()
    source = HttpSource(settings)
    started = time.perf_counter()
    records = source.records() if since is None else source.records_since(since)
    count = sum(1 for _ in records)
    return count, len(pim.requests), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--products", type=int, default=100_000)
    parser.add_argument("--changed", type=int, default=100)
    parser.add_argument("--page-size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    logs.configure(level="warning")  # one line per page otherwise

    watermark = datetime(2026, 6, 1, tzinfo=UTC)  # the last pull's start
    catalog = GeneratedCatalog(args.products)
    step = max(1, args.products // args.changed)
    catalog.touch(range(0, step * args.changed, step), watermark + timedelta(minutes=10))
    with PimServer(catalog) as pim:
        settings = HttpSourceSettings(
            type="http",
            url=pim.url("page"),
            items_path="items",
            pagination="page",
            page_size=args.page_size,
            total_pages_path="meta.pages",
            since_param="updated_since",
        )
        rows = []
        for label, since in (("full", None), ("incremental", watermark - timedelta(seconds=300))):
            runs = [pull(pim, settings, since) for _ in range(args.repeat)]
            records, requests = runs[0][0], runs[0][1]
            seconds = statistics.median(r[2] for r in runs)
            rows.append((label, records, requests, seconds))
    print(
        f"{args.products:,} products, {args.changed} changed, page size {args.page_size}, "
        f"median of {args.repeat}"
    )
    print(f"{'pull':<12} {'records':>9} {'requests':>9} {'seconds':>9}")
    for label, records, requests, seconds in rows:
        print(f"{label:<12} {records:>9,} {requests:>9,} {seconds:>9.2f}")
    full, inc = rows[0], rows[1]
    print(f"incremental/full: requests {inc[2] / full[2]:.4f}, time {inc[3] / full[3]:.4f}")


if __name__ == "__main__":
    main()
