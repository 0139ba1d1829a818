"""Every secret's problem names its own table and key (a newcomer's first stumble).

Forgetting ``export HOOK_SECRET`` once said ``at 'source.hook_secret_env'``; the key is
``[daemon] hook_secret_env``. Each secret is read through one resolver, which is told
the table that names it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from skuferry.config.schema.settings import DaemonSettings
from skuferry.config.secrets import read_secret
from skuferry.errors import ConfigError
from skuferry.service.hooks_http import load_secret


def test_an_unset_hook_secret_variable_names_the_daemon_table() -> None:
    daemon = DaemonSettings(listen="127.0.0.1:9347", hook_secret_env="HOOK_SECRET")
    with pytest.raises(ConfigError) as caught:
        load_secret(daemon, env={})
    message = str(caught.value)
    assert "at 'daemon.hook_secret_env'" in message
    assert "HOOK_SECRET" in message
    assert "source." not in message


def test_an_unreadable_hook_secret_file_names_the_daemon_table(tmp_path: Path) -> None:
    daemon = DaemonSettings(listen="127.0.0.1:9347", hook_secret_file=tmp_path / "missing")
    with pytest.raises(ConfigError) as caught:
        load_secret(daemon, env={})
    assert "at 'daemon.hook_secret_file'" in str(caught.value)


@pytest.mark.parametrize("key", ["token", "password", "client_secret", "sftp_password"])
def test_a_source_secret_names_the_source_table(key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        read_secret(inline=None, file=None, env_name="NOT_SET_HERE", key=key, env={})
    assert f"at 'source.{key}_env'" in str(caught.value)
