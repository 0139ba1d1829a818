"""Float columns on a real MariaDB server (MySQL-flavoured ``FLOAT``/``DOUBLE``).

A Northwind-style table, our own rows, read by the sql source through
``mysql+pymysql`` and mapped: every row syncs (before, each was rejected with
"18.0 is not a decimal number"). The server is private: ``mariadb-install-db``
into a temporary folder, ``mariadbd`` on a free port of 127.0.0.1, thrown away
at the end. Needs Debian's ``mariadb-server`` (``.ci/run`` installs it).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from skuferry.config.schema import FieldSpec, MappingSettings, SqlSourceSettings
from skuferry.models import Product, RawRecord
from skuferry.sources.sql import SqlSource
from skuferry.sync.map.mapper import Mapper, map_records

pytestmark = pytest.mark.integration

pymysql = pytest.importorskip("pymysql", reason="pymysql is not installed (skuferry[mysql])")

PASSWORD = "mariadb-test-secret"


def _binary(*names: str) -> str | None:
    for name in names:
        found = shutil.which(name) or next(
            (str(p) for p in (Path("/usr/sbin") / name, Path("/usr/bin") / name) if p.exists()),
            None,
        )
        if found:
            return found
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def mariadb() -> Iterator[int]:
    """A private MariaDB server; yields its port. Database ``erp``, user ``skuferry``."""
    server = _binary("mariadbd", "mysqld")
    install = _binary("mariadb-install-db", "mysql_install_db")
    if server is None or install is None:
        pytest.skip("MariaDB server binaries not found (apt-get install mariadb-server)")
    root = Path(tempfile.mkdtemp(prefix="skuferry-mariadb-"))
    data, log, port = root / "data", root / "server.log", _free_port()
    user = ["--user=root"]  # mariadbd refuses to run as root unless told to
    proc: subprocess.Popen[bytes] | None = None
    try:
        subprocess.run(
            [install, "--no-defaults", f"--datadir={data}", *user, "--skip-test-db",
             "--auth-root-authentication-method=normal"],
            capture_output=True, timeout=120, check=True,
        )  # fmt: skip
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [server, "--no-defaults", f"--datadir={data}", *user, f"--port={port}",
                 "--bind-address=127.0.0.1", f"--socket={root / 'sock'}", "--skip-name-resolve",
                 "--skip-log-bin", "--innodb-buffer-pool-size=16M"],
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        admin = _connect(port, proc, log)
        with admin.cursor() as cur:
            cur.execute("CREATE DATABASE erp")
            cur.execute("CREATE USER 'skuferry'@'127.0.0.1' IDENTIFIED BY %s", (PASSWORD,))
            cur.execute("GRANT ALL ON erp.* TO 'skuferry'@'127.0.0.1'")
        admin.close()
        yield port
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)


def _connect(port: int, proc: subprocess.Popen[bytes], log: Path) -> Any:  # pymysql: untyped
    """The root connection, once the server answers (it needs a few seconds to start)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return pymysql.connect(host="127.0.0.1", port=port, user="root", autocommit=True)
        except pymysql.err.OperationalError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mariadbd did not start:\n{log.read_text()[-2000:]}") from None
            time.sleep(0.2)


MAPPING = MappingSettings(
    key="sku",
    fields={
        "sku": "ProductID",
        "name": "ProductName",
        "price": FieldSpec(column="UnitPrice", type="decimal"),
        "list_price": FieldSpec(column="ListPrice", type="decimal"),
        "stock": FieldSpec(column="UnitsInStock", type="integer"),
    },
)


def test_float_and_double_columns_sync_as_exact_decimals(mariadb: int) -> None:
    conn = pymysql.connect(host="127.0.0.1", port=mariadb, user="skuferry", password=PASSWORD,
                           database="erp", autocommit=True)  # fmt: skip
    with conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE Products (ProductID int PRIMARY KEY, ProductName varchar(40), "
            "UnitPrice float, ListPrice double, UnitsInStock float)"
        )
        cur.execute(
            "INSERT INTO Products VALUES (1, 'Chai', 18, 18, 39), "
            "(2, 'Chef Anton''s Cajun Seasoning', 22, 21.35, 53), "
            "(3, 'Gumbo Mix', 21.35, 3.4986000000000002, 0), (4, 'Konbu', 6, 0.0345, 24)"
        )
    conn.close()
    settings = SqlSourceSettings(
        type="sql",
        url=f"mysql+pymysql://skuferry@127.0.0.1:{mariadb}/erp",
        password_env="ERP_DB_PASSWORD",
        query="SELECT * FROM Products ORDER BY ProductID",
    )
    source = SqlSource(settings, env={"ERP_DB_PASSWORD": PASSWORD})
    records = list(source.records())
    first = records[0]
    assert isinstance(first, RawRecord) and type(first.fields["UnitPrice"]) is float
    results = list(map_records(records, Mapper(MAPPING, source_name="northwind")))
    assert all(isinstance(r, Product) for r in results), results
    rows = [(r.key, r.payload["price"], r.payload["list_price"], r.payload["stock"])
            for r in results if isinstance(r, Product)]  # fmt: skip
    assert rows == [
        ("1", Decimal("18.0"), Decimal("18.0"), 39),
        ("2", Decimal("22.0"), Decimal("21.35"), 53),
        ("3", Decimal("21.35"), Decimal("3.4986"), 0),
        ("4", Decimal("6.0"), Decimal("0.0345"), 24),
    ]
    assert [str(row[1]) for row in rows] == ["18.0", "22.0", "21.35", "6.0"]
