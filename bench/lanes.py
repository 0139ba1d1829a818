"""Priority lanes: how long a pushed stock change waits behind a long re-sync.

``python -m bench.lanes [--products 2000] [--changes 20] [--at 30] [--only with|without]``

The daemon (in this process, as ``skuferry run`` builds it) re-syncs 2,000
changed descriptions at 180 writes a minute (the workspace cap; sandbox and
budget both token buckets). ``--at`` seconds into that run the source changes
the stock of 20 products and a signed ``POST /hooks/sync`` names them. Measured:
seconds from the hook to the moment the sandbox holds each new stock (polled
every 0.2 s), p50 / p95 / max, once with lanes (``[mapping] urgent = ["stock"]``,
the run going takes the keys in its urgent lane) and once without (the keys
wait for the run to end, then a targeted run sends them). A benchmark, not a
test: it takes real minutes (without lanes, the whole 11-minute run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import free_port, replace_csv
from skuferry import logs
from skuferry.config.load import load_settings
from skuferry.sandbox import Sandbox, SandboxConfig, TierLimit
from skuferry.service.daemon import Daemon
from skuferry.service.hooks_http import sign
from skuferry.sync.engine import run_once

KEY = "bench-key"
WORKSPACE = "bench"
SECRET = b"bench-hook-secret"
FAST = 60_000
CAP = 180  # writes per minute: the workspace cap
HEADER = ("SKU", "Name", "Description", "Stock")

CONFIG = """\
[api]
base_url = "{url}"
api_key = "{key}"
update_method = "patch"
max_in_flight = 4

[source]
type = "csv"
path = "catalog.csv"

[mapping]
key = "sku"
{urgent}
[mapping.fields]
sku = "SKU"
name = "Name"
description = "Description"
stock = {{ column = "Stock", type = "integer" }}

[budget]
write_per_minute = {writes}
workspace_write_per_minute = {writes}
read_per_minute = {reads}
limiter = "bucket"

[schedule]
interval_minutes = 600

[safety]
max_change_ratio = 1.0

[daemon]
listen = "{listen}"
hook_secret_file = "hook_secret"

[state]
path = "state.db"
"""


def _rows(n: int, *, text: str, stock: dict[int, int] | None = None) -> list[dict[str, str]]:
    stock = stock or {}
    return [
        {
            "SKU": f"B-{i:05d}",
            "Name": f"Bench product {i}",
            "Description": f"{text} description of product {i}",
            "Stock": str(stock.get(i, 10)),
        }
        for i in range(1, n + 1)
    ]


def _write(path: Path, rows: list[dict[str, str]]) -> None:
    replace_csv(path, HEADER, rows)


def _config(folder: Path, url: str, listen: str, *, writes: int, urgent: bool) -> Path:
    path = folder / "skuferry.toml"
    path.write_text(
        CONFIG.format(
            url=url,
            key=KEY,
            writes=writes,
            reads=FAST,
            listen=listen,
            urgent='urgent = ["stock"]' if urgent else "",
        ),
        encoding="utf-8",
    )
    path.chmod(0o600)
    return path


def measure(*, lanes: bool, products: int, changes: int, at_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="skuferry-bench-lanes-") as tmp:
        folder = Path(tmp)
        (folder / "hook_secret").write_bytes(SECRET)
        (folder / "hook_secret").chmod(0o600)
        catalog = folder / "catalog.csv"
        _write(catalog, _rows(products, text="First"))
        sandbox = Sandbox(
            SandboxConfig(
                keys={KEY: WORKSPACE},
                key_limits={"write": FAST, "read": FAST},
                workspace_limits={"write": FAST, "read": FAST},
                mode="bucket",
            )
        )
        with sandbox:
            listen = f"127.0.0.1:{free_port()}"
            config = _config(folder, sandbox.url, listen, writes=FAST, urgent=lanes)
            setup = run_once(load_settings(config))  # the catalog on the CMS, fast
            assert setup.created == products, setup.as_json()
            # the measured run: every description changed, at the cap
            sandbox.set_limits(
                write=TierLimit(per_key=CAP, per_workspace=CAP),
                read=TierLimit(per_key=FAST, per_workspace=FAST),
                mode="bucket",
            )
            config = _config(folder, sandbox.url, listen, writes=CAP, urgent=lanes)
            _write(catalog, _rows(products, text="Second"))
            daemon = Daemon(config, job=run_once, load=load_settings, lanes=lanes)
            daemon.start()  # run_at_start: the big run begins
            loop = threading.Thread(target=daemon.serve_forever, daemon=True)
            loop.start()
            started = time.monotonic()
            time.sleep(at_s)
            # 20 stock changes spread over the catalog's second half (written late in order)
            picked = [products // 2 + i * (products // 2) // changes for i in range(changes)]
            new_stock = {i: 1000 + i for i in picked}
            _write(catalog, _rows(products, text="Second", stock=new_stock))
            keys = [f"B-{i:05d}" for i in picked]
            body = json.dumps({"keys": keys}).encode()
            hooked = time.monotonic()
            answer = httpx.post(
                f"http://{listen}/hooks/sync",
                content=body,
                headers={"X-Skuferry-Signature": sign(SECRET, body)},
                timeout=10,
            )
            assert answer.status_code == 202, answer.text
            landed: dict[str, float] = {}
            wanted = {f"B-{i:05d}": 1000 + i for i in picked}
            while len(landed) < len(wanted):
                now = time.monotonic()
                for product in sandbox.products(WORKSPACE):
                    sku = str(product.get("sku"))
                    if sku in wanted and sku not in landed and product.get("stock") == wanted[sku]:
                        landed[sku] = now - hooked
                if now - hooked > 3600:
                    break
                time.sleep(0.2)
            run_s = time.monotonic() - started
            daemon.request_stop()
            loop.join(30)
            seconds = sorted(landed.values())
    return {
        "lanes": lanes,
        "landed": len(seconds),
        "p50_s": round(statistics.median(seconds), 1),
        "p95_s": round(seconds[max(0, round(0.95 * len(seconds)) - 1)], 1),
        "max_s": round(max(seconds), 1),
        "hook_at_s": at_s,
        "elapsed_s": round(run_s, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--products", type=int, default=2000)
    parser.add_argument("--changes", type=int, default=20)
    parser.add_argument("--at", type=float, default=30.0)
    parser.add_argument("--only", choices=("with", "without"))
    args = parser.parse_args()
    logs.configure(level="warning", json=False)
    for lanes in (True, False):
        if args.only and args.only != ("with" if lanes else "without"):
            continue
        figures = measure(lanes=lanes, products=args.products, changes=args.changes, at_s=args.at)
        print(
            f"{'with' if lanes else 'without'} lanes: {figures['landed']}/{args.changes} stock "
            f"changes on the sandbox; seconds from hook: p50 {figures['p50_s']}, "
            f"p95 {figures['p95_s']}, max {figures['max_s']} "
            f"({args.products} description updates at {CAP}/min, hook at {args.at:.0f} s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
