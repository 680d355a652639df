"""What differs between SQLite, PostgreSQL and MySQL/MariaDB: nothing else may.

Every time value the library writes or compares comes from :attr:`now_ms`,
an SQL expression for the database clock in epoch milliseconds, evaluated
inside the statement that uses it. On PostgreSQL that is
``clock_timestamp()``, not ``now()`` (which is frozen at transaction start).
"""

from __future__ import annotations

import json
import math
import re
import select
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, event, text
from sqlalchemy.exc import DisconnectionError, SQLAlchemyError

from .. import deadline
from ..codec import canonical_json
from ..errors import ConfigurationError, DatabaseError

_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_][A-Za-z0-9_]*)")


class Tx:
    """A DB-API cursor with named parameters: the library's only way to run SQL.

    The hot path bypasses SQLAlchemy's statement layer (measured at ~140 µs per
    checkout-and-statement on SQLite against ~20 µs raw) but keeps its pool,
    URL parsing, dialects and DDL.
    """

    __slots__ = ("_cursor", "_render", "connection")

    def __init__(self, cursor: Any, render: Any, connection: Any) -> None:
        self._cursor = cursor
        self._render = render
        #: The pooled DB-API connection this transaction runs on (for commit actions).
        self.connection = connection

    def savepoint(self) -> _Savepoint:
        """A nested transaction: undo this part alone with ``rollback()``."""
        return _Savepoint(self._cursor)

    def run(self, template: str, params: Mapping[str, Any] | None = None) -> int:
        """Execute a statement; return the number of rows it changed."""
        self._cursor.execute(self._render(template), params or ())
        return int(self._cursor.rowcount)

    def run_last_id(
        self, template: str, params: Mapping[str, Any] | None = None
    ) -> tuple[int, int]:
        """:meth:`run`, and the insert id the statement's reply carried (MySQL/MariaDB).

        An ``UPDATE`` that sets a column to ``LAST_INSERT_ID(expr)`` hands ``expr``
        back in its OK packet, read here with no round trip: the ``RETURNING`` that
        MariaDB lacks, for one value. A statement that set none reports 0.
        """
        changed = self.run(template, params)
        return changed, int(self._cursor.lastrowid or 0)

    def row(self, template: str, params: Mapping[str, Any] | None = None) -> Any:
        self._cursor.execute(self._render(template), params or ())
        return self._cursor.fetchone()

    def rows(self, template: str, params: Mapping[str, Any] | None = None) -> list[Any]:
        self._cursor.execute(self._render(template), params or ())
        return list(self._cursor.fetchall())

    def scalar(self, template: str, params: Mapping[str, Any] | None = None) -> Any:
        row = self.row(template, params)
        return None if row is None else row[0]


class _Savepoint:
    _depth = 0

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor
        _Savepoint._depth += 1
        self._name = f"solid_sp{_Savepoint._depth}"
        cursor.execute(f"SAVEPOINT {self._name}")

    def release(self) -> None:
        self._cursor.execute(f"RELEASE SAVEPOINT {self._name}")

    def rollback(self) -> None:
        self._cursor.execute(f"ROLLBACK TO SAVEPOINT {self._name}")
        self.release()


