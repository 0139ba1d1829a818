"""Issue 41: a first load into an empty CMS, side by side with a stateless httpx loop.

    python -m bench --only firstload [--baseline /work/main/src]
    python -m bench.firstload [--quick] [--baseline SRC] [--sizes 5000,50000]

The sandbox runs in a child process of its own (its CPU is not the client's), with
every budget raised out of the way (600,000 a minute per key and workspace), and so
does each contestant, as a user starts it:

- **the floor**: a minimal stateless loop (``floor`` below, about 40 lines): read the
  CSV, type the price and stock as the mapping does, POST each product with one
  ``httpx.Client``, one at a time, keeping nothing. It loses and duplicates products
  on the first fault; it is the floor of what a first load can cost, not a model;
- **skuferry**: ``python -m skuferry sync --config ... --json`` on a fresh state file,
  the defaults otherwise (``max_in_flight`` 4, the window limiter, urgent_share 0.1);
- **the baseline** (``--baseline SRC``): the same command with another checkout's
  package, for today's figures in the same run.

Each round runs them one after another on a reset sandbox (the order rotates from round
to round), 5 rounds at 5,000 products and 2 at 50,000 (quick: 3 at 2,000 and 5,000).
Reported per size: median wall time, each contestant's ratio to the floor of its own
round (median of those), CPU seconds (user + sys of the child, ``os.wait4``) per 1,000
writes, and peak RSS. Every run must leave the sandbox holding each product once.

Two more cases, skuferry only (and the baseline beside it):

- **lost answers**: 5,000 creates (1,000 quick) with 4 % of product writes breaking
  (drop after commit, 500 after commit, reset, 500 before commit: 1 % each); one
  ``sync``, then a second if the first left anything in doubt; the sandbox must hold
  each product exactly once (0 duplicates, 0 lost);
- **the spec's budgets** (also alone: ``--spec 50,1000``, or ``python -m bench --only
  specpace``): 50 and 300 creates (50 and 180 quick) against a sandbox at the spec's
  limits (60 writes a minute per key): one window's burst, then windows in which every
  worker waits for the budget most of the time. Reported per tree: the whole process's
  CPU per 1,000 writes, and the marginal CPU per 1,000 writes (the larger run's CPU less the
  smaller's, over the writes between: a write's cost once the process is up, its waits
  included, as a daemon or a fleet pays it). Every tree and size run at once (they
  wait, they hardly compute), each with a key and workspace of its own.
"""

from __future__ import annotations

import argparse
import compileall
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from bench.common import Result, free_port, write_csv

ROOT = Path(__file__).resolve().parent.parent
RAISED = 600_000
KEY, WORKSPACE = "bench-key", "bench"
FAULTS = {
    "drop_after_commit": 0.01,
    "error_after_commit": 0.01,
    "reset": 0.01,
    "error_before_commit": 0.01,
}
TARGET_RATIO = 1.5

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
[mapping.fields]
sku = "SKU"
name = "Name"
price = {{ column = "Price", type = "decimal" }}
stock = {{ column = "Stock", type = "integer" }}

[budget]
read_per_minute = {reads}
write_per_minute = {writes}
workspace_read_per_minute = {reads}
workspace_write_per_minute = {writes}

[state]
path = "state.db"

