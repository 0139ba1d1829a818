"""``[source] type = "sql"``: a table or a query in the ERP's database, via SQLAlchemy.

Rows are streamed with a server-side cursor (``stream_results`` and
``yield_per``), so memory stays flat however big the table. Column names become
the record's fields; ``Decimal`` stays ``Decimal`` (no float rounding), dates and
times become ISO 8601 strings.

URLs without an explicit driver get the one skuferry's extras install:
``postgresql://`` uses psycopg 3 (``skuferry[postgres]``), ``mysql://`` PyMySQL
(``skuferry[mysql]``), ``mssql://`` pyodbc (``skuferry[mssql]``). A missing
driver is a ``ConfigError`` naming the extra to install. A password comes from
``password_env`` / ``password_file`` so it need not be written in the URL.
A relative ``sqlite:///catalog.db`` is relative to the config file's folder.
"""


# SQLAlchemy is an optional extra: it is imported when a sql source opens, so a
# missing install becomes a ConfigError naming the extra, not an ImportError.

from __future__ import annotations

import contextlib
import datetime as dt
import math
import uuid
from collections.abc import Iterator, Mapping
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skuferry import logs
from skuferry.config.schema import SqlSourceSettings
from skuferry.config.secrets import read_secret
from skuferry.errors import ConfigError, SourceError
from skuferry.models import BadRecord, RawRecord
from skuferry.sources.base import IncrementalSource
from skuferry.sources.digest import FeedDigest

if TYPE_CHECKING:
    from sqlalchemy.engine import URL, Engine

log = logs.get(__name__)

# backend name -> (driver skuferry installs for it, the extra that installs it)
_DRIVERS: dict[str, tuple[str | None, str]] = {
    "postgresql": ("psycopg", "postgres"),
    "mysql": ("pymysql", "mysql"),
    "mariadb": ("pymysql", "mysql"),
    "mssql": ("pyodbc", "mssql"),
    "sqlite": (None, "sql"),
}


class UnconvertibleError(ValueError):
    """A value that has no faithful JSON form (the record becomes a BadRecord)."""


