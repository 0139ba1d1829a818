"""An urgent change never waits (issue 33): a hook, or a new export, during a long backlog.

    python -m bench.urgent --baseline /work/main/src      # every case, this tree and main
    python -m bench --only urgent --baseline /work/main/src

Two cases, each with the defaults a new user has (the daemon as ``skuferry run``
builds it, in a child process: ``--worker``):

``hook``
    300 products on the CMS; every description changes (a PIM mass edit) and the
    daemon drains them at 120 writes a minute. 20 s in, the stock of 10 products
    (late in the backlog's order) changes and a signed ``POST /hooks/sync`` names
    them. Under ``limiter = "window"`` (against a server counting per minute, and
    one counting with a token bucket) and ``limiter = "bucket"`` (a bucket server).
``export``
    2,000 description updates at 180 writes a minute, ``[schedule] watch`` on; 30 s
    in, the export is replaced with 10 changed prices. Seconds from the replace
    (the watch's 5 s settle time included).

``plain`` (issue 41)
    No urgent key at all: 300 creates at 100 writes a minute, a one-shot
    ``skuferry sync`` (no hooks, no watch) into an empty sandbox counting fixed
    windows. The room kept for the urgent must not cost it a window: its span against
    three windows (the bound), with the default ``urgent_share``.

Measured from the sandbox: seconds until each change is on the CMS (polled every
0.2 s; p50, p95, max), the backlog's span from its first write to its last
against its budget bound (the shortest span the configured budget allows for
that many writes from a fresh start), 429s, and requests sent before a
``Retry-After`` had passed. Each variant runs in its own process, this tree and
the baseline (``--baseline SRC``: another checkout's ``src``) side by side, all
at once (they spend minutes waiting for budget, not CPU). A benchmark, not a
test: the export case takes 12 minutes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import Result, free_port, replace_csv

KEY = "bench-key"
WORKSPACE = "bench"
SECRET = b"bench-hook-secret"
FAST = 60_000
HEADER = ("SKU", "Name", "Description", "Price", "Stock")
WINDOW_S, SKEW_S, MARGIN = 60.0, 0.5, 0.01  # the budget's defaults
HOOK_P95_S, EXPORT_P95_S, THROUGHPUT = 5.0, 10.0, 1.05  # the targets

CONFIG = """\
[api]
base_url = "{url}"
api_key = "{key}"
update_method = "patch"

[source]
type = "csv"
path = "catalog.csv"

[mapping]
key = "sku"
urgent = ["price", "stock"]

[mapping.fields]
sku = "SKU"
name = "Name"
description = "Description"
price = {{ column = "Price", type = "decimal" }}
stock = {{ column = "Stock", type = "integer" }}