[safety]
max_change_ratio = 1.0
"""


# -- the floor: a stateless loop, as a 40-line script would be -----------------------------


def floor(url: str, key: str, csv_path: str) -> int:
    """POST every row of the catalog, one after another, keeping nothing. Returns the count."""
    import httpx

    sent = 0
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    with (
        httpx.Client(base_url=url, headers=headers, timeout=30) as http,
        Path(csv_path).open(newline="", encoding="utf-8") as f,
    ):
        for row in csv.DictReader(f):
            product = {
                "sku": row["SKU"],
                "name": row["Name"],
                "price": float(Decimal(row["Price"])),
                "stock": int(row["Stock"]),
            }
            answer = http.post("/api/v1/products", content=json.dumps(product))
            answer.raise_for_status()
            sent += 1
    return sent


# -- the sandbox, in a child process -------------------------------------------------------


class SandboxProcess:
    """``skuferry sandbox`` in a child process; admin calls over loopback."""

    def __init__(self, *, per_minute: int | None, keys: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [sys.executable, "-m", "skuferry", "sandbox", "--port", str(self.port)]
        args += ["--updates", "both"]
        if per_minute is not None:
            for flag in ("--read-per-minute", "--workspace-read-per-minute"):
                args += [flag, str(per_minute)]
            for flag in ("--write-per-minute", "--workspace-write-per-minute"):
                args += [flag, str(per_minute)]
        for k, ws in keys.items():
            args += ["--key", f"{k}={ws}"]
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        self.proc = subprocess.Popen(
            args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        import httpx

        self.http = httpx.Client(base_url=self.url, timeout=60)
        deadline = time.monotonic() + 30
        while True:
            try:
                self.http.get("/_sandbox/stats")
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("the sandbox did not start") from None
                time.sleep(0.1)

    def reset(self, faults: dict[str, float] | None = None) -> None:
        self.http.post("/_sandbox/reset").raise_for_status()
        self.http.post("/_sandbox/faults", json=faults or {}).raise_for_status()

    def stats(self) -> dict[str, Any]:
        data: dict[str, Any] = self.http.get("/_sandbox/stats").json()["data"]
        return data

    def close(self) -> None:
        self.http.close()
        self.proc.terminate()
        self.proc.wait(30)


# -- one run of one contestant -------------------------------------------------------------


@dataclass
class Run:
    who: str
    wall_s: float
    cpu_s: float
    rss_mib: float
    exit_code: int
    summary: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


def _run_child(args: list[str], *, cwd: Path, pythonpath: str, env: dict[str, str]) -> Run:
    full_env = {**os.environ, **env, "PYTHONPATH": pythonpath}
    started = time.perf_counter()
    proc = subprocess.Popen(
        args, cwd=cwd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    summary = json.loads(lines[-1]) if lines else {}
    return Run(
        who="",
        wall_s=wall,
        cpu_s=usage.ru_utime + usage.ru_stime,
        rss_mib=usage.ru_maxrss / 1024,
        exit_code=proc.returncode,
        summary=summary,
    )


def _folder(tmp: Path, name: str, url: str, n: int, *, key: str, per_minute: int) -> Path:
    folder = tmp / name
    folder.mkdir()
    catalog = tmp / f"catalog-{n}.csv"
    if not catalog.exists():
        write_csv(catalog, n)
    (folder / "catalog.csv").symlink_to(catalog)
    config = folder / "skuferry.toml"
    config.write_text(
        CONFIG.format(url=url, key=key, reads=per_minute, writes=per_minute), encoding="utf-8"
    )
    config.chmod(0o600)
    return folder


def skuferry_run(who: str, src: Path, folder: Path, *, env: dict[str, str] | None = None) -> Run:
    args = [sys.executable, "-m", "skuferry", "sync", "--config", "skuferry.toml", "--json"]
    run = _run_child(
        args, cwd=folder, pythonpath=os.pathsep.join([str(src), str(ROOT)]), env=env or {}
    )
    run.who = who
    return run


def floor_run(url: str, csv_path: Path) -> Run:
    args = [sys.executable, "-m", "bench.firstload", "--floor", url, KEY, str(csv_path)]
    run = _run_child(args, cwd=ROOT, pythonpath=str(ROOT), env={})
    run.who = "floor"
    return run


def _check(sandbox: SandboxProcess, n: int, workspace: str = WORKSPACE) -> tuple[int, int]:
    """(products the sandbox holds, duplicated keys) in ``workspace``."""
    stats = sandbox.stats()
    return stats["products"].get(workspace, 0), len(stats["duplicates"].get(workspace, {}))


# -- the figures ---------------------------------------------------------------------------


def side_by_side(
    sandbox: SandboxProcess, n: int, rounds: int, trees: list[tuple[str, Path]], tmp: Path
) -> tuple[dict[str, list[Run]], list[str]]:
    runs: dict[str, list[Run]] = {"floor": [], **{who: [] for who, _src in trees}}
    problems: list[str] = []
    catalog = tmp / f"catalog-{n}.csv"
    write_csv(catalog, n)
    order = ["floor", *(who for who, _src in trees)]
    for r in range(rounds):
        turn = order[r % len(order) :] + order[: r % len(order)]
        for who in turn:
            sandbox.reset()
            if who == "floor":
                run = floor_run(sandbox.url, catalog)
            else:
                src = dict(trees)[who]
                folder = _folder(
                    tmp,
                    f"{who.replace(' ', '-')}-{n}-{r}",
                    sandbox.url,
                    n,
                    key=KEY,
                    per_minute=RAISED,
                )
                run = skuferry_run(who, src, folder)
            held, dupes = _check(sandbox, n)
            if held != n or dupes:
                problems.append(f"{who} {n} round {r}: sandbox holds {held}, {dupes} duplicated")
            runs[who].append(run)
            print(
                f"firstload: {n} {who} round {r}: {run.wall_s:.2f} s, cpu {run.cpu_s:.2f} s, "
                f"{run.rss_mib:.0f} MiB, exit {run.exit_code}",
                file=sys.stderr,
                flush=True,
            )
    return runs, problems


def _ratios(runs: dict[str, list[Run]], who: str) -> list[float]:
    return [t.wall_s / f.wall_s for t, f in zip(runs[who], runs["floor"], strict=True)]


def lost_answers(
    sandbox: SandboxProcess, n: int, trees: list[tuple[str, Path]], tmp: Path
) -> list[str]:
    lines = []
    for who, src in trees:
        sandbox.reset(FAULTS)
        folder = _folder(
            tmp, f"faults-{who.replace(' ', '-')}-{n}", sandbox.url, n, key=KEY, per_minute=RAISED
        )
        first = skuferry_run(who, src, folder)
        runs = [first]
        sandbox.http.post("/_sandbox/faults", json={}).raise_for_status()
        if first.exit_code != 0:
            runs.append(skuferry_run(who, src, folder))
        held, dupes = _check(sandbox, n)
        faults = sandbox.stats()["faults"]
        lines.append(
            f"{who}: {n} creates, faults {faults}: runs {[r.exit_code for r in runs]}, "
            f"sandbox holds {held} ({n - held} lost), {dupes} duplicated; first run "
            f"{first.wall_s:.1f} s"
        )
    return lines


# One window's burst for every tree (54 go at once with room kept for the urgent), then
# five windows. Quick: three windows, so that most writes between the sizes wait their
# second for the budget, as they do in a long run (a run that ends on a window's burst
# waits less per write than one that goes on).
SPEC_SIZES = (50, 300)
QUICK_SPEC_SIZES = (50, 180)


def spec_budget(
    sizes: tuple[int, int], trees: list[tuple[str, Path]], tmp: Path
) -> dict[tuple[str, int], Run]:
    """Each tree at each size, all at once (they wait for the budget, they hardly
    compute), each with a key and workspace of its own at the spec's limits."""
    cases = [(who, src, n) for who, src in trees for n in sizes]
    keys = {f"key-{i}": f"ws-{i}" for i in range(len(cases))}
    sandbox = SandboxProcess(per_minute=None, keys=keys)  # the spec's limits
    try:
        procs = []
        for i, (who, src, n) in enumerate(cases):
            folder = _folder(tmp, f"spec-{i}", sandbox.url, n, key=f"key-{i}", per_minute=60)
            # reads and writes as the spec: 300 / 60 per key
            text = (folder / "skuferry.toml").read_text(encoding="utf-8")
            text = text.replace(f"read_per_minute = {60}", "read_per_minute = 300")
            text = text.replace("workspace_read_per_minute = 300\n", "")
            text = text.replace("workspace_write_per_minute = 60\n", "")
            (folder / "skuferry.toml").write_text(text, encoding="utf-8")
            procs.append((who, src, n, folder))
        import concurrent.futures

        with concurrent.futures.ThreadPoolExecutor(len(procs)) as pool:
            futures = [
                (who, n, pool.submit(skuferry_run, who, src, folder))
                for who, src, n, folder in procs
            ]
            out = {(who, n): f.result() for who, n, f in futures}
        for i, (who, _src, n) in enumerate(cases):
            held, dupes = _check(sandbox, n, f"ws-{i}")
            out[(who, n)].extra = {"held": held, "duplicates": dupes}
        return out
    finally:
        sandbox.close()


