"""Config loading: every problem at once, key precedence, paths, and the example config."""

from __future__ import annotations

import json
import re
import textwrap
import traceback
from pathlib import Path

import pytest

from skuferry.config.load import load_settings, settings_from_dict
from skuferry.config.schema import CsvSourceSettings, FieldSpec, Settings
from skuferry.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]
KEY = "sk-FAKE-zq81-distinctive-9f3c"  # must never show up in any output
ENV = {"SKUFERRY_API_KEY": KEY}

MINIMAL = """\
[api]
base_url = "https://cms.example.com"

[source]
type = "csv"
path = "catalog.csv"
"""
API_ONLY = MINIMAL.split("[source]", maxsplit=1)[0]


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Work in tmp_path so the config can be named as a user types it: config.toml."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write(folder: Path, text: str, name: str = "config.toml") -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def problems_of(text: str, env: dict[str, str] | None = None) -> list[str]:
    """Problems of config.toml (in the cwd) with ``text``; the test must be in ``here``."""
    write(Path.cwd(), text)
    with pytest.raises(ConfigError) as info:
        load_settings("config.toml", env=ENV if env is None else env)
    return info.value.problems


# --- finding and reading the file ---------------------------------------------------


def test_no_config_path_names_both_ways() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(None, env={})
    assert info.value.problems == ["no config file: pass --config PATH or set SKUFERRY_CONFIG"]


def test_skuferry_config_env_stands_in_for_the_path(here: Path) -> None:
    write(here, MINIMAL, "etc/sk.toml")
    settings = load_settings(None, env={"SKUFERRY_CONFIG": "etc/sk.toml", **ENV})
    assert settings.config_path == here / "etc" / "sk.toml"


def test_missing_file(here: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings("config.toml", env=ENV)
    assert info.value.problems == ["config.toml: file not found"]


def test_unreadable_file(here: Path) -> None:
    (here / "config.toml").mkdir()
    with pytest.raises(ConfigError) as info:
        load_settings("config.toml", env=ENV)
    assert info.value.problems == ["config.toml: is a directory, not a config file"]


def test_toml_syntax_error_names_the_line(here: Path) -> None:
    text = MINIMAL + "\n[budget]\nwrite_per_minute = \n"
    problems = problems_of(text)
    assert problems == ["config.toml: line 9: Invalid value (column 20)"]


def test_toml_error_at_end_of_file(here: Path) -> None:
    problems = problems_of("[api]\nbase_url = [1, 2")
    assert len(problems) == 1
    assert problems[0].startswith("config.toml: line 2: ")
    assert "at end of file" in problems[0]


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        (
            '[api]\nbase_url = "http://cms.example\napi_key = "k"\n',
            2,
            12,
        ),  # was "Illegal character"
        ("[api]\nbase_url = 'http://cms.example\n", 2, 12),  # was 'Expected "\'"' at the end
        ('[api]\nbase_url = "http://cms.example', 2, 12),  # the file ends inside it
        ('[api]\nbase_url = "a\\"b  # an escaped quote closes nothing\nx = 1\n', 2, 12),
    ],
)
def test_an_unterminated_string_is_called_so_at_its_opening_quote(
    here: Path, text: str, line: int, column: int
) -> None:
    """Issue 40 item 18: ``Illegal character '\\n' (column 13)`` said nothing of the cause."""
    problems = problems_of(text)
    assert problems == [
        f"config.toml: line {line}: unterminated string: the quote at column {column} is not "
        'closed on its line (a value of several lines is written """...""")'
    ]


# --- field problems, translated ------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("[budget]\nwrite_per_minute = 0", "at 'budget.write_per_minute': must be > 0"),
        ("[budget]\nsafety_margin = 0.5", "at 'budget.safety_margin': must be < 0.5"),
        ("[api]\nmax_in_flight = 0", "at 'api.max_in_flight': must be >= 1"),
        ("[api]\nmax_retries = 11", "at 'api.max_retries': must be <= 10"),
        (
            '[api]\nupdate_method = "post"',
            "at 'api.update_method': must be one of 'patch', 'put', 'none'",
        ),
        ("[budget]\nread_per_minute = 1.5", "at 'budget.read_per_minute': must be a whole number"),
        (
            '[budget]\nread_per_minute = "many"',
            "at 'budget.read_per_minute': must be a whole number",
        ),
        ('[schedule]\nrun_at_start = "yes!"', "at 'schedule.run_at_start': must be true or false"),
        ('[monitor]\ntimeout_s = "soon"', "at 'monitor.timeout_s': must be a number"),
        ("[mapping]\nkey = 5", "at 'mapping.key': must be a string (in quotes)"),
    ],
)
def test_field_problem_messages(here: Path, extra: str, expected: str) -> None:
    # the extra table goes into the file as its own section (or merges into [api])
    text = (
        MINIMAL.replace("[api]\n", extra + "\n", 1)
        if extra.startswith("[api]")
        else (MINIMAL + "\n" + extra + "\n")
    )
    assert problems_of(text) == [f"config.toml: {expected}"]


