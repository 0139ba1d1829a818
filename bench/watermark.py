"""Issue 29 (found 8): what reading each record's change time costs a pull.

An incremental window in the source's own clock reads the change time of every
record a pull passes (sync/read/watermark.py). Measured: microseconds per record over
``n`` rising change times (each one a new latest: the dearest order), for the
layouts the presets use (``%Y-%m-%d %H:%M:%S``, read as ISO 8601), a pattern that
needs ``strptime`` (``%d.%m.%Y %H:%M:%S``), and unix seconds. Median of 3.
Informational: an API pull of the same records takes seconds to minutes.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import Result
from skuferry.sync.read.watermark import ChangeTimes

_START = datetime(2026, 1, 1, 4, 0, 0)


def _layouts() -> dict[str, tuple[str, Callable[[int], Any]]]:
    def text(fmt: str) -> Callable[[int], Any]:
        return lambda i: (_START + timedelta(seconds=i)).strftime(fmt)

    return {
        "wall clock (ISO-like pattern)": ("%Y-%m-%d %H:%M:%S", text("%Y-%m-%d %H:%M:%S")),
        "other pattern (strptime)": ("%d.%m.%Y %H:%M:%S", text("%d.%m.%Y %H:%M:%S")),
        "unix seconds": ("epoch", lambda i: 1_767_240_000 + i),
    }


def figure(quick: bool) -> Result:
    n = 50_000 if quick else 200_000
    now = datetime.now(UTC)
    parts = []
    for name, (fmt, make) in _layouts().items():
        values = [make(i) for i in range(n)]
        runs = []
        for _ in range(3):
            times = ChangeTimes("bench", fmt, now)
            began = time.perf_counter()
            for line, value in enumerate(values, 1):
                times.observe(value, line)
            runs.append(time.perf_counter() - began)
            assert times.read == n
        parts.append(f"{name}: {statistics.median(runs) / n * 1e6:.2f} µs")
    return Result(
        figure="change times read per record",
        measured="; ".join(parts),
        target="informational",
        ok=None,
        notes=[f"{n:,} rising change times, median of 3"],
    )
