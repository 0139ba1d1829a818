"""Full or incremental: which pull a run makes, and the watermark a run earns.

An incremental pull asks the source only for what changed since the *watermark*,
minus ``overlap_s`` for edits in flight. Where the records carry their change
time (``updated_path``, a SQL ``updated_column``), the watermark is the latest
change time read, kept and sent back in the source's own clock and format
(the watermark). Only where they carry none is it the start of the last
pull whose writes were all committed, on skuferry's clock, and then a source
whose clock is elsewhere (a local time with no zone) can miss changes: every run
of such a source says so (``unproven``: a warning in the log, a line in the run's
notes and ``--json`` summary), and so does ``skuferry check``. An incremental pull
proves nothing about absent keys: the pull reports itself to the run's ledger
(``read.pulled``), whose verdict decides what absence proves.

A run is full when asked (``sync --full``), when the source cannot filter,
when there is no watermark yet (or none of the last pull's records had a
readable change time), when the source, mapping or join config changed since
the watermark was earned, or every ``full_every``-th run.

The watermark lives in the mirror's meta table and moves only in ``commit``,
called once the run's writes are committed: a crash, a stop or a failed write
leaves it where it was, so the next run repeats the window instead of
skipping it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from skuferry.config.raw import digest
from skuferry.models import BadRecord, RawRecord
from skuferry.sources.base import IncrementalSource, Source
from skuferry.sources.since import format_since
from skuferry.sync.read.watermark import ChangeTimes, window_start

if TYPE_CHECKING:  # freshness figures are read by the quick lane, without pydantic
    from skuferry.config.schema import Settings

WATERMARK = "pull.watermark"  # ISO 8601: start of the last pull whose writes were committed
IDENTITY = "pull.identity"  # hash of the source, mapping, join config of that watermark
INCREMENTAL_RUNS = "pull.incremental_runs"  # incremental pulls since the last full one
LAST_FULL = "pull.last_full_at"  # unix time the last committed full pull started
UNSYNCED_SINCE = "pull.unsynced_since"  # unix time: oldest pull whose changes are not all sent
CURSOR = "pull.cursor"  # the latest change time read from the records, as the source wrote it
KEYS = (WATERMARK, IDENTITY, INCREMENTAL_RUNS, LAST_FULL, UNSYNCED_SINCE, CURSOR)


class Metas(Protocol):
    def get_meta(self, name: str) -> str | None: ...

    def set_metas(self, values: Mapping[str, str | None]) -> None: ...


@dataclass(frozen=True, slots=True)
class Pull:
    """What this run asks the source for."""

    full: bool
    started_at: datetime  # skuferry's clock: the watermark of a source without change times
    since: datetime | None = None  # incremental: the start of the window, the source's clock
    reason: str = ""
    identity: str = ""
    times: ChangeTimes | None = None  # the records' change times, read as they pass

    @property
    def kind(self) -> str:
        return "full" if self.full else "incremental"

    def records(self, source: Source) -> Iterator[RawRecord | BadRecord]:
        if isinstance(source, IncrementalSource):
            observe = self.times.observe if self.times is not None else None
            return source.pull(self.since, observe)
        return source.records()

    def notes(self) -> list[str]:
        """The run summary's remarks on the window (records whose change time is unread)."""
        return self.times.notes() if self.times is not None else []


def config_identity(settings: Settings) -> str:
    """Changes when the config of what a record is changes: the source, the mapping and
    the ``[[join]]`` tables (secrets masked, so stable)."""
    # how often and how wide the windows are does not change what a record is
    quiet = {"full_every", "since_overlap_s"}
    if getattr(settings.source, "updated_path", None) is None:
        quiet.add("updated_path")  # unset: the identity of such a config is as it was
    source = settings.source.model_dump(mode="json", exclude=quiet)
    data: dict[str, object] = {
        "source": source,
        "mapping": settings.mapping.model_dump(mode="json"),
    }
    if settings.join:  # absent without joins: the identity of such a config is as it was
        data["join"] = [spec.model_dump(mode="json") for spec in settings.join]
    return digest(data)


