"""The sql source against SQLite files (always available), plus its settings and errors."""

# The SQL here is built from the tests' own table names and constants, never from input.
# ruff: noqa: S608

from __future__ import annotations

import datetime as dt
import socket
import sqlite3
import sys
import uuid
from collections.abc import Iterable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from skuferry.config.schema import MappingSettings, SqlSourceSettings, anchor_sqlite_url
from skuferry.errors import ConfigError, SourceError
from skuferry.models import BadRecord, Kind, MirrorRow, RawRecord, State
from skuferry.sources.base import Source
from skuferry.sources.dispatch import open_source
from skuferry.sources.sql import SqlSource, UnconvertibleError, to_field
from skuferry.sync.map.mapper import Mapper
from skuferry.sync.plan.planner import Tally, plan
from skuferry.sync.read import incremental
from tests.source_contract import GOOD, SourceContract


def sqlite_file(
    path: Path, rows: Iterable[tuple[Any, ...]], columns: str = "sku TEXT, name TEXT, price TEXT"
) -> Path:
    conn = sqlite3.connect(path)
    try:
        conn.execute(f"CREATE TABLE products ({columns})")
        marks = ", ".join("?" * len(columns.split(",")))
        conn.executemany(f"INSERT INTO products VALUES ({marks})", rows)
        conn.commit()
    finally:
        conn.close()
    return path


def make(url: str, env: dict[str, str] | None = None, **options: Any) -> SqlSource:
    settings = SqlSourceSettings.model_validate({"type": "sql", "url": url, **options})
    return SqlSource(settings, env=env)


class TestContract(SourceContract):
    def make_source(self, tmp_path: Path, records: list[dict[str, Any]]) -> Source:
        db = sqlite_file(tmp_path / "c.db", [(r["sku"], r["name"], r["price"]) for r in records])
        return make(f"sqlite:///{db}", table="products")

    def make_source_with_bad_record(self, tmp_path: Path) -> tuple[Source, int]:
        rows = [
            tuple(GOOD[0].values()),
            ("X-9", b"\xff\xfe not text", "1.00"),
            tuple(GOOD[1].values()),
            tuple(GOOD[2].values()),
        ]
        return make(f"sqlite:///{sqlite_file(tmp_path / 'c.db', rows)}", table="products"), 1

    def make_unreachable_source(self, tmp_path: Path) -> tuple[Source, str]:
        missing = tmp_path / "nowhere" / "catalog.db"
        return make(f"sqlite:///{missing}", table="products"), str(missing)

    def make_large_source(self, tmp_path: Path, n: int) -> Source:
        rows = ((f"SKU-{i}", f"Product {i}", "9.99") for i in range(n))
        return make(f"sqlite:///{sqlite_file(tmp_path / 'big.db', rows)}", table="products")


def test_a_query_selects_and_renames_columns(tmp_path: Path) -> None:
    db = sqlite_file(tmp_path / "c.db", [("A-1", "Anvil", "19.90"), ("B-2", "Bucket", "4.50")])
    source = make(
        f"sqlite:///{db}",
        query="SELECT sku AS ItemNo, name AS Description FROM products WHERE sku = 'B-2'",
    )
    out = list(source.records())
    assert out == [RawRecord(line=1, fields={"ItemNo": "B-2", "Description": "Bucket"})]


def test_a_table_keeps_column_names_and_values(tmp_path: Path) -> None:
    db = sqlite_file(tmp_path / "c.db", [("A-1", 3, 19.5)], "sku TEXT, stock INTEGER, w REAL")
    out = list(make(f"sqlite:///{db}", table="products").records())
    assert out == [RawRecord(line=1, fields={"sku": "A-1", "stock": 3, "w": 19.5})]


def test_a_schema_qualified_table_name_is_quoted_per_part(tmp_path: Path) -> None:
    db = sqlite_file(tmp_path / "c.db", [("A-1", "Anvil", "1")])
    assert len(list(make(f"sqlite:///{db}", table="main.products").records())) == 1


def test_a_missing_table_is_a_source_error_naming_it(tmp_path: Path) -> None:
    db = sqlite_file(tmp_path / "c.db", [])
    with pytest.raises(SourceError, match="no such table: items") as info:
        list(make(f"sqlite:///{db}", table="items").records())
    assert "table items" in str(info.value)


def test_a_query_returning_a_column_twice_is_a_source_error(tmp_path: Path) -> None:
    db = sqlite_file(tmp_path / "c.db", [("A-1", "Anvil", "1")])
    with pytest.raises(SourceError, match="sku more than once"):
        list(make(f"sqlite:///{db}", query="SELECT sku, sku FROM products").records())


def test_stopping_early_closes_the_connection(tmp_path: Path) -> None:
    # filterwarnings=error turns an unclosed connection's ResourceWarning into a failure
    db = sqlite_file(tmp_path / "c.db", [(f"S{i}", "n", "1") for i in range(5)])
    records = make(f"sqlite:///{db}", table="products").records()
    assert isinstance(next(records), RawRecord)
    records.close()  # type: ignore[attr-defined]


