"""Plain config data with every secret hidden: the one mask of the raw reading's identity,
of ``skuferry check``'s printed config and of the skip decision's digest.

A value masked by mistake would hide a change, so only secrets are: a value kept behind
``get_secret_value`` (a ``SecretStr``), the value of a secret key when the data carries no
types (the raw reading), a secret header, a password in a URL. Imports no pydantic: the
quick lane masks the raw reading with it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

from skuferry.redact import SECRET_KEYS, is_secret_header

MASK = "***"
_URL_PASSWORD = re.compile(r"(://[^/@:]*:)[^/@]*@")


def masked(value: Any, key: str = "", *, by_name: bool = True) -> Any:
    """``value`` as JSON-ready data with every secret replaced by ``***``.

    ``by_name``: a value under a secret key (``api_key``, ``token``...) is a secret, for
    data read without its types. Off for a model's dump, whose secrets are typed: there a
    mapped field may be named ``token`` and its column is no secret.
    """
    if isinstance(value, Mapping):
        if key == "headers":
            return {
                str(name): MASK
                if is_secret_header(str(name))
                else masked(item, str(name), by_name=by_name)
                for name, item in value.items()
            }
        return {str(name): masked(item, str(name), by_name=by_name) for name, item in value.items()}
    if hasattr(value, "get_secret_value"):  # a SecretStr, its type enough
        return MASK
    if by_name and key in SECRET_KEYS and value:
        return [MASK for _ in value] if isinstance(value, list | tuple) else MASK
    if isinstance(value, list | tuple):
        return [masked(item, key, by_name=by_name) for item in value]
    if isinstance(value, str) and key.endswith("url"):
        return _URL_PASSWORD.sub(r"\1***@", value)
    if value is None or isinstance(value, str | bool | int | float | Decimal):
        return value  # a Decimal stays a number (the canonical JSON writes it as one)
    return str(value)  # a path, a TOML date


def url_password(url: str) -> str | None:
    """The password of a URL, if it holds one."""
    try:
        return urlsplit(url).password
    except ValueError:
        return None
