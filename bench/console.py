"""What the operator's page costs (issue 32): render time and the daemon's memory.
With ``--only consolefleet`` (issue 40): the front page of a fleet of 100 workspaces.

1. **render**: a state file with 10,000 refused products and 30 runs; the workspace page
   rendered in this process through the page's WSGI routes (the state read read-only,
   the template, the chart), the median of several renders: the first page of the list,
   a filtered page, and the front page.
2. **rss**: ``skuferry run`` as a child process against the sandbox, whose source refuses
   10,000 rows (a price the mapping cannot read) beside 500 good ones. ``VmRSS`` idle
   after its first run, then after serving the front page and 20 workspace pages
   (plain, filtered, paged), measured 3 s after the last answer as the daemon sits.
3. **fleet front page**: 100 workspaces, each with its own state file (30 runs, 50
   refused products, a budget ledger), in every state the page tells apart (failing,
   stale, running, new, ok); the front page rendered in-process, sorted worst first,
   with its totals; also filtered by state and by name. Median of 7 renders.
"""

from __future__ import annotations

import csv
import functools
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from bench.common import HEADER, KEY, WORKSPACE, Result, free_port, row, settings, toml
from bench.density import health, mib
from skuferry.config.schema import Settings
from skuferry.service.console.app import Console
from skuferry.service.console.auth import Gate
from skuferry.service.console.workspace import Workspace
from skuferry.service.http_app import Request, Router
from skuferry.state.mirror import Mirror

REFUSED = 10_000
GOOD = 500
LIMITS = {"read": 600_000, "write": 600_000}


class Shop:
    """A workspace view over settings only (the page's ``Workspace``; no daemon here)."""

    board: Any = None

    def __init__(self, settings: Settings, name: str = "shop") -> None:
        self.settings = settings
        self.name = name

    def next_run(self) -> str | None:
        return None

    def waiting(self) -> int:
        return 0

    def degraded(self) -> None:
        return None

    def waiting_for_slot_s(self) -> float | None:
        return None

    def run_now(self) -> None:
        raise AssertionError("the bench only reads")

    def retry(self, keys: Sequence[str]) -> None:
        raise AssertionError("the bench only reads")

    def undo(self, run: int) -> None:
        raise AssertionError("the bench only reads")

    def undo_problem(self, run: int) -> str | None:
        return None


def _seed(path: Path, refused: int, runs: int = 30) -> None:
    mirror = Mirror(path)
    try:
        for i in range(runs):
            run = mirror.start_run()
            summary: dict[str, Any] = {"created": i, "updated": 3 * i, "unchanged": 50_000}
            summary |= {"rejected": refused}
            summary |= {"failed": 0, "requests": {"write": 4 * i}, "duration_s": 20.0 + i}
            mirror.finish_run(run, status="partial", exit_code=1, summary=summary)
        letters = (
            (f"SKU-{i:07d}", "map", f"at 'price': '{i},50' is not a decimal number", i + 2)
            for i in range(refused)
        )
        mirror.note_refusals(letters, source="catalog.csv", whole=True)
    finally:
        mirror.close()


FLEET = 100
FLEET_STATES = ("failing", "stale", "running", "new", "ok", "ok", "ok", "ok", "ok", "ok")


def fleet(folder: Path, n: int = FLEET, *, now: float | None = None) -> list[Workspace]:
    """``n`` workspaces under ``folder`` (``shop-000``...), in the states of
    ``FLEET_STATES`` in turn: each a state file with 30 runs (the last as its state asks),
    50 refused products and a few writes in its budget ledger; ``new`` ones have none."""
    from skuferry.config.keys import fingerprint
    from skuferry.remote.budget import Budget
    from skuferry.state.budgetbook import BudgetBook
    from skuferry.state.schema import open_state

    now = time.time() if now is None else now
    shops: list[Workspace] = []
    for i in range(n):
        state = FLEET_STATES[i % len(FLEET_STATES)]
        name = f"shop-{i:03d}"
        home = folder / name
        home.mkdir(parents=True, exist_ok=True)
        s = settings(home, "http://127.0.0.1:9")
        shops.append(Shop(s, name))
        if state == "new":
            continue
        age = 3 * 86400.0 if state == "stale" else 0.0
        clock = _Clock(now - age - 30 * 960.0)  # 30 runs a quarter-hour apart, each < 60 s
        mirror = Mirror(s.state.path, clock=clock)
        try:
            for r in range(30):
                clock.t += 900.0
                run = mirror.start_run()
                clock.t += 20.0 + r
                if state == "running" and r == 29:
                    break
                last = r == 29
                failed = state == "failing" and last
                summary: dict[str, Any] = {"created": r % 7, "updated": 3 * r, "rejected": 50}
                summary |= {"unchanged": 5000}
                summary |= {"failed": 0, "requests": {"write": 4 * r}, "duration_s": 20.0 + r}
                if failed:
                    summary |= {"error": "cannot reach the API (ConnectError)"}
                mirror.finish_run(
                    run,
                    status="error" if failed else "partial",
                    exit_code=3 if failed else 1,
                    summary=summary,
                )
            letters = (
                (f"{name}-SKU-{j:05d}", "map", f"at 'price': '{j},50' is not a decimal", j + 2)
                for j in range(50)
            )
            mirror.note_refusals(letters, source="catalog.csv", whole=True)
        finally:
            mirror.close()
        keys = [fingerprint(k) for k in s.api_keys]
        book = BudgetBook(functools.partial(open_state, s.state.path))
        with Budget.from_settings(s.budget, book, keys=keys) as budget:
            for _ in range(i % 13):
                budget.acquire("write")
    return shops


