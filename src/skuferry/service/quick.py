"""The quick lane: ``skuferry sync`` from cron or systemd on an unchanged source, decided
without validating the config.

A full start imports pydantic and builds and validates the config models (~0.2 s of
a 0.35 s no-op) only to learn what the last run already knew: the source's ``stat()`` is
the same and nothing is pending. So every run that loads the config leaves a *record* in
the state file (``remember``): the config's identity as it was loaded, and the facts a
skipped run needs (the files to ``stat()``, the pending states, the auth check's
interval). The next ``skuferry sync`` (``attempt``) reads the config the way the loader
reads it (the one raw reading: the TOML, the environment in any case, ``$VAR``s, key
files and paths, without pydantic), takes the run lock, and skips when the engine's
skip decision would:

- the argument list is plain: ``sync`` with ``--config``, ``--json``, ``--quiet`` and
  the global ``-v`` / ``--log-format`` (no ``--full``, ``--verify``, ``--dry-run``,
  ``--only``, keys), and stderr is not a terminal (no progress bar to draw);
- the reading found no problem, nothing the load checks beyond it would refuse the
  config (a secret file readable by everyone, a secret's variable unset), its CA bundles
  are as they were, and its identity is the record's;
- the stored change token, built from that identity and each file's ``stat()`` exactly as
  the engine builds it, is the one the last committed run stored;
- nothing is pending, and the auth check is not due.

Otherwise it returns None and the full start runs, skip. The skipped run is the
engine's own: the same runs-table row, summary, log events and exit code.

The record exists only for configs whose skipped run does nothing the lane cannot do
the same way: a local file source, no ``[[join]]``, no monitor pings (a metrics
textfile is written as the run hooks write it). ``SKUFERRY_QUICK=off`` turns the lane
off (the full start always).

No secret reaches the record, not even hashed: the identity masks every secret value.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skuferry import errors, logs
from skuferry.config import raw

if TYPE_CHECKING:
    from skuferry.config.schema import Settings
    from skuferry.models import RunSummary
    from skuferry.state.mirror import Mirror

RECORD = "quick.record"  # meta row: JSON, written by remember(), read by attempt()
OFF = "SKUFERRY_QUICK"  # "off" (or 0, no, false): always the full start
_FORMAT = 2  # the record's layout; another number is no record
_LOG_FORMATS = ("auto", "json", "console")

# the lane's own events, under the engine's logger (the skipped run's are the skip decision's)
log = logs.get("skuferry.sync.engine")
# the loader's warning about a readable config holding a secret, under the loader's logger
_SECURITY_LOG = "skuferry.config.security"


@dataclass(frozen=True, slots=True)
class Call:
    """The arguments of a plain ``skuferry sync``."""

    config: str
    as_json: bool = False
    quiet: bool = False
    verbose: int = 0
    log_format: str = "auto"


def parse(argv: Sequence[str], env: Mapping[str, str]) -> Call | None:
    """The call, when ``argv`` is a plain ``sync``; None for anything else (click decides)."""
    verbose, log_format, config, as_json, quiet = 0, "auto", None, False, False
    args = iter(argv)
    for arg in args:  # global options, up to the verb
        if arg == "sync":
            break
        if arg in ("-v", "--verbose"):
            verbose += 1
        elif arg == "-vv":
            verbose += 2
        elif arg == "--log-format" or arg.startswith("--log-format="):
            log_format = arg.partition("=")[2] if "=" in arg else next(args, "")
            if log_format not in _LOG_FORMATS:
                return None
        else:
            return None
    else:
        return None  # no verb
    for arg in args:
        if arg == "--json":
            as_json = True
        elif arg in ("--quiet", "-q"):
            quiet = True
        elif arg in ("--config", "-c"):
            config = next(args, None)
            if config is None:
                return None  # click's usage error
        elif arg.startswith("--config="):
            config = arg.partition("=")[2]
        else:
            return None
    config = config if config is not None else env.get(raw.ENV_CONFIG, "")
    if not config:
        return None
    return Call(config, as_json=as_json, quiet=quiet, verbose=verbose, log_format=log_format)


# --- the lane ---------------------------------------------------------------------------


def read(call: Call, env: Mapping[str, str]) -> raw.RawConfig | None:
    """The config as the loader reads it; None when it has a problem (the full start words
    it) or its state file is not there yet."""
    try:
        found = raw.read(call.config, env)
    except errors.ConfigError:
        return None
    state = found.state_path
    if found.problems or state is None or not state.is_file():
        return None
    return found


def attempt(argv: Sequence[str], env: Mapping[str, str] | None = None) -> int | None:
    """Run a plain ``skuferry sync`` whose source is unchanged; its exit code, or None when
    the full start must run (anything else, or anything in doubt)."""
    environ = os.environ if env is None else env
    if environ.get(OFF, "").strip().lower() in ("off", "0", "no", "false"):
        return None
    call = parse(argv, environ)
    if call is None or sys.stderr.isatty():
        return None
    started = time.monotonic()
    config = read(call, environ)
    if config is None or config.state_path is None:
        return None
    level = logs.cli_level(verbose=call.verbose, quiet=call.quiet, on_tty=False)
    fmt = call.log_format
    logs.configure(level=level, json=None if fmt == "auto" else fmt == "json")

    from skuferry.state.lock import run_lock
    from skuferry.state.mirror import Mirror

    with ExitStack() as stack:
        try:
            stack.enter_context(run_lock(config.state_path))
            mirror = Mirror(config.state_path)
            stack.callback(mirror.close)
            record = _still_holds(mirror, config)
        except Exception as exc:  # noqa: BLE001 - a held lock, a state file that will not open
            log.debug("sync.quick", taken=False, why=f"{type(exc).__name__}: {exc}")
            return None  # the full start's to tell, in its words and with its hooks
        if record is None:
            return None
        try:
            return _skip(mirror, record, config, call, started)
        except errors.SkuferryError as exc:  # the run's own row could not be written
            print(f"skuferry: {exc}", file=sys.stderr)
            return exc.exit_code


def _still_holds(mirror: Mirror, config: raw.RawConfig) -> dict[str, Any] | None:
    """The record, when the run it describes may be skipped now; else None."""
    from skuferry.models import State
    from skuferry.sources.change_token import file_change_token
    from skuferry.sync import skip
    from skuferry.sync.write import auth_check

    try:
        record = json.loads(mirror.get_meta(RECORD) or "null")
    except ValueError:
        record = None
    why = mismatch(record, config)
    if why is None:
        why = _other_cms(mirror, config)
    if why is None:
        parts = [file_change_token(Path(p)) for p in record["files"]]
        states = tuple(State(s) for s in record["states"])
        why = skip.must_read(  # the skip decision's own rule and words
            skip.token(config.identity, parts),
            mirror.get_meta(skip.SKIP_META),
            lambda: skip.has_pending_work(mirror, states, record["archiving"]),
        )
        if why is None and auth_check.due(
            mirror.last_api_contact(), time.time(), minutes=record["auth"]
        ):
            why = "the auth check is due"
        if why is None:  # last: these read the secret files and CA bundles, which a declined
            why = _refused(record, config)  # lane would read for nothing
    log.debug("sync.quick", taken=why is None, why=why or "source unchanged")
    return record if why is None else None


def mismatch(record: Any, config: raw.RawConfig) -> str | None:
    """Why ``record`` does not describe the config read now (None: it does), from the
    reading alone."""
    if not isinstance(record, dict) or record.get("format") != _FORMAT:
        return "no record of the last run"
    if record.get("state") != str(config.state_path):
        return "another state file"
    if record.get("identity") != config.identity:
        return "the config or its environment changed"
    return None


def _other_cms(mirror: Mirror, config: raw.RawConfig) -> str | None:
    """Why the config's CMS may not be the one the state mirrors (the run's own rule,
    ``state.binding.compare``); a state bound to none yet takes the full start, which
    binds it."""
    from skuferry.state import binding

    bound = binding.recorded(mirror)
    current = binding.Binding.of_reading(config.data)
    if bound is None or current is None:
        return "the state is bound to no CMS yet"
    return binding.compare(bound, current)


def _refused(record: dict[str, Any], config: raw.RawConfig) -> str | None:
    """Why a skip would not be the full start's, from the files the config names."""
    if config.refused:
        return "the load would refuse it: " + "; ".join(config.refused)
    if record.get("bundles") != config.bundles:
        return "a CA bundle changed"
    return None