def test_required_field(here: Path) -> None:
    problems = problems_of('[api]\ntimeout_s = 5\n[source]\ntype = "csv"\n')
    assert problems == [
        "config.toml: at 'api.base_url': required",
        "config.toml: at 'source.path': required",
    ]


def test_two_mistakes_are_both_reported(here: Path) -> None:
    text = MINIMAL.replace("[api]\n", '[api]\nupdate_method = "post"\n') + (
        "\n[budget]\nwrite_per_minute = -1\n"
    )
    assert problems_of(text) == [
        "config.toml: at 'api.update_method': must be one of 'patch', 'put', 'none'",
        "config.toml: at 'budget.write_per_minute': must be > 0",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            MINIMAL + "[budget]\nwrite_per_minut = 5\n",
            "at 'budget.write_per_minut': unknown key; did you mean 'write_per_minute'?",
        ),
        (
            MINIMAL + "[bugdet]\nread_per_minute = 5\n",
            "at 'bugdet': unknown key; did you mean 'budget'?",
        ),
        (
            MINIMAL.replace('type = "csv"', 'type = "csv"\ndelimeter = ";"'),
            "at 'source.delimeter': unknown key; did you mean 'delimiter'?",
        ),
        (
            MINIMAL + '[mapping.fields]\nsku = "ItemNo"\nprice = { colum = "P" }\n',
            "at 'mapping.fields.price.colum': unknown key; did you mean 'column'?",
        ),
    ],
)
def test_unknown_keys_at_every_level(here: Path, text: str, expected: str) -> None:
    problems = problems_of(text)
    assert f"config.toml: {expected}" in problems


def test_unknown_key_without_a_close_match_lists_the_known_ones(here: Path) -> None:
    problems = problems_of(MINIMAL + "[safety]\nzzz = 1\n")
    assert problems == [
        "config.toml: at 'safety.zzz': unknown key; known keys: 'max_change_ratio', "
        "'max_gone_ratio'"
    ]


def test_config_path_is_not_a_file_key(here: Path) -> None:
    problems = problems_of('config_path = "/etc/x.toml"\n' + MINIMAL)
    assert len(problems) == 1
    assert problems[0].startswith("config.toml: at 'config_path': unknown key")


@pytest.mark.parametrize("source", ['type = "ftp"\npath = "x"', 'path = "x"'])
def test_source_type_missing_or_unknown(here: Path, source: str) -> None:
    text = MINIMAL.replace('type = "csv"\npath = "catalog.csv"', source)
    assert problems_of(text) == [
        "config.toml: at 'source.type': must be one of 'csv', 'jsonl', 'http', 'graphql', 'sql', "
        "'xlsx', 'xml'"
    ]


def test_mapping_field_of_the_wrong_shape(here: Path) -> None:
    problems = problems_of(MINIMAL + '[mapping.fields]\nsku = "ItemNo"\nprice = 5\n')
    assert problems == [
        "config.toml: at 'mapping.fields.price': must be a column name or a table like "
        '{ column = "Price", type = "decimal" }'
    ]


# --- api.base_url -------------------------------------------------------------------


@pytest.mark.parametrize(
    "url", ["cms.example.com", "ftp://cms.example.com", "https://", "https:///x"]
)
def test_base_url_needs_http_scheme_and_host(here: Path, url: str) -> None:
    problems = problems_of(MINIMAL.replace("https://cms.example.com", url))
    assert problems == [
        "config.toml: at 'api.base_url': must be an http:// or https:// URL with a host, "
        "like 'https://cms.example.com'"
    ]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://cms.example.com/", "https://cms.example.com"),
        ("https://cms.example.com/api/v1", "https://cms.example.com"),
        ("https://cms.example.com/api/v1/", "https://cms.example.com"),
        ("http://127.0.0.1:8080/tenant-a/api/v1", "http://127.0.0.1:8080/tenant-a"),
    ],
)
def test_base_url_loses_trailing_slash_and_api_prefix(here: Path, url: str, expected: str) -> None:
    write(here, MINIMAL.replace("https://cms.example.com", url))
    assert load_settings("config.toml", env=ENV).api.base_url == expected


