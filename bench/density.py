"""How many workspaces fit on a node: the daemon's resident memory, idle and during a run.

Each case starts ``skuferry run`` as a child process (as the container's entrypoint
would), with ``[daemon] listen`` on a free loopback port, against the local sandbox
seeded with the catalog and a mirror already in step (``build_mirror``). The schedule
is an interval of 20 s with ``run_at_start = false``, so the daemon first sits idle:

1. **idle**: ``VmRSS`` from ``/proc/PID/status`` once ``/healthz`` answers and 3 s
   have passed with no run (the daemon as it waits for its first run);
2. **run**: the first scheduled run, with every 100th row's price changed (1 %: real
   PATCHes, the plan over the whole catalog); ``VmRSS`` is sampled every 50 ms and
   ``VmHWM`` (the kernel's peak) read once ``/healthz`` reports the run;
3. **idle after**: ``VmRSS`` 3 s after the run ended (what a daemon between runs
   holds, imports and freed-but-kept heap included).

The cases: 3,000 products with a first sync (3,000 creates into an empty remote),
3,000 with 1 % changed, 100,000 with 1 % changed; then the first and the last again
with ``PYTHONMALLOC=malloc`` (the daemon trims glibc's heap after each run,
``release_memory``; with that setting the trim also reaches Python's
small objects). A node's share is extrapolated from the default allocator's figures:
workspaces per 4 GiB node = (4 GiB - reserve) / peak, with 1 GiB reserved for the
kubelet, the runtime and system daemons.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from bench.common import (
    KEY,
    WORKSPACE,
    Result,
    build_mirror,
    free_port,
    payload,
    settings,
    toml,
    write_csv,
)
from skuferry.sandbox import Sandbox, SandboxConfig

NODE_MIB = 4096
RESERVED_MIB = 1024  # kubelet, container runtime, system daemons, eviction threshold
LIMITS = {"read": 600_000, "write": 600_000}  # no budget wait: memory, not pacing


@dataclass(frozen=True)
class Case:
    name: str
    products: int
    first_sync: bool  # an empty remote and mirror: every product created
    malloc: bool = False  # PYTHONMALLOC=malloc: every allocation glibc's, so the trim reaches it


@dataclass(frozen=True)
class Figures:
    idle_mib: float
    run_peak_mib: float
    idle_after_mib: float
    run_s: float
    exit_code: int | None


def status_kib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return float(line.split()[1])
    raise LookupError(field)


def mib(pid: int, field: str = "VmRSS") -> float:
    return status_kib(pid, field) / 1024


def health(url: str) -> dict[str, object] | None:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:  # noqa: S310 - loopback
            body: dict[str, object] = json.load(response)
            return body
    except urllib.error.HTTPError as exc:  # 503: answered all the same
        failing: dict[str, object] = json.load(exc)
        return failing
    except OSError:
        return None


def measure(case: Case, quick: bool) -> Figures:
    n = case.products // 10 if quick else case.products
    with tempfile.TemporaryDirectory(prefix="skuferry-bench-") as tmp:
        folder = Path(tmp)
        limits = dict(LIMITS)
        with Sandbox(
            SandboxConfig(
                keys={KEY: WORKSPACE},
                key_limits=limits,
                workspace_limits=limits,
                updates="patch",  # the spec's API answers 405; a CMS that takes PATCH
            )
        ) as sandbox:
            conf = toml(folder, sandbox.url, reads=LIMITS["read"], writes=LIMITS["write"])
            if case.first_sync:
                write_csv(folder / "catalog.csv", n)
            else:
                sandbox.seed_products((payload(i) for i in range(n)), workspace=WORKSPACE)
                build_mirror(settings(folder, sandbox.url), n)
                write_csv(folder / "catalog.csv", n, changed_every=100)
            port = free_port()
            conf.write_text(
                conf.read_text(encoding="utf-8")
                + "[schedule]\ninterval_minutes = 0.333\nrun_at_start = false\n\n"
                f'[daemon]\nlisten = "127.0.0.1:{port}"\n',
                encoding="utf-8",
            )
            env = {k: v for k, v in os.environ.items() if k != "PYTHONMALLOC"}
            if case.malloc:
                env["PYTHONMALLOC"] = "malloc"
            return _observe(conf, folder, f"http://127.0.0.1:{port}", env)


def _observe(conf: Path, folder: Path, url: str, env: dict[str, str]) -> Figures:
    proc = subprocess.Popen(
        [sys.executable, "-m", "skuferry", "run", "--config", str(conf)],
        cwd=folder,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while health(url) is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the daemon did not start (exit {proc.poll()})")
            time.sleep(0.1)
        time.sleep(3)
        idle = mib(proc.pid)
        peak_sampled = idle
        started = None
        deadline = time.monotonic() + 900
        body: dict[str, object] | None = None
        while time.monotonic() < deadline:
            rss = mib(proc.pid)
            if rss > idle + 1 and started is None:
                started = time.monotonic()
            peak_sampled = max(peak_sampled, rss)
            body = health(url)
            if body is not None and "last_run" in body:
                break
            time.sleep(0.05)
        else:
            raise RuntimeError("no run finished within 15 minutes")
        run_s = time.monotonic() - (started or time.monotonic())
        peak = max(peak_sampled, mib(proc.pid, "VmHWM"))
        time.sleep(3)
        after = mib(proc.pid)
        last = body.get("last_run") if body else None
        code = last.get("exit_code") if isinstance(last, dict) else None
        return Figures(idle, peak, after, run_s, code if isinstance(code, int) else None)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


CASES = (
    Case("3,000 products, first sync", 3_000, first_sync=True),
    Case("3,000 products, 1 % changed", 3_000, first_sync=False),
    Case("100,000 products, 1 % changed", 100_000, first_sync=False),
    Case("3,000 products, first sync, PYTHONMALLOC=malloc", 3_000, True, malloc=True),
    Case("100,000 products, 1 % changed, PYTHONMALLOC=malloc", 100_000, False, malloc=True),
)


def density(quick: bool) -> Result:
    if not Path("/proc/self/status").exists():
        return Result("daemon RSS and density", "needs Linux /proc", "-", None, [])
    measured = [(case, measure(case, quick)) for case in CASES]
    notes = []
    for case, f in measured:
        notes.append(
            f"{case.name}{' (quick: a tenth)' if quick else ''}: idle {f.idle_mib:.1f} MiB, "
            f"peak during the run {f.run_peak_mib:.1f} MiB (run ~{f.run_s:.1f} s, exit "
            f"{f.exit_code}), idle after the run {f.idle_after_mib:.1f} MiB"
        )
    default = [(c, f) for c, f in measured if not c.malloc]  # Python's own allocator
    usable = NODE_MIB - RESERVED_MIB
    fits = {}
    for size in (3_000, 100_000):
        between = max(f.idle_after_mib for c, f in default if c.products == size)
        peak = max(f.run_peak_mib for c, f in default if c.products == size)
        fits[size] = (usable // peak, usable // between)
        notes.append(
            f"a 4 GiB node, {RESERVED_MIB} MiB reserved, workspaces of {size:,} products: "
            f"{usable // peak:.0f} if every one is at its peak ({peak:.0f} MiB) at once, "
            f"{usable // between:.0f} between runs ({between:.0f} MiB each)"
        )
    return Result(
        "daemon RSS and density",
        f"3k: {fits[3_000][0]:.0f}-{fits[3_000][1]:.0f}, 100k: {fits[100_000][0]:.0f}-"
        f"{fits[100_000][1]:.0f} workspaces per 4 GiB node (peak-between runs)",
        "figures (issue 23, no target)",
        None,
        notes,
    )
