"""Paths into a source's response, compiled once: JMESPath, ``""`` = the body itself.

Every http-like source (``type = "http"``, a GraphQL source) reads its pages with
these: ``items_path``, ``next_path``, ``cursor_path``, ``total_path``,
``total_pages_path``. A dotted path (``_links.next.href``, ``meta.pages``) is
already JMESPath and keeps its meaning; a key holding a dot or an ``@`` is quoted:
``'"@odata.nextLink"'``. The config checked the text when it loaded
(its expression checks); a path that still does not compile (a settings object
built by hand) is a ``ConfigError`` naming the key.
"""

from __future__ import annotations

from typing import Any

import jmespath
import jmespath.exceptions

from skuferry.config.expressions import source_path_check
from skuferry.errors import ConfigError


class SourcePath:
    """One compiled path; ``find(body)`` is what it selects, None when nothing."""

    __slots__ = ("_compiled", "key", "text")

    def __init__(self, text: str, *, key: str) -> None:
        self.text = text
        self.key = key  # the setting it came from, e.g. "source.next_path"
        try:
            source_path_check(text)
            self._compiled = jmespath.compile(text or "@")
        except (ValueError, jmespath.exceptions.JMESPathError) as exc:
            raise ConfigError([f"at '{key}': {exc}"]) from None

    def find(self, body: Any) -> Any:
        """The value at this path in ``body``; None when the path selects nothing."""
        return self._compiled.search(body)

    def describe(self) -> str:
        """How an error names it: ``'_embedded.items'``, or ``the body`` for ``""``."""
        return repr(self.text) if self.text else "the body"

    def __repr__(self) -> str:
        return f"SourcePath({self.text!r}, key={self.key!r})"


def optional_path(text: str | None, *, key: str) -> SourcePath | None:
    """``SourcePath`` for a setting that may be absent (None: not configured)."""
    return None if text is None else SourcePath(text, key=key)