def _compiled(trees: list[tuple[str, Path]]) -> None:
    """Each tree byte-compiled, as a pip install leaves it: no run pays for compiling it
    (a shell with ``PYTHONDONTWRITEBYTECODE`` would otherwise compile it in every child)."""
    for _who, src in trees:
        compileall.compile_dir(str(src / "skuferry"), quiet=1)


def per_1000(
    runs: dict[tuple[str, int], Run], who: str, sizes: tuple[int, int]
) -> tuple[float, float]:
    """``who``'s (whole process's CPU per 1,000 writes at the larger size, marginal CPU
    per 1,000 writes): the larger run's CPU less the smaller's, over the writes between:
    what a write costs once the process is up, waits for the budget included, as a daemon
    or a fleet pays it."""
    small, big = sizes
    lo, hi = runs[(who, small)].cpu_s, runs[(who, big)].cpu_s
    return 1000 * hi / big, 1000 * (hi - lo) / (big - small)


def spec_lines(runs: dict[tuple[str, int], Run], sizes: tuple[int, int]) -> list[str]:
    """Per tree: ``per_1000``, with its ratios to the baseline's, measured in the same run."""
    small, big = sizes
    lines = [
        f"| spec's budgets (60/min) | who | CPU s at {small} | CPU s at {big} | whole "
        "process, s per 1,000 writes | marginal, s per 1,000 writes | vs baseline (whole / "
        "marginal) |",
        "|---|---|---|---|---|---|---|",
    ]
    whos = list(dict.fromkeys(who for who, _n in runs))
    base = per_1000(runs, "baseline", sizes) if "baseline" in whos else None
    for who in whos:
        whole, marginal = per_1000(runs, who, sizes)
        vs = ""
        if base is not None and who != "baseline":
            vs = f"{whole / base[0]:.2f} / {marginal / base[1]:.2f}"
        lines.append(
            f"| creates | {who} | {runs[(who, small)].cpu_s:.2f} | {runs[(who, big)].cpu_s:.2f} "
            f"| {whole:.2f} | {marginal:.2f} | {vs} |"
        )
    for (who, n), run in runs.items():
        lines.append(
            f"spec budgets: {who}: {n} creates at 60/min, {run.wall_s:.1f} s, cpu "
            f"{run.cpu_s:.2f} s, {run.rss_mib:.0f} MiB, exit {run.exit_code}, sandbox {run.extra}"
        )
    return lines


