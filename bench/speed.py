"""Issue 23: the unchanged source, the start, side by side with a run that reads.

- ``unchanged``: a no-op ``skuferry sync --json`` whose source is unchanged (the run
  reads nothing: ``"pull": "unchanged"``) at 1k and 100k products, alternated with the
  same sync told ``--full`` (it reads and plans the whole file, as every run did before),
  5 runs each, medians and the ratio; then one row changed at 100k (5 runs, one PATCH
  each).
- ``startup``: time from ``exec`` to the first useful work of ``skuferry sync`` (the
  ``mirror.opened`` event, read from the child's JSON log), next to a bare interpreter.

Both also time the same tree's full start (``SKUFERRY_QUICK=off``: the config loaded and
validated, the engine's unchanged check), alternated run by run: the quick lane's gain
(service/quick.py), measured side by side.

With ``--baseline SRC`` (``python -m bench --only startup,unchanged --baseline
/tmp/main/src``), both figures also time the package under SRC (the same venv, its
``PYTHONPATH``), alternated with this tree's run by run, on the same files and state.

Each run is a child process, as cron or systemd starts it. Bytecode is compiled first
(``compileall``), as a pip install does: a tree run from source with
PYTHONDONTWRITEBYTECODE set would otherwise compile every module on every start.
"""

from __future__ import annotations

import compileall
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import skuferry
from bench.common import (
    HEADER,
    KEY,
    WORKSPACE,
    Result,
    as_schema_5,
    build_mirror,
    rows,
    settings,
    toml,
)
from bench.local import run_child
from skuferry.sandbox import Sandbox, SandboxConfig
from skuferry.sources.change_token import RACY_S
from skuferry.state.mirror import Mirror

RUNS = 5
_OFF = {**os.environ, "SKUFERRY_QUICK": "off"}  # the full start: the config loaded, the engine
_OFF_NAME = "the same tree's full start (SKUFERRY_QUICK=off)"
BASELINE_ENV = "SKUFERRY_BENCH_BASELINE"  # set by ``python -m bench --baseline SRC``


def _compiled() -> None:
    compileall.compile_dir(str(Path(skuferry.__file__).parent), quiet=1)
    base = os.environ.get(BASELINE_ENV)
    if base:
        compileall.compile_dir(base, quiet=1)


def _baseline_env() -> dict[str, str] | None:
    """The environment of a baseline child: ``PYTHONPATH`` first on the SRC it names."""
    base = os.environ.get(BASELINE_ENV)
    return {**os.environ, "PYTHONPATH": base} if base else None


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _write(path: Path, n: int, *, bump: int | None = None, cents: int = 0) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        out = csv.writer(handle)
        out.writerow(HEADER)
        for i, values in enumerate(rows(n)):
            sku, name, _price, stock = values
            out.writerow((sku, name, f"{900 + cents}.00", stock) if i == bump else values)


def _settled(path: Path) -> None:
    st = path.stat()
    age = time.time() - max(st.st_mtime, st.st_ctime)
    if age < RACY_S:
        time.sleep(RACY_S - age + 0.1)


Sample = tuple[float, float, int, dict[str, Any], float]  # wall, MiB, exit, summary, CPU


def _median(samples: list[Sample], i: int) -> float:
    return float(statistics.median(float(s[i]) for s in samples))  # type: ignore[arg-type]


