"""``skuferry sync``: one run of one workspace, or of every workspace of a folder.

A plain run (not a dry run, no named keys) leaves the quick lane its record, so the
next unchanged ``sync`` can be decided without loading the config. A run of named keys
while another run holds the lock hands them to that run's urgent lane.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import click

from skuferry import errors
from skuferry.actions.one_run import one_run, stop_on_signals

if TYPE_CHECKING:  # the engine's imports wait until a run is asked for
    from skuferry.config.schema import Settings
    from skuferry.models import RunOptions, RunSummary
    from skuferry.service.workspaces import Shard


def named_keys(
    *, only: bool, keys: tuple[str, ...], keys_from: Path | None
) -> tuple[str, ...] | None:
    """The keys of ``--only KEY ...`` and ``--keys-from FILE``, as stored; None: every key."""
    from skuferry.sync.read.named import read_keys, unique

    if keys and not (only or keys_from):
        raise errors.UsageError(f"keys given without --only: {' '.join(keys[:3])}")
    if not (only or keys_from):
        return None
    named = unique([*keys, *(read_keys(keys_from) if keys_from else [])])
    if not named:
        raise errors.UsageError("--only needs at least one KEY (or --keys-from FILE)")
    return tuple(named)


def sync(config_path: Path | None, options: RunOptions, *, as_json: bool, quiet: bool) -> int:
    """One run of the workspace ``config_path`` names; its exit code."""
    from skuferry.config.load import load_settings
    from skuferry.service import quick

    plain = not options.dry_run and options.only is None  # it leaves the quick lane its record
    settings = load_settings(config_path)
    prepared = quick.prepare(settings) if plain else None
    summary = _run_or_hand_over(settings, options, quiet=quiet, watched=not options.dry_run)
    if summary is None:  # named keys handed to the run holding the lock
        if not quiet:
            click.echo(
                f"handed {len(options.only or ())} key(s) to the running skuferry run: its "
                "urgent lane sends them next (see `skuferry status` / `skuferry rejected`)"
            )
        return errors.EXIT_OK
    if plain:
        quick.remember(prepared, settings.state.path)
    return finish(summary, as_json=as_json, quiet=quiet)


def _run_or_hand_over(
    settings: Settings, options: RunOptions, *, quiet: bool, watched: bool
) -> RunSummary | None:
    """One run; named keys go to the run holding the lock instead (None: handed over)."""
    from skuferry.actions.hand_over import hand_over
    from skuferry.state.lock import run_lock

    if options.only is None or options.dry_run:
        return one_run(settings, options, quiet=quiet, watched=watched)
    try:
        with run_lock(settings.state.path):
            pass  # free: this process runs the keys (the run takes the lock again)
    except errors.LockHeld:  # a run is writing: its urgent lane takes the keys
        return hand_over(
            settings,
            options.only,
            lambda: one_run(settings, options, quiet=quiet, watched=watched),
        )
    return one_run(settings, options, quiet=quiet, watched=watched)


def finish(summary: RunSummary, *, as_json: bool, quiet: bool) -> int:
    """Print the run's summary (JSON, the table, or with ``quiet`` only when it went
    wrong, on stderr); its exit code."""
    from skuferry.service import report

    code = summary.exit_code
    if as_json:
        click.echo(json.dumps(summary.as_json(), ensure_ascii=False))
    elif not quiet or code != errors.EXIT_OK:
        report.print_summary(summary, stream=sys.stdout if not quiet else sys.stderr)
    return code


def sync_fleet(
    directory: Path, shard: Shard, options: RunOptions, *, as_json: bool, quiet: bool
) -> int:
    """``sync --workspaces``: every workspace once; a line each; the worst exit code."""
    from skuferry.service import fleet_sync

    echo_lock = threading.Lock()

    def report(result: fleet_sync.Result) -> None:
        if not quiet or result.exit_code != errors.EXIT_OK:
            with echo_lock:
                click.echo(result.line(), err=quiet)

    with stop_on_signals() as stop:
        results = fleet_sync.sync_all(directory, options, shard=shard, stop=stop, on_result=report)
    if not results and not quiet:
        click.echo(f"no workspaces in {directory} (shard {shard})")
    if as_json:
        data = {"workspaces": {r.name: r.as_json() for r in results}}
        click.echo(json.dumps(data, ensure_ascii=False))
    return fleet_sync.worst([r.exit_code for r in results])
