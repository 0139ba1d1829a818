"""The incremental window in the source's own clock (sync/read/watermark.py, sources/since.py).

Pure: the change times are read, the latest kept as written, and the window sent back
minus the overlap in the same clock and format. The simulations replay a source that
stamps each change with its wall clock and filters ``stamp > since`` as an API does,
across the night daylight saving time ends, and with writers whose clocks disagree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skuferry.models import BadRecord, RawRecord
from skuferry.sources.base import IncrementalSource
from skuferry.sources.since import format_since, parse_change_time
from skuferry.sync.read import incremental, watermark
from skuferry.sync.read.watermark import ChangeTimes, later, window_start

WALL = "%Y-%m-%d %H:%M:%S"
FIELD = "updated_path 'date_upd'"
NOW = datetime(2026, 11, 26, 9, 13, 21, tzinfo=UTC)


# -- reading and writing a time in the source's format ------------------------------


@pytest.mark.parametrize(
    ("value", "fmt", "expected"),
    [
        ("2026-11-26 04:13:17", WALL, datetime(2026, 11, 26, 4, 13, 17)),  # zoneless stays so
        ("2026-11-26T04:13:17", "iso8601", datetime(2026, 11, 26, 4, 13, 17)),
        ("2026-11-26 04:13:17", "iso8601", datetime(2026, 11, 26, 4, 13, 17)),
        ("2026-11-26T09:13:17Z", "iso8601", datetime(2026, 11, 26, 9, 13, 17, tzinfo=UTC)),
        # a pattern for the filter, ISO 8601 in the records (Akeneo, Business Central)
        (
            "2026-11-26T09:13:17.120Z",
            "%Y-%m-%dT%H:%M:%SZ",
            datetime(2026, 11, 26, 9, 13, 17, 120000, tzinfo=UTC),
        ),
        # a literal Z says UTC (Shopify, Business Central)
        (
            "2026-11-26T09:13:17Z",
            "%Y-%m-%dT%H:%M:%SZ",
            datetime(2026, 11, 26, 9, 13, 17, tzinfo=UTC),
        ),
        (1795684397, "epoch", datetime(2026, 11, 26, 9, 13, 17, tzinfo=UTC)),
        ("1795684397", "epoch", datetime(2026, 11, 26, 9, 13, 17, tzinfo=UTC)),
        (1795684397.5, "epoch", datetime(2026, 11, 26, 9, 13, 17, 500000, tzinfo=UTC)),
    ],
)
def test_a_change_time_is_read_in_its_own_clock(value: Any, fmt: str, expected: datetime) -> None:
    assert parse_change_time(value, fmt) == expected


@pytest.mark.parametrize(
    ("value", "fmt"),
    [
        ("0000-00-00 00:00:00", WALL),  # MySQL's zero date, as PrestaShop may hold it
        ("26/11/2026 04:13", WALL),
        ("", WALL),
        (None, WALL),
        (True, "epoch"),
        ("yesterday", "iso8601"),
        ("1.5e9", "epoch"),
        (float("nan"), "epoch"),
        ({"at": "2026-11-26"}, "iso8601"),
    ],
)
def test_a_change_time_that_cannot_be_read_is_none(value: Any, fmt: str) -> None:
    assert parse_change_time(value, fmt) is None


def test_a_time_is_written_back_in_its_own_clock_never_shifted_to_utc() -> None:
    local = datetime(2026, 11, 26, 4, 8, 17)  # a wall clock at UTC-5, no zone
    assert format_since(local, WALL) == "2026-11-26 04:08:17"
    assert format_since(local, "iso8601") == "2026-11-26T04:08:17"
    east = datetime(2026, 11, 26, 11, 8, 17, 900000, tzinfo=timedelta_zone(2))
    assert format_since(east, "iso8601") == "2026-11-26T11:08:17+02:00", "truncated, not rounded"
    assert format_since(east, WALL) == "2026-11-26 11:08:17", "the record's own wall clock"
    # a literal Z in the pattern says UTC
    assert format_since(east, "%Y-%m-%dT%H:%M:%SZ") == "2026-11-26T09:08:17Z"
    assert format_since(east, "epoch") == str(int(east.timestamp()))
    assert format_since(datetime(2026, 11, 26, 9, 8, 17), "epoch") == "1795684097"


def timedelta_zone(hours: int) -> Any:
    from datetime import timezone

    return timezone(timedelta(hours=hours))


# -- the window ------------------------------------------------------------------------


def test_the_window_of_a_zoneless_clock_reaches_back_at_least_an_hour() -> None:
    assert window_start("2026-11-26 04:13:17", WALL, 300) == datetime(2026, 11, 26, 3, 13, 17)
    assert window_start("2026-11-26 04:13:17", WALL, 7200) == datetime(2026, 11, 26, 2, 13, 17)


def test_the_window_of_a_zoned_clock_reaches_back_the_overlap_and_at_least_a_second() -> None:
    assert window_start("2026-11-26T09:13:17Z", "iso8601", 300) == datetime(
        2026, 11, 26, 9, 8, 17, tzinfo=UTC
    )
    assert window_start("1795684397", "epoch", 0) == datetime(2026, 11, 26, 9, 13, 16, tzinfo=UTC)


def test_a_stored_time_that_cannot_be_read_gives_no_window() -> None:
    assert window_start("not a time", WALL, 300) is None
    assert window_start("", WALL, 300) is None


def test_later_keeps_the_latest_of_two_stored_times() -> None:
    assert later("2026-11-26 04:13:17", "2026-11-26 04:13:18", WALL) == "2026-11-26 04:13:18"
    assert later("2026-11-26 04:13:17", "2026-11-25 23:00:00", WALL) == "2026-11-26 04:13:17"
    assert later(None, "2026-11-26 04:13:17", WALL) == "2026-11-26 04:13:17"
    assert later("2026-11-26 04:13:17", None, WALL) == "2026-11-26 04:13:17"
    assert later(None, None, WALL) is None
    # zoned and zoneless cannot be compared: the newer reading says how the source writes
    assert later("2026-11-26T04:13:17", "2026-11-26T01:00:00Z", "iso8601") == "2026-11-26T01:00:00Z"


# -- change times read as records pass -------------------------------------------------


def test_the_latest_change_time_is_kept_as_the_source_wrote_it() -> None:
    times = ChangeTimes(FIELD, WALL, NOW)
    for line, value in enumerate(
        ["2026-11-26 04:13:17", " 2026-11-26 04:20:00 ", "2026-11-25 23:59:59"], 1
    ):
        times.observe(value, line)
    assert (times.read, times.latest_text) == (3, "2026-11-26 04:20:00")
    assert times.cursor("2026-11-26 05:00:00", full=False) == "2026-11-26 05:00:00"
    assert times.cursor("2026-11-26 05:00:00", full=True) == "2026-11-26 04:20:00", "afresh"
    assert times.notes() == []


def test_a_record_whose_change_time_cannot_be_read_never_moves_the_window() -> None:
    times = ChangeTimes(FIELD, WALL, NOW)
    times.observe("2026-11-26 04:13:17", 1)
    times.observe("0000-00-00 00:00:00", 7)
    times.observe(None, 8)
    times.observe("2026-11-26T23:59:59+00:00", 9)  # another layout: ISO 8601, with a zone
    assert (times.read, times.latest_text, times.unread_count) == (1, "2026-11-26 04:13:17", 3)
    (note,) = times.notes()
    assert "3 record(s) have no readable change time at updated_path 'date_upd'" in note
    assert "record 7: updated_path 'date_upd' '0000-00-00 00:00:00' cannot be read" in note
    assert "record 8" in note and "is missing" in note
    assert "record 9" in note and "has a zone where the others have none" in note
    nothing = ChangeTimes(FIELD, WALL, NOW)
    nothing.observe("garbage", 1)
    assert nothing.cursor("2026-11-26 04:00:00", full=False) == "2026-11-26 04:00:00"
    assert nothing.cursor("2026-11-26 04:00:00", full=True) is None, "the next pull is full"


def test_a_change_time_no_clock_could_give_is_not_believed() -> None:
    """A writer whose clock is years ahead would hide every change until the next full pull."""
    times = ChangeTimes(FIELD, WALL, NOW)
    times.observe("2026-11-26 04:13:17", 1)
    times.observe("2099-01-01 00:00:00", 2)
    # a zoneless time may be up to 14 hours ahead of UTC (UTC+14): that is believed
    times.observe((NOW + timedelta(hours=14)).replace(tzinfo=None).strftime(WALL), 3)
    assert times.latest_text == "2026-11-26 23:13:21"
    assert "record 2" in times.notes()[0] and "future" in times.notes()[0]
    zoned = ChangeTimes(FIELD, "iso8601", NOW)
    zoned.observe((NOW + timedelta(minutes=30)).isoformat(), 1)  # a clock a little ahead
    zoned.observe((NOW + timedelta(days=2)).isoformat(), 2)
    assert zoned.latest == NOW + timedelta(minutes=30)
    assert zoned.unread_count == 1


def test_only_the_first_problems_are_kept_one_by_one() -> None:
    times = ChangeTimes(FIELD, WALL, NOW)
    for line in range(1, 21):
        times.observe("n/a", line)
    assert len(times.unread) == watermark.SHOWN
    assert "(and 15 more)" in times.notes()[0]


# -- simulations: a source stamping changes on its own clock ---------------------------


def _replay(
    changes: list[datetime],
    runs: list[datetime],
    stamp: Callable[[int, datetime], str],
    *,
    fmt: str,
    overlap_s: float,
    now_skew: timedelta = timedelta(0),
) -> set[int]:
    """The changes some incremental run read after they were made (each change a record).

    ``stamp(i, when)``: how the source writes change ``i`` made at UTC ``when``; it filters
    ``stamp > since`` on its own clock. The first run is full.
    """
    cursor: str | None = None
    caught: set[int] = set()
    for run in runs:
        made = [i for i, when in enumerate(changes) if when <= run]
        if cursor is None:
            pulled = made
        else:
            since = window_start(cursor, fmt, overlap_s)
            assert since is not None
            pulled = [
                i
                for i in made
                if parse_change_time(stamp(i, changes[i]), fmt) > since  # type: ignore[operator]
            ]
        times = ChangeTimes(FIELD, fmt, run + now_skew)
        for i in pulled:
            times.observe(stamp(i, changes[i]), i + 1)
        cursor = times.cursor(cursor, full=cursor is None)
        caught |= set(pulled)
    return caught


NEW_YORK = ZoneInfo("America/New_York")
FALL_BACK = datetime(2026, 11, 1, 4, 0, tzinfo=UTC)  # 01:59:59 EDT -> 01:00:00 EST (06:00 UTC)


def _wall(zone: ZoneInfo) -> Callable[[int, datetime], str]:
    return lambda _i, when: when.astimezone(zone).strftime(WALL)


def _runs(start: datetime, hours: int, every_min: int) -> list[datetime]:
    return [start + timedelta(minutes=m) for m in range(0, hours * 60 + 1, every_min)]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=4 * 3600 - 1), min_size=1, max_size=25),
    st.sampled_from([1, 5, 15, 40]),
)
def test_no_change_is_missed_through_the_night_daylight_saving_time_ends(
    offsets: list[int], every_min: int
) -> None:
    """A shop in New York writes ``date_upd`` on its wall clock, with no zone: at 02:00 EDT
    the clock runs back to 01:00 EST, so a change can carry an earlier stamp than one made
    an hour before. Every change made during the night is read by a run after it."""
    changes = [FALL_BACK + timedelta(seconds=s) for s in offsets]
    runs = _runs(FALL_BACK - timedelta(minutes=1), 5, every_min)
    caught = _replay(changes, runs, _wall(NEW_YORK), fmt=WALL, overlap_s=300)
    assert caught == set(range(len(changes)))


def test_the_fall_back_night_needs_the_hour(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the hour a zoneless window reaches back, the replayed night loses a change."""
    changes = [
        FALL_BACK + timedelta(hours=1, minutes=50),  # 01:50 EDT: the latest stamp before 02:00
        FALL_BACK + timedelta(hours=2, minutes=20),  # 01:20 EST: stamped earlier, made later
    ]
    runs = [FALL_BACK + timedelta(hours=1, minutes=55), FALL_BACK + timedelta(hours=2, minutes=25)]
    full_then_incremental = [FALL_BACK, *runs]
    assert _replay(changes, full_then_incremental, _wall(NEW_YORK), fmt=WALL, overlap_s=300) == {
        0,
        1,
    }
    monkeypatch.setattr(watermark, "DST_S", 0.0)
    assert _replay(changes, full_then_incremental, _wall(NEW_YORK), fmt=WALL, overlap_s=300) == {0}


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=3 * 3600 - 1), min_size=1, max_size=25),
    st.integers(min_value=-12, max_value=14),
    st.integers(min_value=-7200, max_value=7200),
)
def test_no_change_is_missed_whatever_the_sources_zone_or_skuferrys_clock(
    offsets: list[int], zone_hours: int, skew_s: int
) -> None:
    """The window never reads skuferry's clock: a source at any fixed offset, stamping
    zoneless wall-clock time, loses nothing however far skuferry's own clock is off."""
    start = datetime(2026, 6, 1, 12, tzinfo=UTC)
    changes = [start + timedelta(seconds=s) for s in offsets]
    zone = timedelta_zone(zone_hours)
    runs = _runs(start - timedelta(minutes=1), 4, 5)
    stamp = lambda _i, when: when.astimezone(zone).strftime(WALL)  # noqa: E731
    caught = _replay(
        changes, runs, stamp, fmt=WALL, overlap_s=300, now_skew=timedelta(seconds=skew_s)
    )
    assert caught == set(range(len(changes)))


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(min_value=1, max_value=3 * 3600 - 1), st.booleans()),
        min_size=1,
        max_size=25,
    )
)
def test_writers_whose_clocks_differ_by_less_than_the_overlap_lose_nothing(
    changes_by: list[tuple[int, bool]],
) -> None:
    """Two application servers write the source; one's clock runs 4 minutes ahead. Its
    stamps can put the latest change time ahead of a change the other makes later."""
    start = datetime(2026, 6, 1, 12, tzinfo=UTC)
    changes = [start + timedelta(seconds=s) for s, _ in changes_by]
    ahead = [fast for _, fast in changes_by]

    def stamp(i: int, when: datetime) -> str:
        return (when + timedelta(minutes=4 if ahead[i] else 0)).isoformat()

    runs = _runs(start - timedelta(minutes=1), 4, 3)
    caught = _replay(changes, runs, stamp, fmt="iso8601", overlap_s=300)
    assert caught == set(range(len(changes)))


