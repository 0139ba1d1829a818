"""Config from file and environment: SKUFERRY_<TABLE>__<KEY> over the file, one secret order."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from skuferry.config.load import load_settings
from skuferry.config.schema import CsvSourceSettings, HttpSourceSettings, Settings
from skuferry.config.secrets import read_source_secret
from skuferry.errors import ConfigError
from skuferry.sources.csv import CsvSource

KEY = "sk-FAKE-env-overlay-7d1e"
MINIMAL = """\
[api]
base_url = "https://cms.example.com"

[source]
type = "csv"
path = "catalog.csv"

[budget]
write_per_minute = 60
"""
HTTP_SOURCE = """\
[api]
base_url = "https://cms.example.com"

[source]
type = "http"
url = "https://pim.example.com/products"
auth = "bearer"
"""


def load(tmp_path: Path, text: str, **env: str) -> Settings:
    (tmp_path / "my.toml").write_text(text, encoding="utf-8")
    return load_settings(tmp_path / "my.toml", env={"SKUFERRY_API_KEY": KEY, **env})


def problems(tmp_path: Path, text: str, **env: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text, **env)
    return [p.replace(str(tmp_path / "my.toml"), "my.toml") for p in info.value.problems]


# --- the environment overlay -------------------------------------------------------


def test_a_nested_variable_overrides_one_key_of_the_file(tmp_path: Path) -> None:
    settings = load(
        tmp_path,
        MINIMAL,
        SKUFERRY_BUDGET__WRITE_PER_MINUTE="30",
        SKUFERRY_API__TIMEOUT_S="5",
    )
    assert settings.budget.write_per_minute == 30
    assert settings.budget.read_per_minute == 300  # untouched
    assert settings.api.timeout_s == 5.0
    assert settings.api.base_url == "https://cms.example.com"


def test_a_variable_can_fill_a_table_the_file_lacks(tmp_path: Path) -> None:
    settings = load(tmp_path, MINIMAL, SKUFERRY_SCHEDULE__CRON="0 3 * * *")
    assert settings.schedule.cron == "0 3 * * *"


def test_a_json_list_in_a_variable_is_a_list(tmp_path: Path) -> None:
    settings = load(
        tmp_path, MINIMAL, SKUFERRY_SOURCE__ALLOWED_ORIGINS='["https://cdn.example.com"]'
    )
    assert isinstance(settings.source, CsvSourceSettings)
    assert settings.source.allowed_origins == ["https://cdn.example.com"]


def test_a_bad_value_from_a_variable_is_named_by_the_variable(tmp_path: Path) -> None:
    assert problems(tmp_path, MINIMAL, SKUFERRY_BUDGET__WRITE_PER_MINUTE="0") == [
        "$SKUFERRY_BUDGET__WRITE_PER_MINUTE: at 'budget.write_per_minute': must be > 0"
    ]


def test_an_unknown_key_from_a_variable_gets_did_you_mean(tmp_path: Path) -> None:
    assert problems(tmp_path, MINIMAL, SKUFERRY_BUDGET__WRITE_PER_MINUT="5") == [
        "$SKUFERRY_BUDGET__WRITE_PER_MINUT: at 'budget.write_per_minut': "
        "unknown key; did you mean 'write_per_minute'?"
    ]


def test_file_problems_keep_naming_the_file(tmp_path: Path) -> None:
    text = MINIMAL.replace("write_per_minute = 60", "write_per_minute = 0")
    assert problems(tmp_path, text, SKUFERRY_API__TIMEOUT_S="5") == [
        "my.toml: at 'budget.write_per_minute': must be > 0"
    ]


def test_the_single_legacy_names_are_no_tables(tmp_path: Path) -> None:
    settings = load(
        tmp_path,
        MINIMAL,
        SKUFERRY_STATE_PATH=str(tmp_path / "elsewhere.db"),
        SKUFERRY_CONFIG="ignored.toml",
    )
    assert settings.state.path == tmp_path / "elsewhere.db"
    assert settings.api_key().get_secret_value() == KEY


def test_variable_names_are_case_insensitive(tmp_path: Path) -> None:
    settings = load(tmp_path, MINIMAL, skuferry_Budget__write_per_minute="31")
    assert settings.budget.write_per_minute == 31


def test_a_whole_table_as_json_under_its_nested_variables(tmp_path: Path) -> None:
    settings = load(
        tmp_path,
        MINIMAL,
        SKUFERRY_BUDGET='{"write_per_minute": 10, "read_per_minute": 20}',
        SKUFERRY_BUDGET__WRITE_PER_MINUTE="30",  # the nested one wins
    )
    assert (settings.budget.read_per_minute, settings.budget.write_per_minute) == (20, 30)


def test_a_table_variable_that_is_no_json_table_is_named(tmp_path: Path) -> None:
    found = problems(tmp_path, MINIMAL, SKUFERRY_BUDGET="{")
    assert len(found) == 1 and found[0].startswith("$SKUFERRY_BUDGET: at 'budget': ")


def test_variables_reach_any_depth(tmp_path: Path) -> None:
    text = MINIMAL + '\n[mapping]\nfields = { sku = "SKU", price = { column = "Price" } }\n'
    settings = load(tmp_path, text, SKUFERRY_MAPPING__FIELDS__PRICE__COLUMN="Preis")
    assert settings.mapping.fields is not None
    price = settings.mapping.fields["price"]
    assert not isinstance(price, str) and price.column == "Preis"


def test_toml_errors_still_name_the_line(tmp_path: Path) -> None:
    assert problems(tmp_path, MINIMAL + "oops = \n") == [
        "my.toml: line 10: Invalid value (column 8)"
    ]


# --- source secrets: read at load, one precedence ------------------------------------


def test_source_secrets_are_read_at_load_with_every_other_problem(tmp_path: Path) -> None:
    text = HTTP_SOURCE + f'token_file = "{tmp_path / "missing"}"\n[budget]\nwrite_per_minute = 0\n'
    found = problems(tmp_path, text)
    assert found == [
        "my.toml: at 'budget.write_per_minute': must be > 0",
        f"my.toml: at 'source.token_file': cannot read '{tmp_path / 'missing'}': "
        "No such file or directory",
    ]


def test_an_unset_token_variable_is_a_load_problem(tmp_path: Path) -> None:
    assert problems(tmp_path, HTTP_SOURCE + 'token_env = "PIM_TOKEN"\n') == [
        "my.toml: at 'source.token_env': environment variable PIM_TOKEN is not set or empty"
    ]
    settings = load(tmp_path, HTTP_SOURCE + 'token_env = "PIM_TOKEN"\n', PIM_TOKEN="t0k3n")
    assert isinstance(settings.source, HttpSourceSettings)
    assert settings.source.token_env == "PIM_TOKEN"


def test_source_secret_precedence_is_environment_then_file_then_inline(tmp_path: Path) -> None:
    file = tmp_path / "token"
    file.write_text("from-file\n", encoding="utf-8")
    inline = SecretStr("from-inline")

    def read(env_name: str | None, path: Path | None) -> str | None:
        secret = read_source_secret(
            key="token", inline=inline, file=path, env_name=env_name, env={"T": "from-env"}
        )
        return None if secret is None else secret.get_secret_value()

    assert read("T", file) == "from-env"
    assert read(None, file) == "from-file"
    assert read(None, None) == "from-inline"


# --- one encoding check ------------------------------------------------------------


def test_a_source_built_by_hand_gets_the_configs_encoding_message(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as by_hand:
        CsvSource(tmp_path / "c.csv", encoding="utf-9")
    loaded = problems(
        tmp_path, MINIMAL.replace('path = "catalog.csv"', 'path = "c.csv"\nencoding = "utf-9"')
    )
    assert by_hand.value.problems == [p.removeprefix("my.toml: ") for p in loaded]


def test_the_key_from_a_nested_variable_still_wins_over_a_key_file(tmp_path: Path) -> None:
    (tmp_path / "key").write_text("from-file\n", encoding="utf-8")
    (tmp_path / "key").chmod(0o600)
    text = MINIMAL.replace("[source]", 'api_key_file = "key"\n\n[source]')
    (tmp_path / "my.toml").write_text(text, encoding="utf-8")
    settings = load_settings(tmp_path / "my.toml", env={"SKUFERRY_API__API_KEY": "from-env"})
    assert settings.api_key().get_secret_value() == "from-env"
