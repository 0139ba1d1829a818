"""The one registry of what is a secret (skuferry/redact.py) against the config's models."""

from __future__ import annotations

import typing

from pydantic import BaseModel, SecretStr

from skuferry import logs
from skuferry.config import schema
from skuferry.redact import SECRET_FIELDS, SECRET_KEYS, is_secret_header


def _holds_a_secret(annotation: object) -> bool:
    if annotation is SecretStr:
        return True
    return any(_holds_a_secret(arg) for arg in typing.get_args(annotation))


def _models() -> list[type[BaseModel]]:
    found = [getattr(schema, name) for name in schema.__all__]
    return [m for m in found if isinstance(m, type) and issubclass(m, BaseModel)]


def test_every_secret_key_of_the_config_is_registered() -> None:
    secret_keys = {
        name
        for model in _models()
        for name, field in model.model_fields.items()
        if _holds_a_secret(field.annotation)
    }
    assert secret_keys, "the models hold secrets: the scan found none"
    assert secret_keys <= SECRET_KEYS, f"not in skuferry/redact.py: {secret_keys - SECRET_KEYS}"


def test_log_fields_named_like_a_secret_are_masked_whole() -> None:
    assert SECRET_KEYS <= SECRET_FIELDS
    event = {"event": "x", "Token": "abc", "headers": {"a": 1}, "sku": "A-1"}
    masked = logs._redact(None, "info", dict(event))
    assert masked == {"event": "x", "Token": "***", "headers": "***", "sku": "A-1"}


def test_secret_headers_by_a_hint_in_the_name() -> None:
    for name in ("Authorization", "X-Api-Key", "Cookie", "X-Auth-Token", "Proxy-Authorization"):
        assert is_secret_header(name), name
    for name in ("Accept", "Content-Type", "User-Agent", "X-Request-Id"):
        assert not is_secret_header(name), name
