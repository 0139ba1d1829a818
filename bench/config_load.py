"""``configload``: the full start's config load in a fresh interpreter, this tree against a
baseline (issue 30: pydantic-settings is the loader again).

Each run is a child ``python -c`` that imports the loader and loads a CSV config, as a
``skuferry sync`` that is not skipped does before its run; the quick lane never gets
here. With ``--baseline SRC`` the same child runs on the package under SRC, alternated
run by run, and the ratio is taken pair by pair so a machine whose speed drifts still
compares like with like. Figures: the child's wall and CPU time (user + system).
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import Result, toml
from bench.speed import BASELINE_ENV, _baseline_env, _compiled, _load

RUNS = 15
_CHILD = (
    "import sys\n"
    "from skuferry.config.load import load_settings\n"
    "load_settings(sys.argv[1], env={})\n"
)


def _run(config: Path, env: dict[str, str] | None) -> tuple[float, float]:
    """(wall s, CPU s) of one child loading ``config``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", _CHILD, str(config)], env=env, check=True, capture_output=True
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def figure(quick: bool) -> Result:
    _compiled()
    runs = 5 if quick else RUNS
    load_before = _load()
    base_env = _baseline_env()
    ours: list[tuple[float, float]] = []
    bases: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory(prefix="skuferry-bench-") as tmp:
        folder = Path(tmp)
        config = toml(folder, "http://127.0.0.1:9", reads=300, writes=60)
        _run(config, None)  # warm the page cache
        if base_env is not None:
            _run(config, base_env)
        for _ in range(runs):
            ours.append(_run(config, None))
            if base_env is not None:
                bases.append(_run(config, base_env))
    wall = statistics.median(w for w, _ in ours)
    cpu = statistics.median(c for _, c in ours)
    notes = [
        f"fresh `python -c` loading a CSV config, {runs} runs: wall median {wall:.3f} s, "
        f"CPU median {cpu:.3f} s; load average before {load_before}, after {_load()}"
    ]
    if bases:
        ratio = statistics.median(o[1] / b[1] for o, b in zip(ours, bases, strict=True))
        notes.append(
            f"baseline {os.environ.get(BASELINE_ENV)} (alternated): wall median "
            f"{statistics.median(w for w, _ in bases):.3f} s, CPU median "
            f"{statistics.median(c for _, c in bases):.3f} s; CPU ratio this/baseline, "
            f"pair by pair, median {ratio:.2f}"
        )
    return Result(
        "full start's config load (fresh interpreter)", f"CPU {cpu:.3f} s", "", None, notes
    )
