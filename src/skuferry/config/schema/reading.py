"""The config's raw reading as pydantic-settings sources: ``Settings`` is a
``BaseSettings`` whose ``settings_customise_sources`` returns the two built here.

The reading (the TOML file, ``SKUFERRY_<TABLE>__<KEY>`` in any case, ``$VAR``s, key files
and paths, from the environment the caller gave) is made once, without pydantic, because
the quick lane decides on it too and must decide exactly as the loader does. Its data is
the file's tables with the environment laid over them, then resolved as a whole (a preset
or a path depends on both). So the two sources are two views of one reading:

- the TOML source: the reading's data, everything a value of the file or the
  environment resolved to;
- the environment source: the values the environment set (``SKUFERRY_<TABLE>__<KEY>``,
  ``SKUFERRY_<TABLE>`` as JSON, ``SKUFERRY_STATE_PATH``, ``SKUFERRY_SOURCE_PATH``, the
  API key variables), resolved, winning over the file's.

The environment is the mapping ``load_settings(env=...)`` was given, never the process's
behind its back. Validation anchors relative paths at the config's folder while a reading
is being loaded (``config_dir``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from skuferry.config import overlay

if TYPE_CHECKING:
    from skuferry.config.raw import RawConfig

# the single-name variables the reading lays over a value (dotted key, variable names)
_SINGLE_NAMES = (
    ("state.path", ("SKUFERRY_STATE_PATH",)),
    ("source.path", ("SKUFERRY_SOURCE_PATH",)),
    ("api.api_key", ("SKUFERRY_API_KEY", "SKUFERRY_API_KEYS")),
    ("api.api_keys", ("SKUFERRY_API_KEYS",)),
)

_LOADING: ContextVar[RawConfig | None] = ContextVar("skuferry_config_reading", default=None)


@contextmanager
def loading(found: RawConfig) -> Iterator[None]:
    """While ``Settings()`` is built from ``found``: its sources and its folder."""
    token = _LOADING.set(found)
    try:
        yield
    finally:
        _LOADING.reset(token)


def config_dir() -> Path | None:
    """The folder of the config being loaded (relative paths anchor there), if any."""
    found = _LOADING.get()
    return None if found is None else found.base_dir


class ReadingSource(PydanticBaseSettingsSource):
    """A part of the raw reading as a settings source: top-level tables, as read."""

    def __init__(self, settings_cls: type[BaseSettings], data: dict[str, Any]) -> None:
        super().__init__(settings_cls)
        self._data = data

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._data)


class TomlReadingSource(ReadingSource):
    """The config file's tables, resolved with the environment laid over them."""


class EnvReadingSource(ReadingSource):
    """The values the environment set, resolved: they win over the file's."""


def sources(
    settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource
) -> tuple[PydanticBaseSettingsSource, ...]:
    """The sources of ``Settings()``, highest first: values given in code, then the
    reading being loaded (its environment over its file); none read anything more."""
    found = _LOADING.get()
    if found is None:  # built in code from its arguments alone
        return (init_settings,)
    return (
        init_settings,
        EnvReadingSource(settings_cls, _from_environment(found)),
        TomlReadingSource(settings_cls, found.data),
    )


def _from_environment(found: RawConfig) -> dict[str, Any]:
    """The reading's values at the keys its environment set, as nested tables."""
    dotted = list(overlay.env_names(found.from_env))
    dotted += [key for key, names in _SINGLE_NAMES if any(found.env.get(n) for n in names)]
    out: dict[str, Any] = {}
    taken: list[tuple[str, ...]] = []
    for parts in sorted((tuple(key.split(".")) for key in dotted), key=len):
        if any(parts[: len(done)] == done for done in taken):
            continue  # a whole table the environment set holds it already
        value: Any = found.data
        for part in parts:
            if not isinstance(value, dict) or part not in value:
                break
            value = value[part]
        else:
            place = out
            for part in parts[:-1]:
                place = place.setdefault(part, {})
            place[parts[-1]] = value
            taken.append(parts)
    return out
