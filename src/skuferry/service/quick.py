"""The quick lane: ``skuferry sync`` from cron or systemd on an unchanged source, decided
without loading the config.

A full start imports pydantic and builds and validates the config models (~0.2 s of
a 0.35 s no-op) only to learn what the last run already knew: the source's ``stat()`` is
the same and nothing is pending. So every run that reads the config leaves a *record* in
the state file (``remember``): a digest of everything the config is made of, and the
facts a skipped run needs (the state file, the files to ``stat()``, the pending states,
the auth check's interval). The next ``skuferry sync`` (``attempt``) reads the TOML
only to find the state file, takes the run lock, and skips exactly as the engine's
unchanged check would (sync/unchanged.py) when

- the argument list is plain: ``sync`` with ``--config``, ``--json``, ``--quiet`` and
  the global ``-v`` / ``--log-format`` (no ``--full``, ``--verify``, ``--dry-run``,
  ``--only``, keys), and stderr is not a terminal (no progress bar to draw);
- the digest is the stored one: the config file's path, TOML data (secret values as
  "set" only), mode and owner, the working directory, the skuferry version, every
  ``SKUFERRY_*`` variable and every variable the file names (``$NAME``), whether the
  API key files are there and readable, and their size;
- the stored change token is still the state file's (no run has read the source
  since) and each file's ``stat()`` still gives it;
- nothing is pending, and the auth check is not due.

Otherwise it returns None and the full start runs, unchanged. The skipped run is the
engine's own: the same runs-table row, summary, log events and exit code.

The record exists only for configs whose skipped run does nothing the lane cannot do
the same way: a local file source, no ``[[join]]``, no monitor pings (a metrics
textfile is written as service/hooks.py writes it). ``SKUFERRY_QUICK=off`` turns the
lane off (the full start always).

No secret reaches the record, not even hashed: a secret's value counts as "set".
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skuferry import __version__, errors, logs
from skuferry.redact import API_SECRET_KEYS, SOURCE_SECRET_KEYS, is_secret_header

if TYPE_CHECKING:
    from skuferry.config.schema import Settings
    from skuferry.models import RunSummary
    from skuferry.state.mirror import Mirror

RECORD = "quick.record"  # meta row: JSON, written by remember(), read by attempt()
OFF = "SKUFERRY_QUICK"  # "off" (or 0, no, false): always the full start
_FORMAT = 1  # the record's layout; another number is no record
_CONFIG_ENV = "SKUFERRY_CONFIG"
_STATE_ENV = "SKUFERRY_STATE_PATH"
_STATE_FILE = "skuferry.db"  # config/load.py's default name
_ENV_ALWAYS = ("STATE_DIRECTORY", "CREDENTIALS_DIRECTORY", "HOME")
_NAMED = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")  # $NAME / ${NAME} anywhere in the file
_LOG_FORMATS = ("auto", "json", "console")

# the engine's events, under the engine's logger: a log reader sees one kind of skipped run
log = logs.get("skuferry.sync.engine")


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
    config = config if config is not None else env.get(_CONFIG_ENV, "")
    if not config:
        return None
    return Call(config, as_json=as_json, quiet=quiet, verbose=verbose, log_format=log_format)


# --- the digest of what the config is made of ----------------------------------------


def _masked(data: Mapping[str, Any]) -> dict[str, Any]:
    """The TOML data with each secret's value replaced by whether it is set: the API key(s)
    in [api], a source's credentials and secret headers. Nothing else: a value masked by
    mistake would hide a change."""
    masked = dict(data)
    api = masked.get("api")
    if isinstance(api, dict):
        masked["api"] = _hide(api, API_SECRET_KEYS)
    source = masked.get("source")
    if isinstance(source, dict):
        masked["source"] = _hide(source, SOURCE_SECRET_KEYS)
    return masked


def _hide(table: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    hidden = {k: {"secret set": bool(v)} if k in names else v for k, v in table.items()}
    headers = hidden.get("headers")
    if isinstance(headers, dict):
        hidden["headers"] = {
            k: {"secret set": bool(v)} if is_secret_header(k) else v for k, v in headers.items()
        }
    return hidden


def _secret_variable(name: str) -> bool:
    """``SKUFERRY_API_KEY``, ``SKUFERRY_SOURCE__PASSWORD``...: a secret set from the
    environment (config/overlay.py), by its last part's name."""
    if not name.startswith("SKUFERRY_"):
        return False
    last = name[len("SKUFERRY_") :].lower().rsplit("__", 1)[-1]
    return last in API_SECRET_KEYS or last in SOURCE_SECRET_KEYS


def _key_file(path: str) -> str:
    """What of a key file decides whether the config loads: there, readable, its size.
    Not its inode or times: systemd's LoadCredential= and a pod's Secret volume write the
    same key anew for every run, and a new key changes nothing a skipped run does."""
    try:
        size = Path(path).stat().st_size
    except OSError:
        return "missing"
    return f"{size}:{'readable' if os.access(path, os.R_OK) else 'unreadable'}"