def waits_worker(n: int) -> dict[str, Any]:
    """In this process: ``n`` creates at the spec's 60 writes a minute (the sandbox in a
    thread: it only waits), the budget book's transactions counted (issue 40 item 14)."""
    from skuferry import logs
    from skuferry.sandbox import Sandbox, SandboxConfig
    from skuferry.state.budgetbook import BudgetBook
    from skuferry.sync.engine import run_once

    logs.configure(level="error", json=False)
    counted = [0]
    original = BudgetBook.transact

    def transact(self: BudgetBook, *args: Any, **kw: Any) -> Any:
        counted[0] += 1
        return original(self, *args, **kw)

    BudgetBook.transact = transact  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory(prefix="skuferry-bench-waits-") as name:
        folder = Path(name)
        with Sandbox(SandboxConfig(keys={KEY: WORKSPACE})) as sandbox:
            write_csv(folder / "catalog.csv", n)
            path = folder / "skuferry.toml"
            path.write_text(
                CONFIG.format(url=sandbox.url, key=KEY, reads=300, writes=60)
                .replace("workspace_read_per_minute = 300\n", "")
                .replace("workspace_write_per_minute = 60\n", ""),
                encoding="utf-8",
            )
            from skuferry.config.load import load_settings

            started, cpu = time.perf_counter(), time.process_time()
            summary = run_once(load_settings(path))
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu
            held = sandbox.stats().products.get(WORKSPACE, 0)
    return {
        "created": summary.created,
        "held": held,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 2),
        "budget_transactions": counted[0],
    }