def _skip(
    mirror: Mirror, record: dict[str, Any], config: raw.RawConfig, call: Call, started: float
) -> int:
    """The engine's skipped run (its summary, row and log events), then the textfile as
    the run hooks write it."""
    from skuferry.models import RunSummary
    from skuferry.sync import skip

    warning = config.readable_secret_warning()  # what loading this config warns about
    if warning:
        logs.get(_SECURITY_LOG).warning(
            "config.file.readable", path=str(config.file), message=warning
        )
    run_id = mirror.start_run()
    summary = RunSummary(run_id=run_id)
    skip.skipped_run(summary, mirror)
    summary.duration_s = time.monotonic() - started
    skip.record(mirror, run_id, summary)
    data = skip.finished(summary)
    if record["metrics"] is not None:
        _metrics(record, summary)
    code = summary.exit_code
    if call.as_json:
        print(json.dumps(data, ensure_ascii=False), flush=True)
    elif not call.quiet or code != errors.EXIT_OK:
        from skuferry.service import report

        report.print_summary(summary, stream=sys.stdout if not call.quiet else sys.stderr)
    return code


def _metrics(record: dict[str, Any], summary: RunSummary) -> None:
    """The textfile, written the one way every run's is (the run's one duration)."""
    from skuferry.service import metrics, textfile

    outcome = metrics.RunOutcome.from_summary(
        summary, duration_s=summary.duration_s, finished_at=time.time()
    )
    settings = record["metrics"]
    textfile.write_after_run(
        Path(settings["textfile"]),
        outcome,
        state=Path(record["state"]),
        source_file=Path(record["files"][0]),
        budget=settings["budget"],
        labels=settings["labels"],
    )


