"""The config's raw data: the TOML file, overlaid key by key by ``SKUFERRY_<TABLE>__<KEY>``.

The file is read with ``tomllib`` (a broken file is named with its line); the
environment gives ``SKUFERRY_<TABLE>__<KEY>[__<KEY>...]`` (case-insensitive:
``SKUFERRY_BUDGET__WRITE_PER_MINUTE=30``, ``SKUFERRY_MAPPING__FIELDS__PRICE__COLUMN=Preis``)
and ``SKUFERRY_<TABLE>`` holding a whole table as JSON, its nested variables winning.
The result is plain data, read without pydantic: the loader validates it against
``Settings`` and words every problem itself, so messages stay ``file: at 'a.b': message``
whichever source a value came from.

The older single names (``SKUFERRY_API_KEY``, ``SKUFERRY_STATE_PATH``,
``SKUFERRY_SOURCE_PATH``, ``SKUFERRY_CONFIG``) hold no ``__``, match no table,
and keep their meaning in the raw reading.

pydantic-settings loads the settings, with this overlay inside its sources rather than
its own environment source: that one reads the process environment
(``load_settings(env=...)`` passes its own) and the quick lane, which must read exactly
as the loader does, cannot import it (its import costs ~50 ms: asyncio, python-dotenv).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skuferry.errors import ConfigError

ENV_PREFIX = "SKUFERRY_"
ENV_NESTED_DELIMITER = "__"

# The tables of a config, which a variable may set: the settings' own fields but
# config_path (the model's, not the file's), written out so that reading the raw
# config needs no models (a test holds them equal).
TABLES = (
    "api",
    "source",
    "mapping",
    "budget",
    "schedule",
    "state",
    "safety",
    "gone",
    "metrics",
    "monitor",
    "daemon",
    "join",
)


def read_toml(file: Path, name: str) -> dict[str, Any]:
    """The file's tables; ``ConfigError`` naming ``name`` (and the line) if it cannot be."""
    text = _read_text(file, name)  # raises: not found, a directory, unreadable
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
        opened = _unterminated(text, line, message)
        if opened is not None:
            line, column = opened
            message = (
                f"unterminated string: the quote at column {column} is not closed on its "
                'line (a value of several lines is written """...""")'
            )
        raise ConfigError([f"{name}: line {line}: {message}"]) from None


def _unterminated(text: str, line: int, message: str) -> tuple[int, int] | None:
    """(line, column) of the quote that opened a string left open, when that is what
    tomllib's words (``Illegal character '\\n'``, ``Expected "'"``, ``Unterminated
    string``) mean; None otherwise."""
    if not message.startswith(("Illegal character '\\n'", 'Expected "\'"', "Unterminated string")):
        return None
    lines = text.splitlines()
    for number in range(min(line, len(lines)), 0, -1):  # at end of file: the last open one
        column = _open_quote(lines[number - 1])
        if column is not None:
            return number, column
    return None


def _open_quote(line: str) -> int | None:
    """The 1-based column of a quote the line opens and never closes (comments aside)."""
    quote: str | None = None
    start = 0
    i = 0
    while i < len(line):
        char = line[i]
        if quote is None:
            if char == "#":
                break
            if char in "\"'":
                if line.startswith(char * 3, i):  # a multi-line string: not this rule's
                    return None
                quote, start = char, i
        elif char == "\\" and quote == '"':
            i += 1  # an escape in a basic string
        elif char == quote:
            quote = None
        i += 1
    return start + 1 if quote is not None else None


def env_tables(env: Mapping[str, str]) -> dict[str, Any]:
    """The ``SKUFERRY_<TABLE>__<KEY>`` variables of ``env`` as nested tables (keys lowercased)."""
    whole: dict[str, Any] = {}  # SKUFERRY_<TABLE>: a table as JSON
    nested: dict[str, Any] = {}  # SKUFERRY_<TABLE>__<KEY>...: one value each
    for variable, value in sorted(env.items()):
        name = variable.lower()
        if not name.startswith(ENV_PREFIX.lower()):
            continue
        table, *path = name[len(ENV_PREFIX) :].split(ENV_NESTED_DELIMITER)
        if table not in TABLES:
            continue
        if not path:
            whole[table] = _table(value)
            continue
        place = nested.setdefault(table, {})
        for key in path[:-1]:
            place = place.setdefault(key, {}) if isinstance(place, dict) else place
        if isinstance(place, dict):
            place[path[-1]] = value
    found = overlay(whole, nested)
    return {name: _decoded(value) for name, value in found.items()}


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


def _table(value: str) -> Any:
    """``SKUFERRY_<TABLE>``'s value: JSON when it parses, else the text (the model says why)."""
    try:
        return json.loads(value)
    except ValueError:
        return value


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


_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")


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
