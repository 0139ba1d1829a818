"""``skuferry undo RUN``: put back on the CMS what one run changed (``sync.undo``)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from skuferry import canonical
from skuferry.actions.one_run import stop_on_signals


def undo(
    config_path: Path | None,
    run: int,
    *,
    only: tuple[str, ...] | None,
    dry_run: bool,
    as_json: bool,
) -> int:
    """Undo run ``run`` (``only``: those keys); its exit code."""
    from skuferry.config.load import load_settings
    from skuferry.service import report, undo
    from skuferry.sync.undo import undo_run

    settings = load_settings(config_path)
    with (
        stop_on_signals() as stop,
        report.progress(enabled=not as_json and sys.stderr.isatty()) as on_progress,
    ):
        done = undo_run(
            settings, run, dry_run=dry_run, only=only, stop=stop, on_progress=on_progress
        )
    if as_json:
        click.echo(canonical.dumps(done.as_json()))  # decimals as the CMS holds them
    else:
        undo.print_report(done, sys.stdout)
    return done.exit_code