def test_relative_sqlite_urls_resolve_against_the_config_folder(tmp_path: Path) -> None:
    sqlite_file(tmp_path / "catalog.db", [("A-1", "Anvil", "1")])
    settings = SqlSourceSettings.model_validate(
        {"type": "sql", "url": "sqlite:///catalog.db", "table": "products"},
        context={"config_dir": tmp_path},
    )
    assert settings.url == f"sqlite:///{tmp_path.resolve() / 'catalog.db'}"
    assert len(list(SqlSource(settings).records())) == 1


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///data/c.db?timeout=5", "sqlite:////cfg/data/c.db?timeout=5"),
        ("sqlite:////abs/c.db", "sqlite:////abs/c.db"),
        ("sqlite:///:memory:", "sqlite:///:memory:"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
    ],
)
def test_anchor_sqlite_url(url: str, expected: str) -> None:
    assert anchor_sqlite_url(url, Path("/cfg")) == expected


@pytest.mark.parametrize(
    "options",
    [{}, {"table": "products", "query": "SELECT 1"}, {"table": "  "}],
)
def test_exactly_one_of_table_or_query_is_a_problem_at_source_table(
    options: dict[str, Any],
) -> None:
    with pytest.raises(ValidationError) as info:
        SqlSourceSettings.model_validate({"type": "sql", "url": "sqlite:///x.db", **options})
    assert [e["loc"] for e in info.value.errors()] == [("table",)]


def test_a_missing_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pymysql", None)  # as if skuferry[mysql] were not installed
    with pytest.raises(ConfigError, match=r"pip install 'skuferry\[mysql\]'"):
        list(make("mysql://erp@127.0.0.1/shop", table="items").records())


def test_an_unreachable_server_names_the_host_never_the_password() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    source = make(
        f"postgresql://erp@127.0.0.1:{port}/shop",
        env={"PGPW": "hunter2-secret"},
        password_env="PGPW",
        table="items",
    )
    with pytest.raises(SourceError, match=f"host 127.0.0.1:{port}") as info:
        list(source.records())
    assert "hunter2-secret" not in str(info.value)
    assert "hunter2-secret" not in source.describe()


def test_an_inline_url_password_stays_out_of_describe_and_repr() -> None:
    source = make("postgresql://erp:hunter2-secret@db.internal/shop", table="items")
    assert "hunter2-secret" not in source.describe()
    assert "hunter2-secret" not in repr(source.settings)
    assert "db.internal" in source.describe()


def test_a_missing_password_variable_is_a_config_error() -> None:
    source = make("postgresql://erp@127.0.0.1/shop", env={}, password_env="PGPW", table="t")
    with pytest.raises(ConfigError, match=r"source\.password_env"):
        list(source.records())


def test_values_become_json_ready_fields() -> None:
    assert to_field(Decimal("19.90")) == Decimal("19.90")
    assert to_field(dt.date(2024, 2, 29)) == "2024-02-29"
    assert to_field(dt.datetime(2024, 2, 29, 13, 5, tzinfo=dt.UTC)) == "2024-02-29T13:05:00+00:00"
    assert to_field(uuid.UUID(int=1)) == "00000000-0000-0000-0000-000000000001"
    assert to_field(memoryview(b"text")) == "text"
    assert to_field({"a": [dt.date(2024, 1, 1)]}) == {"a": ["2024-01-01"]}
    with pytest.raises(UnconvertibleError):
        to_field(float("nan"))


def test_open_source_builds_the_sql_source(tmp_path: Path) -> None:
    settings = SqlSourceSettings(type="sql", url="sqlite:///x.db", table="products")
    assert isinstance(open_source(settings), SqlSource)


def test_bad_record_reason_names_row_and_column(tmp_path: Path) -> None:
    db = sqlite_file(tmp_path / "c.db", [("A-1", b"\xff", "1")])
    (bad,) = make(f"sqlite:///{db}", table="products").records()
    assert isinstance(bad, BadRecord)
    assert bad.reason == "row 1: column 'name' holds binary data that is not UTF-8 text"


def test_a_row_with_an_unconvertible_column_holds_its_product_by_key(tmp_path: Path) -> None:
    rows = [("A-1", "Anvil", "1"), ("B-2", b"\xff", "2"), ("C-3", "Crate", "3")]
    db = sqlite_file(tmp_path / "c.db", rows)
    records = list(make(f"sqlite:///{db}", table="products").records())
    bad = records[1]
    assert isinstance(bad, BadRecord)
    assert bad.fields == {"sku": "B-2", "price": "2"}, "the other columns, handed over"
    assert not bad.guessed  # columns are named: nothing read by position
    synced = {k: MirrorRow(k, State.SYNCED, digest=k, remote_id=k) for k in ("A-1", "B-2", "C-3")}
    mapper = Mapper(MappingSettings(key="sku", fields={"sku": "sku", "name": "name"}))
    tally = Tally()
    actions = list(plan(records[:2], synced, walked=True, mapper=mapper, tally=tally))
    kinds = {a.key: a.kind for a in actions}
    assert kinds == {"A-1": Kind.UPDATE, "B-2": Kind.REJECT, "C-3": Kind.GONE}, "B-2 is held"
    assert tally.unsure == 0


