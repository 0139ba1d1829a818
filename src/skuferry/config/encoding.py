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


def text_encoding(name: str) -> str:
    """``known_encoding``, or ``"auto"``: the encoding a text file's bytes show (a BOM,
    else valid UTF-8, else cp1252; ``sources.encodings``)."""
    return name if name.lower() == "auto" else known_encoding(name)


def require_encoding(name: str, *, auto: bool = False) -> None:
    """``known_encoding`` for a source built by hand: a ``ConfigError`` at 'source.encoding'.
    ``auto``: the source reads ``"auto"`` too."""
    try:
        text_encoding(name) if auto else known_encoding(name)
    except ValueError as exc:
        raise ConfigError([f"at 'source.encoding': {exc}"]) from None
