"""What happens around every run, one-shot or scheduled: metrics textfile and monitor pings.

Both are best effort: a failed write or ping is logged and never fails the run.
"""

from __future__ import annotations

from skuferry.config.schema import Settings
from skuferry.service import freshness, monitor, textfile
from skuferry.service.metrics import RunOutcome
from skuferry.service.textfile import dead_letter_counts, product_counts

__all__ = ["after_run", "before_run", "budget_per_minute", "dead_letter_counts", "product_counts"]


def before_run(settings: Settings) -> None:
    monitor.ping_start(settings.monitor)


def after_run(settings: Settings, outcome: RunOutcome, *, stopping: bool = False) -> None:
    if settings.metrics.textfile is not None:
        textfile.write_after_run(
            settings.metrics.textfile,
            outcome,
            state=settings.state.path,
            source_file=freshness.source_file(settings),
            budget=budget_per_minute(settings),
            labels=settings.metrics.labels,
        )
    ping_settings = settings.monitor
    if stopping:  # keep inside the stop deadline
        ping_settings = ping_settings.model_copy(
            update={"timeout_s": min(ping_settings.timeout_s, 2.0)}
        )
    monitor.ping_finish(ping_settings, outcome)


def budget_per_minute(settings: Settings) -> dict[str, float]:
    return {"read": settings.budget.read_per_minute, "write": settings.budget.write_per_minute}