[budget]
write_per_minute = {writes}
workspace_write_per_minute = {writes}
read_per_minute = {reads}
{limiter}
[schedule]
interval_minutes = 600
{watch}
[safety]
max_change_ratio = 1.0
{daemon}
[state]
path = "state.db"
"""


@dataclass(frozen=True)
class Case:
    name: str
    products: int
    per_minute: int
    at_s: float
    changes: int
    limiter: str  # the client's
    server: str  # how the sandbox counts: "window" or "bucket"

    @property
    def label(self) -> str:
        return f"{self.name}, {self.limiter} limiter, {self.server} server"


def cases(quick: bool) -> list[Case]:
    scale = 4 if quick else 1
    return [
        Case("hook", 300 // scale, 120, 20.0, 10, "window", "window"),
        Case("hook", 300 // scale, 120, 20.0, 10, "window", "bucket"),
        Case("hook", 300 // scale, 120, 20.0, 10, "bucket", "bucket"),
        Case("export", 2000 // scale, 180, 30.0, 10, "window", "window"),
        Case("plain", 300 // scale, 100, 0.0, 0, "window", "window"),
    ]


# -- the data -------------------------------------------------------------------------


def _rows(
    n: int, *, text: str, changed: dict[int, int] | None = None, field: str = "Stock"
) -> list[dict[str, str]]:
    changed = changed or {}
    out = []
    for i in range(1, n + 1):
        row = {
            "SKU": f"B-{i:05d}",
            "Name": f"Bench product {i}",
            "Description": f"{text} description of product {i}",
            "Price": "10.00",
            "Stock": "10",
        }
        if i in changed:
            row[field] = f"{changed[i]}.00" if field == "Price" else str(changed[i])
        out.append(row)
    return out


def _write(path: Path, rows: list[dict[str, str]]) -> None:
    replace_csv(path, HEADER, rows)


def _config(folder: Path, url: str, case: Case, *, writes: int, listen: str) -> Path:
    path = folder / "skuferry.toml"
    daemon = f'[daemon]\nlisten = "{listen}"\nhook_secret_file = "hook_secret"\n'
    path.write_text(
        CONFIG.format(
            url=url,
            key=KEY,
            writes=writes,
            reads=FAST,
            limiter='limiter = "bucket"\n' if case.limiter == "bucket" else "",
            watch="watch = true\n" if case.name == "export" else "",
            daemon=daemon if case.name == "hook" else "",
        ),
        encoding="utf-8",
    )
    path.chmod(0o600)
    return path


# -- the bound ------------------------------------------------------------------------


def budget_bound(n: int, per_minute: int, limiter: str) -> float:
    """The shortest span from the first to the n-th write the budget allows, fresh."""
    if limiter == "window":  # N at once, then N more each window of 60 + skew
        return (math.ceil(n / per_minute) - 1) * (WINDOW_S + SKEW_S)
    capacity = math.floor(per_minute - per_minute / WINDOW_S * SKEW_S + 1e-9)
    return max(0, n - capacity) / (per_minute / WINDOW_S * (1 - MARGIN))


# -- one variant, in this process -------------------------------------------------------


def _wait_landed(
    sandbox: Any, wanted: dict[str, tuple[str, Any]], since: float, limit_s: float
) -> dict[str, float]:
    landed: dict[str, float] = {}
    while len(landed) < len(wanted) and time.monotonic() - since < limit_s:
        now = time.monotonic()
        for product in sandbox.products(WORKSPACE):
            sku = str(product.get("sku"))
            if sku in wanted and sku not in landed:
                field, value = wanted[sku]
                if str(product.get(field)) == str(value):
                    landed[sku] = now - since
        time.sleep(0.2)
    return landed


def measure_plain(case: Case) -> dict[str, Any]:
    """A first sync with nothing urgent: its span against the budget's bound."""
    from skuferry import logs
    from skuferry.config.load import load_settings
    from skuferry.sandbox import Sandbox, SandboxConfig
    from skuferry.sync.engine import run_once

    logs.configure(level="error", json=False)
    limits = {"write": case.per_minute, "read": FAST}
    with tempfile.TemporaryDirectory(prefix="skuferry-bench-urgent-") as tmp:
        folder = Path(tmp)
        _write(folder / "catalog.csv", _rows(case.products, text="First"))
        config = SandboxConfig(
            keys={KEY: WORKSPACE}, key_limits=limits, workspace_limits=limits, mode="window"
        )
        with Sandbox(config) as sandbox:
            path = _config(folder, sandbox.url, case, writes=case.per_minute, listen="")
            summary = run_once(load_settings(path))
            stats = sandbox.stats()
    writes = sorted(stats.write_times)
    span = writes[-1] - writes[0] if writes else 0.0
    bound = budget_bound(len(writes), case.per_minute, case.limiter)
    return {
        "case": case.__dict__,
        "landed": summary.created,
        "p50_s": None,
        "p95_s": None,
        "max_s": None,
        "writes": len(writes),
        "span_s": round(span, 1),
        "bound_s": round(bound, 1),
        "ratio": round(span / bound, 3) if bound else None,
        "rate_limited": sum(stats.rate_limited.values()),
        "early_retries": len(stats.early_retries),
    }