# -- the decision: which window a run asks for -----------------------------------------


class _Shop(IncrementalSource):
    since_format = WALL

    def __init__(self, *, field: str | None = FIELD, records: list[dict[str, Any]] | None = None):
        self._field = field
        self._records = records or []
        self.asked: list[datetime | None] = []

    @property
    def incremental(self) -> bool:
        return True

    @property
    def change_time_field(self) -> str | None:
        return self._field

    def change_time(self, fields: Mapping[str, Any]) -> Any:
        return fields.get("date_upd")

    def records(self) -> Any:
        self.asked.append(None)
        return iter([RawRecord(line=i + 1, fields=r) for i, r in enumerate(self._records)])

    def records_since(self, since: datetime) -> Any:
        self.asked.append(since)
        return iter([RawRecord(line=i + 1, fields=r) for i, r in enumerate(self._records)])

    def describe(self) -> str:
        return "shop"


class _Metas(dict[str, str]):
    def get_meta(self, name: str) -> str | None:
        return self.get(name)

    def set_metas(self, values: Mapping[str, str | None]) -> None:
        for name, value in values.items():
            if value is None:
                self.pop(name, None)
            else:
                self[name] = value


def _run(source: _Shop, metas: _Metas, *, committed: bool = True) -> incremental.Pull:
    pull = incremental.choose(source, metas, identity="abc", force_full=False, now=NOW)
    list(pull.records(source))
    incremental.finish(metas, pull, committed=committed)
    return pull


