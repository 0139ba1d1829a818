"""What the daemon logs when a run ends: its counts, or its failure at the level it deserves."""

from __future__ import annotations

from typing import Any

from skuferry import logs
from skuferry.errors import AuthError, Interrupted, LockHeld, SkuferryError
from skuferry.models import RunSummary
from skuferry.service.metrics import RunOutcome

# The daemon's logger: these events were always the daemon's, and tools match the logger.
log = logs.get("skuferry.service.daemon")


def log_finished(
    outcome: RunOutcome, summary: RunSummary, fields: dict[str, int], *, scheduled: bool
) -> None:
    """A run that ended with a summary: the scheduled run's result, or the targeted run's."""
    log.info(
        "daemon.run.finished" if scheduled else "daemon.targeted.finished",
        **fields,
        exit_code=outcome.exit_code,
        **({"result": outcome.result} if scheduled else {}),
        **counts(summary),
    )


def log_failure(number: int, exc: Exception, outcome: RunOutcome) -> None:
    fields = {
        "run": number,
        "error": outcome.error,
        "error_type": type(exc).__name__,
        "exit_code": outcome.exit_code,
    }
    if isinstance(exc, LockHeld):
        log.warning("daemon.run.skipped", **fields)
    elif isinstance(exc, Interrupted):
        log.info("daemon.run.interrupted", **fields)
    elif isinstance(exc, AuthError):
        # Every run, at error level: a revoked key must not look like a quiet daemon.
        log.error(
            "daemon.run.failed",
            **fields,
            hint="the API key was refused; check the api_key credential",
        )
    elif isinstance(exc, SkuferryError):
        log.error("daemon.run.failed", **fields)
    else:
        log.error("daemon.run.failed", **fields, exc_info=exc)


def counts(summary: RunSummary) -> dict[str, Any]:
    data = summary.as_json()
    return {
        k: data[k]
        for k in (
            "created",
            "updated",
            "adopted",
            "unchanged",
            "rejected",
            "failed",
            "requests",
            "duration_s",
        )
    }