def measure(case: Case) -> dict[str, Any]:
    if case.name == "plain":
        return measure_plain(case)
    import httpx

    from skuferry import logs
    from skuferry.config.load import load_settings
    from skuferry.sandbox import Sandbox, SandboxConfig, TierLimit
    from skuferry.service.daemon import Daemon
    from skuferry.service.hooks_http import sign
    from skuferry.sync.engine import run_once

    logs.configure(level="error", json=False)
    with tempfile.TemporaryDirectory(prefix="skuferry-bench-urgent-") as tmp:
        folder = Path(tmp)
        (folder / "hook_secret").write_bytes(SECRET)
        (folder / "hook_secret").chmod(0o600)
        catalog = folder / "catalog.csv"
        _write(catalog, _rows(case.products, text="First"))
        sandbox = Sandbox(
            SandboxConfig(
                keys={KEY: WORKSPACE},
                key_limits={"write": FAST, "read": FAST},
                workspace_limits={"write": FAST, "read": FAST},
                mode=case.server,  # type: ignore[arg-type]
            )
        )
        with sandbox:
            listen = f"127.0.0.1:{free_port()}"
            config = _config(folder, sandbox.url, case, writes=FAST, listen=listen)
            setup = run_once(load_settings(config))  # the catalog on the CMS, fast
            assert setup.created == case.products, setup.as_json()
            _forget_budget(folder / "state.db")  # the catalog was put there long ago
            limit = TierLimit(per_key=case.per_minute, per_workspace=case.per_minute)
            sandbox.set_limits(
                write=limit,
                read=TierLimit(per_key=FAST, per_workspace=FAST),
                mode=case.server,  # type: ignore[arg-type]
            )
            sandbox.reset_stats()
            config = _config(folder, sandbox.url, case, writes=case.per_minute, listen=listen)
            _write(catalog, _rows(case.products, text="Second"))  # the backlog
            daemon = Daemon(config, job=run_once, load=load_settings)
            daemon.start()  # run_at_start: the backlog's run begins
            loop = threading.Thread(target=daemon.serve_forever, daemon=True)
            loop.start()
            time.sleep(case.at_s)
            half = case.products // 2  # late in the backlog's order
            picked = [half + i * half // case.changes for i in range(case.changes)]
            if case.name == "hook":
                new = {i: 1000 + i for i in picked}
                _write(catalog, _rows(case.products, text="Second", changed=new))
                keys = [f"B-{i:05d}" for i in picked]
                body = json.dumps({"keys": keys}).encode()
                since = time.monotonic()
                answer = httpx.post(
                    f"http://{listen}/hooks/sync",
                    content=body,
                    headers={"X-Skuferry-Signature": sign(SECRET, body)},
                    timeout=10,
                )
                assert answer.status_code == 202, answer.text
                wanted: dict[str, tuple[str, Any]] = {
                    f"B-{i:05d}": ("stock", 1000 + i) for i in picked
                }
            else:
                new = {i: 20 + i for i in picked}
                since = time.monotonic()
                _write(catalog, _rows(case.products, text="Second", changed=new, field="Price"))
                wanted = {f"B-{i:05d}": ("price", f"{20 + i}.00") for i in picked}
            landed = _wait_landed(sandbox, wanted, since, limit_s=3600)
            backlog = {f"B-{i:05d}": ("description", "") for i in range(1, case.products + 1)}
            _wait_backlog(sandbox, backlog, limit_s=3600)
            daemon.request_stop()
            loop.join(60)
            stats = sandbox.stats()
    seconds = sorted(landed.values())
    writes = sorted(stats.write_times)
    span = writes[-1] - writes[0] if writes else 0.0
    bound = budget_bound(len(writes), case.per_minute, case.limiter)
    return {
        "case": case.__dict__,
        "landed": len(seconds),
        "p50_s": round(statistics.median(seconds), 1) if seconds else None,
        "p95_s": round(seconds[max(0, round(0.95 * len(seconds)) - 1)], 1) if seconds else None,
        "max_s": round(max(seconds), 1) if seconds else None,
        "writes": len(writes),
        "span_s": round(span, 1),
        "bound_s": round(bound, 1),
        "ratio": round(span / bound, 3) if bound else None,
        "rate_limited": sum(stats.rate_limited.values()),
        "early_retries": len(stats.early_retries),
    }


def _forget_budget(state: Path) -> None:
    """The setup's fast writes out of the budget's log: the measured run starts fresh."""
    import sqlite3

    with sqlite3.connect(state) as conn:
        conn.execute("DELETE FROM budget_sends")
        conn.execute("DELETE FROM budget_bucket")
    conn.close()


def _wait_backlog(sandbox: Any, wanted: dict[str, Any], limit_s: float) -> None:
    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        left = [
            p
            for p in sandbox.products(WORKSPACE)
            if str(p.get("sku")) in wanted and "Second" not in str(p.get("description"))
        ]
        if not left:
            return
        time.sleep(1.0)


# -- every variant, in child processes ----------------------------------------------------


def _child(case: Case, src: Path | None) -> subprocess.Popen[str]:
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), str(root)])
    else:
        env["PYTHONPATH"] = os.pathsep.join([str(root / "src"), str(root)])
    return subprocess.Popen(
        [sys.executable, "-m", "bench.urgent", "--worker", json.dumps(case.__dict__)],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )


