"""The verbs: parse, call the core, report; every error becomes a message and an exit code here.

sync   one run              plan   sync --dry-run
run    the daemon           status what the mirror knows
check  config, source, one authenticated read
demo   the embedded default (sandbox API + sample catalog)
sandbox  serve the local stand-in of the CMS API
rejected the products refused or failed, with stage and reason
retry  send rejected or failed products again
"""

from __future__ import annotations

import functools
import importlib
import json
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from skuferry import __version__, errors, files, logs
from skuferry.models import RunSummary

if TYPE_CHECKING:  # the verbs load their machinery lazily: `skuferry --help` stays fast
    from skuferry.config.schema import Settings

F = TypeVar("F", bound=Callable[..., Any])
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

config_option = click.option(
    "--config",
    "-c",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="SKUFERRY_CONFIG",
    show_envvar=True,
    help="The TOML config file.",
)


def _fail(message: str, code: int) -> None:
    click.echo(f"skuferry: {message}", err=True)
    sys.exit(code)


def guarded(fn: F) -> F:
    """Map every failure to one message and the contract's exit code: the only place that does."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        quiet = bool(kwargs.get("quiet"))
        try:
            return _traced(fn, *args, **kwargs)
        except errors.LockHeld as exc:
            if not quiet:
                click.echo(f"skuferry: {exc}", err=True)
            sys.exit(exc.exit_code)
        except errors.ConfigError as exc:
            click.echo("skuferry: the configuration has problems:", err=True)
            for problem in exc.problems:
                click.echo(f"  {problem}", err=True)
            sys.exit(exc.exit_code)
        except errors.AuthError as exc:
            _fail(
                f"the API key was refused ({exc}); check [api] api_key / SKUFERRY_API_KEY",
                exc.exit_code,
            )
        except errors.Unreachable as exc:
            _fail(f"the API could not be reached: {exc}", exc.exit_code)
        except errors.SkuferryError as exc:
            _fail(str(exc), exc.exit_code)
        except KeyboardInterrupt:
            _fail("interrupted", errors.EXIT_INTERRUPTED)
        except Exception as exc:  # noqa: BLE001 - a bug: one masked line (--debug: traceback)
            hint = "" if _debugging() else " (run with --debug for the traceback)"
            _fail(
                f"internal error: {logs.redact_text(f'{type(exc).__name__}: {exc}')}{hint}",
                errors.EXIT_SOFTWARE,
            )

    return wrapper  # type: ignore[return-value]


def _debugging() -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and (ctx.find_root().obj or {}).get("debug"))


def _traced(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``fn``; with ``--debug``, print the traceback of what it raised, secrets masked."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        if _debugging():
            click.echo(logs.redacted_traceback(exc), err=True, nl=False)
        raise


class _Verbs(click.Group):
    """The verbs. ``sandbox`` (an HTTP server, ~0.1 s of imports) loads only when asked for,
    so ``skuferry sync`` starts without it; ``--help`` still lists it."""

    lazy: dict[str, tuple[str, str]] = {"sandbox": ("skuferry.sandbox.cli", "sandbox_command")}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is None and cmd_name in self.lazy:
            module, name = self.lazy[cmd_name]
            found = getattr(importlib.import_module(module), name)
            self.add_command(found, cmd_name)
        if found is not None:
            _accept_log_options(found)
        return found


def _to_root(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """A log option given after the verb counts as if given before it."""
    if value in (None, 0, False):
        return value
    root = ctx.find_root()
    root.ensure_object(dict)
    if param.name == "verbose":
        root.obj["verbose"] = max(root.obj.get("verbose", 0), value)
    elif param.name == "debug":
        root.obj.update(debug=True, verbose=2)
    else:
        root.obj["log_format"] = value
    return value


def _accept_log_options(command: click.Command) -> None:
    """``skuferry sync -c my.toml -v``: the log options work after the verb too."""
    if any(p.name == "verbose" for p in command.params):
        return
    command.params.extend(
        [
            click.Option(
                ["-v", "--verbose"],
                count=True,
                expose_value=False,
                callback=_to_root,
                help="More log output (-v info, -vv debug); also before the verb.",
            ),
            click.Option(
                ["--debug"],
                is_flag=True,
                expose_value=False,
                callback=_to_root,
                help="Debug logs and tracebacks; also before the verb.",
            ),
            click.Option(
                ["--log-format"],
                type=click.Choice(["auto", "json", "console"]),
                default=None,
                expose_value=False,
                callback=_to_root,
                help="Log rendering; also before the verb.",
            ),
        ]
    )


@click.group(cls=_Verbs, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="skuferry")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
@click.option(
    "--debug",
    is_flag=True,
    help="Debug logs, and the traceback of a failure (secrets shown as ***).",
)
@click.option(
    "--log-format",
    type=click.Choice(["auto", "json", "console"]),
    default="auto",
    help="Log rendering; auto = console on a terminal, JSON otherwise.",
)
@click.pass_context
def main(ctx: click.Context, verbose: int, debug: bool, log_format: str) -> None:
    """Keep a CMS product catalog in step with an ERP/PIM source."""
    ctx.ensure_object(dict)
    ctx.obj["verbose"] = 2 if debug else verbose
    ctx.obj["debug"] = debug
    ctx.obj["log_format"] = log_format


def _configure_logs(ctx: click.Context, *, quiet: bool = False) -> None:
    verbose = ctx.find_root().obj.get("verbose", 0) if ctx.find_root().obj else 0
    fmt = ctx.find_root().obj.get("log_format", "auto") if ctx.find_root().obj else "auto"
    level = logs.cli_level(verbose=verbose, quiet=quiet, on_tty=sys.stderr.isatty())
    logs.configure(level=level, json=None if fmt == "auto" else fmt == "json")


def _settings(config_path: Path | None) -> Settings:
    from skuferry.config.load import load_settings

    return load_settings(config_path)


json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print the JSON summary as the last line of stdout."
)
workspaces_option = click.option(
    "--workspaces",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    metavar="DIR",
    help="Every workspace of DIR (one <name>.toml each, a complete config), side by side.",
)
shard_option = click.option(
    "--shard",
    metavar="K/N",
    help="With --workspaces: only the workspaces in shard K of N (0 <= K < N), by name.",
)


def _fleet_args(ctx: click.Context, workspaces: Path | None, shard: str | None) -> Any:
    """The parsed ``--shard``, after checking the fleet options go together."""
    if workspaces is None:
        if shard is not None:
            raise errors.UsageError("--shard needs --workspaces DIR")
        return None
    from skuferry.service.fleet import Shard  # the daemon's machinery: only for a fleet

    source = ctx.get_parameter_source("config_path")
    if source is click.core.ParameterSource.COMMANDLINE:
        raise errors.UsageError("--workspaces DIR and --config are either-or")
    return Shard.parse(shard) if shard is not None else Shard()


@main.command()
@config_option
@click.option("--dry-run", is_flag=True, help="Plan only: change nothing, remote or local.")
@json_option
@click.option(
    "--quiet", "-q", is_flag=True, help="Print nothing unless something is wrong (for cron)."
)
@click.option(
    "--verify", is_flag=True, help="Walk the remote to find products deleted or edited there."
)
@click.option(
    "--force",
    is_flag=True,
    help="Write even when the change or gone guard ([safety]) would stop the run.",
)
@click.option(
    "--allow-empty-source",
    is_flag=True,
    help="Accept an empty source while the mirror holds products, and an empty [[join]].",
)
@click.option(
    "--full",
    is_flag=True,
    help="Pull the whole source even when it is set up for incremental pulls.",
)
@click.option(
    "--only",
    is_flag=True,
    help="Only the KEYs named after the options: read, planned and written; nothing is "
    "marked gone. While another run is writing, they go to its urgent lane.",
)
@click.option(
    "--keys-from",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Only the keys listed in FILE, one a line (# comments); implies --only.",
)
@workspaces_option
@shard_option
@click.argument("keys", nargs=-1, metavar="[KEY]...")
@click.pass_context
@guarded
def sync(
    ctx: click.Context,
    /,
    *,
    only: bool,
    keys_from: Path | None,
    keys: tuple[str, ...],
    workspaces: Path | None,
    shard: str | None,
    **options: Any,
) -> None:
    """One run: pull, diff, check-then-create/update, report.

    With --only KEY ... (or --keys-from FILE), a run of those products only.
    With --workspaces DIR, one run of every workspace in DIR, side by side.
    """
    named = _named_keys(only=only, keys=keys, keys_from=keys_from)
    chosen = _fleet_args(ctx, workspaces, shard)
    if chosen is not None and workspaces is not None:
        if named is not None:
            raise errors.UsageError("--only names keys of one workspace: use --config")
        options.pop("config_path")
        _sync_fleet(ctx, workspaces, chosen, **options)
    _sync(ctx, **options, only=named)


def _sync_fleet(
    ctx: click.Context,
    directory: Path,
    shard: Any,
    *,
    as_json: bool,
    quiet: bool,
    **flags: Any,
) -> None:
    """``sync --workspaces``: every workspace once; a line each; the worst exit code."""
    from skuferry.models import RunOptions
    from skuferry.service import fleet

    _configure_logs(ctx, quiet=quiet)
    stop = threading.Event()
    echo_lock = threading.Lock()

    def report(result: fleet.Result) -> None:
        if not quiet or result.exit_code != errors.EXIT_OK:
            with echo_lock:
                click.echo(result.line(), err=quiet)

    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in _STOP_SIGNALS}
    try:
        results = fleet.sync_all(
            directory, RunOptions(**flags), shard=shard, stop=stop, on_result=report
        )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if not results and not quiet:
        click.echo(f"no workspaces in {directory} (shard {shard})")
    if as_json:
        data = {"workspaces": {r.name: r.as_json() for r in results}}
        click.echo(json.dumps(data, ensure_ascii=False))
    sys.exit(fleet.worst([r.exit_code for r in results]))


def _named_keys(
    *, only: bool, keys: tuple[str, ...], keys_from: Path | None
) -> tuple[str, ...] | None:
    from skuferry.sync.read.named import read_keys, unique

    if keys and not (only or keys_from):
        raise errors.UsageError(f"keys given without --only: {' '.join(keys[:3])}")
    if not (only or keys_from):
        return None
    named = unique([*keys, *(read_keys(keys_from) if keys_from else [])])
    if not named:
        raise errors.UsageError("--only needs at least one KEY (or --keys-from FILE)")
    return tuple(named)


@main.command("plan")
@config_option
@json_option
@click.option(
    "--full",
    is_flag=True,
    help="Plan against the whole source even when it is set up for incremental pulls.",
)
@click.option(
    "--only",
    is_flag=True,
    help="Only the KEYs named after the options, as sync --dry-run --only plans them.",
)
@click.option(
    "--keys-from",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Only the keys listed in FILE, one a line (# comments); implies --only.",
)
@click.argument("keys", nargs=-1, metavar="[KEY]...")
@click.pass_context
@guarded
def plan_cmd(
    ctx: click.Context,
    /,
    config_path: Path | None,
    *,
    as_json: bool,
    full: bool,
    only: bool,
    keys_from: Path | None,
    keys: tuple[str, ...],
) -> None:
    """What a sync would do (same as sync --dry-run); changes nothing."""
    _sync(
        ctx,
        config_path,
        dry_run=True,
        as_json=as_json,
        quiet=False,
        verify=False,
        force=False,
        allow_empty_source=False,
        full=full,
        only=_named_keys(only=only, keys=keys, keys_from=keys_from),
    )


def _sync(
    ctx: click.Context,
    config_path: Path | None,
    *,
    dry_run: bool,
    as_json: bool,
    quiet: bool,
    verify: bool,
    force: bool,
    allow_empty_source: bool,
    full: bool,
    only: tuple[str, ...] | None,
) -> None:
    from skuferry.models import RunOptions
    from skuferry.service import quick

    _configure_logs(ctx, quiet=quiet)
    plain = not dry_run and only is None  # a run that leaves the quick lane its record
    settings = _settings(config_path)
    prepared = quick.prepare(settings) if plain else None
    options = RunOptions(
        dry_run=dry_run,
        verify=verify,
        force=force,
        allow_empty_source=allow_empty_source,
        full=full,
        only=only,
    )
    summary = _run_sync(settings, options, quiet=quiet, watched=not dry_run)
    if summary is None:  # named keys handed to the run holding the lock
        if not quiet:
            click.echo(
                f"handed {len(only or ())} key(s) to the running skuferry run: its urgent lane "
                "sends them next (see `skuferry status` / `skuferry rejected`)"
            )
        sys.exit(errors.EXIT_OK)
    if plain:
        quick.remember(prepared, settings.state.path)
    _finish(summary, as_json=as_json, quiet=quiet)


def _run_sync(settings: Any, options: Any, *, quiet: bool, watched: bool) -> RunSummary | None:
    """One run, with progress, signals and monitoring hooks; None when handed over."""
    from skuferry.service import operator
    from skuferry.state.lock import run_lock

    if options.only is None or options.dry_run:
        return _run_watched(settings, options, quiet=quiet, watched=watched)
    try:
        with run_lock(settings.state.path):
            pass  # free: this process runs the keys (the run takes the lock again)
    except errors.LockHeld:  # a run is writing: its urgent lane takes the keys
        return operator.hand_over(
            settings,
            options.only,
            lambda: _run_watched(settings, options, quiet=quiet, watched=watched),
        )
    return _run_watched(settings, options, quiet=quiet, watched=watched)


def _run_watched(settings: Any, options: Any, *, quiet: bool, watched: bool) -> RunSummary:
    from skuferry.service import report
    from skuferry.service.runner import run_watched
    from skuferry.sync import engine

    stop = threading.Event()
    # SIGTERM (systemctl stop, a timeout) and Ctrl-C: stop sending, let the requests in
    # flight finish and be committed, then exit 130.
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in _STOP_SIGNALS}
    try:
        with report.progress(enabled=not quiet and sys.stderr.isatty()) as on_progress:
            outcome = run_watched(
                settings,
                lambda: engine.run_once(settings, options, stop=stop, on_progress=on_progress),
                watched=watched,  # a dry run pings no monitor and writes no metrics
            )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if outcome.exception is not None:
        raise outcome.exception  # the hooks have seen it; guarded() words it
    if outcome.summary is None:  # pragma: no cover - an outcome holds one or the other
        raise RuntimeError("a run ended with neither a summary nor an error")
    return outcome.summary


def _finish(summary: RunSummary, *, as_json: bool, quiet: bool) -> None:
    from skuferry.service import report

    code = summary.exit_code
    if as_json:
        click.echo(json.dumps(summary.as_json(), ensure_ascii=False))
    elif not quiet or code != errors.EXIT_OK:
        report.print_summary(summary, stream=sys.stdout if not quiet else sys.stderr)
    sys.exit(code)


@main.command()
@config_option
@workspaces_option
@shard_option
@click.option(
    "--listen",
    metavar="HOST:PORT",
    help="With --workspaces: serve /livez, /healthz, /metrics, the hooks and the operator's "
    "page of every workspace here (their own [daemon] listen is not used).",
)
@click.option(
    "--console-token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --listen: the operator's page takes its sign-in token from FILE (0600); "
    "without a token the page is read-only.",
)
@click.option(
    "--console-token-env",
    metavar="NAME",
    help="With --listen: ... or from the environment variable NAME.",
)
@click.pass_context
@guarded
def run(
    ctx: click.Context,
    *,
    config_path: Path | None,
    workspaces: Path | None,
    shard: str | None,
    listen: str | None,
    console_token_file: Path | None,
    console_token_env: str | None,
) -> None:
    """The daemon: sync on the configured schedule until SIGTERM/SIGINT.

    With --workspaces DIR, one daemon per workspace of DIR in this process.
    """
    from skuferry.service import daemon

    _configure_logs(ctx)
    chosen = _fleet_args(ctx, workspaces, shard)
    if chosen is not None and workspaces is not None:
        from skuferry.service import fleet

        console = _console_settings(console_token_file, console_token_env, listen=listen)
        sys.exit(fleet.serve(workspaces, shard=chosen, listen=listen, console=console))
    if listen is not None or console_token_file is not None or console_token_env is not None:
        raise errors.UsageError(
            "--listen and --console-token-* go with --workspaces; one workspace: [daemon] listen, "
            "console_token_file, console_token_env"
        )
    sys.exit(daemon.serve(config_path))


def _console_settings(file: Path | None, env: str | None, *, listen: str | None) -> Any:
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


@main.command()
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print the status as one JSON object.")
@click.option(
    "--limit", default=20, show_default=True, help="How many rejected products and runs to list."
)
@click.pass_context
@guarded
def status(ctx: click.Context, config_path: Path | None, as_json: bool, limit: int) -> None:
    """What the mirror knows: counts per state, last runs, rejected products, open intents."""
    from skuferry.service import report

    _configure_logs(ctx)
    settings = _settings(config_path)
    data = report.collect_status(settings, limit=limit)
    if as_json:
        click.echo(json.dumps(data, ensure_ascii=False, default=str))
    else:
        report.print_status(data)


@main.command()
@config_option
@click.option(
    "--show-config",
    is_flag=True,
    help="Also print the effective config (file + environment) as JSON, secrets as ***.",
)
@click.option(
    "--sample",
    type=click.IntRange(min=0),
    default=1,
    show_default=True,
    metavar="N",
    help="Show the first N records as read from the source and as mapped (0: none).",
)
@click.pass_context
@guarded
def check(ctx: click.Context, config_path: Path | None, show_config: bool, sample: int) -> None:
    """Validate the config, read the source, make one authenticated read against the API."""
    from skuferry.service import report

    _configure_logs(ctx)
    settings = _settings(config_path)
    if show_config:
        click.echo(json.dumps(settings.redacted(), indent=2, ensure_ascii=False))
    report.check(settings, sample=sample)


@main.command()
@click.option("--keep", is_flag=True, help="Keep the sandbox running after the demo until Ctrl-C.")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to write the demo's config and state (default: a new temporary folder).",
)
@click.pass_context
@guarded
def demo(ctx: click.Context, keep: bool, workdir: Path | None) -> None:
    """The embedded default: a local sandbox API and the shipped sample catalog."""
    from skuferry.service import demo as demo_mod

    _configure_logs(ctx, quiet=True)
    logs.configure(level="error")  # the demo narrates; per-product warnings are in its summary
    if workdir is not None:
        files.private_dir(workdir)  # it gets the state and a config holding the sandbox key
    sys.exit(demo_mod.run_demo(keep=keep, workdir=workdir))


@main.command()
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print the list as one JSON array.")
@click.option(
    "--csv",
    "csv_path",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Write the list to FILE as CSV (created 0600), for the data team.",
)
@click.pass_context
@guarded
def rejected(
    ctx: click.Context, config_path: Path | None, as_json: bool, csv_path: Path | None
) -> None:
    """The products the last runs left rejected or failed: stage, reason, source line."""
    from skuferry.service import operator

    _configure_logs(ctx)
    settings = _settings(config_path)
    letters = operator.dead_letters(settings)
    if csv_path is not None:
        operator.write_csv(letters, csv_path)
        click.echo(f"{len(letters)} rejected or failed product(s) written to {csv_path}")
    elif as_json:
        click.echo(operator.letters_json(letters))
    else:
        operator.print_letters(letters, sys.stdout)


@main.command()
@config_option
@click.option("--all", "every", is_flag=True, help="Every rejected or failed product.")
@json_option
@click.argument("keys", nargs=-1, metavar="[KEY]...")
@click.pass_context
@guarded
def retry(
    ctx: click.Context,
    config_path: Path | None,
    every: bool,
    as_json: bool,
    keys: tuple[str, ...],
) -> None:
    """Send rejected or failed products again, without a source change.

    By the normal rules: read from the source, check-then-create, budgets, field
    ownership. Prints what happened to each key.
    """
    from skuferry.models import RunOptions
    from skuferry.service import operator
    from skuferry.sync.read.named import unique

    _configure_logs(ctx)
    settings = _settings(config_path)
    if not keys and not every:
        raise errors.UsageError("name the keys to retry, or pass --all")
    wanted = unique(operator.retry_keys(settings, keys, every=every))
    if not wanted:
        click.echo("nothing to retry: no rejected or failed products")
        sys.exit(errors.EXIT_OK)
    before = operator.rows(settings, wanted)
    options = RunOptions(only=tuple(wanted), resend=frozenset(wanted))
    summary = _run_watched(settings, options, quiet=as_json, watched=True)
    found = operator.outcomes(
        wanted,
        before,
        operator.rows(settings, wanted),
        operator.dead_letters(settings, wanted),
        summary,
    )
    if as_json:
        data = {**summary.as_json(), "keys": [o.as_json() for o in found]}
        click.echo(json.dumps(data, ensure_ascii=False))
    else:
        click.echo(f"retried {len(found)} product(s):")
        operator.print_outcomes(found, sys.stdout)
    sys.exit(summary.exit_code)