class Dialect:
    """Base class; one subclass per database family."""

    name = "generic"
    #: The SQL the store writes for it: ``sqlite``, ``postgresql`` or ``mysql``.
    family = "generic"
    now_ms = ""
    #: Appended to a SELECT that must lock the rows it reads until commit.
    for_update = " FOR UPDATE"
    supports_skip_locked = False
    #: Run first in an expiry transaction (MySQL/MariaDB): the scan of each candidate's
    #: pending messages then locks the gap a concurrent ``send_to`` inserts into.
    expiry_isolation_sql: str | None = None
    #: PostgreSQL: a ``send_to`` holds the target incarnation's lock shared until its
    #: commit, an expiry tries it exclusive and passes over a candidate it cannot get
    #: (``:lock_key`` is the actor's pk); None where expiry meets sends another way.
    incarnation_share_sql: str | None = None
    incarnation_try_sql: str | None = None

    #: How a ``:name`` placeholder is written for the driver.
    named_style = "pyformat"
    #: Whether writes go through one group-commit thread (see ``store.writer``).
    group_commit = False
    #: A statement that notifies listeners when the transaction commits, if supported.
    notify_sql: str | None = None
    #: The database (and schema) these tables live in: scopes the wake-up channel.
    scope_sql = "SELECT DATABASE()"
    #: Which database server, database and schema a connection reaches: an application
    #: connection must give the same answer as the runtime's own to enqueue on it.
    identity_sql = "SELECT CONCAT(@@hostname, ':', @@port, '/', DATABASE())"
    #: Run first when enqueuing in an application's transaction, to take the write lock
    #: before anything is read (SQLite: see ``SQLiteDialect``); the servers lock rows.
    join_lock_sql: str | None = None
    #: ``UPDATE ... RETURNING`` (SQLite 3.35+, PostgreSQL; not MySQL or MariaDB 10).
    update_returning = False
    #: A data-modifying ``WITH`` (PostgreSQL): a turn that staged nothing commits in
    #: one statement (``finish_direct``, ``finish_turn``).
    writable_cte = False
    begin_sql = "BEGIN"
    #: Behind a transaction pooler (``Options.pooler``, PostgreSQL): the server session
    #: changes between transactions, so nothing is prepared, SET or locked for it.
    pooled = False

    @property
    def notify_call(self) -> str | None:
        """:attr:`notify_sql` as an expression, for a statement that notifies per row
        it returns (a turn's one-statement commit notifies only if its fence held)."""
        return None if self.notify_sql is None else self.notify_sql.removeprefix("SELECT ")

    #: Settings the doctor reports: (name, SQL returning one value) per dialect.
    settings_sql: tuple[tuple[str, str], ...] = ()

    def settings(self, tx: Tx) -> dict[str, str]:
        """The server's version and the settings the library depends on, as read now."""
        return {name: str(tx.scalar(sql)) for name, sql in self.settings_sql}

    #: How long a statement waits for a lock by default (``busy_timeout``), in seconds.
    lock_wait = 30.0

    def configure(self, engine: Engine, options: dict[str, Any]) -> None:
        """Install per-connection settings on the library's own engine."""

    def call_lock_wait(self) -> float | None:
        """The lock wait a transaction made for a call must keep to, if shorter than usual.

        The call's remaining time (``solid_objects.deadline``), when it is more than a
        second shorter than ``busy_timeout``: a call with the default timeouts pays no
        extra statement.
        """
        left = deadline.remaining()
        if left is None or left >= self.lock_wait - 1.0:
            return None
        return left

    def bound_lock_wait(self, cursor: Any, *, in_transaction: bool) -> Callable[[], None] | None:
        """Bound this connection's lock waits by the call's deadline; return the undo."""
        return None

    def is_lock_timeout(self, error: BaseException | None) -> bool:
        """A statement gave up waiting for a lock: it wrote nothing."""
        return False

    def write_blocked(self, engine: Engine, wait: float) -> str | None:
        """Why a write transaction cannot start within ``wait`` seconds, or None.

        Only SQLite has a database-wide write lock to report; the servers' row locks
        bound each call's own waits instead.
        """
        return None

    def unindexed(self, column: str) -> str:
        """``column`` in a form the planner will not pick an index for (SQLite only).

        SQLite's planner, without statistics, would serve the claim scan from the
        (actor_type, actor_id) index and sort every actor; the ``ready_at`` index
        reads only actors with due work.
        """
        return column

    def render(self, template: str) -> str:
        if self.named_style == "named":
            return template
        return _NAMED.sub(r"%(\1)s", template.replace("%", "%%"))

    @contextmanager
    def _checkout(self, engine: Engine) -> Iterator[Any]:
        try:
            raw = engine.raw_connection()
        except (SQLAlchemyError, engine.dialect.loaded_dbapi.Error) as exc:
            raise DatabaseError(f"cannot connect: {exc}", exc, disconnect=True) from exc
        try:
            yield raw
        except engine.dialect.loaded_dbapi.Error as exc:
            disconnect = engine.dialect.is_disconnect(exc, raw.driver_connection, None)
            if disconnect:
                raw.invalidate(exc)
            raise DatabaseError(
                f"{type(exc).__name__}: {exc}",
                exc,
                disconnect=disconnect,
                # A conflict the server reports at COMMIT rolled the transaction back.
                commit_unknown=getattr(exc, "solid_during_commit", False)
                and not self.rolled_back(exc),
            ) from exc
        finally:
            raw.close()

    def begin(self, raw: Any) -> None:
        """Start a write transaction (drivers other than sqlite3 begin implicitly)."""

    def join(self, driver_connection: Any, cursor: Any) -> None:
        """Make sure the application's connection is inside a transaction we can join.

        The server drivers begin one implicitly before the first statement.
        """

    @contextmanager
    def write(self, engine: Engine, render: Any) -> Iterator[Tx]:
        with self._checkout(engine) as raw:
            cursor = raw.cursor()
            undo = None
            try:
                self.begin(raw)
                undo = self.bound_lock_wait(cursor, in_transaction=True)
                yield Tx(cursor, render, raw)
            except BaseException:
                try:
                    raw.rollback()
                    raw.info[_ENDED] = True
                    if undo is not None:
                        undo()
                finally:
                    cursor.close()
                raise
            try:
                raw.commit()
            except engine.dialect.loaded_dbapi.Error as exc:
                # The server may or may not have committed: never re-run this one.
                exc.solid_during_commit = True  # type: ignore[attr-defined]
                cursor.close()
                raise
            raw.info[_ENDED] = True
            try:
                if undo is not None:
                    undo()
            finally:
                cursor.close()

    @contextmanager
    def statement(self, engine: Engine, render: Any) -> Iterator[Tx]:
        """One statement that is its own transaction (autocommit): one round trip.

        Any driver error counts as "may have committed" (``commit_unknown``): the
        statement commits on the server as it ends, so it is never blindly re-run.
        """
        with self._checkout(engine) as raw:
            driver = raw.driver_connection
            driver.autocommit = True
            cursor = raw.cursor()
            undo = None
            try:
                undo = self.bound_lock_wait(cursor, in_transaction=False)
                yield Tx(cursor, render, raw)
            except engine.dialect.loaded_dbapi.Error as exc:
                if not self.is_lock_timeout(exc):  # a lock wait that gave up wrote nothing
                    exc.solid_during_commit = True  # type: ignore[attr-defined]
                raise
            finally:
                try:
                    if undo is not None and not driver.closed:
                        undo()
                finally:
                    cursor.close()
                if not driver.closed:
                    driver.autocommit = False
            raw.info[_ENDED] = True

    @contextmanager
    def read(self, engine: Engine, render: Any) -> Iterator[Tx]:
        with self._checkout(engine) as raw:
            cursor = raw.cursor()
            try:
                yield Tx(cursor, render, raw)
            finally:
                cursor.close()
            # End the snapshot now (the pool no longer does it for every connection);
            # a connection that died after the read is only discarded: the read stands.
            try:
                raw.rollback()
            except engine.dialect.loaded_dbapi.Error as exc:
                raw.invalidate(exc)
                return
            raw.info[_ENDED] = True

    def rolled_back(self, error: BaseException | None) -> bool:
        """The server rolled the whole transaction back for a conflict with another one.

        A serialization failure, a deadlock victim, a Galera certification failure:
        nothing of the transaction committed, even when COMMIT itself raised it, so it
        may simply run again. Not a lock-wait timeout: MariaDB then rolls back only the
        statement (unless ``innodb_rollback_on_timeout``), PostgreSQL aborts the
        transaction; the library's own ROLLBACK ends either, but a re-run at once would
        wait on the same held lock again. Not an ambiguous outcome (PostgreSQL's and
        CockroachDB's 40003 ``statement_completion_unknown``, a connection lost during
        COMMIT): that may have committed.
        """
        return False

    def is_unavailable(self, error: BaseException | None) -> bool:
        """The database cannot take this write *now* (full disk, I/O error, read-only,
        a lock wait that timed out, a lost connection, a shutdown): the same work may
        commit later, and it is not the work's fault. Any other error (a constraint, a
        trigger, a value that does not fit) is charged to the work that caused it."""
        return False

    #: How many times an install that lost a race to another process's is run again
    #: (engines with no install lock: it then finds the other's work and does nothing).
    install_retries = 0

    def lost_install_race(self, error: BaseException | None) -> bool:
        """An install failed because another one created the same object first."""
        return False

    def lock_for_install(self, conn: Connection) -> None:
        """Serialize concurrent ``install()`` calls from several processes."""

    def unlock_after_install(self, conn: Connection) -> None:
        """Release what :meth:`lock_for_install` took, if it outlives the transaction."""

    def byte_exact_text(self, conn: Connection, tables: Sequence[str]) -> None:
        """Make every text column of ``tables`` compare byte by byte (schema 5).

        Nothing to do on SQLite (BINARY is its default collation) or PostgreSQL (a
        deterministic collation, the default, calls two strings equal only when their
        bytes are); MySQL and MariaDB override it.
        """

    @contextmanager
    def install_transaction(self, engine: Engine) -> Iterator[Connection]:
        with engine.begin() as conn:
            yield conn