def run_all(quick: bool, baseline: Path | None) -> list[tuple[str, Case, dict[str, Any]]]:
    trees: list[tuple[str, Path | None]] = [("this tree", None)]
    if baseline is not None:
        trees.append((f"baseline {baseline}", baseline))
    started = [(tree, case, _child(case, src)) for case in cases(quick) for tree, src in trees]
    out = []
    for tree, case, proc in started:
        text, _ = proc.communicate()
        lines = [ln for ln in text.splitlines() if ln.startswith("{")]
        figures = json.loads(lines[-1]) if proc.returncode == 0 and lines else {"failed": True}
        out.append((tree, case, figures))
    return out


def table(results: list[tuple[str, Case, dict[str, Any]]]) -> str:
    head = (
        "| case | tree | landed | p50 s | p95 s | max s | backlog span / bound | 429s "
        "| early retries |"
    )
    rows = [head, "|" + "---|" * 9]
    for tree, case, f in results:
        if f.get("failed"):
            rows.append(f"| {case.label} | {tree} | failed | | | | | | |")
            continue
        rows.append(
            f"| {case.label} | {tree} | {f['landed']}/{case.changes} | {f['p50_s']} | "
            f"{f['p95_s']} | {f['max_s']} | {f['span_s']} s / {f['bound_s']} s = "
            f"{f['ratio']} | {f['rate_limited']} | {f['early_retries']} |"
        )
    return "\n".join(rows)


def _ok(case: Case, f: dict[str, Any]) -> bool:
    if f.get("failed") or f["landed"] < case.changes:
        return False
    if case.name == "plain":
        return bool(f["ratio"] <= THROUGHPUT and f["rate_limited"] == 0)
    target = HOOK_P95_S if case.name == "hook" else EXPORT_P95_S
    return bool(
        f["p95_s"] <= target
        and (f["ratio"] is None or f["ratio"] <= THROUGHPUT)
        and f["rate_limited"] == 0
        and f["early_retries"] == 0
    )


def figure(quick: bool) -> Result:
    """``python -m bench --only urgent``: this tree (and the baseline, when given)."""
    base = os.environ.get("SKUFERRY_BENCH_BASELINE")
    results = run_all(quick, Path(base) if base else None)
    ours = [(c, f) for tree, c, f in results if tree == "this tree"]
    worst = max((f.get("p95_s") or math.inf) for c, f in ours if c.name != "plain")
    return Result(
        "urgent",
        f"p95 {worst} s (worst case); see notes",
        f"hook p95 <= {HOOK_P95_S} s, export p95 <= {EXPORT_P95_S} s, span <= "
        f"{THROUGHPUT} x bound, 0 x 429",
        all(_ok(c, f) for c, f in ours),
        notes=table(results).splitlines(),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--baseline", type=Path, help="another checkout's src, side by side")
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(measure(Case(**json.loads(args.worker)))), flush=True)
        return 0
    results = run_all(args.quick, args.baseline)
    print(table(results))
    ours = [(c, f) for tree, c, f in results if tree == "this tree"]
    return 0 if all(_ok(c, f) for c, f in ours) else 1


if __name__ == "__main__":
    sys.exit(main())