# --- the API key --------------------------------------------------------------------


def key_setup(here: Path, *, inline: bool, file: bool, creds: bool) -> dict[str, str]:
    api = ['base_url = "https://cms.example.com"']
    if inline:
        api.append('api_key = "from-inline"')
    if file:
        (here / "key.txt").write_text("from-file\n", encoding="utf-8")
        (here / "key.txt").chmod(0o600)  # a world-readable key file is refused
        api.append('api_key_file = "key.txt"')
    env: dict[str, str] = {}
    if creds:
        (here / "creds").mkdir()
        (here / "creds" / "api_key").write_text("from-credentials\n", encoding="utf-8")
        env["CREDENTIALS_DIRECTORY"] = str(here / "creds")
    write(here, "[api]\n" + "\n".join(api) + '\n[source]\ntype = "csv"\npath = "c.csv"\n')
    return env


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        # one precedence for every secret: environment > file > inline (config/secrets.py)
        ({"env", "inline", "file", "creds"}, "from-env"),
        ({"inline", "file", "creds"}, "from-file"),
        ({"file", "creds"}, "from-file"),
        ({"inline", "creds"}, "from-credentials"),
        ({"inline"}, "from-inline"),
        ({"creds"}, "from-credentials"),
    ],
)
def test_api_key_precedence(here: Path, given: set[str], expected: str) -> None:
    env = key_setup(here, inline="inline" in given, file="file" in given, creds="creds" in given)
    if "env" in given:
        env["SKUFERRY_API_KEY"] = "from-env"
    settings = load_settings("config.toml", env=env)
    assert settings.api_key().get_secret_value() == expected  # newline stripped, too


def test_api_key_file_resolves_against_the_config_folder(tmp_path: Path) -> None:
    config = write(
        tmp_path,
        MINIMAL.replace("[api]\n", '[api]\napi_key_file = "secret/key"\n'),
        "etc/config.toml",
    )
    (tmp_path / "etc" / "secret").mkdir()
    (tmp_path / "etc" / "secret" / "key").write_text(KEY + "\n", encoding="utf-8")
    (tmp_path / "etc" / "secret" / "key").chmod(0o600)  # a world-readable key file is refused
    settings = load_settings(config, env={})
    assert settings.api.api_key_file == tmp_path / "etc" / "secret" / "key"
    assert settings.api_key().get_secret_value() == KEY


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: None, "cannot read '{p}': No such file or directory"),
        (lambda p: p.mkdir(), "cannot read '{p}': Is a directory"),
        (lambda p: p.write_text("\n", encoding="utf-8"), "'{p}' is empty"),
    ],
)
def test_bad_api_key_file_names_the_path(here: Path, make: object, message: str) -> None:
    key_path = here / "key"
    make(key_path)  # type: ignore[operator]
    problems = problems_of(MINIMAL.replace("[api]\n", '[api]\napi_key_file = "key"\n'), env={})
    assert problems == [f"config.toml: at 'api.api_key_file': {message.format(p=key_path)}"]


def test_empty_credentials_file_is_a_problem(here: Path) -> None:
    (here / "creds").mkdir()
    (here / "creds" / "api_key").write_text("", encoding="utf-8")
    problems = problems_of(MINIMAL, env={"CREDENTIALS_DIRECTORY": str(here / "creds")})
    assert problems == [
        "config.toml: at 'api.api_key': $CREDENTIALS_DIRECTORY/api_key: "
        f"'{here / 'creds' / 'api_key'}' is empty"
    ]


def test_no_api_key_says_the_three_ways(here: Path) -> None:
    problems = problems_of(MINIMAL, env={})
    assert len(problems) == 1
    assert problems[0].startswith("config.toml: at 'api.api_key': no API key: ")
    for way in ("SKUFERRY_API_KEY", "[api] api_key,", "[api] api_key_file"):
        assert way in problems[0]


