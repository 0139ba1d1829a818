"""First syncs into an empty sandbox: how fully the write budget is used, and what it costs."""

from __future__ import annotations

import math
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import KEY, WORKSPACE, Result, settings, write_csv
from skuferry.models import RunSummary
from skuferry.sandbox import Sandbox, SandboxConfig, SandboxStats
from skuferry.sandbox.limits import Mode
from skuferry.sync.engine import run_once


@dataclass
class Fill:
    summary: RunSummary
    stats: SandboxStats
    sandbox_min_s: float
    wall_s: float

    @property
    def span_s(self) -> float:
        """First to last write admitted by the sandbox, on its clock."""
        times = self.stats.write_times
        return times[-1] - times[0] if len(times) > 1 else 0.0

    @property
    def rate_limited(self) -> int:
        return sum(self.stats.rate_limited.values())


def first_sync(
    n: int,
    *,
    writes: int,
    reads: int,
    mode: Mode,
    limiter: str,
    latency_s: float = 0.0,
    max_in_flight: int = 4,
) -> Fill:
    """Sync n new products into an empty sandbox whose limits equal the client's budget."""
    with tempfile.TemporaryDirectory(prefix="skuferry-bench-") as tmp:
        folder = Path(tmp)
        write_csv(folder / "catalog.csv", n)
        config = SandboxConfig(
            keys={KEY: WORKSPACE},
            key_limits={"read": reads, "write": writes},
            workspace_limits={"read": reads, "write": writes},
            mode=mode,
            latency_s=latency_s,
            updates="both",
        )
        with Sandbox(config) as sandbox:
            conf = settings(
                folder,
                sandbox.url,
                reads=reads,
                writes=writes,
                limiter=limiter,
                max_in_flight=max_in_flight,
            )
            started = time.perf_counter()
            summary = run_once(conf)
            wall = time.perf_counter() - started
            return Fill(summary, sandbox.stats(), sandbox.min_elapsed_for(n), wall)


def _check_created(fill: Fill, n: int, notes: list[str]) -> bool:
    ok = fill.summary.created == n and fill.stats.products.get(WORKSPACE, 0) == n
    if not ok:
        notes.append(
            f"created {fill.summary.created}, sandbox holds "
            f"{fill.stats.products.get(WORKSPACE, 0)} (wanted {n})"
        )
    return ok


def budget_fill(name: str, n: int, per_minute: int, *, mode: Mode, limiter: str) -> Result:
    fill = first_sync(n, writes=per_minute, reads=max(300, per_minute), mode=mode, limiter=limiter)
    ratio = fill.span_s / fill.sandbox_min_s
    notes = [
        f"{n} creates at {per_minute}/min, sandbox mode={mode}, client limiter={limiter}: "
        f"first->last write {fill.span_s:.2f} s, sandbox minimum {fill.sandbox_min_s:.2f} s; "
        f"run wall {fill.wall_s:.1f} s; 429s {fill.rate_limited}",
    ]
    ok = _check_created(fill, n, notes) and ratio <= 1.05 and fill.rate_limited == 0
    return Result(name, f"{ratio:.3f}x, {fill.rate_limited} x 429", "<= 1.05x, 0 x 429", ok, notes)


def bucket(quick: bool) -> Result:
    # quick: same shape, a third of the wait (bucket refills 600/min: 200 over capacity = 20 s)
    if quick:
        return budget_fill("budget fill, bucket", 800, 600, mode="bucket", limiter="bucket")
    return budget_fill("budget fill, bucket", 1800, 1200, mode="bucket", limiter="bucket")


def window(quick: bool) -> Result:
    # A window is always 60 s, so quick mode only shrinks the catalog.
    if quick:
        return budget_fill("budget fill, window", 650, 600, mode="window", limiter="window")
    return budget_fill("budget fill, window", 1300, 1200, mode="window", limiter="window")


def latency(quick: bool) -> Result:
    """0.5 s per response: only requests in flight can keep up with the budget's rate."""
    n, per_minute, delay = (120, 120, 0.5) if quick else (240, 240, 0.5)
    fill = first_sync(
        n, writes=per_minute, reads=300, mode="window", limiter="window", latency_s=delay
    )
    budget_min = n * 60.0 / per_minute  # the budget's steady rate; see the note
    elapsed = fill.span_s + delay  # the last write's answer arrives `delay` after admission
    ratio = elapsed / budget_min
    notes = [
        f"{n} creates at {per_minute}/min, +{delay} s per response, max_in_flight 4: "
        f"first write admitted -> last answer {elapsed:.2f} s vs {budget_min:.0f} s at the "
        f"budget's rate ({n}/{per_minute} min); one at a time would need >= {n * delay:.0f} s. "
        f"The sandbox's window alone would admit all {n} at once (its minimum: "
        f"{fill.sandbox_min_s:.0f} s), so the steady rate is the bound used; "
        f"429s {fill.rate_limited}",
    ]
    ok = _check_created(fill, n, notes) and ratio <= 1.10 and fill.rate_limited == 0
    return Result(
        "latency-bound fill",
        f"{ratio:.3f}x, {fill.rate_limited} x 429",
        "<= 1.10x, 0 x 429",
        ok,
        notes,
    )


def requests(quick: bool) -> Result:
    n = 2000 if quick else 10_000
    per_minute = 600_000  # raised far above what one client sends: nothing waits
    fill = first_sync(n, writes=per_minute, reads=per_minute, mode="window", limiter="window")
    reads = fill.stats.requests.get("read", 0)
    writes = fill.stats.requests.get("write", 0)
    allowed_reads = math.ceil(n / 100) + 5
    notes = [
        f"first sync of {n} into an empty sandbox: {writes} writes, {reads} reads "
        f"(the one walk of the empty remote), {fill.wall_s:.1f} s wall = "
        f"{n / fill.wall_s:.0f} creates/s with no budget wait (each create: budget charge, "
        "durable intent, POST, durable confirmation)",
    ]
    ok = _check_created(fill, n, notes) and writes == n and reads <= allowed_reads
    return Result(
        "requests per created product",
        f"{writes / n:.3f} writes, {reads} reads",
        f"1 write each, <= {allowed_reads} reads",
        ok,
        notes,
    )
