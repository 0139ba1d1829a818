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

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import Result, free_port, payload, toml, write_csv
from bench.density import health, mib
from bench.speed import BASELINE_ENV
from skuferry import logs
from skuferry.sandbox import Sandbox, SandboxConfig

SIZES = (100, 300)  # workspaces in one process
QUICK_SIZES = (10, 30)
PRODUCTS = 3_000
SEPARATE = 10  # separate processes measured for real, then scaled to the first size
# issue 41: at 100 no higher than before the pool (290 MiB), at 300 at most 500 MiB; idle
# at most 250 MiB once the first runs are done; every first walk within 3 intervals
PEAK_MIB = {100: 290, 300: 500}
IDLE_MIB = 250
INTERVAL_MIN = 5
LAG_TIMES = 3
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


def _start(
    args: list[str], cwd: Path, *, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "skuferry", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _first_runs(url: str, names: list[str], seen: dict[str, float]) -> bool:
    """Note each workspace's first finished run (unix time) in ``seen``; True once all ran."""
    body = health(url)
    if body is None:
        return False
    found = body.get("workspaces")
    if not isinstance(found, dict):  # one workspace's daemon: its own body
        found = {names[0]: body}
    for name in names:
        member = found.get(name)
        last = member.get("last_run") if isinstance(member, dict) else None
        if isinstance(last, dict) and name not in seen:
            seen[name] = float(last["finished_at"])
    return all(name in seen for name in names)


def _src_env(src: str | None) -> dict[str, str] | None:
    """The environment of a child running the package under ``src`` (None: this tree's)."""
    return None if src is None else {**os.environ, "PYTHONPATH": src}


def _density_side(
    folder: Path, count: int, n: int, *, separate: int, src: str | None = None
) -> dict[str, float]:
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
            extra=f"\n[schedule]\ninterval_minutes = {INTERVAL_MIN}\n",
        )
        write_csv(folder / "catalog.csv", n)
        names = [_name(i) for i in range(count)]
        env = _src_env(src)
        if not separate:
            port = free_port()
            cmd = ["run", "--workspaces", str(workspaces), "--listen", f"127.0.0.1:{port}"]
            procs = [_start(cmd, folder, env=env)]
            urls = [f"http://127.0.0.1:{port}"]
        else:
            procs, urls = [], []
            for name in names[:separate]:
                port = free_port()
                conf = workspaces / f"{name}.toml"
                conf.write_text(
                    conf.read_text() + f'\n[daemon]\nlisten = "127.0.0.1:{port}"\n',
                    encoding="utf-8",
                )
                procs.append(_start(["run", "--config", str(conf)], folder, env=env))
                urls.append(f"http://127.0.0.1:{port}")
        started = time.time()
        try:
            pids = [p.pid for p in procs]
            seen: dict[str, float] = {}
            asked = [0.0]

            def done() -> bool:
                now = time.monotonic()
                if now - asked[0] < 1.0:  # /healthz once a second, RSS every 100 ms
                    return False
                asked[0] = now
                return all(
                    _first_runs(u, names if not separate else [names[k]], seen)
                    for k, u in enumerate(urls)
                )

            peak, took = _wait(done, pids, 3600)
            peak = max(peak, sum(mib(pid, "VmHWM") for pid in pids))
            time.sleep(5)
            idle = sum(mib(pid) for pid in pids)
            time.sleep(25)
            idle_later = sum(mib(pid) for pid in pids)
            return {
                "peak": peak,
                "idle": idle,
                "idle_later": idle_later,
                "s": took,
                "lag": max(seen.values()) - started,
                "remote": sum(len(sandbox.products(name)) for name in names),
            }
        finally:
            _stop(procs)


def density(quick: bool) -> Result:
    """``fleetdensity``: one process at each of ``SIZES``, and one process each at the first."""
    return density_of(QUICK_SIZES if quick else SIZES, 300 if quick else PRODUCTS)