def digest(
    config: Path, data: Mapping[str, Any], text: str, env: Mapping[str, str], watched: list[str]
) -> str:
    """Changes with anything the loaded config depends on; no secret goes in, even hashed."""
    st = config.stat()
    names = {name for name in env if name.startswith("SKUFERRY_") and name not in (OFF,)}
    names |= {*_ENV_ALWAYS, *_NAMED.findall(text)}
    environ = {
        name: ({"secret set": bool(env[name])} if _secret_variable(name) else env[name])
        for name in sorted(names)
        if name in env
    }
    parts = {
        "version": __version__,
        "config": str(config),
        "mode": [st.st_mode, st.st_uid, st.st_gid],
        "cwd": str(Path.cwd()),
        "data": _masked(data),
        "env": environ,
        "watched": {path: _key_file(path) for path in watched},
    }
    blob = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def _state_path(config: Path, data: Mapping[str, Any], env: Mapping[str, str]) -> Path | None:
    """Where config/load.py puts the state file, in the plain cases; None: not sure."""
    if env.get(_STATE_ENV):
        return Path(env[_STATE_ENV]).expanduser().absolute()
    if any(name.upper().startswith("SKUFERRY_STATE") for name in env):
        return None  # a [state] table from the environment
    state = data.get("state", {})
    if not isinstance(state, dict):
        return None
    path = state.get("path")
    if path is None:
        first = env.get("STATE_DIRECTORY", "").split(":", 1)[0]
        return (Path(first) if first else config.parent) / _STATE_FILE
    if not isinstance(path, str) or "$" in path or not path.strip():
        return None
    found = Path(path).expanduser()
    return found if found.is_absolute() else config.parent / found


@dataclass(frozen=True, slots=True)
class _Config:
    path: Path
    data: dict[str, Any]
    text: str
    state: Path


def _read_config(call: Call, env: Mapping[str, str]) -> _Config | None:
    path = Path(call.config).expanduser().absolute()
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None  # the full start words the problem
    state = _state_path(path, data, env)
    if state is None or not state.is_file():
        return None
    return _Config(path, data, text, state)


# --- the lane ---------------------------------------------------------------------------


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
    config = _read_config(call, environ)
    if config is None:
        return None
    level = logs.cli_level(verbose=call.verbose, quiet=call.quiet, on_tty=False)
    fmt = call.log_format
    logs.configure(level=level, json=None if fmt == "auto" else fmt == "json")

    from skuferry.state.lock import run_lock
    from skuferry.state.mirror import Mirror

    with ExitStack() as stack:
        try:
            stack.enter_context(run_lock(config.state))
            mirror = Mirror(config.state)
            stack.callback(mirror.close)
            record = _still_holds(mirror, config, environ)
        except Exception as exc:  # noqa: BLE001 - a held lock, a state file that will not open
            log.debug("sync.quick", taken=False, why=f"{type(exc).__name__}: {exc}")
            return None  # the full start's to tell, in its words and with its hooks
        if record is None:
            return None
        try:
            return _skip(mirror, record, call, started)
        except errors.SkuferryError as exc:  # the run's own row could not be written
            print(f"skuferry: {exc}", file=sys.stderr)
            return exc.exit_code


def _still_holds(mirror: Mirror, config: _Config, env: Mapping[str, str]) -> dict[str, Any] | None:
    """The record, when the run it describes may be skipped now; else None."""
    from skuferry.models import State
    from skuferry.sources.fingerprint import file_fingerprint
    from skuferry.sync import auth_check, unchanged

    try:
        record = json.loads(mirror.get_meta(RECORD) or "null")
    except ValueError:
        record = None
    why = _mismatch(record, config, env)
    if why is None:
        token = str(record["token"])
        parts = [file_fingerprint(Path(p)) for p in record["files"]]
        states = tuple(State(s) for s in record["states"])
        if mirror.get_meta(unchanged.FINGERPRINT) != token:
            why = "a run has read the source since the record"
        elif None in parts or "\n".join([token.split("\n", 1)[0], *map(str, parts)]) != token:
            why = "the source changed"
        elif unchanged.has_pending_work(mirror, states, record["archiving"]):
            why = "retries, creates in doubt or drift are pending"
        elif auth_check.due(mirror.last_api_contact(), time.time(), minutes=record["auth"]):
            why = "the auth check is due"
    log.debug("sync.quick", taken=why is None, why=why or "source unchanged")
    return record if why is None else None


def _mismatch(record: Any, config: _Config, env: Mapping[str, str]) -> str | None:
    if not isinstance(record, dict) or record.get("format") != _FORMAT:
        return "no record of the last run"
    if record.get("state") != str(config.state):
        return "another state file"
    watched = [str(p) for p in record.get("watched", [])]
    if record.get("digest") != digest(config.path, config.data, config.text, env, watched):
        return "the config, its environment or its key files changed"
    return None


