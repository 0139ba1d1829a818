"""One secret resolver with one precedence: environment > file > inline.

The same order for every secret:

- the API key: ``SKUFERRY_API_KEY`` > ``[api] api_key_file`` >
  ``$CREDENTIALS_DIRECTORY/api_key`` (systemd ``LoadCredential=``) > ``[api] api_key``;
- a source secret (``token``, ``password``, ``sftp_password``): ``<key>_env`` (the
  name of a variable) > ``<key>_file`` > ``<key>`` (the model allows only one of them).

``load_settings`` resolves them all, so ``skuferry check`` names every unreadable
file and unset variable together with the other problems; a source reads its
secret again through the same function when it opens. A secret found is masked
in every log line from then on (``logs.add_secrets``); no message here holds one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, SecretStr

from skuferry.config.raw import find_secret
from skuferry.errors import ConfigError
from skuferry.redact import SOURCE_SECRET_KEYS


@dataclass(frozen=True, slots=True)
class SecretPlaces:
    """Where one secret may come from, each place with the words a problem names it by."""

    env_var: str | None = None  # the variable holding the secret
    env_where: str | None = None  # set: the variable must be set (``<key>_env``); else optional
    files: Sequence[tuple[str, Path]] = ()  # (where, path), the first given is read
    inline: SecretStr | None = None


def resolve(places: SecretPlaces, env: Mapping[str, str]) -> tuple[SecretStr | None, list[str]]:
    """The secret from the first place given (environment > file > inline), or the problem."""
    text, problems = find_secret(places.env_var, places.env_where, places.files, env)
    if problems:
        return None, problems
    return (places.inline if text is None else SecretStr(text)), []


def source_places(
    *,
    key: str,
    inline: SecretStr | None,
    file: Path | None,
    env_name: str | None,
    table: str = "source",
) -> SecretPlaces:
    """The places of a secret ``key`` (``token``...) as its ``[table]`` names them."""
    return SecretPlaces(
        env_var=env_name,
        env_where=f"at '{table}.{key}_env'",
        files=() if file is None else ((f"at '{table}.{key}_file'", file),),
        inline=inline,
    )


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
    secret, problems = resolve(
        source_places(key=key, inline=inline, file=file, env_name=env_name, table=table), env
    )
    if problems:
        raise ConfigError(problems)
    return secret


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


def source_secret_problems(source: BaseModel, env: Mapping[str, str]) -> list[str]:
    """Read every secret the ``[source]`` table points at (load time), keep the problems."""
    problems: list[str] = []
    for key in SOURCE_SECRET_KEYS:
        inline, file, env_name = (
            getattr(source, name, None) for name in (key, f"{key}_file", f"{key}_env")
        )
        if inline is None and file is None and env_name is None:
            continue
        _secret, found = resolve(
            source_places(key=key, inline=inline, file=file, env_name=env_name), env
        )
        problems.extend(found)
    return problems
