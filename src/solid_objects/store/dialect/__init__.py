"""What differs between SQLite, PostgreSQL and MySQL/MariaDB: nothing else may.

The base every dialect shares (``Tx``, ``Dialect``) is :mod:`.base`; each database's
differences are a module of its own (:mod:`.sqlite`, :mod:`.postgresql` with
CockroachDB, :mod:`.mysql`), and :mod:`.pool` keeps pooled server connections cheap.
"""

from __future__ import annotations

from sqlalchemy import Engine

from ...errors import ConfigurationError
from .base import Dialect, Tx

__all__ = ["Dialect", "Tx", "dialect_for"]


def dialect_for(engine: Engine) -> Dialect:
    """The dialect of ``engine``'s database; a database the library does not speak is refused."""
    from .mysql import MySQLDialect
    from .postgresql import CockroachDBDialect, PostgreSQLDialect
    from .sqlite import SQLiteDialect

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
