"""``skuferry sync --workspaces DIR [--shard K/N]``: every workspace once, each in its
own thread, each reported under its name; the process exits with the worst code.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from skuferry import errors, logs
from skuferry.config.load import load_settings
from skuferry.config.schema import Settings
from skuferry.models import RunOptions
from skuferry.service.failures import describe, exit_code
from skuferry.service.metrics import RunOutcome
from skuferry.service.runner import run_watched
from skuferry.service.workspaces import Shard, load_workspace, workspace_files

# The fleet's events keep the logger they were logged under before the fleet's sync had
# a module of its own: a log query on the logger field finds them as before.
log = logs.get("skuferry.service.fleet")

# "worst" among exit codes, least bad first: partial < locked < unavailable < config
# < internal error < interrupted (the operator stopped it)
SEVERITY = (
    errors.EXIT_OK,
    errors.EXIT_PARTIAL,
    errors.EXIT_TEMPFAIL,
    errors.EXIT_UNAVAILABLE,
    errors.EXIT_USAGE,
    errors.EXIT_SOFTWARE,
    errors.EXIT_INTERRUPTED,
)


def worst(codes: list[int]) -> int:
    """The worst of ``codes`` (``SEVERITY``; an unknown code counts as an internal error)."""
    rank = {code: i for i, code in enumerate(SEVERITY)}
    software = rank[errors.EXIT_SOFTWARE]
    return max(codes, key=lambda c: rank.get(c, software), default=errors.EXIT_OK)


@dataclass
class Result:
    """How one workspace's run went: its summary, or the error that ended it."""

    name: str
    exit_code: int
    outcome: RunOutcome | None = None
    error: str | None = None

    def line(self) -> str:
        if self.outcome is not None and self.outcome.summary is not None:
            return f"{self.name}: {self.outcome.one_line()}"
        return f"{self.name}: failed (exit {self.exit_code}): {self.error}"

    def as_json(self) -> dict[str, Any]:
        if self.outcome is not None and self.outcome.summary is not None:
            return {**self.outcome.summary.as_json(), "exit_code": self.exit_code}
        return {"error": self.error, "exit_code": self.exit_code}


Runner = Callable[[Settings, RunOptions, threading.Event], Any]


def _engine_run(settings: Settings, options: RunOptions, stop: threading.Event) -> Any:
    from skuferry.sync.engine import run_once  # the whole sync stack: load it when used

    return run_once(settings, options, stop=stop)


def sync_all(
    directory: Path,
    options: RunOptions,
    *,
    shard: Shard = Shard(),
    stop: threading.Event | None = None,
    run: Runner = _engine_run,
    load: Callable[[Path | None], Settings] = load_settings,
    on_result: Callable[[Result], None] | None = None,
) -> list[Result]:
    """Run every workspace of ``directory`` in ``shard`` once, all at the same time.

    Never raises for one workspace: its error is its ``Result``. ``on_result`` hears each
    as it finishes (the CLI prints its line then).
    """
    stop = stop or threading.Event()
    names = workspace_files(directory, shard)

    def one(name: str, path: Path) -> Result:
        try:
            settings = load_workspace(name, path, load)
        except Exception as exc:  # noqa: BLE001 - named under the workspace, the rest go on
            result = Result(name, exit_code(exc), error=describe(exc).one_line())
        else:
            with structlog.contextvars.bound_contextvars(workspace=name):
                outcome = run_watched(
                    settings,
                    lambda: run(settings, options, stop),
                    watched=not options.dry_run,
                    stopping=stop.is_set,
                )
            if outcome.exception is not None:
                failure = outcome.exception
                result = Result(
                    name, exit_code(failure), outcome, error=describe(failure).one_line()
                )
            else:
                result = Result(name, outcome.exit_code, outcome)
        log.info("fleet.sync.finished", workspace=name, exit_code=result.exit_code)
        if on_result is not None:
            on_result(result)
        return result

    if not names:
        return []
    with ThreadPoolExecutor(len(names), thread_name_prefix="skuferry-ws") as pool:
        futures = [pool.submit(one, name, path) for name, path in names.items()]
        return sorted((f.result() for f in futures), key=lambda r: r.name)
