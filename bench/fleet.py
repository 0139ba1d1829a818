"""Many workspaces in one process (issue 31), side by side with one process each.

**density** (``fleetdensity``): 100 workspaces of 3,000 products each. The sandbox
holds every workspace's products already (its own key each), the mirrors are empty, so
each first run adopts by walking the remote's pages. One ``skuferry run --workspaces
DIR --listen`` serves all of them: its ``VmRSS`` is sampled every 100 ms and its
``VmHWM`` (the kernel's peak) read once ``/healthz`` shows every workspace's first run;
idle is ``VmRSS`` 5 s later. Beside it, in the same run, ``SEPARATE`` workspaces each
in its own ``skuferry run --config`` (the same configs, fresh states, all started at
once): the sum of their peaks and of their idle RSS, scaled to 100 (a hundred
interpreters at once would only measure this machine's two cores).

**concurrency** (``fleetconcurrency``): 20 workspaces of 200 new products each, every
key limited to 120 writes/min by the sandbox and by its own ``[budget]``. One
``skuferry sync --workspaces DIR`` against 20 separate ``skuferry sync --config``
processes started together, each on a fresh sandbox: the wall time until the last
finished, the sandbox's 429s, and every product exactly once on its own workspace.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import Result, free_port, payload, toml, write_csv
from bench.density import health, mib
from skuferry.sandbox import Sandbox, SandboxConfig

MANY = 100
PRODUCTS = 3_000
SEPARATE = 10  # separate processes measured for real, then scaled to MANY
PEAK_MIB, IDLE_MIB = 500, 250
WIDE = {"read": 600_000, "write": 600_000}  # density: memory, not pacing

SHOPS = 20
NEW = 200
WRITES = 120  # per key and minute
TOGETHER_S = 90


def _name(i: int) -> str:
    return f"shop-{i:03d}"


def _key(i: int) -> str:
    return f"bench-key-{i:03d}"


def _configs(folder: Path, url: str, count: int, *, reads: int, writes: int, extra: str) -> Path:
    """``folder/workspaces/<name>.toml``: one catalog for all, a key and a state each."""
    workspaces = folder / "workspaces"
    workspaces.mkdir(parents=True)
    base = toml(folder, url, reads=reads, writes=writes).read_text(encoding="utf-8")
    for i in range(count):
        text = (
            base.replace('api_key = "bench-key"', f'api_key = "{_key(i)}"')
            .replace('path = "catalog.csv"', f'path = "{folder / "catalog.csv"}"')
            .replace('path = "skuferry.db"', f'path = "{folder / "state" / _name(i)}.db"')
        )
        (workspaces / f"{_name(i)}.toml").write_text(text + extra, encoding="utf-8")
    return workspaces


def _sandbox(count: int, limits: dict[str, int]) -> Sandbox:
    return Sandbox(
        SandboxConfig(
            keys={_key(i): _name(i) for i in range(count)},
            key_limits=limits,
            workspace_limits=limits,
            updates="patch",
        )
    )


def _wait(until: Callable[[], bool], pids: list[int], limit_s: float) -> tuple[float, float]:
    """Sample the processes' summed RSS until ``until()``; (peak sampled, seconds)."""
    started = time.monotonic()
    peak = 0.0
    while not until():
        peak = max(peak, sum(mib(pid) for pid in pids))
        if time.monotonic() - started > limit_s:
            raise RuntimeError(f"not done within {limit_s:.0f} s")
        time.sleep(0.1)
    return peak, time.monotonic() - started


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _start(args: list[str], cwd: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "skuferry", *args],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _all_ran(url: str, names: list[str]) -> bool:
    body = health(url)
    if body is None:
        return False
    found = body.get("workspaces")
    if not isinstance(found, dict):  # one workspace's daemon: its own body
        return "last_run" in body
    return all(isinstance(found.get(n), dict) and "last_run" in found[n] for n in names)


def _density_side(folder: Path, count: int, n: int, *, separate: int) -> dict[str, float]:
    """One fleet process over ``count`` workspaces, or ``separate`` processes; MiB and s."""
    with _sandbox(count, WIDE) as sandbox:
        for i in range(count):
            sandbox.seed_products((payload(j) for j in range(n)), workspace=_name(i))
        workspaces = _configs(
            folder,
            sandbox.url,
            count,
            reads=WIDE["read"],
            writes=WIDE["write"],
            extra="\n[schedule]\ninterval_minutes = 600\n",
        )
        write_csv(folder / "catalog.csv", n)
        names = [_name(i) for i in range(count)]
        if not separate:
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            cmd = ["run", "--workspaces", str(workspaces), "--listen", f"127.0.0.1:{port}"]
            procs = [_start(cmd, folder)]
            urls = [url]
        else:
            procs, urls = [], []
            for name in names[:separate]:
                port = free_port()
                conf = workspaces / f"{name}.toml"
                conf.write_text(
                    conf.read_text() + f'\n[daemon]\nlisten = "127.0.0.1:{port}"\n',
                    encoding="utf-8",
                )
                procs.append(_start(["run", "--config", str(conf)], folder))
                urls.append(f"http://127.0.0.1:{port}")
        try:
            pids = [p.pid for p in procs]
            peak, took = _wait(
                lambda: all(
                    _all_ran(u, names if not separate else [names[k]]) for k, u in enumerate(urls)
                ),
                pids,
                1800,
            )
            peak = max(peak, sum(mib(pid, "VmHWM") for pid in pids))
            time.sleep(5)
            idle = sum(mib(pid) for pid in pids)
            adopted = sum(len(sandbox.products(name)) for name in names)
            return {"peak": peak, "idle": idle, "s": took, "remote": adopted}
        finally:
            _stop(procs)