def test_key_never_in_repr_str_redacted_or_errors(here: Path) -> None:
    write(here, MINIMAL.replace("[api]\n", f'[api]\napi_key = "{KEY}"\n'))
    settings = load_settings("config.toml", env={})
    assert settings.api_key().get_secret_value() == KEY
    redacted = settings.redacted()
    assert redacted["api"]["api_key"] == "***"
    for text in (repr(settings), str(settings), repr(settings.api), json.dumps(redacted)):
        assert KEY not in text

    # a broken file that holds the key in several places, some of them wrong
    broken = textwrap.dedent(f"""\
        [api]
        base_url = "nope"
        api_key = "{KEY}"
        api_kye = "{KEY}"
        [source]
        type = "csv"
        path = 5
        [monitor]
        start_url = "{KEY}"
        """)
    write(here, broken)
    with pytest.raises(ConfigError) as info:
        load_settings("config.toml", env={"SKUFERRY_API_KEY": KEY})
    assert len(info.value.problems) == 3  # base_url, api_kye, source.path
    rendered = "".join(traceback.format_exception(info.value))
    assert KEY not in rendered
    assert KEY not in str(info.value) and KEY not in repr(info.value)


def test_redacted_is_plain_data(here: Path) -> None:
    write(here, MINIMAL)
    redacted = load_settings("config.toml", env=ENV).redacted()
    assert json.loads(json.dumps(redacted)) == redacted
    assert redacted["source"]["path"] == str(here / "catalog.csv")
    assert redacted["budget"]["limiter"] == "window"


def test_redacted_hides_a_password_in_a_source_url(here: Path) -> None:
    source = '[source]\ntype = "sql"\nurl = "postgresql://erp:hunter2@db/erp"\ntable = "products"\n'
    write(here, API_ONLY + source)
    settings = load_settings("config.toml", env=ENV)
    assert "hunter2" not in json.dumps(settings.redacted())
    assert settings.redacted()["source"]["url"] == "postgresql://erp:***@db/erp"


# --- paths ---------------------------------------------------------------------------


def test_relative_paths_resolve_against_the_config_folder(tmp_path: Path) -> None:
    text = MINIMAL.replace('"catalog.csv"', '"data/catalog.csv"') + textwrap.dedent("""\
        [state]
        path = "state/sk.db"
        [metrics]
        textfile = "../metrics/sk.prom"
        """)
    config = write(tmp_path, text, "etc/skuferry/config.toml")
    settings = load_settings(config, env=ENV)
    folder = tmp_path / "etc" / "skuferry"
    assert isinstance(settings.source, CsvSourceSettings)
    assert settings.source.path == folder / "data" / "catalog.csv"
    assert settings.state.path == folder / "state" / "sk.db"
    assert settings.metrics.textfile == folder / ".." / "metrics" / "sk.prom"


def test_variables_and_home_expand_in_paths(tmp_path: Path) -> None:
    config = write(
        tmp_path,
        MINIMAL.replace('"catalog.csv"', '"${EXPORTS}/$NAME.csv"') + '[state]\npath = "~/sk.db"\n',
    )
    env = {**ENV, "EXPORTS": "/srv/exports", "NAME": "products", "HOME": "/home/op"}
    settings = load_settings(config, env=env)
    assert isinstance(settings.source, CsvSourceSettings)
    assert settings.source.path == Path("/srv/exports/products.csv")
    assert settings.state.path == Path("/home/op/sk.db")


def test_unset_variable_is_a_problem_and_others_still_reported(here: Path) -> None:
    text = MINIMAL.replace('"catalog.csv"', '"$NOPE/x.csv"') + '[schedule]\ncron = "* * *"\n'
    problems = problems_of(text)
    assert problems[0] == "config.toml: at 'source.path': environment variable $NOPE is not set"
    assert problems[1].startswith("config.toml: at 'schedule.cron': not a valid 5-field crontab")
    assert len(problems) == 2


def test_state_path_defaults_beside_the_config_file(tmp_path: Path) -> None:
    config = write(tmp_path, MINIMAL, "etc/config.toml")
    assert load_settings(config, env=ENV).state.path == tmp_path / "etc" / "skuferry.db"


def test_state_path_defaults_into_systemd_state_directory(tmp_path: Path) -> None:
    config = write(tmp_path, MINIMAL)
    env = {**ENV, "STATE_DIRECTORY": "/var/lib/skuferry:/var/lib/other"}
    assert load_settings(config, env=env).state.path == Path("/var/lib/skuferry/skuferry.db")


