"""SQLite: one writer, WAL, the database clock from ``julianday``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, event

from .base import TRANSACTION_ENDED, Dialect


class SQLiteDialect(Dialect):
    name = family = "sqlite"
    # julianday('now') is fixed for the duration of one statement.
    now_ms = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
    for_update = ""
    named_style = "named"
    begin_sql = "BEGIN IMMEDIATE"
    scope_sql = "SELECT file FROM pragma_database_list WHERE name = 'main'"
    identity_sql = scope_sql
    # An application's own deferred transaction (Django's atomic() issues BEGIN) holds
    # no lock yet: a read would start a snapshot, and a writer committing before the
    # enqueue writes would make that write fail at once, whatever the busy timeout. A
    # write statement that changes nothing takes the write lock first, waiting for it.
    join_lock_sql = "UPDATE {actors} SET pk = pk WHERE 1 = 0"
    update_returning = True

    #: SQLite has one writer: a process sends its writes through one group-commit thread.
    group_commit = True
    #: BUSY, LOCKED, NOMEM, READONLY, IOERR, CORRUPT, FULL, CANTOPEN, PROTOCOL, NOTADB
    _UNAVAILABLE = frozenset({5, 6, 7, 8, 10, 11, 13, 14, 15, 26})
    settings_sql = (
        ("version", "SELECT sqlite_version()"),
        ("journal_mode", "PRAGMA journal_mode"),
        ("synchronous", "PRAGMA synchronous"),
    )

    def is_lock_timeout(self, error: BaseException | None) -> bool:
        # SQLITE_BUSY after busy_timeout: "database is locked".
        return "database is locked" in str(error)

    def write_blocked(self, engine: Engine, wait: float) -> str | None:
        # BEGIN IMMEDIATE takes the write lock, waiting at most ``wait``; then roll back.
        with self._checkout(engine) as raw:
            driver = raw.driver_connection
            usual = driver.execute("PRAGMA busy_timeout").fetchone()[0]
            driver.execute(f"PRAGMA busy_timeout = {max(1, int(wait * 1000))}")
            try:
                driver.execute("BEGIN IMMEDIATE")
                driver.execute("ROLLBACK")
            except engine.dialect.loaded_dbapi.OperationalError as exc:
                if not self.is_lock_timeout(exc):
                    raise
                return f"{exc} after {wait:g}s: another connection holds the write lock"
            finally:
                driver.execute(f"PRAGMA busy_timeout = {int(usual)}")
            raw.info[TRANSACTION_ENDED] = True
        return None

    def configure(self, engine: Engine, options: dict[str, Any]) -> None:
        synchronous = options["sqlite_synchronous"]
        busy_ms = int(options["busy_timeout"] * 1000)
        self.lock_wait = options["busy_timeout"]

        @event.listens_for(engine, "connect")
        def _connect(dbapi_conn: Any, _record: Any) -> None:
            # Take transaction control from the sqlite3 module: we issue BEGIN ourselves.
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute(f"PRAGMA busy_timeout={busy_ms}")
            _enable_wal(cur, busy_ms / 1000)
            cur.execute(f"PRAGMA synchronous={synchronous}")
            cur.close()

    def is_unavailable(self, error: BaseException | None) -> bool:
        code = getattr(error, "sqlite_errorcode", None)
        if not isinstance(code, int):
            return True
        return (code & 0xFF) in self._UNAVAILABLE  # the primary code of an extended one

    def unindexed(self, column: str) -> str:
        return f"+{column}"

    def begin(self, raw: Any) -> None:
        # Writers take the write lock up front, so two writers never deadlock on a
        # lock upgrade; readers run each statement in autocommit on a WAL snapshot.
        raw.driver_connection.execute("BEGIN IMMEDIATE")

    def join(self, driver_connection: Any, cursor: Any) -> None:
        # The sqlite3 module begins only before INSERT/UPDATE/DELETE, and a SAVEPOINT
        # outside a transaction would commit on RELEASE: begin (with the write lock,
        # so what the enqueue reads cannot change before it writes) if nothing has.
        if not driver_connection.in_transaction:
            cursor.execute("BEGIN IMMEDIATE")

    @contextmanager
    def install_transaction(self, engine: Engine) -> Iterator[Connection]:
        with engine.connect() as conn:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.exec_driver_sql("COMMIT")
            except BaseException:
                conn.exec_driver_sql("ROLLBACK")
                raise

    def lock_for_install(self, conn: Connection) -> None:
        pass  # BEGIN IMMEDIATE already holds the database's only write lock.


def _enable_wal(cur: Any, timeout: float) -> None:
    """Switch a file to WAL once; retry while other processes open it at the same time.

    Changing the journal mode needs the database to itself, and SQLite reports
    "database is locked" at once instead of waiting on the busy handler, so several
    processes opening a fresh file together (a first deployment) must retry.
    """
    import sqlite3

    deadline = time.monotonic() + timeout
    while True:
        try:
            if str(cur.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal":
                return
            cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)
