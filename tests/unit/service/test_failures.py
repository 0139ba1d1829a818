"""One wording for a failure: the command line's message and a fleet workspace's line
are the same words (``service.failures.describe``), and the same exit code."""

from __future__ import annotations

import threading
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from skuferry import errors
from skuferry.cli import guarded
from skuferry.config.schema import Settings
from skuferry.models import RunOptions, RunSummary
from skuferry.service import failures, fleet_sync
from tests.unit.service.test_daemon import make_settings

FAILURES = [
    errors.ConfigError(["acme.toml: line 3: unterminated string", "at 'api': required"]),
    errors.AuthError(401, "UNAUTHORIZED", "bad key"),
    errors.Unreachable("ConnectError: [Errno 111] Connection refused"),
    errors.StateError("cannot open state file /x.db: disk I/O error"),
    errors.LockHeld("another skuferry run holds the lock on /x.db"),
    RuntimeError("a bug"),
]


def cli_says(exc: BaseException) -> tuple[str, int]:
    @click.command()
    @guarded
    def boom() -> None:
        raise exc

    done = CliRunner().invoke(boom, [])
    return done.stderr, done.exit_code


def fleet_says(exc: BaseException, tmp_path: Path) -> tuple[str, int]:
    (tmp_path / "acme.toml").write_text("")

    def load(_path: Path | None) -> Settings:
        if isinstance(exc, errors.ConfigError):
            raise exc
        return make_settings(tmp_path / "acme")

    def run(_settings: Settings, _options: RunOptions, _stop: threading.Event) -> RunSummary:
        raise exc

    (result,) = fleet_sync.sync_all(tmp_path, RunOptions(dry_run=True), run=run, load=load)
    return result.line(), result.exit_code


@pytest.mark.parametrize("exc", FAILURES, ids=lambda e: type(e).__name__)
def test_a_workspace_line_says_what_the_command_line_says(
    exc: BaseException, tmp_path: Path
) -> None:
    said, code = cli_says(exc)
    line, fleet_code = fleet_says(exc, tmp_path)
    assert fleet_code == code == errors.exit_code_of(exc)
    printed = said.removeprefix("skuferry: ").removesuffix("\n")
    printed = printed.removesuffix(" (run with --debug for the traceback)")
    # the command line puts a config's problems one a line; the workspace's line, after ';'
    one_line = printed.replace(":\n  ", ": ", 1).replace("\n  ", "; ")
    assert line == f"acme: failed (exit {code}): {one_line}"
    assert one_line == failures.describe(exc).one_line()


def test_a_quiet_overlapping_run_says_nothing_and_exits_75() -> None:
    @click.command()
    @click.option("--quiet", is_flag=True)
    @guarded
    def cron(*, quiet: bool) -> None:
        raise errors.LockHeld("another skuferry run holds the lock")

    done = CliRunner().invoke(cron, ["--quiet"])
    assert (done.stderr, done.exit_code) == ("", 75)


def test_ctrl_c_is_interrupted_and_130() -> None:
    assert cli_says(KeyboardInterrupt()) == ("skuferry: interrupted\n", 130)