def test_the_window_starts_at_the_records_latest_change_time_in_their_clock() -> None:
    shop = _Shop(records=[{"date_upd": "2026-11-26 04:08:17"}, {"date_upd": "2026-11-26 03:00:00"}])
    metas = _Metas()
    first = _run(shop, metas)
    assert first.full and metas[incremental.CURSOR] == "2026-11-26 04:08:17"
    second = _run(shop, metas)
    assert not second.full
    # 04:08:17 at UTC-5 is 09:08:17 UTC; skuferry's clock (NOW, 09:13:21) is never read
    assert second.since == datetime(2026, 11, 26, 3, 8, 17)
    assert "changes since 2026-11-26 03:08:17 (the source's clock)" in second.reason
    assert shop.asked == [None, datetime(2026, 11, 26, 3, 8, 17)]


def test_the_window_moves_only_when_the_run_commits() -> None:
    shop = _Shop(records=[{"date_upd": "2026-11-26 04:08:17"}])
    metas = _Metas()
    _run(shop, metas)
    shop._records = [{"date_upd": "2026-11-26 05:00:00"}]
    _run(shop, metas, committed=False)
    assert metas[incremental.CURSOR] == "2026-11-26 04:08:17", "a failed run keeps the window"
    _run(shop, metas)
    assert metas[incremental.CURSOR] == "2026-11-26 05:00:00"
    shop._records = []
    _run(shop, metas)
    assert metas[incremental.CURSOR] == "2026-11-26 05:00:00", "nothing new: the window stays"


