"""The metrics textfile after a run: the run's outcome with the state file's figures.

One way to write it for every run that ends: the one-shot sync's and the daemon's (the
run hooks, from the settings) and the quick lane's skipped run (from its record, without
pydantic). The figures are read from the state file after the run, best effort: a state
file that cannot be read leaves its figures out, and never fails the run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from skuferry import logs
from skuferry.service import freshness, metrics
from skuferry.service.metrics import RunOutcome
from skuferry.state.mirror import Mirror

log = logs.get("skuferry.service.hooks")  # the run hooks' events, whoever writes the file


def write_after_run(
    textfile: Path,
    outcome: RunOutcome,
    *,
    state: Path,
    source_file: Path | None,
    budget: Mapping[str, float],
    labels: Mapping[str, str],
) -> None:
    """Fold ``outcome`` into ``textfile`` with the products, freshness and dead letters of
    the state file at ``state`` (``source_file``: a file source's local file, whose mtime
    tells a change not yet read)."""
    metrics.record_run(
        textfile,
        outcome,
        products=product_counts(state),
        freshness=freshness.read_at(state, source_file),
        budget=budget,
        labels=labels,
        dead_letters=dead_letter_counts(state),
    )


def dead_letter_counts(state_path: Path) -> dict[str, int] | None:
    """Rejected or failed products by stage; None when unreadable."""
    return _read_mirror(state_path, Mirror.dead_letter_counts, "metrics.dead_letters.failed")


def product_counts(state_path: Path) -> dict[str, int] | None:
    return _read_mirror(state_path, Mirror.counts_by_state, "metrics.products.failed")


def _read_mirror(
    state_path: Path, read: Callable[[Mirror], dict[str, int]], failed: str
) -> dict[str, int] | None:
    """``read`` of the mirror opened read-only; None (logged as ``failed``) when unreadable."""
    try:
        mirror = Mirror(state_path, readonly=True)  # never creates nor migrates the file
        try:
            return read(mirror)
        finally:
            mirror.close()
    except Exception as exc:  # noqa: BLE001 - sqlite3.Error or StateError; metrics are best effort
        log.warning(failed, error=str(exc))
        return None
