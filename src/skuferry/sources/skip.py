"""``[source] skip_if_empty``: drop rows that carry no product before they are mapped.

Shopify's product CSV repeats the handle on image-only rows whose other cells are
empty; without this each such row would be a rejected product ("the key is
empty") and every run would exit 1. A record in which every listed column is
empty or absent is skipped here, for every source type, and only counted: the
engine reads ``skipped`` after the pull and puts one note in the summary.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from skuferry import logs
from skuferry.models import BadRecord, RawRecord
from skuferry.sources.base import IncrementalSource, IncrementalWrapper, Source, WrappedSource

log = logs.get(__name__)


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


class SkipEmptyRows(WrappedSource):
    """``source`` minus the records whose ``columns`` are all empty or absent."""

    def __init__(self, source: Source, columns: Sequence[str]) -> None:
        super().__init__(source)
        self.columns = tuple(columns)
        self.skipped = 0  # in the last pull; read by the engine for its note

    def records(self) -> Iterator[RawRecord | BadRecord]:
        return self._filter(self.inner.records())

    def note(self) -> str | None:
        """The summary's remark on the last pull, or None when nothing was skipped."""
        if not self.skipped:
            return None
        return f"{self.skipped} row(s) skipped: {', '.join(self.columns)} empty"

    def _filter(self, records: Iterator[RawRecord | BadRecord]) -> Iterator[RawRecord | BadRecord]:
        self.skipped = 0
        for record in records:
            if isinstance(record, RawRecord) and all(
                _empty(record.fields.get(column)) for column in self.columns
            ):
                self.skipped += 1
                continue
            yield record
        # once per pull, when the source has been read to its end
        log.info("source.rows.skipped", count=self.skipped, columns=list(self.columns))


class IncrementalSkipEmptyRows(SkipEmptyRows, IncrementalWrapper):
    """The same over a source that can pull changes only: that capability is kept."""

    inner: IncrementalSource

    def __init__(self, source: IncrementalSource, columns: Sequence[str]) -> None:
        super().__init__(source, columns)
        self.keep_window(source)

    def _through(self, records: Iterator[RawRecord | BadRecord]) -> Iterator[RawRecord | BadRecord]:
        return self._filter(records)  # a skipped row was read too: its change time counts


def skip_empty_rows(source: Source, columns: Sequence[str]) -> Source:
    """Wrap ``source`` when ``columns`` name any; else return it unchanged."""
    if not columns:
        return source
    if isinstance(source, IncrementalSource):
        return IncrementalSkipEmptyRows(source, columns)
    return SkipEmptyRows(source, columns)


def skipped_rows(source: Source) -> int:
    """The rows ``skip_if_empty`` left out in the last pull (0 for a plain source)."""
    return source.skipped if isinstance(source, SkipEmptyRows) else 0


def skip_notes(source: Source) -> list[str]:
    """The summary's note on the rows the last pull skipped (none for a plain source)."""
    note = source.note() if isinstance(source, SkipEmptyRows) else None
    return [note] if note else []
