"""``skuferry demo``: the embedded default, a local sandbox API and the sample catalog."""

from __future__ import annotations

from pathlib import Path

from skuferry import files, logs


def demo(*, keep: bool, workdir: Path | None) -> int:
    """Sync the sample catalog into a local sandbox twice, narrated; the exit code."""
    from skuferry.service.demo import run_demo

    logs.configure(level="error")  # the demo narrates; per-product warnings are in its summary
    if workdir is not None:
        files.private_dir(workdir)  # it gets the state and a config holding the sandbox key
    return run_demo(keep=keep, workdir=workdir)
