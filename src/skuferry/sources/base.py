"""The source interface.

A source streams ``RawRecord`` (or ``BadRecord`` for a record it could not
decode) and never holds the whole catalog in memory. Sources are selected by
``[source] type`` in ``open_source``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import Any

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

    def change_token(self, previous: str | None = None) -> str | None:
        """A cheap token that changes whenever the records may have changed; None: unknown.

        Taken *before* the records are read, so a change made while they are read shows
        as a different token next time. ``previous`` is the token a committed run stored
        (a remote file sends it back as a conditional request). A source that cannot
        tell cheaply keeps this default, and every run reads it (the run's skip decision).
        """
        del previous
        return None

    def feed_digest(self) -> str | None:
        """What the last reading of ``records()`` read, once it went to its end: the
        feed's content identity (``sources.digest``); None: unknown (no reading went to its
        end since the last began, or this source cannot say).

        Unlike the change token it is known only after reading, and always for a source
        read whole, so a feed is recognised even when its change token is not known (a
        file written in the last seconds, an API without validators). An incremental
        window or items fetched by key are not the whole feed: they leave it None.
        """
        return None

    @property
    def name(self) -> str:
        """How a bad record's message names the source: a file's basename, a URL as it is.

        No secrets. The default is ``describe()``; a file source gives its basename.
        """
        return self.describe()

    @property
    def header(self) -> tuple[str, ...] | None:
        """The column names of the last reading, once its header was read (a CSV's first
        row, a sheet's header row): what the source's shape is judged by. None: the
        records have no header (JSON, an API, XML), or none was read yet."""
        return None


class WrappedSource(Source):
    """A source that changes how ``inner``'s records are read, not where they come from:
    its description, name, change token, header and feed digest are ``inner``'s (the
    forwarding of every wrapper: the incremental ones, ``skip_if_empty``, the ready file,
    products in pieces)."""

    def __init__(self, inner: Source) -> None:
        self.inner = inner

    def describe(self) -> str:
        return self.inner.describe()

    @property
    def name(self) -> str:
        return self.inner.name

    def change_token(self, previous: str | None = None) -> str | None:
        return self.inner.change_token(previous)

    def feed_digest(self) -> str | None:
        return self.inner.feed_digest()

    @property
    def header(self) -> tuple[str, ...] | None:
        return self.inner.header


class IncrementalSource(Source):
    """A source that can also pull only the records changed after a moment.

    ``incremental`` says whether the config asks for it (an http source with
    ``since_param``, a sql source with ``updated_column`` or ``:since``). The
    engine decides when a pull is full; ``records()``
    stays the full pull, so every caller that knows nothing of this still works.

    A source whose records carry their change time names it
    (``change_time_field``, ``change_time``): the window then starts at the latest
    one read, in the source's own clock (the watermark). Without it the window
    is computed from skuferry's clock.
    """

    full_every: int = 24  # every Nth run is a full pull
    overlap_s: float = 300.0  # the window starts this long before the watermark
    since_format: str = "iso8601"  # how the source writes a time (``format_since``)

    @property
    def change_time_field(self) -> str | None:
        """How messages name the field holding a record's change time; None: no such field."""
        return None

    def change_time(self, fields: Mapping[str, Any]) -> Any:
        """The change time in a record's fields, as the source wrote it; None: absent."""
        del fields
        return None

    def pull(
        self, since: datetime | None, observe: Callable[[Any, int], None] | None = None
    ) -> Iterator[RawRecord | BadRecord]:
        """``records()``, or ``records_since(since)``; each record's change time and line
        go to ``observe`` as the record passes (a record that could not be read has none)."""
        records = self.records() if since is None else self.records_since(since)
        if observe is None:
            return records
        return self._observed(records, observe)

    def _observed(
        self, records: Iterator[RawRecord | BadRecord], observe: Callable[[Any, int], None]
    ) -> Iterator[RawRecord | BadRecord]:
        for record in records:
            if isinstance(record, RawRecord):
                observe(self.change_time(record.fields), record.line)
            yield record

    @property
    @abstractmethod
    def incremental(self) -> bool:
        """Whether this source is configured to pull changes only."""

    @abstractmethod
    def records_since(self, since: datetime) -> Iterator[RawRecord | BadRecord]:
        """Yield the records changed after ``since``, like ``records()``.

        ``since`` is in the source's own clock: naive when the source writes times
        without a zone (sent as it is, never shifted), else aware.
        """


class IncrementalWrapper(IncrementalSource):
    """What a ``WrappedSource`` over an ``IncrementalSource`` keeps of that capability
    (``skip_if_empty``, products in pieces): the inner source's window and its answers,
    and every pull passed through the wrapper's ``_through``, as its full pull is. Put
    after the wrapper's own class among the bases, with ``keep_window`` in its
    ``__init__``; the forwarding lives here once."""

    inner: IncrementalSource

    def keep_window(self, inner: IncrementalSource) -> None:
        """Take ``inner``'s window: full pull every N runs, overlap, how a time is written."""
        self.full_every = inner.full_every
        self.overlap_s = inner.overlap_s
        self.since_format = inner.since_format

    def _through(self, records: Iterator[RawRecord | BadRecord]) -> Iterator[RawRecord | BadRecord]:
        """The wrapper's change to ``inner``'s records (the same as its ``records()``'s)."""
        raise NotImplementedError

    @property
    def incremental(self) -> bool:
        return self.inner.incremental

    @property
    def change_time_field(self) -> str | None:
        return self.inner.change_time_field

    def records_since(self, since: datetime) -> Iterator[RawRecord | BadRecord]:
        return self._through(self.inner.records_since(since))

    def pull(
        self, since: datetime | None, observe: Callable[[Any, int], None] | None = None
    ) -> Iterator[RawRecord | BadRecord]:
        # the change times are the inner source's, read as its records pass (a record the
        # wrapper then drops or groups was read all the same)
        return self._through(self.inner.pull(since, observe))