def density(quick: bool) -> Result:
    if not Path("/proc/self/status").exists():
        return Result("fleet density", "needs Linux /proc", "-", None, [])
    count, n = (10, 300) if quick else (MANY, PRODUCTS)
    separate = min(SEPARATE, count)
    with tempfile.TemporaryDirectory(prefix="skuferry-fleet-") as tmp:
        one = _density_side(Path(tmp) / "one", count, n, separate=0)
        each = _density_side(Path(tmp) / "each", count, n, separate=separate)
    scale = count / separate
    ok = one["peak"] <= PEAK_MIB and one["idle"] <= IDLE_MIB
    notes = [
        f"{count} workspaces x {n:,} products, first runs adopting by walking: one process "
        f"peak {one['peak']:.0f} MiB, idle {one['idle']:.0f} MiB, all first runs in "
        f"{one['s']:.0f} s",
        f"one process each ({separate} measured at once, x{scale:.0f}): peak "
        f"{each['peak'] * scale:.0f} MiB, idle {each['idle'] * scale:.0f} MiB "
        f"({each['idle'] / separate:.0f} MiB a process idle); their first runs in "
        f"{each['s']:.0f} s",
    ]
    return Result(
        "fleet density",
        f"{count} workspaces in one process: peak {one['peak']:.0f} MiB, idle "
        f"{one['idle']:.0f} MiB (one process each: {each['peak'] * scale:.0f} / "
        f"{each['idle'] * scale:.0f} MiB)",
        f"peak <= {PEAK_MIB} MiB, idle <= {IDLE_MIB} MiB",
        ok,
        notes,
    )


def _concurrency_side(folder: Path, count: int, n: int, *, separate: bool) -> dict[str, float]:
    limits = {"read": 6_000, "write": WRITES}
    with _sandbox(count, limits) as sandbox:
        workspaces = _configs(folder, sandbox.url, count, reads=6_000, writes=WRITES, extra="")
        write_csv(folder / "catalog.csv", n)
        started = time.monotonic()
        if separate:
            procs = [
                _start(["sync", "--config", str(workspaces / f"{_name(i)}.toml")], folder)
                for i in range(count)
            ]
            codes = [p.wait() for p in procs]
        else:
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "skuferry",
                    "sync",
                    "--workspaces",
                    str(workspaces),
                    "--json",
                ],
                cwd=folder,
                capture_output=True,
                text=True,
                check=False,
            )
            report = json.loads(done.stdout.strip().splitlines()[-1])["workspaces"]
            codes = [report[_name(i)]["exit_code"] for i in range(count)]
        took = time.monotonic() - started
        stats = sandbox.stats()
        exact = all(
            stats.products.get(_name(i), 0) == n and not stats.duplicates.get(_name(i))
            for i in range(count)
        )
        return {
            "s": took,
            "429": sum(stats.rate_limited.values()),
            "exact": float(exact),
            "failed": float(sum(1 for c in codes if c != 0)),
        }


def concurrency(quick: bool) -> Result:
    count, n = (4, 40) if quick else (SHOPS, NEW)
    with tempfile.TemporaryDirectory(prefix="skuferry-fleet-") as tmp:
        one = _concurrency_side(Path(tmp) / "one", count, n, separate=False)
        each = _concurrency_side(Path(tmp) / "each", count, n, separate=True)
    ok = one["s"] <= TOGETHER_S and one["429"] == 0 and one["exact"] == 1 and not one["failed"]
    sequential = count * max(60.0, (n - WRITES) / WRITES * 60)
    notes = [
        f"{count} workspaces x {n} new products at {WRITES} writes/min a key: one process "
        f"{one['s']:.0f} s, {one['429']:.0f} x 429, each product once: "
        f"{bool(one['exact'])}, failed workspaces {one['failed']:.0f}",
        f"{count} separate processes: {each['s']:.0f} s, {each['429']:.0f} x 429, each once: "
        f"{bool(each['exact'])}; one after another the budgets alone would take "
        f"~{sequential:.0f} s",
    ]
    return Result(
        "fleet concurrency",
        f"{count} x {n} in {one['s']:.0f} s, {one['429']:.0f} x 429 (separate: {each['s']:.0f} s)",
        f"<= {TOGETHER_S} s, 0 x 429, each once",
        ok,
        notes,
    )
