"""What differs between SQLite, PostgreSQL and MySQL/MariaDB: the base every dialect shares.

Every time value the library writes or compares comes from :attr:`now_ms`,
an SQL expression for the database clock in epoch milliseconds, evaluated
inside the statement that uses it. On PostgreSQL that is
``clock_timestamp()``, not ``now()`` (which is frozen at transaction start).
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from ... import deadline
from ...errors import DatabaseError

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
    #: The expiry's try, for a batch in one statement: ``{candidates}`` is a ``VALUES``
    #: list of ``(pk, lock_key)``; it returns the pks whose lock it got.
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
                    raw.info[TRANSACTION_ENDED] = True
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
            raw.info[TRANSACTION_ENDED] = True
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
            raw.info[TRANSACTION_ENDED] = True

    @contextmanager
    def read(self, engine: Engine, render: Any) -> Iterator[Tx]:
        with self._checkout(engine) as raw:
            cursor = raw.cursor()
            try:
                yield Tx(cursor, render, raw)
            finally:
                cursor.close()
            # End the snapshot now (the pool does not do it for every connection);
            # a connection that died after the read is only discarded: the read stands.
            try:
                raw.rollback()
            except engine.dialect.loaded_dbapi.Error as exc:
                raw.invalidate(exc)
                return
            raw.info[TRANSACTION_ENDED] = True

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


#: Set in a pooled connection's ``info`` when its transaction was committed or rolled back.
TRANSACTION_ENDED = "solid_transaction_ended"
