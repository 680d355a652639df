"""Read-only sessions: the database itself refuses writes on a fenced connection.

``runtime.guard(engine)`` refuses, by their text, statements that actor code, a
state migration or a commit action sends through SQLAlchemy. A statement's text can
hide a write (``SELECT ... INTO``, ``SELECT setval(...)``, a function that writes),
and a DB-API cursor of ``engine.raw_connection()`` passes no SQLAlchemy event at all.
So a connection checked out of a guarded engine inside such a scope is also made
read-only *at the server* for as long as it is out of the pool: whatever reaches
the database through it, a write is refused there.
"""

from __future__ import annotations

from typing import Any

#: Per SQLAlchemy dialect name: the statement that makes later transactions of the
#: session read-only, and the one that makes them writable again.
_STATEMENTS = {
    "sqlite": ("PRAGMA query_only = ON", "PRAGMA query_only = OFF"),
    "postgresql": (
        "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY",
        "SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE",
    ),
    "cockroachdb": (
        "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY",
        "SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE",
    ),
    "mysql": ("SET SESSION TRANSACTION READ ONLY", "SET SESSION TRANSACTION READ WRITE"),
    "mariadb": ("SET SESSION TRANSACTION READ ONLY", "SET SESSION TRANSACTION READ WRITE"),
}


def supports_read_only(dialect_name: str) -> bool:
    """Whether :func:`set_read_only` knows this SQLAlchemy dialect."""
    return dialect_name in _STATEMENTS


def set_read_only(
    dbapi_connection: Any, dialect_name: str, read_only: bool, how: str | None = None
) -> str:
    """Make the session's next transactions read-only (or writable again); return how
    (``"transaction"`` or ``"session"``), to be undone the same way.

    Called on a connection just checked out (or about to be checked in), so no
    transaction of the application's is open on it. On psycopg outside autocommit
    the driver opens each transaction with ``BEGIN READ ONLY``: nothing is set for
    the server session, which a transaction pooler (PgBouncer) would hand to other
    clients with the setting still on. Elsewhere the statement's own implicit
    transaction is committed at once, and the next one starts with the setting.
    """
    if how is None:
        per_transaction = (
            dialect_name in ("postgresql", "cockroachdb")
            and hasattr(dbapi_connection, "read_only")
            and not getattr(dbapi_connection, "autocommit", True)
            and _idle(dbapi_connection)
        )
        how = "transaction" if per_transaction else "session"
    if how == "transaction":
        dbapi_connection.read_only = True if read_only else None
        return how
    statement = _STATEMENTS[dialect_name][0 if read_only else 1]
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(statement)
    finally:
        cursor.close()
    if dialect_name != "sqlite":
        dbapi_connection.commit()
    return how


def _idle(dbapi_connection: Any) -> bool:
    """Whether a psycopg connection has no transaction open (its ``read_only`` may change)."""
    info = getattr(dbapi_connection, "info", None)
    return getattr(info, "transaction_status", None) == 0  # psycopg.pq.TransactionStatus.IDLE
