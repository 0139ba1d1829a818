"""The config's raw data: the TOML file, overlaid key by key by ``SKUFERRY_<TABLE>__<KEY>``.

pydantic-settings reads both: ``TomlConfigSettingsSource`` the file (through
``_read_file`` below, so a broken file is named with its line), and
``EnvSettingsSource`` the environment with the prefix ``SKUFERRY_`` and the
nested delimiter ``__`` (``SKUFERRY_BUDGET__WRITE_PER_MINUTE=30``,
``SKUFERRY_MAPPING__FIELDS__PRICE__COLUMN=Preis``). The result is plain data:
``load.py`` validates it against ``Settings`` and words every problem itself,
so messages stay ``file: at 'a.b': message`` whichever source a value came from.

The older single names (``SKUFERRY_API_KEY``, ``SKUFERRY_STATE_PATH``,
``SKUFERRY_SOURCE_PATH``, ``SKUFERRY_CONFIG``) hold no ``__``, match no table,
and keep their meaning in ``load.py``.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import create_model
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)
from pydantic_settings.sources.utils import parse_env_vars

from skuferry.config.schema import Settings
from skuferry.errors import ConfigError

ENV_PREFIX = "SKUFERRY_"
ENV_NESTED_DELIMITER = "__"

# The tables as pydantic-settings sees them: each one plain data (validated later by
# Settings), so the sources only gather values and never word a problem of their own.
_Tables: type[BaseSettings] = create_model(  # type: ignore[call-overload]
    "_Tables",
    __base__=BaseSettings,
    **{
        name: (dict[str, Any] | None, None)
        for name in Settings.model_fields
        if name != "config_path"
    },
)
_Tables.model_config.update(
    SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter=ENV_NESTED_DELIMITER, extra="ignore"
    )
)


def read_toml(file: Path, name: str) -> dict[str, Any]:
    """The file's tables; ``ConfigError`` naming ``name`` (and the line) if it cannot be."""
    if not file.is_file():
        _read_text(file, name)  # raises: not found, a directory, unreadable
    return dict(_TomlFile(name, file)())


def env_tables(env: Mapping[str, str]) -> dict[str, Any]:
    """The ``SKUFERRY_<TABLE>__<KEY>`` variables of ``env`` as nested tables (keys lowercased)."""
    try:
        found = _Environment(env)()
    except SettingsError as exc:  # e.g. SKUFERRY_API='{' is not JSON for a table
        raise ConfigError([f"environment: {exc}"]) from None
    return {name: _decoded(value) for name, value in found.items() if value is not None}


def overlay(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` laid on it key by key (tables merged, other values replaced)."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = overlay(out[key], value)
        else:
            out[key] = value
    return out


def env_names(tables: Mapping[str, Any], parent: tuple[str, ...] = ()) -> dict[str, str]:
    """Dotted key -> the variable that set it, for every value ``env_tables`` found."""
    names: dict[str, str] = {}
    for key, value in tables.items():
        path = (*parent, str(key))
        if isinstance(value, Mapping) and value:
            names.update(env_names(value, path))
        else:
            names[".".join(path)] = ENV_PREFIX + ENV_NESTED_DELIMITER.join(path).upper()
    return names


def _decoded(value: Any) -> Any:
    """A value that reads as a JSON array or object (``allowed_origins``, ``headers``) as one."""
    if isinstance(value, dict):
        return {key: _decoded(item) for key, item in value.items()}
    if isinstance(value, str) and value.strip()[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except ValueError:
            return value  # the model says what is wrong with it
    return value


class _Environment(EnvSettingsSource):
    """The environment given (``load_settings(env=...)``), not necessarily ``os.environ``."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._given = dict(env)
        super().__init__(_Tables)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(
            self._given, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str
        )


_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")


class _TomlFile(TomlConfigSettingsSource):
    """pydantic-settings' TOML source, reading with messages that name the file and line."""

    def __init__(self, name: str, file: Path) -> None:
        self._name = name
        super().__init__(_Tables, toml_file=file)

    def _read_file(self, file_path: Path) -> dict[str, Any]:  # type: ignore[override]
        text = _read_text(file_path, self._name)
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            message = str(exc)
            found = _TOML_POSITION.search(message)
            if found:
                message = f"{message[: found.start()]} (column {found.group(2)})"
                line = int(found.group(1))
            else:  # "(at end of document)"
                message = message.replace(" (at end of document)", " at end of file")
                line = max(text.count("\n") + (0 if text.endswith("\n") else 1), 1)
            raise ConfigError([f"{self._name}: line {line}: {message}"]) from None


def _read_text(file: Path, name: str) -> str:
    try:
        return file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{name}: file not found"]) from None
    except IsADirectoryError:
        raise ConfigError([f"{name}: is a directory, not a config file"]) from None
    except OSError as exc:
        raise ConfigError([f"{name}: cannot read: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{name}: not UTF-8 text (byte {exc.start})"]) from None
