"""What happens around every run, one-shot or scheduled: metrics textfile and monitor pings.

Both are best effort: a failed write or ping is logged and never fails the run.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from skuferry import logs
from skuferry.config.schema import Settings
from skuferry.service import freshness, metrics, monitor
from skuferry.service.metrics import RunOutcome
from skuferry.state.mirror import Mirror

log = logs.get(__name__)


def before_run(settings: Settings) -> None:
    monitor.ping_start(settings.monitor)


def after_run(settings: Settings, outcome: RunOutcome, *, stopping: bool = False) -> None:
    if settings.metrics.textfile is not None:
        metrics.record_run(
            settings.metrics.textfile,
            outcome,
            products=product_counts(settings.state.path),
            freshness=freshness.read(settings),
            budget=budget_per_minute(settings),
            labels=settings.metrics.labels,
            dead_letters=dead_letter_counts(settings.state.path),
        )
    ping_settings = settings.monitor
    if stopping:  # keep inside the stop deadline
        ping_settings = ping_settings.model_copy(
            update={"timeout_s": min(ping_settings.timeout_s, 2.0)}
        )
    monitor.ping_finish(ping_settings, outcome)


def budget_per_minute(settings: Settings) -> dict[str, float]:
    return {"read": settings.budget.read_per_minute, "write": settings.budget.write_per_minute}


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