def to_field(value: Any) -> Any:
    """A database value as a JSON-ready source field."""
    if value is None or isinstance(value, str | bool | int | Decimal):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise UnconvertibleError(f"{value} is not a finite number")
        return value
    if isinstance(value, dt.date | dt.time):  # datetime is a date
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, memoryview | bytes | bytearray):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise UnconvertibleError("binary data that is not UTF-8 text") from None
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, Mapping):
        return {str(k): to_field(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_field(v) for v in value]
    raise UnconvertibleError(f"a {type(value).__name__} value has no JSON form")


# A full pull of an incremental query binds :since to the start of the epoch.
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class SqlSource(IncrementalSource):
    """Streams the rows of a table or query."""

    def __init__(
        self, settings: SqlSourceSettings, *, env: Mapping[str, str] | None = None
    ) -> None:
        self.settings = settings
        self._env = env
        self._target: URL | None = None  # the URL connected to, password included
        self.full_every = settings.full_every
        self.overlap_s = settings.since_overlap_s
        self.since_format = settings.since_format
        self._content = FeedDigest()  # the rows of the last full pull, once it ended

    def describe(self) -> str:
        what = f"table {self.settings.table}" if self.settings.table else "query"
        return f"sql {self._safe_url()} ({what})"

    @property
    def name(self) -> str:
        return self._safe_url()

    def _safe_url(self) -> str:
        try:
            from sqlalchemy.engine import make_url

            return str(make_url(self.settings.url).render_as_string(hide_password=True))
        except Exception:  # noqa: BLE001 - an unparsable URL is reported elsewhere; show its scheme only
            return self.settings.url.partition("://")[0] + "://..."

    @property
    def incremental(self) -> bool:
        s = self.settings
        return bool(s.updated_column) or (s.query is not None and ":since" in s.query)

    @property
    def change_time_field(self) -> str | None:
        column = self.settings.updated_column
        return None if column is None else f"updated_column {column!r}"

    def change_time(self, fields: Mapping[str, Any]) -> Any:
        column = self.settings.updated_column
        return None if column is None else fields.get(column)

    def change_token(self, previous: str | None = None) -> str | None:
        """The table's ``signature()`` (row count, newest ``updated_column``); a query: None."""
        return self.signature()

    def records(self) -> Iterator[RawRecord | BadRecord]:
        return self._content.records(self._pull(None))

    def feed_digest(self) -> str | None:
        """The rows of the last full pull that went to its end, added up in any order."""
        return self._content.value

    def signature(self) -> str | None:
        """``count:max(updated_column)`` of the table; None without a table and that column.

        Changes whenever a row is added, removed or updated (its ``updated_column``
        moves), so a ``[[join]]`` over the table can skip re-reading it.
        """
        import sqlalchemy
        from sqlalchemy.exc import SQLAlchemyError

        s = self.settings
        if not (s.table and s.updated_column):
            return None
        schema, _, name = s.table.rpartition(".")
        table = sqlalchemy.table(name, sqlalchemy.column(s.updated_column), schema=schema or None)
        column = table.c[s.updated_column]
        statement = sqlalchemy.select(sqlalchemy.func.count(), sqlalchemy.func.max(column))
        engine = self._engine()
        try:
            with engine.connect() as conn:
                count, newest = conn.execute(statement.select_from(table)).one()
        except SQLAlchemyError:
            return None  # reading it will say what is wrong
        finally:
            engine.dispose()
        return f"sql:{count}:{newest}"

    def records_since(self, since: dt.datetime) -> Iterator[RawRecord | BadRecord]:
        self._content.value = None  # a window is not the feed
        yield from self._pull(since)

    def _pull(self, since: dt.datetime | None) -> Iterator[RawRecord | BadRecord]:
        engine = self._engine()
        try:
            yield from self._rows(engine, since)
        finally:
            engine.dispose()

    # -- opening -------------------------------------------------------------------------

    def _url(self) -> URL:
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            url = make_url(self.settings.url)
        except ArgumentError:
            raise ConfigError(
                [
                    "at 'source.url': not a SQLAlchemy URL (e.g. "
                    "sqlite:///catalog.db, postgresql://user@host/db)"
                ]
            ) from None
        backend = url.get_backend_name()
        driver, _extra = _DRIVERS.get(backend, (None, ""))
        if driver and "+" not in url.drivername:
            url = url.set(drivername=f"{backend}+{driver}")
        s = self.settings
        password = read_secret(
            inline=s.password,
            file=s.password_file,
            env_name=s.password_env,
            key="password",
            env=self._env,
        )
        if password is not None:
            url = url.set(password=password.get_secret_value())
        if backend == "sqlite" and url.database not in (None, "", ":memory:"):
            path = Path(str(url.database))
            if not url.database.startswith("file:") and not path.is_file():
                raise SourceError(f"{self.describe()}: no SQLite database at {path}")
        return url

    def _engine(self) -> Engine:
        try:
            import sqlalchemy
            from sqlalchemy.exc import NoSuchModuleError
            from sqlalchemy.pool import NullPool
        except ImportError:
            raise ConfigError(
                ["at 'source.type': the sql source needs SQLAlchemy: pip install 'skuferry[sql]'"]
            ) from None
        url = self._target = self._url()
        backend = url.get_backend_name()
        extra = _DRIVERS.get(backend, (None, "sql"))[1]
        try:
            return sqlalchemy.create_engine(url, poolclass=NullPool)
        except (ImportError, NoSuchModuleError) as exc:
            hint = (
                f"pip install 'skuferry[{extra}]'"
                if backend in _DRIVERS
                else "install the SQLAlchemy dialect and driver for it"
            )
            raise ConfigError(
                [
                    f"at 'source.url': no driver for {url.drivername} "
                    f"({type(exc).__name__}: {exc}); {hint}"
                ]
            ) from None

    # -- reading -------------------------------------------------------------------------

    def _statement(self, since: dt.datetime | None, backend: str) -> Any:
        import sqlalchemy

        s = self.settings
        if s.table:
            schema, _, name = s.table.rpartition(".")
            table = sqlalchemy.table(name, schema=schema or None)
            select = sqlalchemy.select(sqlalchemy.text("*")).select_from(table)
            if since is None or not s.updated_column:
                return select
            # a bound parameter, never string formatting
            column: Any = sqlalchemy.column(s.updated_column)
            return select.where(column > sqlalchemy.bindparam("since", _bound(since, s, backend)))
        statement = sqlalchemy.text(s.query or "")
        if ":since" in (s.query or ""):
            statement = statement.bindparams(since=_bound(since or _EPOCH, s, backend))
        return statement

    def _rows(self, engine: Engine, since: dt.datetime | None) -> Iterator[RawRecord | BadRecord]:
        from sqlalchemy.exc import SQLAlchemyError

        line = 0
        try:
            with engine.connect() as conn:
                result = conn.execution_options(
                    stream_results=True, yield_per=self.settings.batch_size
                ).execute(self._statement(since, engine.dialect.name))
                # closed explicitly: a consumer that stops early must not leave the
                # server-side cursor to the garbage collector
                with contextlib.closing(result):
                    columns = [str(c) for c in result.keys()]  # noqa: SIM118 - not a dict
                    twice = sorted({c for c in columns if columns.count(c) > 1})
                    if twice:
                        raise SourceError(
                            f"{self.describe()}: the result has column(s) "
                            f"{', '.join(twice)} more than once; alias them"
                        )
                    for row in result:
                        line += 1
                        yield self._record(line, columns, row)
        except SQLAlchemyError as exc:
            raise SourceError(self._failure(exc, line)) from None
        log.info("source.sql.done", source=self.describe(), records=line)

    def _record(self, line: int, columns: list[str], row: Any) -> RawRecord | BadRecord:
        """One row; a row with a column that has no JSON form is bad, and hands over the
        columns that converted (``BadRecord.fields``): its key, if readable, holds the product."""
        fields: dict[str, Any] = {}
        problem: str | None = None
        for column, value in zip(columns, row, strict=True):
            try:
                fields[column] = to_field(value)
            except UnconvertibleError as exc:
                problem = problem or f"row {line}: column {column!r} holds {exc}"
        if problem is not None:
            return BadRecord(line=line, reason=problem, fields=fields)
        return RawRecord(line=line, fields=fields)

    def _failure(self, exc: Exception, line: int) -> str:
        orig = getattr(exc, "orig", None) or exc
        text = str(orig).strip()
        detail = text.splitlines()[0] if text else type(orig).__name__
        url = self._target
        if url is not None and url.password:
            detail = detail.replace(str(url.password), "***")
        host = ""
        if url is not None and url.host:
            host = f" (host {url.host}{f':{url.port}' if url.port else ''})"
        where = f"after row {line}" if line else "before the first row"
        return f"{self.describe()}{host}: reading failed {where}: {detail}"


def _bound(since: dt.datetime, settings: SqlSourceSettings, backend: str) -> Any:
    """``since`` as the driver should compare it: unix seconds, or a timestamp.

    A naive ``since`` is the column's own wall clock (the latest change time read
    from ``updated_column``, minus the overlap): bound as it is, never shifted.
    An aware one (a window from skuferry's clock, without ``updated_column``):
    PostgreSQL compares it with ``timestamp with time zone`` columns exactly; the
    others get it as naive UTC, as SQLite's ``CURRENT_TIMESTAMP`` text
    (``YYYY-MM-DD HH:MM:SS``) is UTC and compares as text, and MySQL's
    ``DATETIME`` or SQL Server's ``datetime2`` have no zone to convert from.
    """
    if settings.since_format == "epoch":
        aware = since if since.tzinfo is not None else since.replace(tzinfo=dt.UTC)
        return math.floor(aware.timestamp())
    if since.tzinfo is None:
        return since
    return since if backend == "postgresql" else since.astimezone(dt.UTC).replace(tzinfo=None)


def open_sql_source(settings: SqlSourceSettings) -> SqlSource:
    return SqlSource(settings)
