"""What a config is made of, read once: the TOML file, the environment, ``$VAR``s, key
files and paths, as plain data, without validating it.

``read(path, env)`` reads the file and ``resolve`` does the rest; the loader validates
the result, and the quick lane decides on it without loading pydantic. Both take the
config's ``identity`` from here, so the question "is this the config the last run
read?" has one answer whichever of them asks it. A second reader beside the loader
would drift from it (it did: names in another case, a ``$VAR`` inside a variable).

The reading, in order:

- the file's tables, overlaid by ``SKUFERRY_<TABLE>__<KEY>`` variables in any case;
- a source's preset filled in;
- every path value's ``$VAR``/``${VAR}`` and ``~`` expanded, relative paths anchored at
  the config's folder; ``SKUFERRY_STATE_PATH`` / ``SKUFERRY_SOURCE_PATH`` laid over them;
  the state file's default place (``$STATE_DIRECTORY``, else beside the config);
- the API key(s) found (environment > file > inline) and read.

Nothing here imports pydantic: the quick lane must stay fast.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from skuferry import __version__, canonical, files
from skuferry.config import overlay, presets
from skuferry.config.keys import resolve_api_keys
from skuferry.config.masking import masked, url_password
from skuferry.config.secret_rules import (
    SECRET_FILE_KEYS,
    find_secret,
    secret_file_problems,
    source_secret_problems,
)
from skuferry.errors import ConfigError
from skuferry.net.paths import url_scheme
from skuferry.redact import SECRET_KEYS, is_secret_header

__all__ = ["SECRET_FILE_KEYS", "RawConfig", "digest", "masked", "read", "resolve"]

ENV_CONFIG = "SKUFERRY_CONFIG"
ENV_API_KEY = "SKUFERRY_API_KEY"
ENV_STATE_PATH = "SKUFERRY_STATE_PATH"
ENV_SOURCE_PATH = "SKUFERRY_SOURCE_PATH"
DEFAULT_STATE_FILE = "skuferry.db"

# The source types with a local ``path`` (SKUFERRY_SOURCE_PATH), and every source type:
# the settings' own lists, written out so that reading needs no models (a test holds
# them equal).
FILE_SOURCE_TYPES = ("csv", "jsonl", "xlsx", "xml")
SOURCE_TYPES = ("csv", "jsonl", "http", "graphql", "sql", "xlsx", "xml")

_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def digest(value: Any) -> str:
    """The short digest of plain data (canonical JSON): equal data, equal digests. Every
    config identity is one (the skip decision's, the incremental pull's)."""
    return hashlib.sha256(canonical.dumps(value).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class RawConfig:
    """One reading of a config: the data the settings are validated from, and what else
    decides the load (problems found while reading, the files it depends on).

    What only the quick lane asks (``refused``, ``bundles``) is worked out when asked: a
    full start validates the data and checks the secrets and CA bundles itself, and
    reading each secret file more than once would cost it for nothing.
    """

    # data, toml and from_env hold secrets as read: never in a repr (a log, a traceback)
    data: dict[str, Any] = field(repr=False)  # resolved, ready for validation
    toml: dict[str, Any] = field(repr=False)  # the file's own tables, as written
    origin: str  # the file as the user named it (problems say it)
    base_dir: Path
    file: Path | None = None  # absolute; None: data built in code
    from_env: dict[str, Any] = field(default_factory=dict, repr=False)  # SKUFERRY_* set these
    problems: list[str] = field(default_factory=list)
    env: Mapping[str, str] = field(default_factory=dict, repr=False)  # what it was read with

    @property
    def identity(self) -> str:
        """Changes with anything the config's settings are made of, secret values aside
        (a rotated key is no change), and with the skuferry version."""
        return digest(
            {"version": __version__, "base": str(self.base_dir), "config": masked(self.data)}
        )

    @property
    def state_path(self) -> Path | None:
        """Where the state file is (None: the data does not say it in a usable form)."""
        state = self.data.get("state")
        path = state.get("path") if isinstance(state, dict) else None
        return path if isinstance(path, Path) else None

    @cached_property
    def refused(self) -> tuple[str, ...]:
        """What the load refuses beyond the data, by the loader's own rules and in its words:
        a secret file that holds something and every user may read, a source secret's file
        that cannot be read or its variable unset. Never a value."""
        found = secret_file_problems(_files(self.data, SECRET_FILE_KEYS, self.base_dir))
        source = self.data.get("source")
        if isinstance(source, dict):
            found += source_secret_problems(self._source_value(source), self.env)
        return tuple(found)

    @cached_property
    def bundles(self) -> dict[str, str]:
        """Each CA bundle's size and time: its certificates decide whether the load accepts
        it, and checking them needs OpenSSL, which a quick look does not load."""
        found = _files(self.data, ("ca_bundle",), self.base_dir)
        return {str(path): _bundle(path) for _table, _key, path in found}

    def _source_value(self, source: Mapping[str, Any]) -> Any:
        """``[source]``'s value of a key as the settings would hold it: a ``*_file`` anchored
        at the config's folder, a value of the wrong type as not set (the model refuses it)."""

        def value(name: str) -> Any:
            found = source.get(name)
            if name.endswith("_file"):
                paths = _files({"source": {name: found}}, (name,), self.base_dir)
                return next((path for _table, _key, path in paths), None)
            if name.endswith("_env"):
                return found if isinstance(found, str) else None
            return found

        return value

    def readable_secret_warning(self) -> str | None:
        """The warning a load logs for this file: a secret inline in a file others may read."""
        return None if self.file is None else inline_secret_warning(self.file, self.toml)


