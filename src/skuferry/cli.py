"""The command line: parse the arguments and call the verb's action (one per verb); every
error becomes a message and an exit code here.

sync   one run              plan   sync --dry-run
run    the daemon           status what the mirror knows
check  config, source, one authenticated read
demo   the embedded default (sandbox API + sample catalog)
sandbox  serve the local stand-in of the CMS API
rejected the products refused or failed, with stage and reason
retry  send rejected or failed products again
init   propose a config from an export or API, show it at work, write it
explain  one product's story: where it is, what the CMS has, why, what next
undo   put back on the CMS what one run changed
accept-shape  the source's shape now is the contract (after a refused change of shape)
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from skuferry import __version__, errors, logs

if TYPE_CHECKING:  # the verbs load their machinery lazily: `skuferry --help` stays fast
    from skuferry.service.workspaces import Shard

F = TypeVar("F", bound=Callable[..., Any])

SUMMARY_LIMIT = 300  # a verb's first sentence, never cut
EPILOG = (
    f"Exit codes: {errors.EXIT_OK} in step; {errors.EXIT_PARTIAL} some products rejected or "
    f"failed; {errors.EXIT_USAGE} usage, config or a safety guard (nothing done); "
    f"{errors.EXIT_UNAVAILABLE} the API or the source unreachable, or the key refused; "
    f"{errors.EXIT_TEMPFAIL} another run holds the lock, or the ready file never came; "
    f"{errors.EXIT_INTERRUPTED} stopped by a signal; {errors.EXIT_SOFTWARE} an internal error."
    "\n\nEach command's options: skuferry COMMAND --help. The documentation: docs/ in the "
    "source (docs/commands.md; exit codes in docs/operations/exit-codes.md), built as a "
    "site by python3 dev.py docs."
)

config_option = click.option(
    "--config",
    "-c",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="SKUFERRY_CONFIG",
    show_envvar=True,
    help="The TOML config file.",
)


def guarded(fn: F) -> F:
    """Map every failure to its message (``service.failures``, the one wording the fleet's
    lines share) and the contract's exit code, on stderr: the only place that does."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return _traced(fn, *args, **kwargs)
        except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - worded, then exit
            _fail(exc, quiet=bool(kwargs.get("quiet")))

    return wrapper  # type: ignore[return-value]


def _fail(exc: BaseException, *, quiet: bool) -> None:
    from skuferry.service import failures

    said = failures.describe(exc)
    if isinstance(exc, errors.LockHeld) and quiet:
        pass  # cron's overlapping run: the exit code (75) says it
    elif said.details:
        click.echo(f"skuferry: {said.headline}:", err=True)
        for detail in said.details:
            click.echo(f"  {detail}", err=True)
    else:
        hint = " (run with --debug for the traceback)" if said.internal and not _debugging() else ""
        click.echo(f"skuferry: {said.headline}{hint}", err=True)
    sys.exit(failures.exit_code(exc))


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

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Each verb's first sentence whole, wrapped: click's default cuts it with "..." at
        45 characters."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=SUMMARY_LIMIT)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

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


@click.group(cls=_Verbs, context_settings={"help_option_names": ["-h", "--help"]}, epilog=EPILOG)
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


def keys_options(only_help: str) -> Callable[[F], F]:
    """``--only``, ``--keys-from FILE`` and the ``KEY`` arguments: a run of named products."""

    def apply(fn: F) -> F:
        fn = click.argument("keys", nargs=-1, metavar="[KEY]...")(fn)
        fn = click.option(
            "--keys-from",
            type=click.Path(dir_okay=False, exists=True, path_type=Path),
            help="Only the keys listed in FILE, one a line (# comments); implies --only.",
        )(fn)
        return click.option("--only", is_flag=True, help=only_help)(fn)

    return apply