def test_env_overrides_state_and_source_paths(here: Path) -> None:
    write(here, MINIMAL + '[state]\npath = "/var/lib/skuferry/sk.db"\n', "etc/config.toml")
    env = {**ENV, "SKUFERRY_STATE_PATH": "/tmp/other.db", "SKUFERRY_SOURCE_PATH": "in/cat.csv"}
    settings = load_settings("etc/config.toml", env=env)
    assert settings.state.path == Path("/tmp/other.db")
    assert isinstance(settings.source, CsvSourceSettings)
    assert settings.source.path == here / "in" / "cat.csv"  # relative to the cwd, as typed


def test_source_path_override_for_a_source_without_path(here: Path) -> None:
    source = '[source]\ntype = "http"\nurl = "https://pim.example.com/products"\n'
    env = {**ENV, "SKUFERRY_SOURCE_PATH": "x.csv"}
    problems = problems_of(API_ONLY + source, env=env)
    assert problems == [
        "config.toml: at 'source.path': SKUFERRY_SOURCE_PATH is set, but a 'http' source "
        "has no path; unset it"
    ]


# --- rules across fields ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            '[schedule]\ninterval_minutes = 15\ncron = "*/15 * * * *"',
            "at 'schedule': set interval_minutes or cron, not both",
        ),
        (
            '[mapping.fields]\nname = "Description"',
            "at 'mapping.fields': must map the key field 'sku'",
        ),
        (
            '[monitor]\nsuccess_url = "ftp://hc.example.com/x"',
            "at 'monitor.success_url': must be an",
        ),
        ('[monitor]\nfailure_url = "hc-ping.com/x"', "at 'monitor.failure_url': must be an"),
    ],
)
def test_cross_field_rules(here: Path, extra: str, expected: str) -> None:
    problems = problems_of(MINIMAL + extra + "\n")
    assert len(problems) == 1
    assert problems[0].startswith(f"config.toml: {expected}")


@pytest.mark.parametrize("cron", ["* * *", "61 * * * *", "* * * * * *"])
def test_cron_must_be_a_valid_crontab(here: Path, cron: str) -> None:
    problems = problems_of(MINIMAL + f'[schedule]\ncron = "{cron}"\n')
    assert len(problems) == 1
    assert problems[0].startswith(
        "config.toml: at 'schedule.cron': not a valid 5-field crontab expression"
    )


def test_valid_cron_and_mapping_load(here: Path) -> None:
    write(
        here,
        MINIMAL
        + textwrap.dedent("""\
        [schedule]
        cron = "*/15 6-22 * * mon-fri"
        [mapping]
        key = "ean"
        [mapping.fields]
        ean = "EAN"
        price = { column = "P", type = "decimal", required = true }
        """),
    )
    settings = load_settings("config.toml", env=ENV)
    assert settings.schedule.cron == "*/15 6-22 * * mon-fri"
    assert settings.mapping.fields == {
        "ean": "EAN",
        "price": FieldSpec(column="P", type="decimal", required=True),
    }


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('delimiter = ";;"', "at 'source.delimiter': must be exactly one character"),
        ('delimiter = ""', "at 'source.delimiter': must be exactly one character"),
        ('encoding = "utf-9"', "at 'source.encoding': not an encoding Python knows"),
    ],
)
def test_csv_delimiter_and_encoding(here: Path, line: str, expected: str) -> None:
    problems = problems_of(MINIMAL.replace('type = "csv"', f'type = "csv"\n{line}'))
    assert len(problems) == 1
    assert problems[0].startswith(f"config.toml: {expected}")


def test_tab_delimiter_and_windows_encoding_load(here: Path) -> None:
    lines = 'type = "csv"\ndelimiter = "\\t"\nencoding = "cp1252"'
    write(here, MINIMAL.replace('type = "csv"', lines))
    source = load_settings("config.toml", env=ENV).source
    assert isinstance(source, CsvSourceSettings)
    assert (source.delimiter, source.encoding) == ("\t", "cp1252")


# --- building in code, and the shipped example -------------------------------------------


