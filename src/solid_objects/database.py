"""The library's own SQLAlchemy engine, from a URL or from the application's Engine.

The library always pools its connections apart from the application's: it sets
per-connection state the application must not inherit (sqlite3's transaction
control, PostgreSQL's ``lock_timeout`` and isolation, MySQL's session time zone,
isolation and lock wait; ``store.dialect`` installs them on connect), sizes the
pool to its worker threads, and replaces the pool's reset and pre-ping with cheaper
ones of its own.

Given an ``Engine``, the library's connections are made *by that engine*: each new
one is opened through a copy of the application's pool (``Pool.recreate()``, the
same creator and listeners) and then detached from it. So whatever makes a
connection the application's holds for the library too: ``connect_args`` (a
PostgreSQL ``options=-csearch_path=shop``, TLS files, a driver setting), a custom
``creator``, and the pool's ``connect`` listeners (a ``SET search_path`` or a
session variable set there). What the library cannot honour is refused by name:
``schema_translate_map`` (its SQL is its own), an async engine, and pools that
share a single connection.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError
from sqlalchemy.pool import NullPool, SingletonThreadPool, StaticPool

from .errors import ConfigurationError
from .options import Options
from .redaction import redact_url

#: The drivers the library supports per backend: (DB-API module, URL driver name).
SUPPORTED_DRIVERS = {
    "postgresql": ("psycopg", "psycopg"),
    "mysql": ("pymysql", "pymysql"),
    "mariadb": ("pymysql", "pymysql"),
    "cockroachdb": ("psycopg", "psycopg"),
}
_EXTRAS = {
    "postgresql": "postgres",
    "mysql": "mysql",
    "mariadb": "mysql",
    "cockroachdb": "cockroachdb",
}


def library_engine(database: str | URL | Engine, options: Options) -> Engine:
    """The engine the runtime runs on: see the module docstring."""
    if isinstance(database, Engine):
        return _from_application_engine(database, options)
    try:
        url = make_url(database)
    except ArgumentError as exc:
        raise ConfigurationError(
            f"not a database URL: {redact_url(str(database))!r} ({exc})"
        ) from None
    _refuse_memory_sqlite(url)
    kwargs = _pool_settings(url, options)
    if url.get_backend_name() == "sqlite":
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": options.busy_timeout}
    try:
        return create_engine(url, **kwargs)
    except (NoSuchModuleError, ModuleNotFoundError) as exc:
        raise ConfigurationError(_driver_hint(url, exc)) from None
    except ArgumentError as exc:
        raise ConfigurationError(f"invalid database URL {redact_url(url)!r}: {exc}") from None


def listen_engine(options: Options, family: str) -> Engine | None:
    """The ``listen_url`` engine, if any; ``pooler`` and ``listen_url`` are refused by
    name on a database other than PostgreSQL (its poolers and sessions differ)."""
    if family != "postgresql":
        for name in ("pooler", "listen_url"):
            if getattr(options, name) is not None:
                raise ConfigurationError(
                    f"{name} is for PostgreSQL (PgBouncer); this runtime's database is {family}"
                )
        return None
    return None if options.listen_url is None else direct_engine(options.listen_url)


#: Per database family: the schemes a replica URL may have, and the driver to use.
_REPLICA_SCHEMES = {
    "postgresql": (("postgresql", "postgres"), "postgresql+psycopg"),
    "mysql": (("mysql", "mariadb"), "mysql+pymysql"),
}


def replica_engine(options: Options, family: str) -> Engine | None:
    """The ``replica_url`` engine, if any: a PostgreSQL streaming replica of a PostgreSQL
    database (staleness by WAL position) or a MariaDB replica of a MariaDB database (by
    GTID position); anything else is refused."""
    if options.replica_url is None:
        return None
    parsed = make_url(options.replica_url)
    scheme = _REPLICA_SCHEMES.get(family)
    if scheme is None or parsed.drivername.split("+")[0] not in scheme[0]:
        raise ConfigurationError(
            "replica_url is for PostgreSQL streaming replicas and MariaDB replicas of the "
            f"same kind of database; this runtime's database is {family}"
        )
    if "+" not in parsed.drivername:
        parsed = parsed.set(drivername=scheme[1])
    return engine_for(parsed)


def direct_engine(url: str) -> Engine:
    """The engine of ``listen_url``: a few sessions that must stay the process's own
    (the LISTEN connection, the session mark), so it keeps none pooled; a URL without
    a driver gets psycopg, the driver the runtime speaks PostgreSQL with."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigurationError(
            f"listen_url is not a database URL: {redact_url(url)!r} ({exc})"
        ) from None
    if "+" not in parsed.drivername:
        parsed = parsed.set(drivername="postgresql+psycopg")
    return engine_for(parsed, poolclass=NullPool)