def read(path: Path | str | None, env: Mapping[str, str]) -> RawConfig:
    """Read the config file ``path`` (else ``$SKUFERRY_CONFIG``) and resolve it with ``env``.

    Raises ``ConfigError`` when the file cannot be read or parsed; every other problem is
    in ``problems``, for the loader to report with the model's.
    """
    given = str(path) if path is not None and str(path) else env.get(ENV_CONFIG, "")
    if not given:
        raise ConfigError([f"no config file: pass --config PATH or set {ENV_CONFIG}"])
    file = Path(given).expanduser().absolute()
    toml = overlay.read_toml(file, given)
    problems = []
    if "config_path" in toml:  # a field of the model, not a key of the file
        known = ", ".join(f"'{name}'" for name in overlay.TABLES)
        problems.append(f"at 'config_path': unknown key; known keys: {known}")
    return resolve(toml, origin=given, base_dir=file.parent, file=file, env=env, problems=problems)


def resolve(
    toml: Mapping[str, Any],
    *,
    origin: str,
    base_dir: Path,
    env: Mapping[str, str],
    file: Path | None = None,
    problems: list[str] | None = None,
) -> RawConfig:
    """The config's data from the file's tables ``toml`` and ``env`` (see the module)."""
    found = [] if problems is None else problems
    env_given = env
    from_env = overlay.env_tables(env)  # SKUFERRY_<TABLE>__<KEY> wins over the file
    own = {k: v for k, v in toml.items() if file is None or k != "config_path"}
    data: dict[str, Any] = overlay.overlay(copy.deepcopy(own), from_env)
    data["source"], preset_problems = presets.apply(data.get("source"))  # before validation
    found.extend(preset_problems)
    if data["source"] is None:
        del data["source"]
    _resolve_paths(data, base_dir=base_dir, env=env, problems=found)
    _apply_env_paths(data, env=env, problems=found)
    _default_state_path(data, base_dir=base_dir, env=env)
    api = data.get("api")
    if isinstance(api, dict):
        key_from_env = from_env.get("api", {}).get("api_key")
        if isinstance(key_from_env, str) and not env.get(ENV_API_KEY, "").strip():
            env = {**env, ENV_API_KEY: key_from_env}  # SKUFERRY_API__API_KEY: still the environment
        _resolve_api_key(api, env=env, problems=found)
    if file is not None:
        data["config_path"] = file
    return RawConfig(
        data=data,
        toml=dict(toml),
        origin=origin,
        base_dir=base_dir,
        file=file,
        from_env=from_env,
        problems=found,
        env=env_given,
    )