def test_settings_from_dict_reads_no_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKUFERRY_API_KEY", "from-the-environment")
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/elsewhere")
    data = {
        "api": {"base_url": "http://127.0.0.1:9/api/v1/", "api_key": KEY},
        "source": {"type": "jsonl", "path": "cat.jsonl"},
    }
    settings = settings_from_dict(data, base_dir=tmp_path)
    assert settings.api_key().get_secret_value() == KEY
    assert settings.api.base_url == "http://127.0.0.1:9"
    assert settings.source.type == "jsonl"
    assert settings.state.path == tmp_path / "skuferry.db"
    assert settings.config_path is None
    assert data["source"] == {"type": "jsonl", "path": "cat.jsonl"}  # input left alone


def test_settings_from_dict_problems_name_the_origin() -> None:
    with pytest.raises(ConfigError) as info:
        settings_from_dict({"api": {"base_url": "http://x", "api_key": "k"}}, origin="demo")
    assert info.value.problems == [
        "demo: at 'source': required",
    ]


def test_example_config_loads() -> None:
    example = REPO / "config.example.toml"
    settings = load_settings(example, env=ENV)
    assert isinstance(settings.source, CsvSourceSettings)
    assert settings.source.path == REPO / "examples" / "catalog.csv"
    assert settings.mapping.key == "sku"
    assert settings.mapping.fields is not None
    assert settings.mapping.fields["price"] == FieldSpec(column="Price", type="decimal")
    assert settings.state.path == REPO / "skuferry.db"


def test_example_config_documents_every_key() -> None:
    text = (REPO / "config.example.toml").read_text(encoding="utf-8")
    sections = re.split(r"(?m)^\[(\w+)\]\s*$", text)
    bodies = dict(zip(sections[1::2], sections[2::2], strict=True))
    for section, field in Settings.model_fields.items():
        if section == "config_path":
            continue
        if section == "join":  # an array of tables, shown commented out: [[join]]
            assert re.search(r"(?m)^# \[\[join\]\]$", text), "[[join]] not documented"
            for key in ("name", "key", "on"):
                assert re.search(rf"(?m)^# {key} = ", text), f"join.{key} not documented"
            continue
        assert section in bodies, f"[{section}] missing"
        model = CsvSourceSettings if section == "source" else field.annotation
        for key in model.model_fields:  # type: ignore[union-attr]
            pattern = rf"(?m)^(#?\s*{key}\s*=|\[{section}\.{key}\])"
            assert re.search(pattern, bodies[section]), f"{section}.{key} not documented"


@pytest.mark.parametrize("cron", ["0 9 * * 7", "0 9 * * 0", "30 2 * * 1-5", "0 0 1 * sun"])
def test_crontab_weekdays_as_cron_writes_them_load(here: Path, cron: str) -> None:
    # 7 is Sunday in crontab; APScheduler's own from_crontab refuses it.
    write(here, MINIMAL + f'[schedule]\ncron = "{cron}"\n')
    assert load_settings("config.toml", env=ENV).schedule.cron == cron


# --- [metrics] labels (issue 23): Prometheus label names ------------------------------


def test_metrics_labels_are_loaded(here: Path) -> None:
    write(here, MINIMAL + '\n[metrics]\nlabels = { workspace = "acme", team = "shops-2" }\n')
    settings = load_settings("config.toml", env=ENV)
    assert settings.metrics.labels == {"workspace": "acme", "team": "shops-2"}


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ('{ "work-space" = "acme" }', "'work-space' is not a Prometheus label name"),
        ('{ "1st" = "acme" }', "'1st' is not a Prometheus label name"),
        ('{ __name__ = "x" }', "'__name__': label names starting with __ are Prometheus' own"),
        ('{ tier = "gold" }', "'tier' is a label skuferry's metrics already use"),
        ("{ workspace = 5 }", "at 'metrics.labels.workspace': must be a string"),
    ],
)
def test_metrics_label_names_must_be_prometheus_label_names(
    here: Path, labels: str, expected: str
) -> None:
    (problem,) = problems_of(MINIMAL + f"\n[metrics]\nlabels = {labels}\n")
    assert problem.startswith("config.toml: at 'metrics.labels")
    assert expected in problem


def test_every_bad_label_name_is_named_at_once(here: Path) -> None:
    (problem,) = problems_of(MINIMAL + '\n[metrics]\nlabels = { "a-b" = "x", key = "y" }\n')
    assert "'a-b' is not a Prometheus label name" in problem
    assert "'key' is a label skuferry's metrics already use" in problem
