"""The sql source against a real PostgreSQL server this module starts in a temporary folder.

Needs Debian's ``postgresql`` package (``initdb``/``pg_ctl`` under
/usr/lib/postgresql/*/bin; ``.ci/run`` installs it). The server listens on a
free port of 127.0.0.1 only, with password (scram) auth, and is thrown away at
the end. As root, it runs as the ``postgres`` (or ``nobody``) user, because
initdb refuses root.
"""

# The SQL here is built from the tests' own table names and constants, never from input.
# ruff: noqa: S608

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from itertools import count
from pathlib import Path
from typing import Any

import pytest

from skuferry.config.schema import SqlSourceSettings
from skuferry.errors import SourceError
from skuferry.models import RawRecord
from skuferry.sources.base import Source
from skuferry.sources.sql import SqlSource
from tests.source_contract import GOOD, SourceContract

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (skuferry[postgres])")

PASSWORD = "pg-test-secret"
USER = "skuferry"


@dataclass(frozen=True)
class Postgres:
    port: int

    @property
    def url(self) -> str:  # no password: it is injected from the environment
        return f"postgresql://{USER}@127.0.0.1:{self.port}/postgres"

    def execute(self, *statements: str) -> None:
        with psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user=USER,
            password=PASSWORD,
            dbname="postgres",
            autocommit=True,
        ) as conn:
            for statement in statements:
                conn.execute(statement)

    def source(self, **options: Any) -> SqlSource:
        settings = SqlSourceSettings.model_validate(
            {"type": "sql", "url": self.url, "password_env": "PG_PASSWORD", **options}
        )
        return SqlSource(settings, env={"PG_PASSWORD": PASSWORD})


def _binaries() -> Path | None:
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0,
    )
    if found:
        return found[-1].parent
    on_path = shutil.which("initdb")
    return Path(on_path).parent if on_path else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_server_user(argv: list[str]) -> tuple[list[str], int | None]:
    """The command to run (wrapped in runuser when root) and the uid that will own the files."""
    if os.geteuid() != 0:
        return argv, None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            uid = pwd.getpwnam(name).pw_uid
            runuser = shutil.which("runuser")
            if runuser:
                return [runuser, "-u", name, "--", *argv], uid
    pytest.skip("running as root and neither runuser nor a postgres/nobody user is available")


def _run(argv: list[str], log: Path) -> None:
    cmd, _ = _as_server_user(argv)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        tail = log.read_text()[-2000:] if log.exists() else ""
        raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stdout}{done.stderr}\n{tail}")


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    bindir = _binaries()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries not found (apt-get install postgresql)")
    # Not under pytest's tmp_path: its 0700 parents would lock out the server user.
    root = Path(tempfile.mkdtemp(prefix="skuferry-pg-"))
    data, log, pwfile = root / "data", root / "server.log", root / "pw"
    pwfile.write_text(PASSWORD + "\n")
    _, uid = _as_server_user([])
    if uid is not None:
        os.chown(root, uid, -1)
        os.chown(pwfile, uid, -1)
    port = _free_port()
    pg_ctl = [str(bindir / "pg_ctl"), "-D", str(data)]
    try:
        _run(
            [
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                USER,
                "--auth=scram-sha-256",
                f"--pwfile={pwfile}",
                "--no-sync",
                "--encoding=UTF8",
                "--locale=C",
            ],
            log,
        )
        options = (
            f"-p {port} -c listen_addresses=127.0.0.1 -k {root} -c fsync=off "
            "-c full_page_writes=off -c synchronous_commit=off"
        )
        _run([*pg_ctl, "-l", str(log), "-o", options, "-w", "-t", "30", "start"], log)
        try:
            yield Postgres(port)
        finally:
            _run([*pg_ctl, "-m", "immediate", "-w", "stop"], log)
    finally:
        shutil.rmtree(root, ignore_errors=True)


_names = count(1)


