"""What differs between SQLite, PostgreSQL and MySQL/MariaDB: nothing else may.

Every time value the library writes or compares comes from :attr:`now_ms`,
an SQL expression for the database clock in epoch milliseconds, evaluated
inside the statement that uses it. On PostgreSQL that is
``clock_timestamp()``, not ``now()`` (which is frozen at transaction start).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, event, text

from ..errors import ConfigurationError


class Dialect:
    """Base class; one subclass per database family."""

    name = "generic"
    now_ms = ""
    #: Appended to a SELECT that must lock the rows it reads until commit.
    for_update = " FOR UPDATE"
    supports_skip_locked = False

    def configure(self, engine: Engine, options: dict[str, Any]) -> None:
        """Install per-connection settings on the library's own engine."""

    @contextmanager
    def write(self, engine: Engine) -> Iterator[Connection]:
        with engine.begin() as conn:
            yield conn

    @contextmanager
    def read(self, engine: Engine) -> Iterator[Connection]:
        with engine.connect() as conn:
            yield conn

    def lock_for_install(self, conn: Connection) -> None:
        """Serialize concurrent ``install()`` calls from several processes."""


class SQLiteDialect(Dialect):
    name = "sqlite"
    # julianday('now') is fixed for the duration of one statement.
    now_ms = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
    for_update = ""

    def configure(self, engine: Engine, options: dict[str, Any]) -> None:
        synchronous = options["sqlite_synchronous"]
        busy_ms = int(options["busy_timeout"] * 1000)

        @event.listens_for(engine, "connect")
        def _connect(dbapi_conn: Any, _record: Any) -> None:
            # Take transaction control from the sqlite3 module: we issue BEGIN ourselves.
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA synchronous={synchronous}")
            cur.execute(f"PRAGMA busy_timeout={busy_ms}")
            cur.close()

        @event.listens_for(engine, "begin")
        def _begin(conn: Connection) -> None:
            # Writers take the write lock up front, so two writers never deadlock on a
            # lock upgrade; readers run each statement in autocommit on a WAL snapshot.
            if conn.get_execution_options().get("solid_write"):
                conn.exec_driver_sql("BEGIN IMMEDIATE")

    @contextmanager
    def write(self, engine: Engine) -> Iterator[Connection]:
        with engine.connect() as conn:
            conn.execution_options(solid_write=True)
            with conn.begin():
                yield conn

    def lock_for_install(self, conn: Connection) -> None:
        pass  # BEGIN IMMEDIATE already holds the database's only write lock.


class PostgreSQLDialect(Dialect):
    name = "postgresql"
    now_ms = "CAST(FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000) AS BIGINT)"
    supports_skip_locked = True

    def lock_for_install(self, conn: Connection) -> None:
        conn.execute(text("SELECT pg_advisory_xact_lock(7310580462)"))


class MySQLDialect(Dialect):
    name = "mysql"
    # SYSDATE(6) is the time the function runs; NOW(6) is the statement's start.
    now_ms = "CAST(FLOOR(UNIX_TIMESTAMP(SYSDATE(6)) * 1000) AS SIGNED)"
    supports_skip_locked = True

    def configure(self, engine: Engine, options: dict[str, Any]) -> None:
        @event.listens_for(engine, "connect")
        def _connect(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("SET SESSION time_zone = '+00:00'")
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            cur.close()

    def lock_for_install(self, conn: Connection) -> None:
        got = conn.execute(text("SELECT GET_LOCK('solid_objects_install', 60)")).scalar()
        if got != 1:
            raise ConfigurationError("could not take the install lock within 60 s")


def dialect_for(engine: Engine) -> Dialect:
    name = engine.dialect.name
    if name == "sqlite":
        return SQLiteDialect()
    if name == "postgresql":
        return PostgreSQLDialect()
    if name in ("mysql", "mariadb"):
        return MySQLDialect()
    raise ConfigurationError(
        f"unsupported database {name!r}: use sqlite, postgresql+psycopg or mysql+pymysql"
    )
