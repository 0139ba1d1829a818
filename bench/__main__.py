"""``python -m bench [--only a,b] [--quick]``: run the figures of issue 6 and print a table."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench import (
    config_load,
    console,
    density,
    feed,
    fill,
    firstload,
    fleet,
    history,
    http_crowd,
    keys,
    local,
    readers,
    soak,
    speed,
    statelib,
    urgent,
    walks,
    watermark,
)
from bench.common import Result, machine
from skuferry import logs

FIGURES: dict[str, Callable[[bool], Result]] = {
    "noop": local.noop,
    "plan1m": local.plan_large,
    "requests": fill.requests,
    "baseline": walks.baseline,
    "bucket": fill.bucket,
    "window": fill.window,
    "latency": fill.latency,
    "adopt": walks.adopt,
    "keys": keys.three_keys,
    "neighbour": keys.neighbour,
    "gateway": keys.gateway,
    "xlsx": readers.xlsx,  # a 200k-row XLSX, both readers (issue 23 §4)
    "xlsx1m": readers.xlsx_large,  # a 1M-row XLSX: each reader's memory
    "xlsxphases": readers.xlsx_phases,  # where a 200k-row default read goes
    "xml": readers.xml,  # a 300 MB BMEcat XML read with flat memory
    "soak": soak.figure,  # the daemon for 10 min against 4 % write faults (issue 18)
    "density": density.density,  # the daemon's RSS idle and during runs: workspaces per node
    "fleetdensity": fleet.density,  # issue 31: 100 workspaces in one process vs one each
    "fleetconcurrency": fleet.concurrency,  # issue 31: 20 workspaces' budgets side by side
    "unchanged": speed.unchanged,  # issue 23: a no-op whose source is unchanged, vs --full
    "startup": speed.startup,  # issue 23: exec to the first useful work
    "configload": config_load.figure,  # issue 30: the full start's config load, vs a baseline
    "statelib": statelib.figure,  # issue 19: the mirror's hot paths, sqlite3 vs sqlite-utils
    "crowd": http_crowd.figure,  # issue 29: /healthz beside hundreds of stalled clients
    "watermark": watermark.figure,  # issue 29: each record's change time, read for the window
    "urgent": urgent.figure,  # issue 33: a hook or a new export during a backlog (12 min)
    "console": console.figure,  # issue 32: the operator's page: render time, the daemon's RSS
    "consolefleet": console.fleet_front,  # issue 40: the front page of 100 workspaces
    "firstload": firstload.figure,  # issue 41: a first load vs a stateless httpx loop
    "specpace": firstload.spec_figure,  # issue 41: CPU per write at the spec's budgets
    "history": history.figure,  # issue 38: a first sync and a 1 % change, history on and off
    "historyjournal": history.journal,  # issue 38: the journal's own cost per write, on and off
    "feeddigest": feed.figure,  # issue 38: a feed known by its content: a full pull's cost
}


def table(results: list[Result]) -> str:
    head = ("figure", "measured", "target", "verdict")
    rows = [(r.figure, r.measured, r.target, r.verdict) for r in results]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=True)]

    def line(cells: tuple[str, ...]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return "\n".join(
        [line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *(line(r) for r in rows)]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--only", default="", help=f"comma-separated: {','.join(FIGURES)}")
    parser.add_argument("--quick", action="store_true", help="smaller sizes (minutes, not ten)")
    parser.add_argument(
        "--baseline",
        metavar="SRC",
        help="startup, unchanged, configload, plan1m, xlsx, urgent, firstload, feeddigest: also "
        "time the "
        "skuferry package under SRC (the src/ of another checkout, e.g. a `git worktree` of main), "
        "alternated run by run",
    )
    args = parser.parse_args(argv)
    if args.baseline:
        os.environ[speed.BASELINE_ENV] = str(Path(args.baseline).absolute())
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(FIGURES)
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        parser.error(f"unknown figure(s) {', '.join(unknown)}; choose from {', '.join(FIGURES)}")
    logs.configure(level="error")  # the runs' own events would drown the table
    info = machine()
    results: list[Result] = []
    started = time.perf_counter()
    for name in names:
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        result = FIGURES[name](args.quick)
        results.append(result)
        print(
            f"bench: {name}: {result.measured} [{result.verdict}] "
            f"({time.perf_counter() - t0:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
    print("\n".join(f"- {k}: {v}" for k, v in info.items()))
    total = time.perf_counter() - started
    print(f"- mode: {'quick' if args.quick else 'full'}; total {total:.0f} s")
    print("- noise: a shared 2-core machine; times are medians where several runs are made\n")
    print(table(results))
    print()
    for r in results:
        for note in r.notes:
            print(f"- {r.figure}: {note}")
    return 0 if all(r.ok is not False for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