def test_records_without_a_readable_change_time_make_the_next_pull_full() -> None:
    shop = _Shop(records=[{"date_upd": "0000-00-00 00:00:00"}, {"sku": "A"}])
    metas = _Metas()
    first = _run(shop, metas)
    assert incremental.CURSOR not in metas
    assert "2 record(s) have no readable change time" in first.notes()[0]
    second = _run(shop, metas)
    assert second.full and "no change time read at updated_path 'date_upd'" in second.reason


def test_without_a_change_time_field_the_window_is_skuferrys_clock() -> None:
    shop = _Shop(field=None, records=[{"date_upd": "2026-11-26 04:08:17"}])
    metas = _Metas()
    _run(shop, metas)
    second = _run(shop, metas)
    assert second.since == NOW - timedelta(seconds=300)
    assert "skuferry's clock" in second.reason
    assert incremental.CURSOR not in metas
    assert second.notes() == []


def test_check_warns_where_the_window_is_skuferrys_clock_or_no_time_is_readable() -> None:
    check = incremental.WindowCheck(_Shop(field=None), NOW)
    list(check.records())
    (warning,) = check.warnings()
    assert "skuferry's clock" in warning and "updated_path" in warning
    unreadable = incremental.WindowCheck(_Shop(records=[{"date_upd": "soon"}]), NOW)
    assert [type(r) for r in unreadable.records()] == [RawRecord]
    found = unreadable.warnings()
    assert any("no record has a readable change time" in w for w in found)
    fine = incremental.WindowCheck(_Shop(records=[{"date_upd": "2026-11-26 04:08:17"}]), NOW)
    list(fine.records())
    assert fine.warnings() == []