def engine_for(url: URL, **kwargs: Any) -> Engine:
    """``create_engine`` for a URL the runtime does not own (the test plugin's admin
    connection): a missing driver is the same `ConfigurationError`, naming the extra."""
    try:
        return create_engine(url, **kwargs)
    except (NoSuchModuleError, ModuleNotFoundError) as exc:
        raise ConfigurationError(_driver_hint(url, exc)) from None


def _from_application_engine(app: Engine, options: Options) -> Engine:
    url = app.url
    if app.dialect.is_async:
        raise ConfigurationError(
            f"the engine for {redact_url(url)!r} uses an async driver "
            f"({app.dialect.driver}); the library runs its SQL on worker threads: pass "
            "an engine (or URL) with a sync driver, e.g. postgresql+psycopg://"
        )
    if app.get_execution_options().get("schema_translate_map"):
        raise ConfigurationError(
            "the engine has a schema_translate_map, which the library cannot apply (it "
            "writes its own SQL): put its tables in a schema through the connection "
            "(PostgreSQL: connect_args={'options': '-csearch_path=shop'}), or give them a "
            "table_prefix"
        )
    if isinstance(app.pool, StaticPool | SingletonThreadPool):
        raise ConfigurationError(
            f"the engine's {type(app.pool).__name__} shares one connection; the library's "
            "workers need connections of their own: use the default pool (a file for SQLite)"
        )
    _refuse_memory_sqlite(url)
    source = app.pool.recreate()

    def connect() -> Any:
        """A new DB-API connection made by the application's creator and listeners."""
        proxied = source.connect()
        dbapi_connection = proxied.dbapi_connection
        proxied.detach()
        return dbapi_connection

    return create_engine(url, creator=connect, **_pool_settings(url, options))


def pool_limits(backend: str, options: Options) -> tuple[int, int]:
    """The pool's steady size and burst overflow for a database backend: what bounds
    the connections one runtime opens through its pool."""
    size = options.pool_size or options.workers + options.effect_workers + 8
    overflow = options.pool_overflow
    if overflow is None:
        overflow = 64 if backend == "sqlite" else 32
    return size, overflow


def _pool_settings(url: URL, options: Options) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    if url.get_backend_name() != "sqlite":
        # No pool_pre_ping (a round trip per checkout) and no unconditional rollback on
        # return (PyMySQL sends it even after COMMIT): the store pings only connections
        # that may be dead and rolls back only open transactions (store.dialect).
        kwargs["pool_recycle"] = 1800
        kwargs["pool_reset_on_return"] = None
    # Workers, effect runners, the poller and callers each hold a connection only for one
    # transaction; overflow connections are closed on return, so a pool smaller than the
    # usual concurrency reconnects on every transaction.
    kwargs["pool_size"], kwargs["max_overflow"] = pool_limits(url.get_backend_name(), options)
    return kwargs


def _refuse_memory_sqlite(url: URL) -> None:
    if url.get_backend_name() == "sqlite" and (
        url.database in (None, "", ":memory:") or "mode=memory" in str(url)
    ):
        raise ConfigurationError(
            "in-memory SQLite cannot be shared by workers and callers: use a file, "
            "e.g. sqlite:///app.db"
        )


def _driver_hint(url: URL, exc: BaseException) -> str:
    """Why the URL's driver is missing, and the URL that works with what is installed.

    A URL without a driver (``mysql://``, ``postgresql://``) means SQLAlchemy's
    default driver (mysqlclient, psycopg2), not the one the library's extras
    install; the library does not pick another one silently, because the same URL
    may be read by other tools that would then use a different driver.
    """
    backend = url.get_backend_name()
    message = f"no driver for {url.drivername!r}: {exc}"
    supported = SUPPORTED_DRIVERS.get(backend)
    if supported is None:
        return message
    module, driver = supported
    fixed = redact_url(url.set(drivername=f"{backend}+{driver}"))
    if url.get_driver_name() == driver:
        return f"{message}; install solid-objects[{_EXTRAS[backend]}]"
    default = "" if "+" in url.drivername else " (SQLAlchemy's default driver for it)"
    if importlib.util.find_spec(module) is not None:
        return f"{message}{default}. {module} is installed: name it in the URL, {fixed}"
    return (
        f"{message}{default}. Install solid-objects[{_EXTRAS[backend]}] (it brings "
        f"{module}) and name it in the URL: {fixed}"
    )