def _fleet_args(ctx: click.Context, workspaces: Path | None, shard: str | None) -> Shard | None:
    """The parsed ``--shard``, after checking the fleet options go together."""
    if workspaces is None:
        if shard is not None:
            raise errors.UsageError("--shard needs --workspaces DIR")
        return None
    from skuferry.service.workspaces import Shard  # the config's machinery: only for a fleet

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
    help="Write even when the change, gone or replacement guard ([safety]) would stop the "
    "run. Never accepts a change of the source's shape (see --accept-shape).",
)
@click.option(
    "--accept-shape",
    is_flag=True,
    help="First accept the source's shape as it is now (as `skuferry accept-shape`), then run.",
)
@click.option(
    "--moved-cms",
    is_flag=True,
    help="The CMS workspace moved (another base URL or keys): bind the state to this one "
    "and walk it to find each product again (implies --verify).",
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
@keys_options(
    "Only the KEYs named after the options: read, planned and written; nothing is "
    "marked gone. While another run is writing, they go to its urgent lane."
)
@workspaces_option
@shard_option
@click.pass_context
@guarded
def sync(
    ctx: click.Context,
    /,
    *,
    config_path: Path | None,
    as_json: bool,
    quiet: bool,
    only: bool,
    keys_from: Path | None,
    keys: tuple[str, ...],
    workspaces: Path | None,
    shard: str | None,
    **flags: Any,
) -> None:
    """One run: pull, diff, check-then-create/update, report.

    With --only KEY ... (or --keys-from FILE), a run of those products only.
    With --workspaces DIR, one run of every workspace in DIR, side by side.
    """
    from skuferry.actions import sync as action
    from skuferry.models import RunOptions

    named = action.named_keys(only=only, keys=keys, keys_from=keys_from)
    chosen = _fleet_args(ctx, workspaces, shard)
    if chosen is not None and named is not None:
        raise errors.UsageError("--only names keys of one workspace: use --config")
    if flags["moved_cms"]:  # a moved workspace is walked: each product is found again
        flags["verify"] = True
    options = RunOptions(**flags, only=named)  # --dry-run, --verify, --force, ...
    _configure_logs(ctx, quiet=quiet)
    if workspaces is not None and chosen is not None:
        sys.exit(action.sync_fleet(workspaces, chosen, options, as_json=as_json, quiet=quiet))
    sys.exit(action.sync(config_path, options, as_json=as_json, quiet=quiet))


@main.command("plan")
@config_option
@json_option
@click.option(
    "--full",
    is_flag=True,
    help="Plan against the whole source even when it is set up for incremental pulls.",
)
@keys_options("Only the KEYs named after the options, as sync --dry-run --only plans them.")
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
    from skuferry.actions.plan import plan
    from skuferry.actions.sync import named_keys

    named = named_keys(only=only, keys=keys, keys_from=keys_from)
    _configure_logs(ctx)
    sys.exit(plan(config_path, as_json=as_json, full=full, only=named))


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
@click.option(
    "--max-runs",
    type=click.IntRange(min=1),
    metavar="N",
    help="With --workspaces: at most N workspaces' runs at once; the others wait for a slot, "
    "late but never skipped (default: twice the cores, or the container's CPU limit).",
)
@click.pass_context
@guarded
def run(ctx: click.Context, /, *, workspaces: Path | None, shard: str | None, **args: Any) -> None:
    """The daemon: sync on the configured schedule until SIGTERM/SIGINT.

    With --workspaces DIR, one daemon per workspace of DIR in this process.
    """
    from skuferry.actions.run import run as action

    _configure_logs(ctx)
    chosen = _fleet_args(ctx, workspaces, shard)
    sys.exit(action(workspaces=workspaces, shard=chosen, **args))


@main.command()
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print the status as one JSON object.")
@click.option(
    "--limit", default=20, show_default=True, help="How many rejected products and runs to list."
)
@click.pass_context
@guarded
def status(ctx: click.Context, /, **args: Any) -> None:
    """What the mirror knows: counts per state, last runs, rejected products, open intents."""
    from skuferry.actions.status import status as action

    _configure_logs(ctx)
    sys.exit(action(**args))


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
def check(ctx: click.Context, /, **args: Any) -> None:
    """Validate the config, read the source, make one authenticated read against the API."""
    from skuferry.actions.check import check as action

    _configure_logs(ctx)
    sys.exit(action(**args))


@main.command()
@click.option("--keep", is_flag=True, help="Keep the sandbox running after the demo until Ctrl-C.")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to write the demo's config and state (default: a new temporary folder).",
)
@click.pass_context
@guarded
def demo(ctx: click.Context, /, **args: Any) -> None:
    """The embedded default: a local sandbox API and the shipped sample catalog."""
    from skuferry.actions.demo import demo as action

    _configure_logs(ctx, quiet=True)
    sys.exit(action(**args))


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
def rejected(ctx: click.Context, /, **args: Any) -> None:
    """The products the last runs left rejected or failed: stage, reason, source line."""
    from skuferry.actions.rejected import rejected as action

    _configure_logs(ctx)
    sys.exit(action(**args))


@main.command()
@config_option
@click.option("--all", "every", is_flag=True, help="Every rejected or failed product.")
@json_option
@click.argument("keys", nargs=-1, metavar="[KEY]...")
@click.pass_context
@guarded
def retry(ctx: click.Context, /, **args: Any) -> None:
    """Send rejected or failed products again, without a source change.

    By the normal rules: read from the source, check-then-create, budgets, field
    ownership. Prints what happened to each key.
    """
    from skuferry.actions.retry import retry as action

    _configure_logs(ctx)
    sys.exit(action(**args))


