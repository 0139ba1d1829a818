"""The window of an incremental pull, in the source's own clock. Pure.

The watermark is the latest change time found in the records themselves (the
field at ``[source] updated_path``, or a SQL table's ``updated_column``), kept as
the source wrote it, as dlt's incremental cursors keep their ``last_value``. The
next window starts there, minus the overlap, and is written back in the same
clock and format: a local wall-clock time with no zone (PrestaShop's
``date_upd``, many ERPs) stays a local wall-clock time with no zone. skuferry's
own clock never enters it, so a source west or east of UTC, or a source whose
clock is off, loses nothing.

Two rules keep a change from falling behind the window:

- The watermark only moves forward, and only to a change time that was read.
  A record whose change time is missing, cannot be read in ``since_format``,
  carries a zone where the others carry none (or the reverse), or lies further
  ahead of skuferry's clock than any zone could put it, is still synced, but its
  time is not taken: guessing it could move the watermark past a change. Each
  such record is named in a warning with the field and the value.
- A time with no zone may run back when daylight saving time ends, so its
  window reaches back at least ``DST_S`` (the overlap if that is larger). Every
  window reaches back at least ``MIN_OVERLAP_S``: the filters ask for changes
  *after* the time, and another change may carry the same second.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from skuferry import logs
from skuferry.sources.since import parse_change_time

log = logs.get(__name__)

DST_S = 3600.0  # a zoneless wall clock runs back an hour when daylight saving time ends
MIN_OVERLAP_S = 1.0  # a later change stamped in the latest change's second is not "after" it
ZONE_AHEAD_S = 14 * 3600.0  # no zone is further ahead of UTC (UTC+14): a zoneless bound
FUTURE_S = 3600.0  # an aware time this far past skuferry's clock is not believed
SHOWN = 5  # problems logged and kept one by one; the rest are counted


def window_start(cursor: str, fmt: str, overlap_s: float) -> datetime | None:
    """Where the next window starts: ``cursor`` (as stored) minus the overlap, same clock.

    None when ``cursor`` cannot be read in ``fmt`` (then the pull must be full).
    """
    when = parse_change_time(cursor, fmt)
    if when is None:
        return None
    back = max(overlap_s, MIN_OVERLAP_S)
    if when.tzinfo is None:
        back = max(back, DST_S)
    return when - timedelta(seconds=back)


def later(a: str | None, b: str | None, fmt: str) -> str | None:
    """The later of two stored change times (either may be absent).

    Two times that cannot be compared (one zoned, one not) give the newer
    reading, ``b``: the records of this pull say how the source writes now.
    """
    if a is None or b is None:
        return b if a is None else a
    first, second = parse_change_time(a, fmt), parse_change_time(b, fmt)
    if first is None or second is None or _zoned(first) != _zoned(second):
        return b if second is not None else a
    return a if first >= second else b


@dataclass(frozen=True, slots=True)
class Unread:
    """A record whose change time was not taken for the watermark."""

    line: int
    value: Any
    why: str

    def describe(self, where: str) -> str:
        return f"record {self.line}: {where} {_shown(self.value)} {self.why}"


@dataclass
class ChangeTimes:
    """The change times of one pull's records, watched as they stream past."""

    where: str  # how messages name the field: "updated_path 'date_upd'"
    fmt: str  # since_format
    now: datetime  # skuferry's clock (aware): only to spot times no clock could give
    latest: datetime | None = None
    latest_text: str | None = None  # as the source wrote it: what the watermark stores
    read: int = 0  # records whose change time was taken
    unread: list[Unread] = field(default_factory=list)  # the first SHOWN
    unread_count: int = 0

    def observe(self, value: Any, line: int) -> None:
        """One record's change time (``value`` as found, None when absent)."""
        when, why = self._read(value)
        if when is None:
            self._skip(Unread(line, value, why))
            return
        self.read += 1
        if self.latest is None or when > self.latest:
            self.latest, self.latest_text = when, _text(value)

    def cursor(self, previous: str | None, *, full: bool) -> str | None:
        """What the watermark becomes: this pull's latest change time, or the previous one
        if that is later. A full pull starts afresh (the source may have been reset)."""
        if full:
            return self.latest_text
        return later(previous, self.latest_text, self.fmt)

    def notes(self) -> list[str]:
        """The run summary's remarks on the change times read."""
        if not self.unread_count:
            return []
        first = "; ".join(u.describe(self.where) for u in self.unread)
        hidden = self.unread_count - len(self.unread)
        more = f" (and {hidden} more)" if hidden else ""
        return [
            f"{self.unread_count} record(s) have no readable change time at {self.where}, "
            f"so they do not move the incremental window: {first}{more}"
        ]

    def _read(self, value: Any) -> tuple[datetime | None, str]:
        """The change time to take, or None and why not."""
        if value is None or value == "":
            return None, "is missing"
        when = parse_change_time(value, self.fmt)
        if when is None:
            return None, f"cannot be read as since_format {self.fmt!r}"
        if self.latest is not None and _zoned(when) != _zoned(self.latest):
            if _zoned(when):
                return None, "has a zone where the others have none"
            return None, "has no zone where the others have one"
        if self.latest is not None and when <= self.latest:
            return when, ""  # cannot move the watermark: no need to ask more of it
        if when > self._believable(zoned=_zoned(when)):
            return None, "lies in the future of every clock (a writer's clock is wrong?)"
        return when, ""

    def _believable(self, *, zoned: bool) -> datetime:
        """The latest change time any clock could give now (a zoneless one: UTC+14)."""
        return self._zoned_bound if zoned else self._wall_bound

    def __post_init__(self) -> None:
        self._zoned_bound = self.now + timedelta(seconds=FUTURE_S)
        utc = self.now.astimezone(UTC).replace(tzinfo=None)
        self._wall_bound = utc + timedelta(seconds=ZONE_AHEAD_S + FUTURE_S)

    def _skip(self, unread: Unread) -> None:
        self.unread_count += 1
        if len(self.unread) < SHOWN:
            self.unread.append(unread)
            log.warning(
                "pull.change_time.unread",
                field=self.where,
                record=unread.line,
                value=_shown(unread.value),
                why=unread.why,
            )


def _zoned(when: datetime) -> bool:
    return when.tzinfo is not None


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else str(value)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
