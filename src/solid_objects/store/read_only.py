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


def set_read_only(dbapi_connection: Any, dialect_name: str, read_only: bool) -> None:
    """Make the session's next transactions read-only (or writable again).

    Called on a connection just checked out (or about to be checked in), so no
    transaction of the application's is open on it: the statement's own implicit
    transaction is committed at once, and the next one starts with the setting.
    """
    statement = _STATEMENTS[dialect_name][0 if read_only else 1]
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(statement)
    finally:
        cursor.close()
    if dialect_name != "sqlite":
        dbapi_connection.commit()