def density_of(sizes: tuple[int, ...], n: int, *, separate: int = SEPARATE) -> Result:
    if not Path("/proc/self/status").exists():
        return Result("fleet density", "needs Linux /proc", "-", None, [])
    baseline = os.environ.get(BASELINE_ENV)
    trees: list[tuple[str, str | None]] = [("this tree", None)]
    if baseline:  # alternated: this tree, the baseline, at each size
        trees.append((f"baseline {baseline}", baseline))
    notes: list[str] = []
    measured: list[str] = []
    ok = True
    with tempfile.TemporaryDirectory(prefix="skuferry-fleet-") as tmp:
        for count in sizes:
            for label, src in trees:
                folder = Path(tmp) / f"one-{count}-{len(notes)}"
                one = _density_side(folder, count, n, separate=0, src=src)
                notes.append(f"{label}: {_one_line(count, n, one)}")
                if src is None:
                    measured.append(
                        f"{count}: peak {one['peak']:.0f}, idle {one['idle_later']:.0f} MiB, "
                        f"walked in {one['lag'] / (INTERVAL_MIN * 60):.2f} x the interval"
                    )
                    ok = ok and _meets(count, one)
        if separate:
            apart = min(separate, sizes[0])
            each = _density_side(Path(tmp) / "each", sizes[0], n, separate=apart)
            scale = sizes[0] / apart
            notes.append(
                f"one process each ({apart} measured at once, x{scale:.0f} = {sizes[0]}): peak "
                f"{each['peak'] * scale:.0f} MiB, idle {each['idle'] * scale:.0f} MiB "
                f"({each['idle'] / apart:.0f} MiB a process idle); their first runs in "
                f"{each['s']:.0f} s"
            )
    targets = ", ".join(f"{c}: peak <= {PEAK_MIB[c]} MiB" for c in sizes if c in PEAK_MIB)
    return Result(
        "fleet density",
        "; ".join(measured),
        f"{targets or 'no peak target'}; idle <= {IDLE_MIB} MiB; walked within "
        f"{LAG_TIMES} x the interval",
        ok,
        notes,
    )


def _one_line(count: int, n: int, one: dict[str, float]) -> str:
    interval_s = INTERVAL_MIN * 60
    return (
        f"{count} workspaces x {n:,} products in one process, first runs adopting by "
        f"walking: peak {one['peak']:.0f} MiB; idle {one['idle']:.0f} MiB 5 s after the last "
        f"first run, {one['idle_later']:.0f} MiB 30 s after; every first run done "
        f"{one['lag']:.0f} s after the start (interval {interval_s} s: "
        f"{one['lag'] / interval_s:.2f} x); {one['remote']:,.0f} products on the remote"
    )


def _meets(count: int, one: dict[str, float]) -> bool:
    return (
        one["peak"] <= PEAK_MIB.get(count, float("inf"))
        and one["idle_later"] <= IDLE_MIB
        and one["lag"] <= LAG_TIMES * INTERVAL_MIN * 60
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


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.fleet --workspaces 300 [--products N] [--baseline SRC]``: the
    density figure at the sizes given (``fleetdensity`` takes 100 and 300)."""
    parser = argparse.ArgumentParser(prog="python -m bench.fleet", description=main.__doc__)
    parser.add_argument("--workspaces", default="100,300", help="sizes, comma-separated")
    parser.add_argument("--products", type=int, default=PRODUCTS)
    parser.add_argument("--separate", type=int, default=0, help="also N processes of one each")
    parser.add_argument("--baseline", metavar="SRC", help="also the package under SRC, alternated")
    args = parser.parse_args(argv)
    if args.baseline:
        os.environ[BASELINE_ENV] = str(Path(args.baseline).absolute())
    logs.configure(level="error")
    sizes = tuple(int(s) for s in args.workspaces.split(",") if s.strip())
    result = density_of(sizes, args.products, separate=args.separate)
    print(f"{result.figure}: {result.measured} [{result.verdict}] (target: {result.target})")
    for note in result.notes:
        print(f"- {note}")
    return 0 if result.ok is not False else 1


if __name__ == "__main__":
    sys.exit(main())
