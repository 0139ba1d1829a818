"""Issue 38: what the history of writes costs a run, side by side with it off.

Each write records its history row in its journal's transactions (``state.history``):
one more INSERT in the transaction committed before the request, one more UPDATE in the
one that commits its outcome. Measured end to end against the sandbox over loopback,
its limits raised far above what one client sends (nothing waits for the budget), so
what is left is skuferry's own time per write:

- a first sync of ``n`` products into an empty sandbox (``n`` creates);
- then a 1 % change (every hundredth price: ``n / 100`` updates).

``[state] history_days = 30`` (on, the default) and ``0`` (off) alternate run by run,
``rounds`` times each, in fresh folders; the figures are medians, their ratio, and the
state file's size after the two runs. Informational: the machine is shared, so only the
side-by-side ratio means something.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from bench.common import KEY, WORKSPACE, Result, settings, write_csv
from skuferry.sandbox import Sandbox, SandboxConfig
from skuferry.sync.engine import run_once

FAST = 6_000_000  # per minute: far above what one client sends


Sample = tuple[float, float, int, float, float]  # wall s first, 1 %; bytes; CPU s first, 1 %


def _pair(n: int, *, history_days: int) -> Sample:
    """(first sync s, 1 % change s, state file bytes, and the two runs' CPU s) of one fresh
    folder. CPU: this process's (the sandbox's threads too, the same either way), which a
    busy box's fsync waits and neighbours disturb less than wall time."""
    with tempfile.TemporaryDirectory(prefix="skuferry-bench-") as tmp:
        folder = Path(tmp)
        write_csv(folder / "catalog.csv", n)
        config = SandboxConfig(
            keys={KEY: WORKSPACE},
            key_limits={"read": FAST, "write": FAST},
            workspace_limits={"read": FAST, "write": FAST},
            updates="both",
        )
        with Sandbox(config) as sandbox:
            base = settings(folder, sandbox.url, reads=FAST, writes=FAST)
            conf = base.model_copy(
                update={"state": base.state.model_copy(update={"history_days": history_days})}
            )
            started, cpu = time.perf_counter(), time.process_time()
            first = run_once(conf)
            first_s, first_cpu = time.perf_counter() - started, time.process_time() - cpu
            assert first.created == n, first.as_json()
            write_csv(folder / "catalog.csv", n, changed_every=100)
            started, cpu = time.perf_counter(), time.process_time()
            change = run_once(conf)
            change_s, change_cpu = time.perf_counter() - started, time.process_time() - cpu
            assert change.updated == (n + 99) // 100, change.as_json()
        size = sum(p.stat().st_size for p in folder.glob("skuferry.db*") if p.is_file())
        return first_s, change_s, size, first_cpu, change_cpu


def figure(quick: bool) -> Result:
    n, rounds = (5_000, 3) if quick else (20_000, 3)
    on: list[Sample] = []
    off: list[Sample] = []
    for i in range(rounds):  # alternate, and alternate which goes first
        order = [(on, 30), (off, 0)] if i % 2 == 0 else [(off, 0), (on, 30)]
        for samples, days in order:
            samples.append(_pair(n, history_days=days))

    def median(samples: list[Sample], at: int) -> float:
        return statistics.median(s[at] for s in samples)

    def pair(at: int, unit: str, digits: int) -> str:
        a, b = median(on, at), median(off, at)
        return f"{a:.{digits}f} {unit} with / {b:.{digits}f} {unit} without ({a / b:.3f})"

    measured = (
        f"first {n:,}: wall {pair(0, 's', 1)}, CPU {pair(3, 's', 1)}; 1 %: wall "
        f"{pair(1, 's', 2)}, CPU {pair(4, 's', 2)}; state file {median(on, 2) / 1e6:.1f} MB "
        f"/ {median(off, 2) / 1e6:.1f} MB"
    )
    shown = [[tuple(round(x, 2) for x in sample) for sample in s] for s in (on, off)]
    notes = [
        f"{rounds} rounds, history on and off alternated; medians. Samples (first s, 1 % s, "
        f"bytes, first CPU s, 1 % CPU s): with {shown[0]}, without {shown[1]}"
    ]
    return Result("history cost", measured, "ratio ~1 (informational)", None, notes)


def _journal(n: int, *, keep: bool) -> float:
    """CPU seconds for ``n`` creates and ``n`` updates through the journal alone (no HTTP): each
    an intent or update journal committed, then its outcome, as the writer commits them."""
    from skuferry.models import Product
    from skuferry.state.mirror import Mirror

    with tempfile.TemporaryDirectory(prefix="skuferry-bench-") as tmp:
        mirror = Mirror(Path(tmp) / "skuferry.db")
        try:
            mirror.keep_history = keep
            mirror.start_run()
            products = [
                Product(f"SKU-{i:07d}", {"sku": f"SKU-{i:07d}", "price": i}, f"d{i}", line=i + 2)
                for i in range(n)
            ]
            started = time.process_time()
            for p in products:
                mirror.open_intent(p, run_id=mirror.run_id)
                mirror.record_created(p, f"r{p.line}")
            for p in products:
                changed = Product(p.key, {**p.payload, "price": -1}, p.digest + "x", line=p.line)
                mirror.record_update_sent(p.key, ["price"], sending={"price": -1} if keep else None)
                mirror.record_updated(changed, f"r{p.line}", sent=changed.payload)
            return time.process_time() - started
        finally:
            mirror.close()


def journal(quick: bool) -> Result:
    """The journal's own cost per write, history on and off, alternated (no HTTP, no
    budget: what the history adds to each of a write's two commits)."""
    n, rounds = (1_000, 4) if quick else (3_000, 6)
    on: list[float] = []
    off: list[float] = []
    for i in range(rounds):
        for keep in (True, False) if i % 2 == 0 else (False, True):
            (on if keep else off).append(_journal(n, keep=keep))
    with_ms = statistics.median(on) / (2 * n) * 1000
    without_ms = statistics.median(off) / (2 * n) * 1000
    measured = (
        f"CPU {with_ms:.3f} ms with / {without_ms:.3f} ms without per write "
        f"({statistics.median(on) / statistics.median(off):.3f}), two commits each"
    )
    notes = [
        f"{n} creates then {n} updates through the mirror's journal (synchronous=FULL), "
        f"{rounds} rounds alternated; medians of CPU time (fsync waits excluded: on a busy "
        f"box they swamp the rest). Samples s: with {[round(x, 2) for x in on]}, "
        f"without {[round(x, 2) for x in off]}"
    ]
    return Result("history cost, journal", measured, "ratio ~1 (informational)", None, notes)
