"""The config's security rules: clear text, private CAs, and who may read the secrets.

``problems(settings)`` runs with the config loader's other cross-field rules
and refuses, as ``at 'a.b': message`` lines:

- ``http://`` in ``[api] base_url`` or an http source's ``url`` to a host that is
  not a loopback literal, unless that table sets ``allow_insecure_http = true``
  (the API key or the source's token would cross the network in clear text);
- a ``ca_bundle`` that is not a readable PEM file of CA certificates;
- a secret file (``*_file``: API key, keys file, token, password, SFTP key or
  password) that every user of the box may read, as ssh refuses such a key.

``after_load(settings, raw)`` runs once a config is valid: it hands every secret
the config holds to the log redactor and warns when the config file itself
holds an inline secret and others may read it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr

from skuferry import logs
from skuferry.config.masking import url_password as _url_password
from skuferry.config.raw import inline_secret_warning
from skuferry.config.schema import ApiSourceSettings, Settings
from skuferry.config.secret_rules import SECRET_FILE_KEYS, secret_file_problems
from skuferry.net.origins import insecure_http_problem, parse_allowed
from skuferry.redact import is_secret_header

__all__ = ["SECRET_FILE_KEYS", "after_load", "inline_secret_warning", "problems"]

log = logs.get(__name__)


def problems(settings: Settings) -> list[str]:
    """Every security problem of a validated config, as ``at 'a.b': message`` lines."""
    found: list[str] = []
    api, source = settings.api, settings.source
    problem = insecure_http_problem(api.base_url, allow_insecure_http=api.allow_insecure_http)
    if problem:
        found.append(f"at 'api.base_url': {problem}")
    if isinstance(source, ApiSourceSettings):
        problem = insecure_http_problem(source.url, allow_insecure_http=source.allow_insecure_http)
        if problem:
            found.append(f"at 'source.url': {problem}")
        if source.token_url:
            problem = insecure_http_problem(
                source.token_url, allow_insecure_http=source.allow_insecure_http
            )
            if problem:
                found.append(f"at 'source.token_url': {problem}")
        try:
            parse_allowed(source.allowed_origins)
        except ValueError as exc:
            found.append(f"at 'source.allowed_origins': {exc}; write https://host[:port]")
    for table, key, path in _paths(settings, ("ca_bundle",)):
        problem = ca_bundle_problem(path)
        if problem:
            found.append(f"at '{table}.{key}': {problem}")
    found.extend(secret_file_problems(_paths(settings, SECRET_FILE_KEYS)))
    return found


def ca_bundle_problem(path: Path) -> str | None:
    """Why ``path`` cannot serve as a bundle of CA certificates, or None."""
    import ssl  # only with a ca_bundle: loading OpenSSL costs a start ~10 ms

    try:
        ssl.create_default_context(cafile=str(path))
    except FileNotFoundError:
        return f"'{path}' does not exist"
    except ssl.SSLError:  # before OSError, its base class
        return f"'{path}' holds no PEM CA certificate (-----BEGIN CERTIFICATE-----)"
    except OSError as exc:
        return f"cannot read '{path}': {exc.strerror or exc}"
    return None


def _paths(settings: Settings, keys: tuple[str, ...]) -> Iterator[tuple[str, str, Path]]:
    """(table, key, path) for every ``keys`` field set to a path in any table."""
    for table in type(settings).model_fields:
        section = getattr(settings, table)
        if not isinstance(section, BaseModel):
            continue
        for key in keys:
            value = getattr(section, key, None)
            if isinstance(value, Path):
                yield table, key, value


# --- once the config is valid --------------------------------------------------------


def after_load(settings: Settings, raw: Mapping[str, Any]) -> None:
    """Register the config's secrets with the log redactor; warn about a readable config."""
    logs.add_secrets(secret_values(settings))
    config_path = getattr(settings, "config_path", None)
    if isinstance(config_path, Path):
        warning = inline_secret_warning(config_path, raw)
        if warning:
            log.warning("config.file.readable", path=str(config_path), message=warning)


def secret_values(settings: Settings) -> Iterator[str]:
    """Every secret the settings hold: ``SecretStr`` fields, secret headers, URL passwords.

    Secrets read later from files or the environment (a source's token, an SFTP
    password) are registered where they are read (``config.secrets.read_secret``).
    """
    for table in type(settings).model_fields:  # [api] api_keys: every key of a keys file
        yield from _secrets_in(getattr(settings, table))


def _secrets_in(value: Any, name: str = "") -> Iterator[str]:
    if isinstance(value, SecretStr):
        yield value.get_secret_value()
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _secrets_in(item, name)
    elif isinstance(value, BaseModel):
        for field in type(value).model_fields:
            yield from _secrets_in(getattr(value, field), field)
    elif isinstance(value, Mapping) and name == "headers":
        for header, text in value.items():
            if is_secret_header(str(header)):
                yield from _header_secret(str(text))
    elif isinstance(value, str) and name.endswith("url"):
        password = _url_password(value)
        if password:
            yield password


def _header_secret(text: str) -> Iterator[str]:
    yield text
    scheme, _, credential = text.partition(" ")  # "Bearer abc": abc alone is the secret too
    if credential and scheme.isalpha():
        yield credential
