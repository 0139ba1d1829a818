"""Configuration: a TOML file plus environment overrides, every problem reported at once.

``load_settings(path)`` takes the config's raw reading (the file, the environment,
``$VAR``s, key files and paths: the one reading, which the quick lane shares), builds
``Settings`` from it through pydantic-settings (the reading is its TOML and environment
sources), runs the cross-field rules, and raises one ``ConfigError`` listing
every problem as ``<file>: at 'a.b': message``. ``settings_from_dict`` does the
same for configs built in code (tests, the demo) and reads no environment
unless given one.

The API key lives only in ``settings.api.api_key`` (a ``SecretStr``); no
message built here ever contains a config value, so it cannot leak the key.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, TypeAdapter, ValidationError

from skuferry.config import overlay, raw, secrets, security
from skuferry.config.schedule import schedule_problems
from skuferry.config.schema import (
    SOURCE_MODELS,
    SOURCE_TYPES,
    CsvSourceSettings,
    FieldSpec,
    Settings,
    SourceSettings,
)
from skuferry.config.schema.reading import loading
from skuferry.errors import ConfigError
from skuferry.net.paths import is_remote

__all__ = ["load_settings", "settings_from_dict"]


# --- loading -----------------------------------------------------------------------


def load_settings(path: Path | str | None, env: Mapping[str, str] | None = None) -> Settings:
    """Read, resolve and validate a config file; raise one ``ConfigError`` with every problem.

    ``path`` falls back to ``$SKUFERRY_CONFIG``; ``env`` defaults to ``os.environ``.
    Problems name the file as the user gave it.
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    return _build(raw.read(path, environ), env=environ, read_secrets=True)