def waits(n: int, trees: list[tuple[str, Path]]) -> list[str]:
    """``waits_worker`` for each tree, in child processes side by side (they wait)."""
    procs = []
    for who, src in trees:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(ROOT)])}
        args = [sys.executable, "-m", "bench.firstload", "--waits", str(n)]
        procs.append(
            (who, subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True))
        )
    lines = []
    for who, proc in procs:
        out, _ = proc.communicate()
        found = [ln for ln in out.splitlines() if ln.startswith("{")]
        lines.append(f"{who}: {found[-1] if found else 'failed'}")
    return lines


def measure(
    *, quick: bool, baseline: Path | None, sizes: list[int] | None = None
) -> tuple[list[str], bool]:
    trees: list[tuple[str, Path]] = [("skuferry", ROOT / "src")]
    if baseline is not None:
        trees.append(("baseline", baseline))
    _compiled(trees)
    plan = sizes or ([2000, 5000] if quick else [5000, 50_000])
    rounds = {2000: 3, 5000: 3 if quick else 5}
    notes: list[str] = []
    ok = True
    with tempfile.TemporaryDirectory(prefix="skuferry-bench-firstload-") as name:
        tmp = Path(name)
        sandbox = SandboxProcess(per_minute=RAISED, keys={KEY: WORKSPACE})
        try:
            table = [
                "| products | who | wall s (median) | ratio to floor (median) | CPU s per 1,000 "
                "writes | peak RSS MiB |",
                "|---|---|---|---|---|---|",
            ]
            for n in plan:
                runs, problems = side_by_side(sandbox, n, rounds.get(n, 2), trees, tmp)
                notes += problems
                ok = ok and not problems
                for who, got in runs.items():
                    ratio = (
                        "1" if who == "floor" else f"{statistics.median(_ratios(runs, who)):.2f}"
                    )
                    if who == "skuferry" and n == 5000:
                        ok = ok and statistics.median(_ratios(runs, who)) <= TARGET_RATIO
                    table.append(
                        f"| {n:,} | {who} | {statistics.median(r.wall_s for r in got):.2f} | "
                        f"{ratio} | {1000 * statistics.median(r.cpu_s for r in got) / n:.3f} | "
                        f"{max(r.rss_mib for r in got):.0f} |"
                    )
                    notes.append(
                        f"{n} {who}: walls {[round(r.wall_s, 2) for r in got]}, cpu "
                        f"{[round(r.cpu_s, 2) for r in got]}"
                    )
            notes = table + notes
            faulty = 1000 if quick else 5000
            lines = lost_answers(sandbox, faulty, trees, tmp)
            notes += [f"lost answers: {line}" for line in lines]
            ok = ok and all(" (0 lost), 0 duplicated" in line for line in lines[:1])
        finally:
            sandbox.close()
        spec = QUICK_SPEC_SIZES if quick else SPEC_SIZES
        notes += spec_lines(spec_budget(spec, trees, tmp), spec)
    return notes, ok


