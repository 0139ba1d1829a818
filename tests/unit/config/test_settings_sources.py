"""The loader through pydantic-settings (issue 30): ``Settings`` is a ``BaseSettings``
whose two sources are the config's one raw reading (the TOML file and the environment
the caller gave, never the process's); and a load reads each secret file once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic_settings import BaseSettings, InitSettingsSource

from skuferry.config import raw
from skuferry.config.load import load_settings, settings_from_dict
from skuferry.config.schema import Settings
from skuferry.config.schema.reading import (
    EnvReadingSource,
    TomlReadingSource,
    loading,
    sources,
)
from skuferry.errors import ConfigError

CONFIG = """
[api]
base_url = "http://127.0.0.1:9"
api_key = "sk-secret-1"

[source]
type = "csv"
path = "catalog.csv"

[mapping.fields]
sku = "SKU"
name = "Name"
price = { column = "Price", type = "decimal" }
"""


def _write(tmp_path: Path, text: str = CONFIG) -> Path:
    config = tmp_path / "skuferry.toml"
    config.write_text(text, encoding="utf-8")
    config.chmod(0o600)
    return config


def test_settings_are_pydantic_settings_fed_by_the_reading(tmp_path: Path) -> None:
    assert issubclass(Settings, BaseSettings)
    env = {"skuferry_api__timeout_s": "7", "SKUFERRY_STATE_PATH": str(tmp_path / "s.db")}
    found = raw.read(_write(tmp_path), env)
    init = InitSettingsSource(Settings, init_kwargs={})
    with loading(found):
        chosen = sources(Settings, init)
    assert [type(s) for s in chosen] == [InitSettingsSource, EnvReadingSource, TomlReadingSource]
    from_env, from_file = chosen[1](), chosen[2]()
    # the environment source: only what the environment set, resolved as the reading did
    assert from_env == {"api": {"timeout_s": "7"}, "state": {"path": tmp_path / "s.db"}}
    assert from_file == found.data
    settings = load_settings(tmp_path / "skuferry.toml", env=env)
    assert settings.api.timeout_s == 7 and settings.state.path == tmp_path / "s.db"
    assert settings.source.path == tmp_path / "catalog.csv"  # type: ignore[union-attr]
    assert sources(Settings, init) == (init,), "outside a load: the arguments alone"


def test_the_environment_is_the_one_given_never_the_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKUFERRY_API__TIMEOUT_S", "7")
    monkeypatch.setenv("SKUFERRY_MAPPING__KEY", "name")
    monkeypatch.setenv("API", '{"timeout_s": 9}')  # a field's own name, as pydantic-settings reads
    (tmp_path / ".env").write_text("SKUFERRY_API__TIMEOUT_S=8\nAPI__TIMEOUT_S=8\n")
    monkeypatch.chdir(tmp_path)
    config = _write(tmp_path)
    settings = load_settings(config, env={})
    assert (settings.api.timeout_s, settings.mapping.key) == (30.0, "sku")
    built = settings_from_dict(
        {"api": {"base_url": "http://127.0.0.1:9", "api_key": "k"}, **_rest()}
    )
    assert built.api.timeout_s == 30.0
    assert load_settings(config, env={"SKUFERRY_API__TIMEOUT_S": "5"}).api.timeout_s == 5


def _rest() -> dict[str, Any]:
    return {"source": {"type": "csv", "path": "c.csv"}, "mapping": {"fields": {"sku": "SKU"}}}


def test_a_value_from_the_environment_is_still_named_by_its_variable(tmp_path: Path) -> None:
    config = _write(tmp_path)
    with pytest.raises(ConfigError) as raised:
        load_settings(config, env={"skuferry_api__timeout_s": "soon"})
    assert raised.value.problems == [
        "$SKUFERRY_API__TIMEOUT_S: at 'api.timeout_s': must be a number"
    ]
    with pytest.raises(ConfigError) as raised:
        load_settings(_write(tmp_path, CONFIG + "\n[budget]\nwrite_per_minute = 0\n"), env={})
    assert raised.value.problems == [f"{config}: at 'budget.write_per_minute': must be > 0"]


def test_settings_built_in_code_take_their_arguments() -> None:
    settings = Settings(
        api={"base_url": "http://127.0.0.1:9", "api_key": "k"},
        source={"type": "csv", "path": "/srv/c.csv"},
        state={"path": "/srv/s.db"},
    )
    assert settings.api.base_url == "http://127.0.0.1:9" and settings.read_identity is None