#: A pooled server connection unused for this long is pinged before it is handed out.
PING_AFTER_IDLE = 1.0


def ping_idle_connections(engine: Engine, idle_seconds: float = PING_AFTER_IDLE) -> None:
    """Ping a pooled connection before use only when it may be dead, not every time.

    SQLAlchemy's ``pool_pre_ping`` costs a round trip per transaction (a quarter of
    a direct call's). Here a connection is pinged when it sat idle, or when its
    socket has input while no query is in flight: a server that closes a connection
    (a restart, ``pg_terminate_backend``, ``KILL``) sends that at once, and a
    ``select()`` with no timeout sees it without a round trip. A dead connection is
    replaced (``DisconnectionError`` makes the pool connect afresh); a write that
    still meets one before COMMIT runs again (``Store.transact``).
    """

    @event.listens_for(engine, "checkin")
    def _checkin(_dbapi_conn: Any, record: Any) -> None:
        record.info["solid_idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        since = record.info.pop("solid_idle_since", None)
        if since is None:
            return  # a new connection
        if time.monotonic() - since < idle_seconds and not _has_input(dbapi_conn):
            return
        try:
            engine.dialect.do_ping(dbapi_conn)
        except Exception as exc:
            raise DisconnectionError(f"pooled connection is dead: {exc}") from exc


def rollback_unfinished_transactions(engine: Engine) -> None:
    """On return to the pool, roll back only a connection whose transaction did not end.

    The pool's own reset (``pool_reset_on_return``, off for the servers) rolls back
    every time, and PyMySQL sends that ROLLBACK even right after a COMMIT: a wasted
    round trip per transaction. :meth:`Dialect.write` and :meth:`Dialect.read` mark a
    connection whose transaction they ended; any other is rolled back as before
    (SQLAlchemy ``Connection`` objects roll back their own on close anyway).
    """

    @event.listens_for(engine, "reset")
    def _reset(dbapi_conn: Any, record: Any, state: Any) -> None:
        if not record.info.pop(_ENDED, False) and not state.terminate_only:
            dbapi_conn.rollback()


#: Set in a pooled connection's ``info`` when its transaction was committed or rolled back.
_ENDED = "solid_transaction_ended"


def _has_input(dbapi_conn: Any) -> bool:
    """Whether an idle connection's socket is readable: the server closed it, or said
    something unprompted. Unknown drivers count as readable (they get pinged)."""
    try:
        fileno = dbapi_conn.fileno() if hasattr(dbapi_conn, "fileno") else dbapi_conn._sock.fileno()
        readable, _, _ = select.select([fileno], [], [], 0)
    except Exception:
        return True
    return bool(readable)


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
            raw.info[_ENDED] = True
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
    import time

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


def _canonical_json_loader() -> type[Any]:
    """A psycopg loader that reads ``jsonb`` as the library's canonical JSON text.

    The store deals in JSON text; ``jsonb`` hands back its own spelling (spaces, keys by
    length), and a turn compares the state it read with the one it writes to skip an
    unchanged write, so the read is put back into the spelling the library writes."""
    from psycopg.adapt import Loader

    class Canonical(Loader):
        def load(self, data: Any) -> str:
            return canonical_json(json.loads(bytes(data)))

    return Canonical


class PostgreSQLDialect(Dialect):
    name = family = "postgresql"
    now_ms = "CAST(FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000) AS BIGINT)"
    supports_skip_locked = True
    incarnation_share_sql: str | None = (
        "SELECT pg_advisory_xact_lock_shared(1397705796, CAST(:lock_key AS INTEGER))"
    )
    incarnation_try_sql: str | None = (
        "SELECT pg_try_advisory_xact_lock(1397705796, CAST(:lock_key AS INTEGER))"
    )
    notify_sql: str | None = "SELECT pg_notify(:channel, :payload)"
    writable_cte = True
    scope_sql = "SELECT current_database() || '.' || current_schema()"
    # The server's start time tells two servers apart without superuser rights, and
    # does not depend on how the client reached it (TCP, a socket, another address).
    identity_sql = (
        "SELECT current_database() || '.' || current_schema() || '@' || "
        "CAST(pg_postmaster_start_time() AS TEXT)"
    )
    settings_sql = (
        ("version", "SHOW server_version"),
        ("transaction_isolation", "SHOW transaction_isolation"),
        ("lock_timeout", "SHOW lock_timeout"),
    )
    update_returning = True
    #: The isolation of every library connection (None: the server's own default).
    isolation: str | None = "READ COMMITTED"
    #: Set from the first connection's ``version()`` (YugabyteDB speaks this dialect).
    server: str | None = None

    def configure(self, engine: Engine, options: dict[str, Any]) -> None:
        lock_ms = max(1, int(options["busy_timeout"] * 1000))
        self.lock_wait = options["busy_timeout"]
        self.pooled = options.get("pooler") == "transaction"
        ping_idle_connections(engine)
        rollback_unfinished_transactions(engine)
        settings = f"SET lock_timeout = {lock_ms}"
        if self.isolation is not None:
            settings += (
                f"; SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL {self.isolation}"
            )

        canonical_loader = _canonical_json_loader()

        @event.listens_for(engine, "connect")
        def _connect(dbapi_conn: Any, _record: Any) -> None:
            # A row lock held by a stalled transaction must not hold a caller past its
            # deadline (PostgreSQL waits forever by default). SET is transactional here.
            # Turns run at READ COMMITTED in real transactions whatever the engine the
            # connection came through (database.py): an application engine made with
            # isolation_level="AUTOCOMMIT" or "SERIALIZABLE" must not change them.
            if dbapi_conn.autocommit:
                dbapi_conn.autocommit = False
            dbapi_conn.adapters.register_loader("jsonb", canonical_loader)
            if self.pooled:
                # Each transaction may run on another server session, shared with other
                # clients: nothing prepared or SET outlives it (``bound_lock_wait``).
                dbapi_conn.prepare_threshold = None
            with dbapi_conn.cursor() as cur:
                if not self.pooled:
                    cur.execute(settings)
                if self.server is None:
                    cur.execute("SELECT version()")
                    self.adapt(str(cur.fetchone()[0]))
            dbapi_conn.commit()
            if self.pooled and self.isolation is not None:
                # psycopg then opens each transaction with BEGIN ISOLATION LEVEL ...
                from psycopg import IsolationLevel

                dbapi_conn.isolation_level = IsolationLevel[self.isolation.replace(" ", "_")]
            elif dbapi_conn.isolation_level is not None:
                dbapi_conn.isolation_level = None

    def adapt(self, version: str) -> None:
        """Follow what the server is: YugabyteDB (``...-YB-...``) serves this dialect
        but, as documented, has no LISTEN/NOTIFY before v2025.2.3 (early access there)
        and advisory locks only in recent releases, so wake-ups are polled (or go
        through Redis) and installs are serialized by re-running the loser, as on
        CockroachDB."""
        self.server = version
        if "-YB-" in version:
            self.notify_sql = None
            self.install_retries = _INSTALL_RETRIES

    def rolled_back(self, error: BaseException | None) -> bool:
        # serialization_failure (CockroachDB's "restart transaction" too), deadlock_detected
        return getattr(error, "sqlstate", None) in ("40001", "40P01")

    def is_lock_timeout(self, error: BaseException | None) -> bool:
        return getattr(error, "sqlstate", None) == "55P03"  # lock_not_available

    def bound_lock_wait(self, cursor: Any, *, in_transaction: bool) -> Callable[[], None] | None:
        left = self.call_lock_wait()
        if self.pooled:
            # No session lock_timeout to fall back on: every write transaction sets its own.
            ms = max(1, int((self.lock_wait if left is None else left) * 1000))
            cursor.execute(f"SET LOCAL lock_timeout = {ms}")
            return None
        if left is None:
            return None
        ms = max(1, int(left * 1000))
        if in_transaction:  # SET LOCAL ends with the transaction: nothing to undo
            cursor.execute(f"SET LOCAL lock_timeout = {ms}")
            return None
        cursor.execute(f"SET lock_timeout = {ms}")
        usual = max(1, int(self.lock_wait * 1000))
        return lambda: cursor.execute(f"SET lock_timeout = {usual}")

    @contextmanager
    def statement(self, engine: Engine, render: Any) -> Iterator[Tx]:
        """Behind a transaction pooler, a transaction of its own: its ``SET LOCAL
        lock_timeout`` bounds the statement's lock waits (no session one to rely on)."""
        opener = self.write if self.pooled else super().statement
        with opener(engine, render) as tx:
            yield tx

    def is_unavailable(self, error: BaseException | None) -> bool:
        state = getattr(error, "sqlstate", None)
        if state is None:
            return True  # raised by the client (connection closed), not by a statement
        # connection, insufficient resources (disk full), operator intervention
        # (statement timeout, shutdown), system error (I/O), transaction rollback;
        # lock_not_available, object_in_use, read_only_sql_transaction
        return state[:2] in ("08", "53", "57", "58", "40") or state in (
            "55P03",
            "55006",
            "25006",
        )

    def lost_install_race(self, error: BaseException | None) -> bool:
        # duplicate_table, duplicate_object, duplicate_column, unique_violation (the
        # catalogs' own indexes: two CREATE TABLE of one name), or a conflict.
        state = getattr(error, "sqlstate", None)
        return self.rolled_back(error) or state in ("42P07", "42710", "42701", "23505")

    def lock_for_install(self, conn: Connection) -> None:
        if self.install_retries:
            return  # no advisory locks here: the loser of a race runs again (Store.install)
        conn.execute(text("SELECT pg_advisory_xact_lock(7310580462)"))


#: How many times an install that lost a race is run again where no lock serializes it.
_INSTALL_RETRIES = 10


class CockroachDBDialect(PostgreSQLDialect):
    """CockroachDB through ``sqlalchemy-cockroachdb`` (``cockroachdb+psycopg://``).

    What its documentation says differs from PostgreSQL, handled here: no
    LISTEN/NOTIFY (wake-ups are polled, or go through Redis with ``wakeup_url``);
    SERIALIZABLE is the default isolation, kept (READ COMMITTED needs a cluster
    setting), so conflicts come back as 40001 and are run again (``rolled_back``);
    its advisory-lock functions were long no-op stubs (cockroachdb/cockroach#13546),
    so concurrent installs are serialized by re-running the one that lost; the
    server is named by its cluster id (no postmaster). Data-modifying CTEs are not relied on.
    """

    name = "cockroachdb"
    notify_sql = None
    # Advisory locks were no-op stubs there: the expiry race stays as documented.
    incarnation_share_sql = None
    incarnation_try_sql = None
    writable_cte = False
    isolation = None
    install_retries = _INSTALL_RETRIES
    identity_sql = (
        "SELECT current_database() || '.' || current_schema() || '@' || "
        "CAST(crdb_internal.cluster_id() AS TEXT)"
    )

    def adapt(self, version: str) -> None:
        self.server = version


class MySQLDialect(Dialect):
    name = family = "mysql"
    # SYSDATE(6) is the time the function runs; NOW(6) is the statement's start.
    now_ms = "CAST(FLOOR(UNIX_TIMESTAMP(SYSDATE(6)) * 1000) AS SIGNED)"
    supports_skip_locked = True
    expiry_isolation_sql = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"
    scope_sql = "SELECT CONCAT(@@hostname, ':', @@port, '/', DATABASE())"
    settings_sql = (
        ("version", "SELECT VERSION()"),
        ("time_zone", "SELECT @@SESSION.time_zone"),
        ("lock_wait_timeout", "SELECT @@SESSION.innodb_lock_wait_timeout"),
    )

    def settings(self, tx: Tx) -> dict[str, str]:
        # MariaDB before 11.1 names it tx_isolation, MySQL 8 transaction_isolation.
        found = super().settings(tx)
        for _name, value in tx.rows("SHOW SESSION VARIABLES LIKE '%%isolation'"):
            found["transaction_isolation"] = str(value)
        return found

    def rolled_back(self, error: BaseException | None) -> bool:
        # ER_LOCK_DEADLOCK: InnoDB rolls back the whole transaction, and Galera reports
        # a certification failure or a brute-force abort (at COMMIT or before) with it.
        args: tuple[Any, ...] = tuple(getattr(error, "args", ()))
        return bool(args) and args[0] == 1213

    def is_lock_timeout(self, error: BaseException | None) -> bool:
        args: tuple[Any, ...] = tuple(getattr(error, "args", ()))
        return bool(args) and args[0] == 1205  # ER_LOCK_WAIT_TIMEOUT

    def bound_lock_wait(self, cursor: Any, *, in_transaction: bool) -> Callable[[], None] | None:
        # Whole seconds only: the bound is the call's remaining time rounded up.
        left = self.call_lock_wait()
        if left is None:
            return None
        cursor.execute(f"SET SESSION innodb_lock_wait_timeout = {max(1, math.ceil(left))}")
        usual = int(self.lock_wait)
        return lambda: cursor.execute(f"SET SESSION innodb_lock_wait_timeout = {usual}")

    #: Server errors that mean "not now": lock wait timeout, deadlock, disk full, table
    #: full, too many connections, shutdown, read-only, killed or timed-out statements.
    _UNAVAILABLE = frozenset(
        {1205, 1213, 1021, 1114, 1040, 1053, 1290, 1792, 1836, 1927, 3024, 1969, 1317, 4031}
    )

    def is_unavailable(self, error: BaseException | None) -> bool:
        args: tuple[Any, ...] = tuple(getattr(error, "args", ()))
        if not args or not isinstance(args[0], int):
            return True  # raised by the client, not by a statement
        return 2000 <= args[0] < 3000 or args[0] in self._UNAVAILABLE  # 2xxx: client errors

    def configure(self, engine: Engine, options: dict[str, Any]) -> None:
        # Lock waits bounded like PostgreSQL's (whole seconds here; the default is 50).
        lock_s = max(1, math.ceil(options["busy_timeout"]))
        self.lock_wait = float(lock_s)
        ping_idle_connections(engine)
        rollback_unfinished_transactions(engine)

        @event.listens_for(engine, "connect")
        def _connect(dbapi_conn: Any, _record: Any) -> None:
            if dbapi_conn.get_autocommit():  # an application engine's AUTOCOMMIT (database.py)
                dbapi_conn.autocommit(False)
            cur = dbapi_conn.cursor()
            cur.execute("SET SESSION time_zone = '+00:00'")
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            cur.execute(f"SET SESSION innodb_lock_wait_timeout = {lock_s}")
            cur.close()

    _LOCK = "CONCAT(DATABASE(), '.solid_objects_install')"

    def byte_exact_text(self, conn: Connection, tables: Sequence[str]) -> None:
        # The default collations ignore case and accents: reminders for `tick` and
        # `Tick` (or `cafe` and `café`) would be one row. CONVERT rebuilds each table.
        for table in tables:
            conn.execute(
                text(f"ALTER TABLE {table} CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
            )

    def lock_for_install(self, conn: Connection) -> None:
        # A session lock: DDL commits implicitly on MySQL, so no transaction can hold it.
        got = conn.execute(text(f"SELECT GET_LOCK({self._LOCK}, 60)")).scalar()
        if got != 1:
            raise ConfigurationError("could not take the install lock within 60 s")

    def unlock_after_install(self, conn: Connection) -> None:
        conn.execute(text(f"SELECT RELEASE_LOCK({self._LOCK})"))


def dialect_for(engine: Engine) -> Dialect:
    name = engine.dialect.name
    if name == "sqlite":
        return SQLiteDialect()
    if name == "postgresql":
        return PostgreSQLDialect()
    if name == "cockroachdb":
        return CockroachDBDialect()
    if name in ("mysql", "mariadb"):
        return MySQLDialect()
    raise ConfigurationError(
        f"unsupported database {name!r}: use sqlite, postgresql+psycopg, mysql+pymysql or "
        "cockroachdb+psycopg"
    )
