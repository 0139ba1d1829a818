"""``skuferry run``: the daemon, syncing on the configured schedule until SIGTERM/SIGINT;
with ``--workspaces``, one daemon per workspace of a folder in this process."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from skuferry import errors

if TYPE_CHECKING:  # the daemon's machinery loads when the daemon starts
    from skuferry.config.schema.settings import DaemonSettings
    from skuferry.service.workspaces import Shard


def run(
    config_path: Path | None,
    *,
    workspaces: Path | None,
    shard: Shard | None,
    listen: str | None,
    console_token_file: Path | None,
    console_token_env: str | None,
    max_runs: int | None = None,
) -> int:
    """Serve until stopped; 0 on a clean stop. ``shard`` comes with ``workspaces``."""
    if workspaces is not None and shard is not None:
        from skuferry.service import fleet

        console = console_settings(console_token_file, console_token_env, listen=listen)
        return fleet.serve(
            workspaces, shard=shard, listen=listen, console=console, max_runs=max_runs
        )
    if listen is not None or console_token_file is not None or console_token_env is not None:
        raise errors.UsageError(
            "--listen and --console-token-* go with --workspaces; one workspace: [daemon] listen, "
            "console_token_file, console_token_env"
        )
    if max_runs is not None:
        raise errors.UsageError("--max-runs goes with --workspaces: one workspace runs alone")
    from skuferry.service import daemon

    return daemon.serve(config_path)


def console_settings(
    file: Path | None, env: str | None, *, listen: str | None
) -> DaemonSettings | None:
    """The fleet's page token, given by flags, checked as ``[daemon]`` checks its keys."""
    if file is None and env is None:
        return None
    if listen is None:
        raise errors.UsageError("--console-token-file/--console-token-env need --listen")
    from pydantic import ValidationError

    from skuferry.config.schema.settings import DaemonSettings

    try:
        return DaemonSettings(console_token_file=file, console_token_env=env)
    except ValidationError as exc:
        problems = [f"--console-token-*: {e['msg']}" for e in exc.errors()]
        raise errors.ConfigError(problems) from None