def test_a_bad_record_passes_without_a_change_time() -> None:
    class _Bad(_Shop):
        def records(self) -> Any:
            return iter(
                [
                    BadRecord(line=1, reason="torn"),
                    RawRecord(line=2, fields={"date_upd": "2026-11-26 04:08:17"}),
                ]
            )

    times = ChangeTimes(FIELD, WALL, NOW)
    out = list(_Bad().pull(None, times.observe))
    assert [type(r) for r in out] == [BadRecord, RawRecord]
    assert (times.read, times.unread_count) == (1, 0)


def test_the_wrappers_keep_the_change_time_of_the_source_they_wrap() -> None:
    """``skip_if_empty`` and the pieces (where, joins, each) wrap the source: its change
    times are still read, from its own records, or the window would fall back to
    skuferry's clock in silence."""
    from skuferry.config.schema import MappingSettings
    from skuferry.sources.skip import skip_empty_rows
    from skuferry.sync.read.pieces import assemble

    records = [
        {"sku": "A", "date_upd": "2026-11-26 04:08:17"},
        {"sku": "", "date_upd": "2026-11-26 05:00:00"},
    ]
    mapping = MappingSettings.model_validate({"key": "sku"})
    skipping = skip_empty_rows(_Shop(records=records), ["sku"])
    wrapped = assemble(skipping, mapping, where="sku == 'A'", joins=[])
    for source in (skipping, wrapped):
        assert isinstance(source, IncrementalSource)
        assert source.change_time_field == FIELD
        assert source.since_format == WALL
        metas = _Metas()
        pull = incremental.choose(source, metas, identity="abc", force_full=False, now=NOW)
        read = [r.fields["sku"] for r in pull.records(source) if isinstance(r, RawRecord)]
        assert read == ["A"]
        incremental.finish(metas, pull, committed=True)
        assert metas[incremental.CURSOR] == "2026-11-26 05:00:00", "read, though skipped"


def test_naming_the_change_time_field_starts_the_window_afresh_leaving_it_unset_does_not() -> None:
    """Setting ``updated_path`` changes what the watermark is: the next pull is full and
    earns one from the records. A config without it keeps the identity it had, so an
    upgrade alone does not force a full pull."""
    import hashlib

    from skuferry import canonical
    from skuferry.config.load import settings_from_dict

    def settings(**source: Any) -> Any:
        return settings_from_dict(
            {
                "api": {"base_url": "http://127.0.0.1:9", "api_key": "k-0123456789"},
                "source": {"type": "http", "url": "http://127.0.0.1:9/p", **source},
                "mapping": {"key": "sku"},
                "state": {"path": "/tmp/never-opened.db"},
            }
        )

    plain = settings(since_param="updated_since")
    named = settings(since_param="updated_since", updated_path="date_upd")
    assert incremental.config_identity(plain) != incremental.config_identity(named)
    before = plain.source.model_dump(
        mode="json", exclude={"full_every", "since_overlap_s", "updated_path"}
    )
    data = {"source": before, "mapping": plain.mapping.model_dump(mode="json")}
    earlier = hashlib.sha256(canonical.dumps(data).encode()).hexdigest()[:16]
    assert incremental.config_identity(plain) == earlier
