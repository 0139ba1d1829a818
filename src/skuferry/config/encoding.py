"""The one check of a source's ``encoding``: the config model and the adapters both call it."""

from __future__ import annotations

import codecs

from skuferry.errors import ConfigError


def known_encoding(name: str) -> str:
    """``name`` if Python has a codec of that name, else ValueError (a pydantic validator)."""
    try:
        codecs.lookup(name)
    except LookupError:
        raise ValueError("not an encoding Python knows (e.g. 'utf-8', 'cp1252')") from None
    return name


def require_encoding(name: str) -> None:
    """``known_encoding`` for a source built by hand: a ``ConfigError`` at 'source.encoding'."""
    try:
        known_encoding(name)
    except ValueError as exc:
        raise ConfigError([f"at 'source.encoding': {exc}"]) from None