def unchanged(quick: bool) -> Result:
    _compiled()
    load_before = _load()
    sizes = (1_000, 20_000) if quick else (1_000, 100_000)
    notes: list[str] = []
    measured: list[str] = []
    ok = True
    limits = {"read": 6000, "write": 6000}
    with Sandbox(
        SandboxConfig(
            keys={KEY: WORKSPACE}, key_limits=limits, workspace_limits=limits, updates="patch"
        )
    ) as sandbox:
        for n in sizes:
            with tempfile.TemporaryDirectory(prefix="skuferry-bench-") as tmp:
                folder = Path(tmp)
                catalog = folder / "catalog.csv"
                _write(catalog, n)
                conf = toml(folder, sandbox.url, reads=6000, writes=6000)
                build_mirror(settings(folder, sandbox.url), n)
                mirror = Mirror(folder / "skuferry.db")
                mirror.record_api_contact()  # no auth check in these runs: measured in `noop`
                mirror.close()
                _settled(catalog)
                sync = ["sync", "--config", str(conf), "--json"]
                warm = run_child(sync, folder)  # reads once, stores the record digest
                skips, reads, bases, slow = [], [], [], []
                base_env = _baseline_env()
                base_sync = sync
                if base_env is not None:  # its own copy: a tree before schema 6 refuses ours
                    other = Path(tempfile.mkdtemp(prefix="skuferry-bench-"))
                    shutil.copytree(folder, other, dirs_exist_ok=True)
                    as_schema_5(other / "skuferry.db")
                    base_sync = ["sync", "--config", str(other / "skuferry.toml"), "--json"]
                    _settled(other / "catalog.csv")
                    run_child(base_sync, other, env=base_env)  # its record digest, stored
                for _ in range(RUNS):  # A B A B: the machine's drift hits both alike
                    skips.append(run_child(sync, folder))
                    slow.append(run_child(sync, folder, env=_OFF))
                    if base_env is not None:
                        bases.append(run_child(base_sync, other, env=base_env))
                    reads.append(run_child([*sync, "--full"], folder))
                pulls = {s[3].get("pull") for s in skips}
                counts = {s[3].get("unchanged") for s in skips + reads}
                ratios = [a[0] / b[0] for a, b in zip(skips, reads, strict=True)]
                wall, rss = _median(skips, 0), max(s[1] for s in skips)
                target = 0.3 if n <= 1_000 else 0.4
                ok = ok and pulls == {"unchanged"} and counts == {n} and warm[2] == 0
                ok = ok and wall <= target
                measured.append(f"{n // 1000}k: {wall:.2f} s vs {_median(reads, 0):.2f} s")
                notes.append(
                    f"{n} products, source unchanged: wall median {wall:.2f} s (runs "
                    f"{', '.join(f'{s[0]:.2f}' for s in skips)}), CPU {_median(skips, 4):.2f} s, "
                    f"peak RSS {rss:.0f} MiB, pull {sorted(map(str, pulls))}; the same sync "
                    f"with --full (reads and plans the file): wall {_median(reads, 0):.2f} s, "
                    f"CPU {_median(reads, 4):.2f} s, {max(s[1] for s in reads):.0f} MiB; "
                    f"ratio unchanged/--full median {statistics.median(ratios):.2f} "
                    f"(target {target} s wall)"
                )
                notes.append(_versus(f"{n} products, source unchanged", skips, slow, _OFF_NAME))
                if bases:
                    notes.append(_versus(f"{n} products, source unchanged", skips, bases))
                if n == sizes[-1]:
                    against = (other, base_env) if base_env is not None else None
                    notes.append(_one_row_changed(folder, conf, n, sandbox, against))
                if base_env is not None:
                    shutil.rmtree(other, ignore_errors=True)
    notes.append(f"load average before {load_before}, after {_load()}")
    return Result(
        "no-op, source unchanged (vs --full)",
        "; ".join(measured),
        "1k <= 0.3 s, 100k <= 0.4 s (whole process)",
        ok,
        notes,
    )


def _versus(what: str, ours: list[Sample], bases: list[Sample], name: str = "") -> str:
    ratios = [a[0] / b[0] for a, b in zip(ours, bases, strict=True)]
    name = name or f"the baseline {os.environ.get(BASELINE_ENV)}"
    return (
        f"{what}, this tree vs {name} (alternated): "
        f"wall median {_median(ours, 0):.2f} s vs {_median(bases, 0):.2f} s (baseline runs "
        f"{', '.join(f'{s[0]:.2f}' for s in bases)}), CPU {_median(ours, 4):.2f} s vs "
        f"{_median(bases, 4):.2f} s, peak RSS {max(s[1] for s in ours):.0f} vs "
        f"{max(s[1] for s in bases):.0f} MiB; ratio median {statistics.median(ratios):.2f}; "
        f"pull {sorted({str(s[3].get('pull')) for s in bases})}"
    )


