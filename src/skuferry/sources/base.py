"""The source interface.

A source streams ``RawRecord`` (or ``BadRecord`` for a record it could not
decode) and never holds the whole catalog in memory. Sources are selected by
``[source] type`` in ``sources/dispatch.py`` (``open_source``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from datetime import datetime

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

    def fingerprint(self, previous: str | None = None) -> str | None:
        """A cheap token that changes whenever the records may have changed; None: unknown.

        Taken *before* the records are read, so a change made while they are read shows
        as a different token next time. ``previous`` is the token a committed run stored
        (a remote file sends it back as a conditional request). A source that cannot
        tell cheaply keeps this default, and every run reads it (sync/unchanged.py).
        """
        del previous
        return None

    @property
    def name(self) -> str:
        """How a bad record's message names the source: a file's basename, a URL as it is.

        No secrets. The default is ``describe()``; a file source gives its basename.
        """
        return self.describe()


class IncrementalSource(Source):
    """A source that can also pull only the records changed after a moment.

    ``incremental`` says whether the config asks for it (an http source with
    ``since_param``, a sql source with ``updated_column`` or ``:since``). The
    engine decides when a pull is full (sync/incremental.py); ``records()``
    stays the full pull, so every caller that knows nothing of this still works.
    """

    full_every: int = 24  # every Nth run is a full pull
    overlap_s: float = 300.0  # the window starts this long before the last pull's start

    @property
    @abstractmethod
    def incremental(self) -> bool:
        """Whether this source is configured to pull changes only."""

    @abstractmethod
    def records_since(self, since: datetime) -> Iterator[RawRecord | BadRecord]:
        """Yield the records changed after ``since`` (an aware datetime), like ``records()``."""
