"""The source interface and its registry.

A source streams ``RawRecord`` (or ``BadRecord`` for a record it could not
decode) and never holds the whole catalog in memory. Sources are selected by
``[source] type``; each module registers its factory with ``@register``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any

from skuferry.errors import ConfigError
from skuferry.models import BadRecord, RawRecord


class Source(ABC):
    """A catalog to read from start to end, once per run."""

    @abstractmethod
    def records(self) -> Iterator[RawRecord | BadRecord]:
        """Yield every record in order.

        Raise ``SourceError`` (naming the path/URL) when the source cannot be
        opened or fails before its end: a partial read must never look complete.
        A single undecodable record is yielded as ``BadRecord`` and reading goes on.
        """

    @abstractmethod
    def describe(self) -> str:
        """Where the records come from, for messages (a path or URL, no secrets)."""


Factory = Callable[[Any], Source]  # takes the typed [source] settings model
_REGISTRY: dict[str, Factory] = {}


def register(type_name: str) -> Callable[[Factory], Factory]:
    def deco(factory: Factory) -> Factory:
        _REGISTRY[type_name] = factory
        return factory

    return deco


def open_source(settings: Any) -> Source:
    """Build the source named by ``settings.type`` (the ``[source]`` table)."""
    # Import the built-in adapters so they register themselves.
    from skuferry.sources import csv, http, jsonl, sql  # noqa: F401 - they register themselves

    factory = _REGISTRY.get(settings.type)
    if factory is None:
        known = ", ".join(sorted(_REGISTRY))
        raise ConfigError(
            [f"at 'source.type': unknown source type {settings.type!r} (known: {known})"]
        )
    return factory(settings)
