"""``feeddigest`` (issue 38, item 4): what knowing a feed by its content costs a run that reads.

Every run that reads its whole source hashes what it read (``sources.digest``: SHA-256 of
a file's bytes on their way to the reader), so that ``skuferry undo`` can refuse the feed
again even without a change token. A run skipped on an unchanged source reads nothing and
hashes nothing. Three cases over a 200,000-row CSV (50,000 with ``--quick``), each a child
process, this tree alternated run by run with ``--baseline SRC`` (main's ``src/``):

- ``read``: the CSV source's records, every one (the reader alone: the worst ratio);
- ``lines``: the same through the line route (``CsvSource.lines()``, what a plan reads);
- ``api``: an HTTP API's full pull (a tenth as many records, from the stand-in PIM on
  loopback, pages of 1,000): each record hashed in sorted JSON, the client's CPU only;
- ``plan``: ``skuferry plan --json`` against a mirror in step, 1 % of the prices changed:
  the whole run of a full pull but the writes.

Figures: medians of the child's CPU (user + system) and wall time, and their ratio to the
baseline pair by pair.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import (
    Result,
    as_older_schema,
    build_mirror,
    learn_lines,
    settings,
    toml,
    write_csv,
)
from bench.local import run_child
from bench.speed import _baseline_env, _compiled, _load
from skuferry.sandbox.pim import GeneratedCatalog, PimServer

RUNS = 7
_READ = (
    "import json, sys, time\n"
    "from skuferry.sources.csv import CsvSource\n"
    "source = CsvSource(sys.argv[1])\n"
    "started, cpu = time.perf_counter(), time.process_time()\n"
    "items = source.lines() if sys.argv[2] == 'lines' else source.records()\n"
    "n = sum(1 for _ in items)\n"
    "wall, cpu = time.perf_counter() - started, time.process_time() - cpu\n"
    "digest = getattr(source, 'feed_digest', lambda: None)()\n"
    "print(json.dumps({'n': n, 'wall': wall, 'cpu': cpu, 'digest': digest}))\n"
)

_API = (
    "import json, sys, time\n"
    "from skuferry.config.schema import HttpSourceSettings\n"
    "from skuferry.sources.http import HttpSource\n"
    "source = HttpSource(HttpSourceSettings.model_validate({'type': 'http', 'url': sys.argv[1],"
    " 'items_path': 'items', 'pagination': 'page', 'page_size': 1000}))\n"
    "started, cpu = time.perf_counter(), time.process_time()\n"
    "n = sum(1 for _ in source.records())\n"
    "wall, cpu = time.perf_counter() - started, time.process_time() - cpu\n"
    "digest = getattr(source, 'feed_digest', lambda: None)()\n"
    "print(json.dumps({'n': n, 'wall': wall, 'cpu': cpu, 'digest': digest}))\n"
)

Sample = tuple[float, float]  # (wall s, CPU s)


def _read(path: Path | str, how: str, env: dict[str, str] | None) -> tuple[Sample, dict[str, Any]]:
    """The reading alone, timed inside the child (its start and imports left out)."""
    script = _API if how == "api" else _READ
    done = subprocess.run(
        [sys.executable, "-c", script, str(path), how],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return (float(out["wall"]), float(out["cpu"])), out


def _as_schema_9(state: Path) -> None:
    """A state file of this tree as main before ``runs.feed`` (schema 9) opens it."""
    as_older_schema(state, "runs", "feed", 9)


def _line(what: str, ours: list[Sample], bases: list[Sample]) -> str:
    wall, cpu = (statistics.median(s[i] for s in ours) for i in (0, 1))
    text = f"{what}: this tree wall {wall:.3f} s, CPU {cpu:.3f} s"
    if bases:
        b_wall, b_cpu = (statistics.median(s[i] for s in bases) for i in (0, 1))
        cpu_ratio = statistics.median(a[1] / b[1] for a, b in zip(ours, bases, strict=True))
        wall_ratio = statistics.median(a[0] / b[0] for a, b in zip(ours, bases, strict=True))
        text += (
            f"; baseline wall {b_wall:.3f} s, CPU {b_cpu:.3f} s; ratio (pair by pair, median) "
            f"wall {wall_ratio:.3f}, CPU {cpu_ratio:.3f}; CPU {(cpu - b_cpu) * 1000:+.0f} ms"
        )
    runs = ", ".join(f"{s[1]:.2f}" for s in ours)
    base_runs = ", ".join(f"{s[1]:.2f}" for s in bases)
    return text + f" (CPU s, this tree: {runs}" + (f"; baseline: {base_runs})" if bases else ")")


def figure(quick: bool) -> Result:
    _compiled()
    n = 50_000 if quick else 200_000
    load_before = _load()
    base_env = _baseline_env()
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="skuferry-bench-") as tmp:
        folder = Path(tmp) / "this"
        folder.mkdir()
        url = "http://127.0.0.1:9"  # never contacted: a plan makes no request
        conf = toml(folder, url, reads=300, writes=60)
        catalog = write_csv(folder / "catalog.csv", n)
        build_mirror(settings(folder, url), n)
        learn_lines(settings(folder, url), catalog, skip_every=100)
        write_csv(catalog, n, changed_every=100)  # 1 % of the prices changed
        size = catalog.stat().st_size
        started = time.perf_counter()
        floor = hashlib.sha256(catalog.read_bytes()).hexdigest()
        hashing = time.perf_counter() - started
        other = Path(tmp) / "baseline"
        if base_env is not None:
            shutil.copytree(folder, other)
            _as_schema_9(other / "skuferry.db")
        cases: dict[str, tuple[list[Sample], list[Sample]]] = {}
        digests: set[Any] = set()
        for how in ("read", "lines"):
            ours: list[Sample] = []
            bases: list[Sample] = []
            _read(catalog, how, None)  # warm the page cache
            for _ in range(RUNS):
                sample, out = _read(catalog, how, None)
                ours.append(sample)
                digests.add(out["digest"])
                if base_env is not None:
                    bases.append(_read(catalog, how, base_env)[0])
            cases[how] = (ours, bases)
        with PimServer(GeneratedCatalog(n // 10)) as pim:  # the client's CPU, in the child
            url = pim.url("page")
            ours, bases = [], []
            _read(url, "api", None)
            for _ in range(RUNS):
                sample, out = _read(url, "api", None)
                ours.append(sample)
                if base_env is not None:
                    bases.append(_read(url, "api", base_env)[0])
            cases[f"api ({n // 10} records)"] = (ours, bases)
        ours, bases = [], []
        plan = ["plan", "--config", str(conf), "--json"]
        base_plan = ["plan", "--config", str(other / "skuferry.toml"), "--json"]
        planned: set[Any] = set()
        for _ in range(RUNS):
            wall, _rss, code, summary, cpu = run_child(plan, folder)
            assert code == 0, summary
            planned.add(summary.get("updated"))
            ours.append((wall, cpu))
            if base_env is not None:
                b_wall, _rss, b_code, _summary, b_cpu = run_child(base_plan, other, env=base_env)
                assert b_code == 0
                bases.append((b_wall, b_cpu))
        cases["plan"] = (ours, bases)
    notes.append(
        f"{n} rows, {size / 1e6:.1f} MB; SHA-256 of the whole file in one call: "
        f"{hashing * 1000:.0f} ms ({size / 1e6 / hashing:.0f} MB/s); the digest read: "
        f"{sorted(map(str, digests))[0][:20]}... (sha256 {floor[:12]}...); plan: "
        f"{sorted(map(str, planned))} updates; {RUNS} runs each"
        + (" alternated with the baseline" if base_env is not None else " (no --baseline)")
    )
    for how, (ours, bases) in cases.items():
        notes.append(_line(how, ours, bases))
    notes.append(f"load average before {load_before}, after {_load()}")
    read_ours, read_bases = cases["plan"]
    cpu = statistics.median(s[1] for s in read_ours)
    measured = f"plan of {n // 1000}k rows: {cpu:.2f} s CPU"
    if read_bases:
        ratio = statistics.median(a[1] / b[1] for a, b in zip(read_ours, read_bases, strict=True))
        measured += f", {ratio:.3f} x the baseline"
    return Result("feed digest (a full pull)", measured, "small next to the reading", None, notes)