def figure(quick: bool) -> Result:
    """``python -m bench --only firstload``."""
    base = os.environ.get("SKUFERRY_BENCH_BASELINE")
    notes, ok = measure(quick=quick, baseline=Path(base) if base else None)
    ratio = next((ln for ln in notes if ln.startswith("| 5,000 | skuferry")), "")
    cells = [c.strip() for c in ratio.split("|")]
    measured = f"5,000: {cells[4]}x the floor" if len(cells) > 4 else "see notes"
    return Result(
        "first load vs a stateless loop",
        measured,
        f"<= {TARGET_RATIO}x at 5,000, 0 duplicates under lost answers",
        ok,
        notes,
    )


def measure_spec(
    *, sizes: tuple[int, int], baseline: Path | None
) -> tuple[list[str], dict[tuple[str, int], Run], list[str]]:
    """The spec's budgets alone: the lines, the runs, and the runs that went wrong (an
    exit, a product lost or duplicated)."""
    trees: list[tuple[str, Path]] = [("skuferry", ROOT / "src")]
    if baseline is not None:
        trees.append(("baseline", baseline))
    _compiled(trees)
    with tempfile.TemporaryDirectory(prefix="skuferry-bench-spec-") as name:
        runs = spec_budget(sizes, trees, Path(name))
    problems = [
        f"{who} at {n}: exit {run.exit_code}, sandbox {run.extra}"
        for (who, n), run in runs.items()
        if run.exit_code != 0 or run.extra != {"held": n, "duplicates": 0}
    ]
    return spec_lines(runs, sizes) + problems, runs, problems


def spec_figure(quick: bool) -> Result:
    """``python -m bench --only specpace`` (with ``SKUFERRY_BENCH_BASELINE`` for the ratio)."""
    base = os.environ.get("SKUFERRY_BENCH_BASELINE")
    sizes = QUICK_SPEC_SIZES if quick else SPEC_SIZES
    lines, runs, problems = measure_spec(sizes=sizes, baseline=Path(base) if base else None)
    marginal = per_1000(runs, "skuferry", sizes)[1]
    measured = f"{marginal:.2f} s marginal per 1,000 writes"
    ratio = None
    if base:
        ratio = marginal / per_1000(runs, "baseline", sizes)[1]
        measured += f", {ratio:.2f}x the baseline's"
    ok = not problems and (ratio is None or ratio <= 0.5)
    return Result(
        "CPU per 1,000 writes at the spec's budgets",
        measured,
        "<= 0.5x the baseline's marginal (issue 41)",
        ok,
        lines,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--floor", nargs=3, metavar=("URL", "KEY", "CSV"), help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--baseline", type=Path, help="another checkout's src, side by side")
    parser.add_argument("--sizes", help="comma-separated product counts")
    parser.add_argument(
        "--waits",
        type=int,
        metavar="N",
        help="only: N creates at 60/min, the budget's transactions counted, per tree",
    )
    parser.add_argument(
        "--spec",
        metavar="SMALL,BIG",
        help="only: the spec's budgets at two sizes, per tree (e.g. 50,300 or 50,1000)",
    )
    args = parser.parse_args(argv)
    if args.spec:
        small, big = (int(s) for s in args.spec.split(","))
        lines, _runs, problems = measure_spec(sizes=(small, big), baseline=args.baseline)
        print("\n".join(lines))
        return 1 if problems else 0
    if args.floor:
        print(json.dumps({"sent": floor(*args.floor)}))
        return 0
    if args.waits and os.environ.get("SKUFERRY_BENCH_WAITS_CHILD"):
        print(json.dumps(waits_worker(args.waits)))
        return 0
    if args.waits:
        trees = [("skuferry", ROOT / "src")]
        if args.baseline is not None:
            trees.append(("baseline", args.baseline))
        os.environ["SKUFERRY_BENCH_WAITS_CHILD"] = "1"
        print("\n".join(waits(args.waits, trees)))
        return 0
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else None
    notes, ok = measure(quick=args.quick, baseline=args.baseline, sizes=sizes)
    print("\n".join(notes))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