def test_a_row_whose_key_column_cannot_be_converted_decides_nothing_gone(tmp_path: Path) -> None:
    db = sqlite_file(tmp_path / "c.db", [(b"\xff", "Anvil", "1")])
    (bad,) = make(f"sqlite:///{db}", table="products").records()
    assert isinstance(bad, BadRecord) and bad.fields == {"name": "Anvil", "price": "1"}
    synced = {"A-1": MirrorRow("A-1", State.SYNCED, digest="d", remote_id="r")}
    mapper = Mapper(MappingSettings(key="sku", fields={"sku": "sku"}))
    tally = Tally()
    assert [a.kind for a in plan([bad], synced, walked=True, mapper=mapper, tally=tally)] == [
        Kind.REJECT
    ]
    assert (tally.unsure, tally.gone_skipped) == (1, True)


# -- incremental pulls: the window in the column's own clock ---------------------------


class _Metas(dict[str, str]):
    def get_meta(self, name: str) -> str | None:
        return self.get(name)

    def set_metas(self, values: Mapping[str, str | None]) -> None:
        for name, value in values.items():
            if value is None:
                self.pop(name, None)
            else:
                self[name] = value


def _run(source: SqlSource, metas: _Metas, now: dt.datetime) -> list[str]:
    """One committed run's pull: the skus it read."""
    pull = incremental.choose(source, metas, identity="abc", force_full=False, now=now)
    skus = [r.fields["sku"] for r in pull.records(source) if isinstance(r, RawRecord)]
    incremental.finish(metas, pull, committed=True)
    return skus


def test_updated_column_holding_local_time_west_of_utc_loses_no_change(tmp_path: Path) -> None:
    """An ERP writing its local wall-clock time (UTC-5) with no zone. The window comes
    from the rows' own latest change time, so a row changed after the first run is read
    however far skuferry's UTC clock is ahead of the ERP's."""
    rows = [(f"P-{i}", f"Hinge {i}", "1.00", f"2026-11-26 0{i}:00:00") for i in range(1, 5)]
    db = sqlite_file(tmp_path / "erp.db", rows, "sku TEXT, name TEXT, price TEXT, updated_at TEXT")
    source = make(f"sqlite:///{db}", table="products", updated_column="updated_at")
    assert source.change_time_field == "updated_column 'updated_at'"
    metas = _Metas()
    utc_now = dt.datetime(2026, 11, 26, 9, 13, 21, tzinfo=dt.UTC)  # 04:13:21 at the ERP
    assert len(_run(source, metas, utc_now)) == 4
    assert metas[incremental.CURSOR] == "2026-11-26 04:00:00", "as the column holds it"
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE products SET price = '687.70', updated_at = '2026-11-26 04:13:17' "
            "WHERE sku = 'P-2'"
        )
    conn.close()
    # the window starts an hour (a zoneless clock) before the latest change time read:
    # the row at 04:00:00 is read again, and the row changed at 04:13:17 local
    assert _run(source, metas, utc_now + dt.timedelta(minutes=5)) == ["P-2", "P-4"]
    assert metas[incremental.CURSOR] == "2026-11-26 04:13:17"
    # from 03:13:17 on: P-3 (03:00:00) has been read and is left out
    assert _run(source, metas, utc_now + dt.timedelta(minutes=10)) == ["P-2", "P-4"]


def test_updated_column_of_unix_seconds_binds_unix_seconds(tmp_path: Path) -> None:
    base = 1_795_684_397  # 2026-11-26 09:13:17 UTC
    rows = [(f"P-{i}", "n", "1.00", base + i * 600) for i in range(3)]
    db = sqlite_file(tmp_path / "e.db", rows, "sku TEXT, name TEXT, price TEXT, changed INT")
    source = make(
        f"sqlite:///{db}", table="products", updated_column="changed", since_format="epoch"
    )
    metas = _Metas()
    now = dt.datetime(2026, 11, 26, 10, tzinfo=dt.UTC)
    _run(source, metas, now)
    assert metas[incremental.CURSOR] == str(base + 1200)
    # the overlap (300 s) reaches the last row only
    assert _run(source, metas, now) == ["P-2"]


def test_a_query_names_its_change_time_column_and_filters_with_since(tmp_path: Path) -> None:
    rows = [
        ("P-1", "n", "1.00", "2026-11-26 04:00:00"),
        ("P-2", "n", "1.00", "2026-11-20 04:00:00"),
    ]
    db = sqlite_file(tmp_path / "q.db", rows, "sku TEXT, name TEXT, price TEXT, updated_at TEXT")
    query = "SELECT * FROM products WHERE updated_at > :since"
    source = make(f"sqlite:///{db}", query=query, updated_column="updated_at")
    metas = _Metas()
    now = dt.datetime(2026, 11, 26, 10, tzinfo=dt.UTC)
    assert sorted(_run(source, metas, now)) == ["P-1", "P-2"]
    assert _run(source, metas, now) == ["P-1"]
    with pytest.raises(ValidationError, match="filters with :since itself"):
        make(f"sqlite:///{db}", query="SELECT * FROM products", updated_column="updated_at")
