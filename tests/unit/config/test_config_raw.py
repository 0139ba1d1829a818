"""The config's raw reading: the one reader of the TOML, the environment, ``$VAR``s, key
files and paths, shared by the loader and the quick lane, and the identity both decide on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from skuferry.config import overlay, raw
from skuferry.config.load import load_settings, settings_from_dict
from skuferry.config.schema import FILE_SOURCE_TYPES, SOURCE_TYPES, Settings
from skuferry.errors import ConfigError
from skuferry.sync import skip

CONFIG = """
[api]
base_url = "http://127.0.0.1:9"
api_key = "sk-secret-1"
auth_check_minutes = 0

[source]
type = "csv"
path = "${EXPORT}/catalog.csv"

[mapping]
key = "sku"
[mapping.fields]
sku = "SKU"
name = "Name"
"""


def test_its_lists_are_the_settings_own() -> None:
    """Written out so that reading needs no models; these keep them the models' lists."""
    assert list(overlay.TABLES) == [n for n in Settings.model_fields if n != "config_path"]
    assert set(raw.FILE_SOURCE_TYPES) == set(FILE_SOURCE_TYPES)
    assert set(raw.SOURCE_TYPES) == set(SOURCE_TYPES)


def _read(tmp_path: Path, text: str, env: dict[str, str]) -> raw.RawConfig:
    config = tmp_path / "skuferry.toml"
    config.write_text(text, encoding="utf-8")
    config.chmod(0o600)
    return raw.read(config, env)


def test_the_state_file_is_where_the_loader_puts_it(tmp_path: Path) -> None:
    env = {"EXPORT": str(tmp_path)}
    cases = [
        ("", {}, tmp_path / "skuferry.db"),
        ("", {"STATE_DIRECTORY": "/var/lib/a:/x"}, Path("/var/lib/a/skuferry.db")),
        ('[state]\npath = "state/s.db"\n', {}, tmp_path / "state" / "s.db"),
        ('[state]\npath = "${DB}/s.db"\n', {"DB": "/srv"}, Path("/srv/s.db")),
        ('[state]\npath = "state/s.db"\n', {"SKUFERRY_STATE_PATH": "/run/s.db"}, Path("/run/s.db")),
        ("", {"skuferry_state__path": "/in/any/case.db"}, Path("/in/any/case.db")),
    ]
    for extra, more, expected in cases:
        found = _read(tmp_path, CONFIG + extra, {**env, **more})
        assert found.state_path == expected, (extra, more)
        assert load_settings(tmp_path / "skuferry.toml", env={**env, **more}).state.path == expected


def test_the_identity_is_the_loaded_settings_own(tmp_path: Path) -> None:
    env = {"EXPORT": "/srv/a"}
    found = _read(tmp_path, CONFIG, env)
    settings = load_settings(tmp_path / "skuferry.toml", env=env)
    assert skip.identity(settings) == found.identity
    coded = settings_from_dict(found.toml, base_dir=tmp_path, env=env)  # the same reading
    assert (
        coded.read_identity
        == raw.resolve(found.toml, origin="-", base_dir=tmp_path, env=env).identity
    )
    built = Settings.model_validate(
        settings.model_dump(exclude_unset=True)
    )  # no reading: its effective config's
    assert built.read_identity is None and len(skip.identity(built)) == 16


def test_the_identity_sees_every_input_but_secret_values(tmp_path: Path) -> None:
    env = {"EXPORT": "/srv/a", "PATH": "/bin"}
    base = _read(tmp_path, CONFIG, env).identity
    assert _read(tmp_path, CONFIG, env).identity == base, "deterministic"
    same = [
        _read(tmp_path, CONFIG.replace("sk-secret-1", "sk-secret-2"), env),  # a rotated key
        _read(tmp_path, CONFIG + "# a comment\n", env),
        _read(tmp_path, CONFIG, {**env, "PATH": "/usr/bin"}),  # not read
        _read(tmp_path, CONFIG, {**env, "SKUFERRY_API_KEY": "sk-env-1"}),  # masked too
        _read(tmp_path, CONFIG.replace("${EXPORT}", "$EXPORT"), env),
        _read(tmp_path, CONFIG.replace("${EXPORT}", "/srv/a"), env),
    ]
    assert {found.identity for found in same} == {base}
    changed = [
        _read(tmp_path, CONFIG.replace('key = "sku"', 'key = "ean"'), env),
        _read(tmp_path, CONFIG, {**env, "EXPORT": "/srv/b"}),
        _read(tmp_path, CONFIG, {**env, "SKUFERRY_SAFETY__MAX_CHANGE_RATIO": "0.9"}),
        _read(tmp_path, CONFIG, {**env, "skuferry_mapping__fields__name": "Title"}),
        _read(tmp_path, CONFIG, {**env, "Skuferry_Source__Path": "${ELSE}/c.csv", "ELSE": "/e"}),
        _read(tmp_path, CONFIG, {**env, "SKUFERRY_SOURCE_PATH": "/srv/other.csv"}),
        _read(tmp_path, CONFIG, {**env, "STATE_DIRECTORY": "/var/lib/x"}),
    ]
    identities = [found.identity for found in changed]
    assert base not in identities and len(set(identities)) == len(identities)