@main.command()
@click.option(
    "--from",
    "origin",
    required=True,
    metavar="PATH_OR_URL",
    help="The export (CSV, TSV, XLSX, JSON Lines, XML/BMEcat; .gz and .zip too), as a file "
    "or at an https:// or sftp:// URL, or a JSON API's URL; only a sample is read.",
)
@click.option(
    "--preset",
    metavar="NAME",
    help="Read the API of a system the presets know (akeneo, shopify, business-central, "
    "odoo, woocommerce, magento) at --from URL, its secret from the variable its example "
    "names.",
)
@click.option(
    "--base-url",
    metavar="URL",
    help="The CMS workspace's URL for [api] base_url (default: the local sandbox).",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("skuferry.toml"),
    show_default=True,
    help="Where to write the config (0600).",
)
@click.option(
    "--source",
    "source",
    multiple=True,
    metavar="KEY=VALUE",
    help="A key a file at an https:// or sftp:// URL is read with (sftp_known_hosts, "
    "sftp_key_file, sftp_password_env, ca_bundle, allowed_origins, ...), written into the "
    "config; repeat it. Secret headers: SKUFERRY_SOURCE__HEADERS.",
)
@click.option("--yes", "-y", is_flag=True, help="Take the proposal as it is: ask nothing.")
@click.option("--force", is_flag=True, help="Replace --output if it exists.")
@click.pass_context
@guarded
def init(ctx: click.Context, /, **args: Any) -> None:
    """Propose a config from your export or API, show it at work, and write it.

    Detects the format, encoding, delimiter, header, number and date styles, the key
    and the fields, says how sure it is, shows three records as read and as sent and
    the rows it would refuse (writing nothing to the CMS), and on a terminal asks
    before writing.
    """
    from skuferry.actions.init import init as action

    _configure_logs(ctx, quiet=True)
    sys.exit(action(**args, interactive=_on_terminal(), command=_command_line("init", args)))


def _on_terminal() -> bool:
    """Someone to ask: stdin and stdout are a terminal."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def _command_line(verb: str, args: dict[str, Any]) -> str:
    """The command as a user would type it again (its options, not secrets: init has none)."""
    import shlex

    words = ["skuferry", verb]
    for name, value in args.items():
        if value is None or value is False or value == ():
            continue
        flag = "--" + ("from" if name == "origin" else name.replace("_", "-"))
        for one in value if isinstance(value, tuple) else (value,):
            words += [flag] if one is True else [flag, shlex.quote(str(one))]
    return " ".join(words)


@main.command()
@config_option
@click.argument("run", type=click.IntRange(min=1), metavar="RUN")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Read the products and say what would be put back; write nothing.",
)
@json_option
@keys_options("Only the KEYs named after the options: the rest of the run stays as it is.")
@click.pass_context
@guarded
def undo(
    ctx: click.Context,
    /,
    *,
    config_path: Path | None,
    run: int,
    dry_run: bool,
    as_json: bool,
    only: bool,
    keys_from: Path | None,
    keys: tuple[str, ...],
) -> None:
    """Put back on the CMS what run RUN changed (the run_id of sync --json, or status).

    Each field that run updated goes back to its value before it, unless the CMS holds
    something else by now (left and listed); products it created are archived with the
    [gone] patch (else listed); products it archived are restored. The source that run
    read is refused from then on, until the export changes or sync --force.
    """
    from skuferry.actions.sync import named_keys
    from skuferry.actions.undo import undo as action

    named = named_keys(only=only, keys=keys, keys_from=keys_from)
    _configure_logs(ctx)
    sys.exit(action(config_path, run, only=named, dry_run=dry_run, as_json=as_json))


@main.command()
@config_option
@click.argument("key", metavar="KEY")
@click.option("--json", "as_json", is_flag=True, help="Print the story as one JSON object.")
@click.pass_context
@guarded
def explain(ctx: click.Context, /, *, config_path: Path | None, key: str, as_json: bool) -> None:
    """One product's story: where it is in the source, what the CMS has, its state and why,
    the last runs that wrote it (field by field), and what the next run would do."""
    from skuferry.actions.explain import explain as action

    _configure_logs(ctx)
    sys.exit(action(config_path, key, as_json=as_json))


@main.command("accept-shape")
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print what was accepted as one JSON object.")
@click.pass_context
@guarded
def accept_shape(ctx: click.Context, /, **args: Any) -> None:
    """Accept the source's shape as it is now: the next sync is held to it.

    After a sync refused a change of shape (a column renamed or dropped, a field moved,
    keys reformatted). A field the source no longer gives is then left alone on the CMS;
    keys that came back reformatted keep their products. Sends nothing to the CMS.
    """
    from skuferry.actions.accept_shape import accept_shape as action

    _configure_logs(ctx)
    sys.exit(action(**args))
