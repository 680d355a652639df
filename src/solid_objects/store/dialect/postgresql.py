"""PostgreSQL, and CockroachDB as far as it speaks PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, event, text

from ...codec import canonical_json
from .base import Dialect, Tx
from .pool import ping_idle_connections, rollback_unfinished_transactions


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
        "SELECT c.pk FROM (VALUES {candidates}) AS c(pk, lock_key) "
        "WHERE pg_try_advisory_xact_lock(1397705796, c.lock_key)"
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