def settings_from_dict(
    data: Mapping[str, Any],
    *,
    origin: str = "<dict>",
    base_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Build settings from plain data as if it were a config file's content.

    Relative paths resolve against ``base_dir`` (default: the working directory).
    Unlike ``load_settings`` this reads no environment unless ``env`` is given,
    so code-built configs (tests, the demo) behave the same everywhere; only then
    are source secrets read at load (else when the source opens).
    """
    base = (base_dir or Path.cwd()).absolute()
    found = raw.resolve(data, origin=origin, base_dir=base, env=env or {})
    return _build(found, env=env or {}, read_secrets=env is not None)


def _build(found: raw.RawConfig, *, env: Mapping[str, str], read_secrets: bool) -> Settings:
    """Validate what the raw reading found, and run the rules across fields."""
    data, problems, base_dir = found.data, list(found.problems), found.base_dir
    try:
        with loading(found):  # the sources Settings() reads, and where paths anchor
            settings = Settings()
    except ValidationError as exc:
        problems.extend(_translate(exc, data))
        if read_secrets:  # the [source] table may be fine on its own: its secrets too
            source = _source_alone(data, base_dir)
            problems.extend(secrets.source_secret_problems(source, env) if source else [])
    else:
        problems.extend(_cross_field_problems(settings))
        if read_secrets:  # every unreadable secret now, with the rest (the secret resolver's)
            problems.extend(secrets.source_secret_problems(settings.source, env))
        if not problems:
            security.after_load(settings, found.toml)
            settings._reading = found  # its identity: the skip decision's, and the lane's
            return settings
    set_by = overlay.env_names(found.from_env)
    origin = found.origin
    raise ConfigError([f"{_origin(problem, origin, set_by)}: {problem}" for problem in problems])


_AT = re.compile(r"^at '([^']*)'")
_SOURCE: TypeAdapter[SourceSettings] = TypeAdapter(SourceSettings)


def _source_alone(data: Mapping[str, Any], base_dir: Path) -> BaseModel | None:
    try:
        return _SOURCE.validate_python(data.get("source"), context={"config_dir": base_dir})
    except ValidationError:
        return None


def _origin(problem: str, origin: str, set_by: Mapping[str, str]) -> str:
    """The file, or the ``$SKUFERRY_...`` variable when the value at fault came from one."""
    found = _AT.match(problem)
    variable = set_by.get(found.group(1)) if found else None
    return f"${variable}" if variable else origin


# --- translating pydantic's errors -------------------------------------------------

_FIELD_SPEC_HINT = 'must be a column name or a table like { column = "Price", type = "decimal" }'


def _translate(exc: ValidationError, data: Mapping[str, Any]) -> list[str]:
    """Pydantic errors as short ``at 'a.b': message`` lines, never echoing a value."""
    lines: list[str] = []
    for error in exc.errors(include_url=False, include_input=False):
        loc = tuple(error["loc"])
        kind = error["type"]
        message: str | None
        if loc[:2] == ("mapping", "fields") and len(loc) > 3:
            # one union, two branches ("str" and the table, whose label names its
            # validators): the table branch explains every mistake
            if loc[3] == "str":
                continue
            message = _FIELD_SPEC_HINT if kind == "model_type" else None
            loc = loc[:3] + loc[4:]
        elif loc[:1] == ("source",) and kind in ("union_tag_not_found", "union_tag_invalid"):
            loc, message = ("source", "type"), _one_of(SOURCE_TYPES)
        elif loc[:1] == ("join",) and len(loc) > 2 and loc[2] == "source":
            # [[join]] holds its source keys beside name, key and on: no "source" level
            if kind in ("union_tag_not_found", "union_tag_invalid"):
                loc, message = (*loc[:2], "type"), _one_of(SOURCE_TYPES)
            else:
                rest = loc[4:] if len(loc) > 3 and loc[3] in SOURCE_TYPES else loc[3:]
                loc, message = (*loc[:2], *rest), None
                if kind == "extra_forbidden":
                    known = _join_keys(data, loc[1])
                    message = _unknown_key(str(loc[-1]), known)
        else:
            if loc[:1] == ("source",) and len(loc) > 1 and loc[1] in SOURCE_TYPES:
                loc = loc[:1] + loc[2:]  # drop pydantic's union-branch marker
            message = None
        if message is None:
            message = _message(error, loc, data)
        line = f"at '{'.'.join(str(part) for part in loc)}': {message}"
        if line not in lines:
            lines.append(line)
    return lines


def _message(error: Any, loc: tuple[Any, ...], data: Mapping[str, Any]) -> str:
    kind: str = error["type"]
    ctx: dict[str, Any] = error.get("ctx") or {}
    bounds = {
        "greater_than": ">",
        "greater_than_equal": ">=",
        "less_than": "<",
        "less_than_equal": "<=",
    }
    if kind == "missing":
        return "required"
    if kind == "extra_forbidden":
        return _unknown_key(str(loc[-1]), _known_keys(loc[:-1], data))
    if kind in bounds:
        limit = next(iter(ctx.values()))
        return f"must be {bounds[kind]} {limit}"
    if kind == "literal_error":
        return _one_of(tuple(re.findall(r"'([^']*)'", str(ctx.get("expected", "")))))
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return "must be a whole number"
    if kind in ("float_parsing", "float_type", "finite_number"):
        return "must be a number"
    if kind in ("bool_parsing", "bool_type"):
        return "must be true or false"
    if kind == "string_type":
        return "must be a string (in quotes)"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return "must be a table"
    if kind == "path_type":
        return "must be a path (a string)"
    text = str(error["msg"]).removeprefix("Value error, ")
    return text[:1].lower() + text[1:]


def _one_of(values: tuple[str, ...]) -> str:
    return "must be one of " + ", ".join(f"'{value}'" for value in values)


def _unknown_key(key: str, known: list[str]) -> str:
    import difflib  # only for a problem

    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if close:
        return f"unknown key; did you mean '{close[0]}'?"
    if known:
        return "unknown key; known keys: " + ", ".join(f"'{name}'" for name in known)
    return "unknown key"


def _join_keys(data: Mapping[str, Any], index: Any) -> list[str]:
    """The keys a ``[[join]]`` table allows: name, key, on and its source type's keys."""
    joins = data.get("join")
    join = joins[index] if isinstance(joins, list) and isinstance(index, int) else None
    tag = join.get("type") if isinstance(join, dict) else None
    model = next((m for m, t in zip(SOURCE_MODELS, SOURCE_TYPES, strict=True) if t == tag), None)
    return ["name", "key", "on", *(model.model_fields if model is not None else ())]


def _known_keys(parent: tuple[Any, ...], data: Mapping[str, Any]) -> list[str]:
    """The keys allowed in the table at ``parent`` (for "did you mean")."""
    model: type[BaseModel] | None = None
    if parent == ():
        return [name for name in Settings.model_fields if name != "config_path"]
    if parent == ("source",):
        source = data.get("source")
        tag = source.get("type") if isinstance(source, dict) else None
        model = next(
            (m for m, t in zip(SOURCE_MODELS, SOURCE_TYPES, strict=True) if t == tag), None
        )
    elif len(parent) == 3 and parent[:2] == ("mapping", "fields"):
        model = FieldSpec
    elif len(parent) == 1 and parent[0] in Settings.model_fields:
        annotation = Settings.model_fields[parent[0]].annotation
        model = annotation if isinstance(annotation, type) else None
    if model is None or not issubclass(model, BaseModel):
        return []
    return list(model.model_fields)


# --- rules across fields -----------------------------------------------------------


def _cross_field_problems(settings: Settings) -> list[str]:
    """Rules a single field cannot check alone, as ``at 'a.b': message`` lines."""
    problems: list[str] = []
    schedule = settings.schedule
    problems.extend(schedule_problems(schedule))
    mapping = settings.mapping
    if mapping.fields is not None and mapping.key not in mapping.fields:
        problems.append(
            f"at 'mapping.fields': must map the key field '{mapping.key}' (mapping.key), "
            f'e.g. {mapping.key} = "ItemNo"'
        )
    monitor = settings.monitor
    for name in ("start_url", "success_url", "failure_url"):
        url = getattr(monitor, name)
        if url is not None and not _is_http_url(url):
            problems.append(f"at 'monitor.{name}': must be an http:// or https:// URL with a host")
    source = settings.source
    watched = getattr(source, "path", None)
    if schedule.watch and (watched is None or is_remote(watched)):
        problems.append("at 'schedule.watch': needs a source with a local file (source.path)")
    if isinstance(source, CsvSourceSettings) and len(source.delimiter) != 1:
        problems.append("at 'source.delimiter': must be exactly one character")
    names = [join.name for join in settings.join]
    for n, name in enumerate(names):
        if name in names[:n]:
            problems.append(f"at 'join.{n}.name': another [[join]] is named {name!r} already")
        elif name == "parent" and mapping.each:
            problems.append(
                f"at 'join.{n}.name': 'parent' is the record around an item of [mapping] each"
            )
    problems.extend(security.problems(settings))
    return problems


def _is_http_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
        return parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # e.g. a malformed IPv6 host
        return False