def test_no_secret_reaches_the_masked_data(tmp_path: Path) -> None:
    text = CONFIG.replace(
        "[source]", '[source]\nheaders = { Authorization = "Bearer tok-1", Accept = "x" }'
    )
    found = _read(tmp_path, text, {"EXPORT": "/srv", "SKUFERRY_SOURCE__PASSWORD": "pw-1"})
    dumped = json.dumps(raw.masked(found.data))
    assert "sk-secret-1" not in dumped and "tok-1" not in dumped and "pw-1" not in dumped
    assert '"Accept": "x"' in dumped, "only secrets are masked"


def test_a_reading_s_repr_shows_no_secret(tmp_path: Path) -> None:
    """A reading in a log line or a traceback's locals must not print the key it read."""
    env = {"EXPORT": "/srv", "SKUFERRY_SOURCE__PASSWORD": "pw-1"}
    shown = repr(_read(tmp_path, CONFIG, env))
    assert "sk-secret-1" not in shown and "pw-1" not in shown
    assert "RawConfig(" in shown


def test_a_problem_of_the_reading_is_the_loader_s(tmp_path: Path) -> None:
    found = _read(tmp_path, CONFIG, {})
    assert found.problems == ["at 'source.path': environment variable $EXPORT is not set"]


def test_a_key_file_written_anew_is_no_change(tmp_path: Path) -> None:
    """systemd's LoadCredential= and a pod's Secret volume write the key again for every
    run: a new inode and new times, the same place. Gone, empty or readable by everyone,
    it decides whether the config loads."""
    key = tmp_path / "api_key"
    key.write_text("sk-1\n", encoding="utf-8")
    key.chmod(0o600)
    text = CONFIG.replace('api_key = "sk-secret-1"', 'api_key_file = "api_key"')
    env = {"EXPORT": "/srv"}
    before = _read(tmp_path, text, env)
    assert before.data["api"]["api_key"] == "sk-1" and before.identity
    key.unlink()
    key.write_text("sk-2 rotated\n", encoding="utf-8")
    key.chmod(0o600)
    after = _read(tmp_path, text, env)
    assert (after.identity, after.refused, after.problems) == (before.identity, (), [])
    key.chmod(0o640)  # the group may read it: the load allows that
    assert _read(tmp_path, text, env).refused == ()
    key.chmod(0o644)  # every user: the load refuses it, and the lane in the load's words
    refused = _read(tmp_path, text, env).refused
    assert refused == (
        f"at 'api.api_key_file': '{key}' holds a secret and every user of this machine may "
        f"read it (mode 0644); run: chmod 600 {key}",
    )
    with pytest.raises(ConfigError) as raised:
        load_settings(tmp_path / "skuferry.toml", env=env)
    assert raised.value.problems == [f"{tmp_path / 'skuferry.toml'}: {refused[0]}"]
    key.write_text("", encoding="utf-8")
    assert _read(tmp_path, text, env).problems == [f"at 'api.api_key_file': '{key}' is empty"]
    key.unlink()
    assert _read(tmp_path, text, env).problems[0].startswith("at 'api.api_key_file': cannot read")


@pytest.mark.parametrize("module", ["skuferry.config.raw", "skuferry.service.quick"])
def test_the_reading_needs_no_pydantic(tmp_path: Path, module: str) -> None:
    config = tmp_path / "skuferry.toml"
    config.write_text(CONFIG, encoding="utf-8")
    child = (
        f"import sys, importlib; importlib.import_module({module!r})\n"
        "from skuferry.config import raw\n"
        f"raw.read({str(config)!r}, {{'EXPORT': '/srv'}}).identity\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pydantic'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


def test_a_source_secret_the_load_cannot_read_is_refused(tmp_path: Path) -> None:
    """``token_env = "NAME"`` with NAME unset, a ``token_file`` not there: the load fails."""
    text = CONFIG.replace("[source]", '[source]\nsftp_password_env = "SFTP_PW"')
    assert _read(tmp_path, text, {"EXPORT": "/srv"}).refused == (
        "at 'source.sftp_password_env': environment variable SFTP_PW is not set or empty",
    )
    assert _read(tmp_path, text, {"EXPORT": "/srv", "SFTP_PW": "pw"}).refused == ()
    text = CONFIG.replace("[source]", '[source]\nsftp_password_file = "pw.txt"')
    assert _read(tmp_path, text, {"EXPORT": "/srv"}).refused == (
        f"at 'source.sftp_password_file': cannot read '{tmp_path / 'pw.txt'}': "
        "No such file or directory",
    )
    (tmp_path / "pw.txt").write_text("pw\n", encoding="utf-8")
    (tmp_path / "pw.txt").chmod(0o600)
    assert _read(tmp_path, text, {"EXPORT": "/srv"}).refused == ()
