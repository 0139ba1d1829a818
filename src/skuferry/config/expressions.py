"""JMESPath in the config: checked when the config loads, so a typo is a config error.

``jmespath_check`` serves the mapping's ``path`` fields. ``SourcePathSetting`` is the type
of every path into a source's response (``items_path``, ``next_path``,
``cursor_path``, ``total_path``, ``total_pages_path``, a GraphQL source's
``page_info_path``): JMESPath, with ``""`` meaning the body itself. A path that
does not compile fails at ``'source.<key>'`` with a hint to quote a key that
holds a dot, an ``@`` or a ``-``: OData's next link is ``'"@odata.nextLink"'``.

The sources compile the same text with ``skuferry.sources.paths``; this module
only checks it (config sits below sources and never imports them).
"""

from __future__ import annotations

import re
from typing import Annotated

import jmespath
from pydantic import AfterValidator

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def jmespath_check(expression: str) -> None:
    """Raise ``ValueError`` saying where ``expression`` is not JMESPath (one line, no caret)."""
    try:
        jmespath.compile(expression)
    except jmespath.exceptions.JMESPathError as exc:
        position = getattr(exc, "lex_position", None)
        problem = getattr(exc, "message", None) or getattr(exc, "msg", None) or str(exc)
        if getattr(exc, "token_value", None) is None and "Incomplete" in type(exc).__name__:
            problem = "incomplete expression"
        where = f" at character {position + 1}" if isinstance(position, int) else ""
        raise ValueError(f"not a valid JMESPath expression: {problem}{where}") from None


def quoted_suggestion(text: str) -> str | None:
    """What ``text`` probably meant, with its odd keys quoted as JMESPath quotes them.

    An OData annotation (``@odata.nextLink``) is one key holding dots, so it is quoted
    whole; otherwise each dotted part that is not a plain name is quoted
    (``meta.next-page`` -> ``meta."next-page"``). None when there is nothing to quote.
    """
    if not text or '"' in text or any(c in text for c in "[]{}|`'*()&!<>=,: "):
        return None
    if text.startswith(("@", "$")):
        return f'"{text}"'
    parts = text.split(".")
    if any(not part for part in parts) or all(_PLAIN_KEY.fullmatch(p) for p in parts):
        return None
    return ".".join(p if _PLAIN_KEY.fullmatch(p) else f'"{p}"' for p in parts)


def source_path_check(text: str) -> str:
    """A source path: ``""`` (the body) or JMESPath, else ``ValueError`` with a quoting hint."""
    if text == "":
        return text
    try:
        jmespath_check(text)
    except ValueError as exc:
        suggestion = quoted_suggestion(text)
        if suggestion is None:
            raise
        raise ValueError(
            f"{exc}; a key that holds a dot, an @ or a - is quoted as JMESPath quotes it, "
            f"in double quotes inside the TOML string: '{suggestion}'"
        ) from None
    return text


SourcePathSetting = Annotated[str, AfterValidator(source_path_check)]
"""A path into a source response: JMESPath, ``""`` = the body; checked at load time."""
