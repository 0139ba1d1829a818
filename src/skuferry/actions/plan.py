"""``skuferry plan``: what a sync would do, the same as ``sync --dry-run``; changes nothing."""

from __future__ import annotations

from pathlib import Path

from skuferry.actions.sync import sync


def plan(
    config_path: Path | None, *, as_json: bool, full: bool, only: tuple[str, ...] | None
) -> int:
    """The dry run's summary (nothing written, remote or local); its exit code."""
    from skuferry.models import RunOptions

    options = RunOptions(dry_run=True, full=full, only=only)
    return sync(config_path, options, as_json=as_json, quiet=False)