def _one_row_changed(
    folder: Path,
    conf: Path,
    n: int,
    sandbox: Sandbox,
    baseline: tuple[Path, dict[str, str]] | None = None,
) -> str:
    """Sync after one row changed, RUNS times; with ``baseline`` (its folder and
    environment) the baseline tree's runs alternate with these, on its own copy."""
    sync = ["sync", "--config", str(conf), "--json"]
    writes_before = sandbox.stats().requests.get("write", 0)
    samples: list[Sample] = []
    bases: list[Sample] = []
    for run in range(RUNS):
        _write(folder / "catalog.csv", n, bump=n // 2, cents=run)
        samples.append(run_child(sync, folder))
        if baseline is not None:
            other, env = baseline
            _write(other / "catalog.csv", n, bump=n // 2, cents=run)
            base_sync = ["sync", "--config", str(other / "skuferry.toml"), "--json"]
            bases.append(run_child(base_sync, other, env=env))
    updated = [s[3].get("updated") for s in samples]
    writes = sandbox.stats().requests.get("write", 0) - writes_before
    text = (
        f"{n} products, one row changed before each run: wall median {_median(samples, 0):.2f} s "
        f"(runs {', '.join(f'{s[0]:.2f}' for s in samples)}), CPU {_median(samples, 4):.2f} s, "
        f"peak RSS {max(s[1] for s in samples):.0f} MiB; updated per run {updated}, "
        f"writes seen by the sandbox {writes}"
    )
    if bases:
        text += "; " + _versus("one row changed", samples, bases)
        text += f", updated per run {[s[3].get('updated') for s in bases]}"
    return text


def startup(quick: bool) -> Result:
    """Exec to the ``mirror.opened`` event of a no-op ``skuferry sync`` (source unchanged)."""
    del quick
    _compiled()
    load_before = _load()
    with tempfile.TemporaryDirectory(prefix="skuferry-bench-") as tmp:
        folder = Path(tmp)
        n = 1_000
        _write(folder / "catalog.csv", n)
        conf = toml(folder, "http://127.0.0.1:9", reads=300, writes=60)
        build_mirror(settings(folder, "http://127.0.0.1:9"), n)
        mirror = Mirror(folder / "skuferry.db")
        mirror.record_api_contact()
        mirror.close()
        _settled(folder / "catalog.csv")
        args = [sys.executable, "-m", "skuferry", "-vv", "sync", "--config", str(conf), "--json"]
        # stores the record digests
        subprocess.run(args, cwd=folder, capture_output=True, check=False)
        firsts, totals, bare, slow = [], [], [], []
        base_env = _baseline_env()
        base_firsts: list[float] = []
        base_totals: list[float] = []
        for _ in range(RUNS):
            started = time.time()
            done = subprocess.run(args, cwd=folder, capture_output=True, text=True, check=False)
            totals.append(time.time() - started)
            firsts.append(_first_work(done.stderr) - started)
            started = time.time()
            done = subprocess.run(
                args, cwd=folder, env=_OFF, capture_output=True, text=True, check=False
            )
            slow.append(_first_work(done.stderr) - started)
            if base_env is not None:
                started = time.time()
                done = subprocess.run(
                    args, cwd=folder, env=base_env, capture_output=True, text=True, check=False
                )
                base_totals.append(time.time() - started)
                base_firsts.append(_first_work(done.stderr) - started)
            t0 = time.time()
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            bare.append(time.time() - t0)
    first = statistics.median(firsts)
    versus = []
    if base_firsts:
        versus.append(
            f"baseline {os.environ.get(BASELINE_ENV)} (alternated): exec -> mirror.opened "
            f"{', '.join(f'{x:.2f}' for x in base_firsts)} s, median "
            f"{statistics.median(base_firsts):.2f} s (this tree {first:.2f} s); whole process "
            f"median {statistics.median(base_totals):.2f} s "
            f"(this tree {statistics.median(totals):.2f} s)"
        )
    return Result(
        "time to first useful work",
        f"{first:.2f} s (bare interpreter {statistics.median(bare):.2f} s)",
        "<= 0.2 s after exec",
        first <= 0.2,
        [
            f"exec -> mirror.opened of `skuferry sync` (source unchanged, 1k): "
            f"{', '.join(f'{x:.2f}' for x in firsts)} s; whole process median "
            f"{statistics.median(totals):.2f} s; `python -c pass` median "
            f"{statistics.median(bare):.2f} s; load average before {load_before}, after {_load()}",
            f"{_OFF_NAME}, alternated: exec -> mirror.opened "
            f"{', '.join(f'{x:.2f}' for x in slow)} s, median {statistics.median(slow):.2f} s",
            *versus,
        ],
    )


def _first_work(stderr: str) -> float:
    for line in stderr.splitlines():
        if '"mirror.opened"' in line:
            stamp = json.loads(line)["timestamp"].replace("Z", "+00:00")
            return datetime.fromisoformat(stamp).timestamp()
    raise RuntimeError(f"no mirror.opened event in the child's log:\n{stderr[-2000:]}")
