"""``init --source KEY=VALUE``: the keys a remote file is read with, given as the
environment gives them (``SKUFERRY_SOURCE__<KEY>``); never a header (a credential on a
command line is every user's to read); how the config writes them back."""

from __future__ import annotations

from pathlib import Path

import pytest

from skuferry.actions.init import _source_keys
from skuferry.config.load import settings_from_dict
from skuferry.config.schema import FileSourceSettings
from skuferry.discover.read import connection
from skuferry.errors import UsageError


def test_source_keys_become_the_loaders_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    found = _source_keys(["sftp_key_file=keys/id_ed25519", "sftp_password_env=ERP_PW"])
    assert found == {
        "SKUFERRY_SOURCE__SFTP_KEY_FILE": str(tmp_path / "keys" / "id_ed25519"),
        "SKUFERRY_SOURCE__SFTP_PASSWORD_ENV": "ERP_PW",
    }


@pytest.mark.parametrize(
    ("pair", "said"),
    [
        ('headers={"Authorization": "Bearer x"}', "SKUFERRY_SOURCE__HEADERS"),
        ("delimiter=;", "KEY one of"),
        ("sftp_key_file", "KEY=VALUE"),
    ],
)
def test_what_source_refuses(pair: str, said: str) -> None:
    with pytest.raises(UsageError, match=said):
        _source_keys([pair])


def test_the_config_gets_the_keys_but_never_a_credentials_header(tmp_path: Path) -> None:
    env = {
        "SKUFERRY_SOURCE__HEADERS": '{"Authorization": "Bearer s3cret", "Accept": "text/csv"}',
        "SKUFERRY_SOURCE__ALLOWED_ORIGINS": '["https://cdn.example.com"]',
        "SKUFERRY_SOURCE__TIMEOUT_S": "30",
    }
    settings = settings_from_dict(
        {
            "api": {"base_url": "http://127.0.0.1:9", "api_key": "k" * 12},
            "source": {"type": "csv", "path": "https://erp.example.com/a.csv"},
            "state": {"path": str(tmp_path / "s.db")},
        },
        base_dir=tmp_path,
        env=env,
    )
    assert isinstance(settings.source, FileSourceSettings)
    keys, notes = connection(settings.source, folder=tmp_path)
    assert keys == {"allowed_origins": ["https://cdn.example.com"], "timeout_s": 30.0}
    assert "Authorization" in notes[0] and "SKUFERRY_SOURCE__HEADERS" in notes[0]
    assert "s3cret" not in repr(keys) + repr(notes)