# --- the record, left by every run that loaded the config --------------------------------


def prepare(settings: Settings) -> dict[str, Any] | None:
    """Right after the config loaded: the record's config half (from the loader's own
    reading), or None when this config cannot be skipped this way."""
    from skuferry.config.schema import FileSourceSettings, TableFile
    from skuferry.service import hooks
    from skuferry.sync import skip
    from skuferry.sync.context import Policies  # the run's own: what a skipped run decides by

    source, config, monitor = settings.source, settings.config_path, settings.monitor
    if (
        config is None
        or settings.read_identity is None
        or not isinstance(source, FileSourceSettings)
        or source.remote_scheme() is not None
        or settings.join  # a join's index and notes are the engine's to keep
        or any((monitor.start_url, monitor.success_url, monitor.failure_url))
    ):
        return None
    found: raw.RawConfig = settings.reading
    if found.problems:
        return None
    tables = [t.file for t in settings.mapping.tables.values() if isinstance(t, TableFile)]
    policies = Policies.of(settings)
    return {
        "format": _FORMAT,
        "identity": skip.identity(settings),
        "state": str(settings.state.path),
        "files": [str(source.path), *map(str, tables)],
        "bundles": found.bundles,
        "states": [str(s) for s in policies.pending],
        "archiving": policies.archiving,
        "auth": settings.api.auth_check_minutes,
        "metrics": None  # what the run hooks write after the run, when a textfile is set
        if settings.metrics.textfile is None
        else {
            "textfile": str(settings.metrics.textfile),
            "budget": hooks.budget_per_minute(settings),
            "labels": dict(settings.metrics.labels),
        },
    }


def remember(prepared: dict[str, Any] | None, state: Path) -> None:
    """After a ``skuferry sync`` that read the config (not a dry or named run): store the
    record the next plain sync needs to skip quickly (``prepared`` and the change token
    the run left), or remove the old one.

    Best effort: a record not written only means the next run takes the full start.
    """
    from skuferry.state.lock import run_lock
    from skuferry.state.mirror import Mirror
    from skuferry.sync import skip

    try:
        with run_lock(state):
            mirror = Mirror(state)
            try:
                token = mirror.get_meta(skip.SKIP_META)
                record = None
                if prepared is not None and token is not None:
                    lines = token.split("\n")
                    same = lines[0] == prepared["identity"]  # the config this run loaded
                    if same and len(lines) == 1 + len(prepared["files"]):
                        record = {**prepared, "token": token}
                mirror.set_metas({RECORD: None if record is None else json.dumps(record)})
            finally:
                mirror.close()
    except errors.LockHeld:
        return  # another run took over: it leaves its own record
    except Exception as exc:  # noqa: BLE001 - never fails the run it follows
        log.debug("sync.quick.not_recorded", error=str(exc))