# --- secrets -------------------------------------------------------------------------


def inline_secret_warning(config_path: Path, toml: Mapping[str, Any]) -> str | None:
    """A warning when the config file holds a secret inline and others may read it."""
    where = [f"{table}.{key}" for table, key in _inline_secrets(toml)]
    if not where or not files.others_can_read(config_path):
        return None
    return (
        f"config file {config_path} holds a secret ({', '.join(where)}) and is readable by "
        f"other users (mode {files.mode_text(config_path)}); run: chmod 600 {config_path}, "
        "or move the secret to a *_file, the environment or a systemd credential"
    )


def _inline_secrets(toml: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    for table, section in toml.items():
        if not isinstance(section, Mapping):
            continue
        for key, value in section.items():
            inline = key in SECRET_KEYS and bool(value)
            header = (
                key == "headers"
                and isinstance(value, Mapping)
                and any(is_secret_header(str(name)) for name in value)
            )
            in_url = isinstance(value, str) and key.endswith("url") and bool(url_password(value))
            if inline or header or in_url:
                yield table, key


def _resolve_api_key(api: dict[str, Any], *, env: Mapping[str, str], problems: list[str]) -> None:
    """Put the key found first into ``api_key``: environment > file > inline.

    ``SKUFERRY_API_KEY`` > ``api_key_file`` > ``$CREDENTIALS_DIRECTORY/api_key`` > ``api_key``.
    """
    if resolve_api_keys(api, env=env, problems=problems):  # several keys
        return
    inline = api.get("api_key")
    if isinstance(inline, str) and not inline.strip():
        problems.append("at 'api.api_key': is empty; set the key, or remove the line")
        return
    places: list[tuple[str, Path]] = []
    key_file = api.get("api_key_file")
    if isinstance(key_file, Path):  # a bad path's problem is already reported
        places.append(("at 'api.api_key_file'", key_file))
    credentials = env.get("CREDENTIALS_DIRECTORY")
    if credentials and (Path(credentials) / "api_key").exists():
        where = "at 'api.api_key': $CREDENTIALS_DIRECTORY/api_key"
        places.append((where, Path(credentials) / "api_key"))
    key, found = find_secret(ENV_API_KEY, None, places, env)
    problems.extend(found)
    if key is not None:
        api["api_key"] = key
    elif inline is None and key_file is None and not found:
        problems.append(
            f"at 'api.api_key': no API key: set {ENV_API_KEY}, or [api] api_key, or "
            "[api] api_key_file (under systemd, LoadCredential=api_key:PATH is found in "
            "$CREDENTIALS_DIRECTORY/api_key)"
        )


# --- paths ---------------------------------------------------------------------------


def _path_fields(data: dict[str, Any]) -> list[tuple[dict[str, Any], str, str]]:
    """(table, key, dotted name) of every path value present in ``data``."""
    found = []
    for section, key in (
        ("state", "path"),
        ("api", "api_key_file"),
        ("metrics", "textfile"),
        ("api", "ca_bundle"),
        ("api", "api_keys_file"),
    ):
        table = data.get(section)
        if isinstance(table, dict) and key in table:
            found.append((table, key, f"{section}.{key}"))
    for dotted, source in _sources(data):
        if (
            source.get("type") in FILE_SOURCE_TYPES
            and "path" in source
            and url_scheme(source["path"]) is None  # a URL stays as written
        ):
            found.append((source, "path", f"{dotted}.path"))
    return found


def _sources(data: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(dotted name, table) of ``[source]`` and each ``[[join]]`` (its source keys beside
    name, key and on)."""
    found = []
    source = data.get("source")
    if isinstance(source, dict):
        found.append(("source", source))
    joins = data.get("join")
    if isinstance(joins, list):
        found += [(f"join.{n}", join) for n, join in enumerate(joins) if isinstance(join, dict)]
    return found


def _resolve_paths(
    data: dict[str, Any], *, base_dir: Path, env: Mapping[str, str], problems: list[str]
) -> None:
    for table, key, dotted in _path_fields(data):
        value = table[key]
        if not isinstance(value, str | Path):
            continue  # the model reports the wrong type
        resolved, problem = expand_path(str(value), base_dir=base_dir, env=env)
        if problem:
            problems.append(f"at '{dotted}': {problem}")
        else:
            table[key] = resolved


def expand_path(text: str, *, base_dir: Path, env: Mapping[str, str]) -> tuple[Path, str]:
    """``$VAR``/``${VAR}`` and ``~`` expanded, relative paths anchored at ``base_dir``."""
    if not text.strip():
        return base_dir, "must not be empty"
    unset = [a or b for a, b in _VARIABLE.findall(text) if (a or b) not in env]
    if unset:
        names = ", ".join(f"${name}" for name in dict.fromkeys(unset))
        return base_dir, f"environment variable {names} is not set"
    expanded = _VARIABLE.sub(lambda m: env[m.group(1) or m.group(2)], text)
    if (expanded == "~" or expanded.startswith("~/")) and env.get("HOME"):
        expanded = env["HOME"] + expanded[1:]
    path = Path(expanded).expanduser()
    return (path if path.is_absolute() else base_dir / path), ""


def _apply_env_paths(data: dict[str, Any], *, env: Mapping[str, str], problems: list[str]) -> None:
    """SKUFERRY_STATE_PATH / SKUFERRY_SOURCE_PATH win over the file (relative: to the cwd)."""
    state_path = env.get(ENV_STATE_PATH)
    if state_path:
        state = data.setdefault("state", {})
        if isinstance(state, dict):
            state["path"] = Path(state_path).expanduser().absolute()
    source_path = env.get(ENV_SOURCE_PATH)
    source = data.get("source")
    if source_path and isinstance(source, dict):
        if source.get("type") in FILE_SOURCE_TYPES:
            url = url_scheme(source_path) is not None  # an http(s):// or sftp:// URL stays
            source["path"] = source_path if url else Path(source_path).expanduser().absolute()
        elif source.get("type") in SOURCE_TYPES:
            problems.append(
                f"at 'source.path': {ENV_SOURCE_PATH} is set, but a {source['type']!r} "
                "source has no path; unset it"
            )


def _default_state_path(data: dict[str, Any], *, base_dir: Path, env: Mapping[str, str]) -> None:
    """Omitted state.path: systemd's StateDirectory= if set, else beside the config file."""
    state = data.setdefault("state", {})
    if not isinstance(state, dict) or "path" in state:
        return
    state_dirs = env.get("STATE_DIRECTORY", "")
    first = state_dirs.split(":", 1)[0]  # StateDirectory= may list several, colon-separated
    state["path"] = (Path(first) if first else base_dir) / DEFAULT_STATE_FILE


# --- what else a load refuses -----------------------------------------------------------


def _files(
    data: Mapping[str, Any], keys: Sequence[str], base_dir: Path
) -> Iterator[tuple[str, str, Path]]:
    """(table, key, path) of the files ``keys`` name in any table of the settings (relative:
    to the config's folder, as the settings anchor them)."""
    for table, section in data.items():
        if isinstance(section, dict):
            for key in keys:
                value = section.get(key)
                if isinstance(value, str | Path) and str(value).strip():
                    path = Path(value).expanduser()
                    yield table, key, (path if path.is_absolute() else base_dir / path)


def _bundle(path: Path) -> str:
    try:
        st = path.stat()
    except OSError:
        return "missing"
    return f"{st.st_size}:{st.st_mtime_ns}"