class _Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def fleet_front(quick: bool) -> Result:
    n = FLEET // 4 if quick else FLEET
    with tempfile.TemporaryDirectory(prefix="skuferry-bench-") as tmp:
        shops = fleet(Path(tmp), n)
        router = Console(lambda: shops, Gate(None)).mount(Router())
        front = _median_ms(router, "/")
        failing = _median_ms(router, "/", "state=failing")
        named = _median_ms(router, "/", "q=shop-04")
    return Result(
        f"console front page, {n} workspaces",
        f"{front:.0f} ms (state=failing {failing:.0f} ms, q=shop-04 {named:.0f} ms)",
        "< 500 ms",
        front < 500,
        [
            "median of 7 renders in-process: one read-only state file and budget ledger "
            "per workspace, sorted worst first, totals"
        ],
    )


def _median_ms(router: Router, path: str, query: str = "", times: int = 7) -> float:
    took = []
    for _ in range(times):
        started = time.perf_counter()
        answer = router.answer(Request("GET", path, query, {}, b""))
        took.append(time.perf_counter() - started)
        assert answer.status == 200, answer.status
    return 1000 * statistics.median(took)


def render(quick: bool) -> Result:
    refused = REFUSED // 10 if quick else REFUSED
    with tempfile.TemporaryDirectory(prefix="skuferry-bench-") as tmp:
        folder = Path(tmp)
        s = settings(folder, "http://127.0.0.1:9")
        s = s.model_copy(update={"state": s.state.model_copy(update={"path": folder / "s.db"})})
        _seed(s.state.path, refused)
        router = Console(lambda: [Shop(s)], Gate(None)).mount(Router())
        page = _median_ms(router, "/workspaces/shop")
        filtered = _median_ms(router, "/workspaces/shop", "q=SKU-00012&stage=map")
        last = _median_ms(router, "/workspaces/shop", f"offset={refused - 200}")
        front = _median_ms(router, "/")
    return Result(
        f"console page, {refused:,} refused products",
        f"{page:.0f} ms (filtered {filtered:.0f} ms, last page {last:.0f} ms, "
        f"front {front:.0f} ms)",
        "< 500 ms",
        page < 500,
        ["median of 7 renders in-process: state read read-only, 200 rows, chart of 30 runs"],
    )


def _catalog(path: Path, good: int, refused: int) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow(HEADER)
        for i in range(good + refused):
            sku, name, price, stock = row(i)
            out.writerow((sku, name, price if i < good else price.replace(".", ","), stock))


def rss(quick: bool) -> Result:
    from skuferry.sandbox import Sandbox, SandboxConfig

    if not Path("/proc/self/status").exists():
        return Result("console: daemon RSS", "needs Linux /proc", "-", None, [])
    refused = REFUSED // 10 if quick else REFUSED
    with tempfile.TemporaryDirectory(prefix="skuferry-bench-") as tmp:
        folder = Path(tmp)
        config = SandboxConfig(
            keys={KEY: WORKSPACE}, key_limits=LIMITS, workspace_limits=LIMITS, updates="patch"
        )
        with Sandbox(config) as sandbox:
            conf = toml(folder, sandbox.url, reads=LIMITS["read"], writes=LIMITS["write"])
            _catalog(folder / "catalog.csv", GOOD, refused)
            port = free_port()
            conf.write_text(
                conf.read_text(encoding="utf-8")
                + "[schedule]\ninterval_minutes = 600\nrun_at_start = true\n\n"
                f'[daemon]\nlisten = "127.0.0.1:{port}"\n',
                encoding="utf-8",
            )
            url = f"http://127.0.0.1:{port}"
            before, after, page_ms = _observe(conf, folder, url)
    return Result(
        f"console: daemon RSS, {refused:,} refused",
        f"{before:.1f} -> {after:.1f} MiB (+{after - before:.1f}); page over HTTP {page_ms:.0f} ms",
        "info",
        None,
        ["idle after the first run, then 3 s after 1 front page and 20 workspace pages"],
    )


def _observe(conf: Path, folder: Path, url: str) -> tuple[float, float, float]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONMALLOC"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "skuferry", "run", "--config", str(conf)],
        cwd=folder,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 300
        while True:
            body = health(url)
            if body is not None and "last_run" in body:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the daemon's first run did not finish (exit {proc.poll()})")
            time.sleep(0.1)
        time.sleep(3)
        before = mib(proc.pid)
        took = []
        with httpx.Client(base_url=url, timeout=60) as client:
            assert client.get("/").status_code == 200
            for i in range(20):
                query = ("", "q=SKU-00012", f"offset={200 * i}", "stage=map")[i % 4]
                started = time.perf_counter()
                answer = client.get(f"/workspaces/{conf.stem}?{query}")
                took.append(time.perf_counter() - started)
                assert answer.status_code == 200, answer.status_code
        time.sleep(3)
        return before, mib(proc.pid), 1000 * statistics.median(took)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def figure(quick: bool) -> Result:
    """Both figures as one row of the bench table."""
    a, b = render(quick), rss(quick)
    return Result(
        "console page (issue 32)",
        f"{a.measured}; {b.measured}",
        a.target,
        a.ok,
        [*a.notes, *b.notes],
    )