class TestContract(SourceContract):
    @pytest.fixture(autouse=True)
    def _server(self, postgres: Postgres) -> None:
        self.pg = postgres

    def _table(self, columns: str, *inserts: str) -> str:
        name = f"products_{next(_names)}"
        self.pg.execute(
            f"CREATE TABLE {name} ({columns})", *(f"INSERT INTO {name} {i}" for i in inserts)
        )
        return name

    def make_source(self, tmp_path: Path, records: list[dict[str, Any]]) -> Source:
        rows = ", ".join(f"('{r['sku']}', '{r['name']}', {r['price']})" for r in records)
        name = self._table(
            "sku text, name text, price numeric(10,2)", *([f"VALUES {rows}"] if rows else [])
        )
        return self.pg.source(query=f"SELECT * FROM {name} ORDER BY sku")

    def make_source_with_bad_record(self, tmp_path: Path) -> tuple[Source, int]:
        name = self._table(
            "n int, sku text, name bytea",
            *(
                f"VALUES ({i}, '{r['sku']}', convert_to('{r['name']}', 'UTF8'))"
                for i, r in enumerate(GOOD)
            ),
            "VALUES (1, 'X-9', '\\xfffe'::bytea)",
        )
        return self.pg.source(query=f"SELECT * FROM {name} ORDER BY n, sku"), 1

    def make_unreachable_source(self, tmp_path: Path) -> tuple[Source, str]:
        port = _free_port()
        settings = SqlSourceSettings(
            type="sql", url=f"postgresql://{USER}@127.0.0.1:{port}/x", table="products"
        )
        return SqlSource(settings), f"127.0.0.1:{port}"

    def make_large_source(self, tmp_path: Path, n: int) -> Source:
        name = self._table(
            "sku text, name text, price numeric(10,2)",
            f"SELECT 'SKU-' || i, 'Product ' || i, i % 1000 + 0.99 "
            f"FROM generate_series(1, {n}) AS i",
        )
        return self.pg.source(table=name)


def test_types_keep_decimals_exact_and_dates_as_iso_text(postgres: Postgres) -> None:
    postgres.execute(
        "CREATE TABLE typed (sku text, price numeric(10,2), launched date, "
        "changed timestamptz, tags text[], attrs jsonb)",
        "INSERT INTO typed VALUES ('A-1', 19.90, '2024-02-29', '2024-02-29 13:05:00+00', "
        "'{red,big}', '{\"w\": 1.5}')",
        "CREATE SCHEMA erp",
        "CREATE TABLE erp.items AS SELECT * FROM typed",
    )
    for source in (postgres.source(table="typed"), postgres.source(table="erp.items")):
        (record,) = source.records()
        assert isinstance(record, RawRecord)
        assert record.fields["price"] == Decimal("19.90")
        assert str(record.fields["price"]) == "19.90"
        assert record.fields["launched"] == "2024-02-29"
        assert record.fields["changed"].startswith("2024-02-29T13:05:00")
        assert record.fields["tags"] == ["red", "big"]
        assert record.fields["attrs"] == {"w": 1.5}


def test_rows_come_through_a_server_side_cursor(postgres: Postgres) -> None:
    postgres.execute("CREATE TABLE streamed AS SELECT i AS n FROM generate_series(1, 5000) i")
    records = postgres.source(table="streamed", batch_size=100).records()
    first = next(records)
    try:
        with psycopg.connect(
            host="127.0.0.1", port=postgres.port, user=USER, password=PASSWORD, dbname="postgres"
        ) as watcher:
            queries = [
                row[0]
                for row in watcher.execute(
                    "SELECT query FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                    "AND backend_type = 'client backend'"
                )
            ]
        # psycopg's server cursor: DECLARE ... CURSOR, then FETCH FORWARD n at a time.
        assert any(q.lstrip().upper().startswith(("DECLARE", "FETCH")) for q in queries), queries
        assert isinstance(first, RawRecord) and first.line == 1
        assert sum(1 for _ in records) == 4999
    finally:
        records.close()  # type: ignore[attr-defined]


def test_wrong_password_is_a_source_error_without_the_password(postgres: Postgres) -> None:
    settings = SqlSourceSettings(type="sql", url=postgres.url, password_env="PW", table="x")
    source = SqlSource(settings, env={"PW": "not-the-password"})
    with pytest.raises(SourceError, match="password authentication failed") as info:
        list(source.records())
    assert "not-the-password" not in str(info.value)
    assert f"127.0.0.1:{postgres.port}" in str(info.value)


def test_a_query_error_mid_catalog_fails_the_pull(postgres: Postgres) -> None:
    # 1/(n-3) divides by zero on the fourth row: the stream must raise, not end early.
    postgres.execute("CREATE TABLE divs AS SELECT i AS n FROM generate_series(1, 10) i")
    source = postgres.source(query="SELECT n, 1 / (n - 4) AS x FROM divs ORDER BY n", batch_size=1)
    seen: list[object] = []
    with pytest.raises(SourceError, match="division by zero"):
        seen.extend(source.records())
    assert len(seen) < 10


def test_server_stays_on_loopback(postgres: Postgres) -> None:
    with psycopg.connect(
        host="127.0.0.1", port=postgres.port, user=USER, password=PASSWORD, dbname="postgres"
    ) as conn:
        row = conn.execute("SHOW listen_addresses").fetchone()
    assert row == ("127.0.0.1",)