def _skip(mirror: Mirror, record: dict[str, Any], call: Call, started: float) -> int:
    """The engine's skipped run (sync/engine.py, ``_skip_unchanged``), recorded the same way."""
    from skuferry.models import RunSummary, State
    from skuferry.sync import unchanged

    for warning in record.get("warnings", []):  # what loading this config warns about
        logs.get(warning["logger"]).warning(warning["event"], **warning["fields"])
    run_id = mirror.start_run()
    summary = RunSummary()
    unchanged.carry(summary, mirror, in_step=mirror.counts_by_state().get(State.SYNCED, 0))
    log.info("sync.source.checked", skip=True, why="source unchanged")
    summary.duration_s = time.monotonic() - started
    data = summary.as_json()
    mirror.finish_run(run_id, status=summary.status, exit_code=summary.exit_code, summary=data)
    log.info("sync.finished", **{k: v for k, v in data.items() if k != "problems"})
    if record["metrics"] is not None:
        _metrics(mirror, record, summary, started)
    code = summary.exit_code
    if call.as_json:
        print(json.dumps(data, ensure_ascii=False), flush=True)
    elif not call.quiet or code != errors.EXIT_OK:
        from skuferry.service import report

        report.print_summary(summary, stream=sys.stdout if not call.quiet else sys.stderr)
    return code


def _metrics(mirror: Mirror, record: dict[str, Any], summary: RunSummary, started: float) -> None:
    """The textfile, as service/hooks.py ``after_run`` writes it after a run."""
    from skuferry.service import freshness, metrics

    outcome = metrics.RunOutcome.from_summary(
        summary, duration_s=time.monotonic() - started, finished_at=time.time()
    )
    settings = record["metrics"]
    metrics.record_run(
        Path(settings["textfile"]),
        outcome,
        products=mirror.counts_by_state(),
        freshness=freshness.from_metas(mirror, Path(record["files"][0])),
        budget=settings["budget"],
        labels=settings["labels"],
        dead_letters=mirror.dead_letter_counts(),
    )


# --- the record, left by every run that read the config ---------------------------------


def config_text(config_path: Path | str | None, env: Mapping[str, str] | None = None) -> str | None:
    """The config file's text as the full start is about to load it (None: unreadable)."""
    environ = os.environ if env is None else env
    given = str(config_path) if config_path else environ.get(_CONFIG_ENV, "")
    try:
        return Path(given).expanduser().absolute().read_text(encoding="utf-8") if given else None
    except (OSError, UnicodeDecodeError):
        return None


def prepare(
    settings: Settings, text: str | None, env: Mapping[str, str] | None = None
) -> dict[str, Any] | None:
    """Right after the config loaded from ``text`` (``config_text``, read before the load):
    the record's config half, or None when this config cannot be skipped this way (or the
    file changed around the load, so ``text`` may not be what was loaded)."""
    from skuferry.config.schema import FileSourceSettings, TableFile
    from skuferry.service import hooks
    from skuferry.sync import unchanged
    from skuferry.sync.gone import GonePolicy

    environ = os.environ if env is None else env
    source, config, monitor = settings.source, settings.config_path, settings.monitor
    if (
        text is None
        or config is None
        or not isinstance(source, FileSourceSettings)
        or source.remote_scheme() is not None
        or settings.join  # a join's index and notes are the engine's to keep
        or any((monitor.start_url, monitor.success_url, monitor.failure_url))
        or config_text(config, environ) != text
    ):
        return None
    data = tomllib.loads(text)
    tables = [t.file for t in settings.mapping.tables.values() if isinstance(t, TableFile)]
    watched = [str(p) for p in _key_files(settings, environ)]
    return {
        "format": _FORMAT,
        "digest": digest(config, data, text, environ, watched),
        "state": str(settings.state.path),
        "identity": unchanged.identity(settings),
        "files": [str(source.path), *map(str, tables)],
        "watched": watched,
        "states": [str(s) for s in unchanged.pending_states(settings)],
        "archiving": GonePolicy.from_settings(settings.gone).archiving,
        "auth": settings.api.auth_check_minutes,
        "warnings": list(_warnings(config, data)),
        "metrics": None  # what service/hooks.py writes after the run, when a textfile is set
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
    from skuferry.sync import unchanged

    try:
        with run_lock(state):
            mirror = Mirror(state)
            try:
                token = mirror.get_meta(unchanged.FINGERPRINT)
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


def _key_files(settings: Settings, env: Mapping[str, str]) -> Iterator[Path]:
    """The files the API key(s) are read from at load: changed, the load may fail now."""
    for path in (settings.api.api_key_file, settings.api.api_keys_file):
        if path is not None:
            yield Path(path)
    credentials = env.get("CREDENTIALS_DIRECTORY")
    if credentials:
        yield Path(credentials) / "api_key"


def _warnings(config: Path, data: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The warnings loading this config logs (config/security.py), to be logged again."""
    from skuferry.config import security

    message = security.inline_secret_warning(config, data)
    if message:
        fields = {"path": str(config), "message": message}
        yield {"logger": security.__name__, "event": "config.file.readable", "fields": fields}
