"""One secret resolver with one precedence: environment > file > inline.

The same order for every secret:

- the API key: ``SKUFERRY_API_KEY`` > ``[api] api_key_file`` >
  ``$CREDENTIALS_DIRECTORY/api_key`` (systemd ``LoadCredential=``) > ``[api] api_key``;
- a source secret (``token``, ``password``, ``sftp_password``): ``<key>_env`` (the
  name of a variable) > ``<key>_file`` > ``<key>`` (the model allows only one of them).

``load_settings`` resolves them all, so ``skuferry check`` names every unreadable
file and unset variable together with the other problems; a source reads its
secret again through the same function when it opens. The rules themselves (the
places, their order, their words) are the pydantic-free ones the quick lane shares.
A secret found is masked in every log line from then on (``logs.add_secrets``); no
message here holds one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, SecretStr

from skuferry.config import secret_rules
from skuferry.errors import ConfigError


def read_source_secret(
    *,
    key: str,
    inline: SecretStr | None,
    file: Path | None,
    env_name: str | None,
    env: Mapping[str, str],
    table: str = "source",
) -> SecretStr | None:
    """A secret of ``[table]``, or ``ConfigError`` naming the place that failed."""
    places = secret_rules.source_places(key=key, file=file, env_name=env_name, table=table)
    text, problems = secret_rules.find_secret(*places, env)
    if problems:
        raise ConfigError(problems)
    return inline if text is None else SecretStr(text)


def read_secret(
    *,
    inline: SecretStr | None,
    file: Path | None,
    env_name: str | None,
    key: str,
    env: Mapping[str, str] | None = None,
    table: str = "source",
) -> SecretStr | None:
    """The secret from ``<key>_env`` > ``<key>_file`` > inline, read when its user opens.

    ``env`` defaults to ``os.environ``; ``table`` is the config table that names the
    secret (``[source]``, ``[daemon]``), so a problem names its own key. Raises
    ConfigError when the named file or variable cannot be read.
    """
    environ = os.environ if env is None else env
    return read_source_secret(
        key=key, inline=inline, file=file, env_name=env_name, env=environ, table=table
    )


def read_daemon_secret(
    daemon: BaseModel, key: str, env: Mapping[str, str] | None = None
) -> SecretStr | None:
    """A ``[daemon]`` secret (``hook_secret``, ``console_token``).

    Read from ``<key>_env`` or ``<key>_file``; None when neither is set. Raises
    ConfigError as ``read_secret`` does.
    """
    return read_secret(
        inline=None,
        file=getattr(daemon, f"{key}_file"),
        env_name=getattr(daemon, f"{key}_env"),
        key=key,
        table="daemon",
        env=env,
    )


def source_secret_problems(source: BaseModel, env: Mapping[str, str]) -> list[str]:
    """Read every secret the ``[source]`` table points at (load time), keep the problems."""
    return secret_rules.source_secret_problems(lambda name: getattr(source, name, None), env)