def choose(
    source: Source,
    metas: Mapping[str, str | None],
    *,
    identity: str,
    force_full: bool,
    now: datetime,
) -> Pull:
    """Decide the pull from what the mirror remembers. Pure."""
    if not isinstance(source, IncrementalSource) or not source.incremental:
        return Pull(
            full=True, started_at=now, reason="the source has no change filter", identity=identity
        )
    field = source.change_time_field

    def times() -> ChangeTimes | None:
        return None if field is None else ChangeTimes(field, source.since_format, now)

    def full(reason: str) -> Pull:
        return Pull(full=True, started_at=now, reason=reason, identity=identity, times=times())

    if force_full:
        return full("asked for (--full)")
    watermark = _parse_time(metas.get(WATERMARK))
    if watermark is None:
        return full("no earlier pull to continue from")
    if metas.get(IDENTITY) != identity:
        return full("the source, mapping or join config changed")
    runs = _int(metas.get(INCREMENTAL_RUNS))
    if runs + 1 >= source.full_every:
        return full(f"every {source.full_every} runs ([source] full_every)")
    if field is None:  # no change time in the records: skuferry's clock (check warns)
        since = watermark - timedelta(seconds=source.overlap_s)
        reason = f"changes since {since.isoformat(timespec='seconds')} (skuferry's clock)"
    else:
        cursor = metas.get(CURSOR)
        start = (
            None if cursor is None else window_start(cursor, source.since_format, source.overlap_s)
        )
        if start is None:
            return full(f"no change time read at {field} to continue from")
        since = start
        reason = f"changes since {format_since(since, source.since_format)} (the source's clock)"
    return Pull(
        full=False, started_at=now, since=since, identity=identity, reason=reason, times=times()
    )


def read(mirror: Metas) -> dict[str, str | None]:
    return {name: mirror.get_meta(name) for name in KEYS}


def note_pending(mirror: Metas, pull: Pull, *, writes: int) -> None:
    """Before the writes: remember that changes are seen but not yet on the remote."""
    if writes and mirror.get_meta(UNSYNCED_SINCE) is None:
        mirror.set_metas({UNSYNCED_SINCE: str(pull.started_at.timestamp())})


def finish(mirror: Metas, pull: Pull, *, committed: bool) -> None:
    """At the end of a run that got through its writes; ``committed``: all of them landed.

    A run with a failed write keeps the watermark (the next window still holds the
    product), but an incremental one still counts toward ``full_every``, so that a
    product failing for days cannot put off the full pull that decides gone.
    """
    if committed:
        commit(mirror, pull)
    elif not pull.full:
        runs = _int(mirror.get_meta(INCREMENTAL_RUNS)) + 1
        mirror.set_metas({INCREMENTAL_RUNS: str(runs)})


def commit(mirror: Metas, pull: Pull) -> None:
    """After the run's writes are committed, all of them: the pull's start is the new watermark,
    and the latest change time its records carried the new cursor."""
    values: dict[str, str | None] = {
        WATERMARK: pull.started_at.astimezone(UTC).isoformat(),
        IDENTITY: pull.identity,
        INCREMENTAL_RUNS: "0" if pull.full else str(_int(mirror.get_meta(INCREMENTAL_RUNS)) + 1),
        UNSYNCED_SINCE: None,
        CURSOR: None,
    }
    if pull.times is not None:
        values[CURSOR] = pull.times.cursor(mirror.get_meta(CURSOR), full=pull.full)
    if pull.full:
        values[LAST_FULL] = str(pull.started_at.timestamp())
    mirror.set_metas(values)


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


UNPROVEN = (
    "the incremental window is computed from skuferry's clock, as the records name no "
    "change time: a source whose clock or zone differs (a local time with no zone) can "
    "miss changes; set [source] updated_path (a SQL source: updated_column) to the field "
    "holding each record's change time"
)


def unproven(source: Source) -> str | None:
    """Why the incremental window of ``source`` may miss changes (None: it follows the
    records' own change times, or the source pulls no window). Every run and ``check``
    say it."""
    if not isinstance(source, IncrementalSource) or not source.incremental:
        return None
    return UNPROVEN if source.change_time_field is None else None


class WindowCheck:
    """What ``skuferry check`` says about the incremental window, from one full read."""

    def __init__(self, source: Source, now: datetime) -> None:
        self.source = source
        self.times: ChangeTimes | None = None
        if isinstance(source, IncrementalSource) and source.incremental:
            field = source.change_time_field
            if field is not None:
                self.times = ChangeTimes(field, source.since_format, now)

    def records(self) -> Iterator[RawRecord | BadRecord]:
        if isinstance(self.source, IncrementalSource) and self.times is not None:
            return self.source.pull(None, self.times.observe)
        return self.source.records()

    def warnings(self) -> list[str]:
        source = self.source
        if not isinstance(source, IncrementalSource) or not source.incremental:
            return []
        if self.times is None:
            return [UNPROVEN]
        found = self.times.notes()
        if self.times.read == 0:
            found.append(
                f"no record has a readable change time at {self.times.where}: every pull "
                "will be full until one does"
            )
        return found
