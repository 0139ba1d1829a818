"""Incremental pulls against real local servers: the PIM test server, SQLite, PostgreSQL.

Each scenario: a first run pulls everything (there is no watermark yet); then the
source changes a few products and drops one; the next run reads only the changed
rows (the window starting at the first pull's start minus the overlap), writes
them and marks nothing gone; a full pull (``--full`` or ``full_every``) then
decides the dropped product is gone. A run that dies after its pull, before its
writes, leaves the watermark alone: the next run asks for the same window.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

import pytest

from skuferry import errors
from skuferry.config.load import settings_from_dict
from skuferry.config.schema import Settings
from skuferry.models import BadRecord, RawRecord, RunOptions, RunSummary, State
from skuferry.sandbox import Sandbox
from skuferry.sandbox import pim as pim_server
from skuferry.sandbox.pim import PimServer
from skuferry.service import freshness, report
from skuferry.sources.base import IncrementalSource
from skuferry.state.mirror import Mirror
from skuferry.sync import engine
from skuferry.sync.read import incremental
from tests.fakes import FakeRemote
from tests.integration import test_postgres_source as pg
from tests.integration.conftest import KEY

pytestmark = pytest.mark.integration

postgres = pg.postgres  # the session's private PostgreSQL server (skips when not installed)

LONG_AGO = datetime(2026, 1, 1, tzinfo=UTC)


class _Down(FakeRemote):
    """The CMS, down: every request fails before it reaches the server."""

    def _count(self, tier: Literal["read", "write"]) -> None:
        raise errors.Unreachable(f"{tier}: connection refused")


def _settings(tmp_path: Path, api_url: str, source: dict[str, Any], **extra: Any) -> Settings:
    return settings_from_dict(
        {
            "api": {"base_url": api_url, "api_key": KEY},
            "source": source,
            "mapping": {"key": "sku", "fields": {"sku": "sku", "name": "name", "price": "price"}},
            "state": {"path": str(tmp_path / "state.db")},
            **extra,
        }
    )


def _state(settings: Settings, key: str) -> State:
    mirror = Mirror(settings.state.path, readonly=True)
    try:
        row = mirror.known().get(key)
        assert row is not None, key
        return row.state
    finally:
        mirror.close()


def _meta(settings: Settings, name: str) -> str | None:
    mirror = Mirror(settings.state.path, readonly=True)
    try:
        return mirror.get_meta(name)
    finally:
        mirror.close()


def _pulled(summary: RunSummary) -> int:
    return summary.created + summary.updated + summary.unchanged


def _product(i: int, updated: datetime, *, name: str = "") -> dict[str, Any]:
    return {
        "sku": f"P-{i:03d}",
        "name": name or f"Anchor bolt M{i}",
        "price": f"{i}.50",
        "updated": updated.isoformat(),
    }


# -- the http source -------------------------------------------------------------------


def _since_sent(pim: PimServer, param: str) -> list[str]:
    found = []
    for seen in pim.requests:
        query = parse_qs(urlsplit(seen.path).query)
        if param in query:
            found.append(query[param][0])
    return found


def test_http_pulls_only_changes_with_overlap_and_decides_gone_on_the_next_full_pull(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    catalog = [_product(i, LONG_AGO) for i in range(1, 41)]
    with PimServer(catalog) as pim:
        settings = _settings(
            tmp_path,
            sandbox.url,
            {
                "type": "http",
                "url": pim.url("page"),
                "items_path": "items",
                "pagination": "page",
                "page_size": 10,
                "total_pages_path": "meta.pages",
                "since_param": "updated_since",
                "since_overlap_s": 120,
            },
        )
        first = engine.run_once(settings)
        assert (first.pull, first.created) == ("full", 40)
        assert _since_sent(pim, "updated_since") == []
        watermark = datetime.fromisoformat(_meta(settings, incremental.WATERMARK) or "")

        now = datetime.now(UTC)
        catalog[2] = _product(3, now, name="Anchor bolt M3, zinc plated")
        catalog[7] = _product(8, now, name="Anchor bolt M8, stainless")
        catalog[9] = _product(10, watermark - timedelta(seconds=60))  # in the overlap only
        del catalog[20]  # P-021 leaves the source
        pim.requests.clear()

        second = engine.run_once(settings)
        assert second.pull == "incremental"
        assert _pulled(second) == 3, "only the rows changed in the window were read"
        assert (second.updated, second.unchanged, second.gone) == (2, 1, 0)
        assert len(pim.requests) == 1, "one page holds the three changes"
        expected = (watermark - timedelta(seconds=120)).isoformat(timespec="seconds")
        assert _since_sent(pim, "updated_since") == [expected]
        assert _state(settings, "P-021") is State.SYNCED, "absence proves nothing"

        third = engine.run_once(settings, RunOptions(full=True))
        assert (third.pull, third.gone, third.updated) == ("full", 1, 0)
        assert _state(settings, "P-021") is State.GONE
    names = {p["sku"]: p["name"] for p in sandbox.products()}
    assert names["P-003"] == "Anchor bolt M3, zinc plated"


def test_every_full_every_th_run_is_a_full_pull(tmp_path: Path, sandbox: Sandbox) -> None:
    catalog = [_product(i, LONG_AGO) for i in range(1, 6)]
    with PimServer(catalog) as pim:
        settings = _settings(
            tmp_path,
            sandbox.url,
            {
                "type": "http",
                "url": pim.url("offset"),
                "items_path": "items",
                "pagination": "offset",
                "total_path": "total",
                "since_param": "updated_since",
                "since_format": "epoch",
                "full_every": 3,
            },
        )
        pulls = [engine.run_once(settings).pull for _ in range(5)]
        assert pulls == ["full", "incremental", "incremental", "full", "incremental"]
        assert all(v.isdigit() for v in _since_sent(pim, "updated_since"))
        last_full = float(_meta(settings, incremental.LAST_FULL) or 0)
        assert last_full > LONG_AGO.timestamp()


def test_an_akeneo_search_expression_carries_the_window(tmp_path: Path, sandbox: Sandbox) -> None:
    catalog = [_product(i, LONG_AGO) for i in range(1, 31)]
    with PimServer(catalog) as pim:
        settings = _settings(
            tmp_path,
            sandbox.url,
            {
                "type": "http",
                "url": pim.url("hal") + "?limit=10",  # the filter joins the URL's own query
                "items_path": "_embedded.items",
                "since_param": "search",
                "since_format": "%Y-%m-%d %H:%M:%S",
                "since_template": '{"updated":[{"operator":">","value":"{since}"}]}',
            },
        )
        assert engine.run_once(settings).created == 30
        catalog[0] = _product(1, datetime.now(UTC), name="Anchor bolt M1, galvanised")
        pim.requests.clear()
        second = engine.run_once(settings)
        assert (second.pull, _pulled(second), second.updated) == ("incremental", 1, 1)
        (search,) = _since_sent(pim, "search")
        assert _since_sent(pim, "limit") == ["10"]
        assert search.startswith('{"updated":[{"operator":">","value":"20')


def test_a_crash_after_the_pull_before_the_writes_repeats_the_window(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    catalog = [_product(i, LONG_AGO) for i in range(1, 11)]
    with PimServer(catalog) as pim:
        source = {
            "type": "http",
            "url": pim.url("page"),
            "items_path": "items",
            "pagination": "page",
            "since_param": "updated_since",
        }
        settings = _settings(tmp_path, sandbox.url, source)
        engine.run_once(settings)
        watermark = _meta(settings, incremental.WATERMARK)
        catalog[4] = _product(5, datetime.now(UTC), name="Anchor bolt M5, long")
        pim.requests.clear()

        # the API is gone: the run pulls, plans, then dies before any write lands (the
        # same CMS, unreachable: a config pointed elsewhere would be another CMS, refused
        # before anything is read, issue 37)
        with pytest.raises(errors.SkuferryError):
            engine.run_once(settings, adapters=engine.Adapters(client=_Down()))
        assert _meta(settings, incremental.WATERMARK) == watermark, "the window is not skipped"
        assert _meta(settings, incremental.UNSYNCED_SINCE) is not None, "a change is waiting"
        waiting = report.collect_status(settings)["freshness"]
        assert waiting["oldest_unsynced_change_age_s"] >= 0
        window = _since_sent(pim, "updated_since")

        pim.requests.clear()
        again = engine.run_once(settings)
        assert _since_sent(pim, "updated_since") == window, "the same window, asked again"
        assert (again.pull, again.updated) == ("incremental", 1)
        assert _meta(settings, incremental.UNSYNCED_SINCE) is None
        fresh = report.collect_status(settings)["freshness"]
        assert fresh["oldest_unsynced_change"] is None
        assert fresh["last_full_pull"] is not None
    assert {p["sku"]: p["name"] for p in sandbox.products()}["P-005"] == "Anchor bolt M5, long"


def test_the_empty_source_guard_does_not_stop_an_incremental_pull_with_no_changes(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    with PimServer([_product(i, LONG_AGO) for i in range(1, 4)]) as pim:
        settings = _settings(
            tmp_path,
            sandbox.url,
            {"type": "http", "url": pim.url("link"), "since_param": "updated_since"},
        )
        engine.run_once(settings)
        quiet = engine.run_once(settings)
        assert (quiet.pull, _pulled(quiet), quiet.exit_code) == ("incremental", 0, 0)


# -- the sql source --------------------------------------------------------------------


SqlExec = Callable[..., None]


def _sql_scenario(settings: Settings, execute: SqlExec, sandbox: Sandbox, *, reread: int) -> None:
    """The shared story for SQLite and PostgreSQL over table ``items``.

    ``reread``: the unchanged rows the second window reads again besides the two
    changed ones (with change times read from the rows, those at the latest one).
    """
    first = engine.run_once(settings)
    assert (first.pull, first.created) == ("full", 20)
    execute("UPDATE items SET name = 'Hex nut M6, brass', updated_at = :now WHERE sku = 'P-006'")
    execute("UPDATE items SET updated_at = :recent WHERE sku = 'P-007'")  # in the overlap
    execute("DELETE FROM items WHERE sku = 'P-015'")
    second = engine.run_once(settings)
    assert second.pull == "incremental"
    pulled = (_pulled(second), second.updated, second.unchanged, second.gone)
    assert pulled == (2 + reread, 1, 1 + reread, 0)
    assert _state(settings, "P-015") is State.SYNCED
    third = engine.run_once(settings, RunOptions(full=True))
    assert (third.pull, third.gone) == ("full", 1)
    assert _state(settings, "P-015") is State.GONE
    assert {p["sku"]: p["name"] for p in sandbox.products()}["P-006"] == "Hex nut M6, brass"


def _times(settings: Settings) -> dict[str, datetime]:
    """``now``, and ``recent``: 30 s before the watermark, the records' (the source's clock)
    when they carry change times, else the last pull's start (skuferry's clock)."""
    cursor = _meta(settings, incremental.CURSOR)
    mark = datetime.fromisoformat(cursor or _meta(settings, incremental.WATERMARK) or "")
    return {
        "now": datetime.now(UTC) + timedelta(seconds=1),
        "recent": mark - timedelta(seconds=30),
    }


def _hour(i: int) -> str:
    return f"2026-01-01 {i:02d}:00:00"  # SQLite's own text timestamps: 'YYYY-MM-DD HH:MM:SS'


@pytest.mark.parametrize("shape", ["table", "query", "query with its change time"])
def test_sqlite_pulls_only_changed_rows(tmp_path: Path, sandbox: Sandbox, shape: str) -> None:
    db = tmp_path / "erp.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE items (sku TEXT, name TEXT, price TEXT, updated_at TEXT)")
        conn.executemany(
            "INSERT INTO items VALUES (?, ?, ?, ?)",
            [(f"P-{i:03d}", f"Hex nut M{i}", f"0.{i:02d}", _hour(i)) for i in range(1, 21)],
        )
    conn.close()
    source: dict[str, Any] = {"type": "sql", "url": f"sqlite:///{db}"}
    if shape == "table":
        source |= {"table": "items", "updated_column": "updated_at"}
    elif shape == "query":  # no change time in the rows: the window is on skuferry's clock
        source["query"] = "SELECT sku, name, price FROM items WHERE updated_at > :since"
    else:
        source["query"] = "SELECT * FROM items WHERE updated_at > :since"
        source["updated_column"] = "updated_at"
    settings = _settings(tmp_path, sandbox.url, source)

    def execute(statement: str) -> None:
        values = {k: v.strftime("%Y-%m-%d %H:%M:%S") for k, v in _times(settings).items()}
        with sqlite3.connect(db) as c:
            c.execute(statement, {k: v for k, v in values.items() if f":{k}" in statement})
        c.close()

    # the rows' latest change time (P-020's) is read again: it is inside the overlap
    _sql_scenario(settings, execute, sandbox, reread=0 if shape == "query" else 1)
    cursor = _meta(settings, incremental.CURSOR)
    if shape == "query":
        assert cursor is None, "no change time in the rows: none kept"
    else:  # P-006's, kept as the column holds it: the source's clock and layout
        assert cursor is not None and cursor > _hour(20)
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", cursor), cursor


@pytest.mark.postgres
def test_postgresql_pulls_only_changed_rows(
    tmp_path: Path, sandbox: Sandbox, postgres: pg.Postgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    postgres.execute(
        "DROP TABLE IF EXISTS items",
        "CREATE TABLE items (sku text, name text, price numeric(10,2), updated_at timestamptz)",
        "INSERT INTO items SELECT 'P-' || lpad(i::text, 3, '0'), 'Hex nut M' || i, i / 100.0, "
        "'2026-01-01T00:00:00Z'::timestamptz + i * interval '1 hour' "
        "FROM generate_series(1, 20) AS i",
    )
    monkeypatch.setenv("PG_PASSWORD", pg.PASSWORD)
    settings = _settings(
        tmp_path,
        sandbox.url,
        {
            "type": "sql",
            "url": postgres.url,
            "password_env": "PG_PASSWORD",
            "table": "items",
            "updated_column": "updated_at",
        },
    )

    def execute(statement: str) -> None:
        for name, when in _times(settings).items():
            statement = statement.replace(f":{name}", f"'{when.isoformat()}'")
        postgres.execute(statement)

    _sql_scenario(settings, execute, sandbox, reread=1)


def test_pim_server_filters_by_change_time() -> None:
    catalog = pim_server.GeneratedCatalog(1000)
    later = datetime(2026, 6, 1, tzinfo=UTC)
    catalog.touch([5, 500], later)
    assert len(catalog.changed_since(LONG_AGO - timedelta(days=1))) == 1000
    changed = catalog.changed_since(later - timedelta(seconds=1))
    assert [p["sku"] for p in changed] == ["SKU-000006", "SKU-000501"]


def test_sync_full_on_the_command_line(
    tmp_path: Path, sandbox: Sandbox, run_cli: Callable[..., Any]
) -> None:
    with PimServer([_product(i, LONG_AGO) for i in range(1, 6)]) as pim:
        config = tmp_path / "skuferry.toml"
        config.write_text(
            f'[api]\nbase_url = "{sandbox.url}"\napi_key = "{KEY}"\n'
            f'[source]\ntype = "http"\nurl = "{pim.url("link")}"\n'
            'since_param = "updated_since"\n'
            '[mapping]\nkey = "sku"\n',
            encoding="utf-8",
        )
        config.chmod(0o600)
        pulls = []
        for extra in ([], [], ["--full"]):
            done = run_cli("sync", "--config", str(config), "--json", *extra)
            assert done.returncode == 0, done.stderr
            pulls.append(json.loads(done.stdout.splitlines()[-1])["pull"])
    assert pulls == ["full", "incremental", "full"]


# -- the decision alone ----------------------------------------------------------------


class _Incremental(IncrementalSource):
    def __init__(self, *, incremental: bool = True, full_every: int = 24) -> None:
        self._incremental = incremental
        self.full_every = full_every
        self.overlap_s = 300.0

    @property
    def incremental(self) -> bool:
        return self._incremental

    def records(self) -> Iterator[RawRecord | BadRecord]:
        return iter(())

    def records_since(self, since: datetime) -> Iterator[RawRecord | BadRecord]:
        return iter(())

    def describe(self) -> str:
        return "fake"


NOW = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
EARNED = {
    incremental.WATERMARK: "2026-11-22T09:45:00+00:00",
    incremental.IDENTITY: "abc",
    incremental.INCREMENTAL_RUNS: "3",
}


@pytest.mark.parametrize(
    ("source", "metas", "force", "full", "why"),
    [
        (_Incremental(incremental=False), EARNED, False, True, "no change filter"),
        (_Incremental(), EARNED, True, True, "--full"),
        (_Incremental(), {}, False, True, "no earlier pull"),
        (_Incremental(), {**EARNED, incremental.IDENTITY: "xyz"}, False, True, "config changed"),
        (_Incremental(full_every=4), EARNED, False, True, "every 4 runs"),
        (_Incremental(full_every=5), EARNED, False, False, "changes since 2026-11-22T09:40"),
    ],
)
def test_when_a_pull_is_full(
    source: IncrementalSource, metas: dict[str, str], force: bool, full: bool, why: str
) -> None:
    pull = incremental.choose(source, metas, identity="abc", force_full=force, now=NOW)
    assert pull.full is full
    assert why in pull.reason
    assert pull.started_at == NOW
    assert (pull.since is None) is full


class _Metas(dict[str, str]):
    def get_meta(self, name: str) -> str | None:
        return self.get(name)

    def set_metas(self, values: Mapping[str, str | None]) -> None:
        for name, value in values.items():
            if value is None:
                self.pop(name, None)
            else:
                self[name] = value


def test_a_run_with_a_failed_write_keeps_the_watermark_but_counts_toward_full_every() -> None:
    metas = _Metas(EARNED)
    pull = incremental.choose(
        _Incremental(full_every=5), metas, identity="abc", force_full=False, now=NOW
    )
    incremental.note_pending(metas, pull, writes=2)
    incremental.finish(metas, pull, committed=False)
    assert metas[incremental.WATERMARK] == EARNED[incremental.WATERMARK]
    assert metas[incremental.INCREMENTAL_RUNS] == "4"
    assert metas[incremental.UNSYNCED_SINCE] == str(NOW.timestamp())
    after = incremental.choose(
        _Incremental(full_every=5), metas, identity="abc", force_full=False, now=NOW
    )
    assert after.full, "the failing product cannot put off the full pull"
    incremental.finish(metas, after, committed=True)
    assert metas[incremental.INCREMENTAL_RUNS] == "0"
    assert incremental.UNSYNCED_SINCE not in metas
    assert metas[incremental.LAST_FULL] == str(NOW.timestamp())


def test_a_file_changed_after_the_last_pull_is_a_change_not_yet_on_the_remote(
    tmp_path: Path,
) -> None:
    export = tmp_path / "products.csv"
    export.write_text("sku\nA-1\n", encoding="utf-8")
    pulled = datetime.fromtimestamp(export.stat().st_mtime, UTC) + timedelta(seconds=5)
    metas = _Metas({incremental.WATERMARK: pulled.isoformat()})
    assert freshness.from_metas(metas, export).oldest_unsynced_change is None
    os.utime(export, (pulled.timestamp() + 60, pulled.timestamp() + 60))  # a new export
    fresh = freshness.from_metas(metas, export)
    assert fresh.oldest_unsynced_change == pulled.timestamp() + 60
    assert fresh.age_s(pulled.timestamp() + 90) == 30
    metas[incremental.UNSYNCED_SINCE] = str(pulled.timestamp() - 100)  # an older failed write
    assert freshness.from_metas(metas, export).oldest_unsynced_change == pulled.timestamp() - 100
