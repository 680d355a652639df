"""``Runtime(engine)`` uses the application's Engine as given, and a URL
without the installed driver says which URL works.

The application's engine says *where* the tables go only through what the library
used to drop: PostgreSQL's ``search_path`` in ``connect_args`` (or set by a
``connect`` listener), MySQL's database in ``connect_args``, SQLite's file in a
``creator``; the URL itself points elsewhere. The library's own per-connection
settings must not reach the application's connections.
"""

from __future__ import annotations

import sqlite3
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import StaticPool

from solid_objects import Actor, Runtime
from solid_objects.errors import ConfigurationError

from .conftest import FAST, fresh_database

TABLES = {
    "solid_schema",
    "solid_actors",
    "solid_messages",
    "solid_effects",
    "solid_reminders",
    "solid_processes",
}


class Stock(Actor):
    count: int = 0

    def add(self, n: int) -> int:
        self.count += n
        return self.count


def application_engine(backend: str, db_url: str, how: str, tmp_path: Path) -> Engine:
    """The application's engine for the fresh database ``db_url``, which its URL does not name."""
    url = make_url(db_url)
    if backend == "sqlite":
        elsewhere = url.set(database=str(tmp_path / "not-here.db"))
        return create_engine(
            elsewhere, creator=lambda: sqlite3.connect(url.database or "", check_same_thread=False)
        )
    if backend == "postgresql":
        schema = url.query["options"]
        assert isinstance(schema, str) and schema.startswith("-csearch_path=")
        bare = url.difference_update_query(["options"])
        if how == "connect_args":
            return create_engine(bare, connect_args={"options": schema})
        engine = create_engine(bare)

        @event.listens_for(engine, "connect")
        def _search_path(dbapi_conn: Any, _record: Any) -> None:
            with dbapi_conn.cursor() as cur:
                cur.execute(f"SET search_path TO {schema.removeprefix('-csearch_path=')}")
            dbapi_conn.commit()

        return engine
    return create_engine(url.set(database="mysql"), connect_args={"database": url.database})


def tables_where_the_application_looks(engine: Engine) -> set[str]:
    """The library's tables in the application's schema/database/file, by its own engine."""
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            names = conn.execute(text("SELECT name FROM sqlite_master WHERE type='table'"))
        elif engine.dialect.name == "postgresql":
            names = conn.execute(
                text(
                    "SELECT table_name FROM information_schema.tables "
                    "WHERE table_schema = current_schema()"
                )
            )
        else:
            names = conn.execute(
                text(
                    "SELECT table_name FROM information_schema.tables "
                    "WHERE table_schema = DATABASE()"
                )
            )
        return {str(n) for (n,) in names}


def application_settings(engine: Engine) -> dict[str, Any]:
    """What the library must leave alone on the application's own connections."""
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            raw = conn.connection.driver_connection
            return {"isolation_level": getattr(raw, "isolation_level", None)}
        if engine.dialect.name == "postgresql":
            return {"lock_timeout": conn.execute(text("SHOW lock_timeout")).scalar()}
        return {
            "lock_wait": conn.execute(text("SELECT @@SESSION.innodb_lock_wait_timeout")).scalar(),
            "time_zone": conn.execute(text("SELECT @@SESSION.time_zone")).scalar(),
        }


@pytest.fixture(params=["connect_args", "connect_listener"])
def how(request: pytest.FixtureRequest, backend: str) -> str:
    if request.param == "connect_listener" and backend != "postgresql":
        return "connect_args"  # the listener variant is PostgreSQL's search_path only
    return str(request.param)


@pytest.fixture
def app_engine(backend: str, db_url: str, how: str, tmp_path: Path) -> Iterator[Engine]:
    engine = application_engine(backend, db_url, how, tmp_path)
    try:
        yield engine
    finally:
        engine.dispose()


def test_the_runtime_installs_and_runs_where_the_applications_engine_connects(
    app_engine: Engine, backend: str, tmp_path: Path
) -> None:
    before = application_settings(app_engine)
    runtime = Runtime(app_engine, workers=2, **FAST)
    runtime.install()
    with runtime:
        assert runtime.ref(Stock, "s").add(n=2) == 2
        assert runtime.ref(Stock, "s").add(n=3) == 5
    assert TABLES <= tables_where_the_application_looks(app_engine)
    with app_engine.connect() as conn:  # the actor's row is in the application's database
        query = text("SELECT COUNT(*) FROM solid_actors WHERE actor_id = 's'")
        assert conn.execute(query).scalar() == 1
    if backend == "sqlite":
        assert not (tmp_path / "not-here.db").exists()
    # The library's connection settings stayed on the library's own connections.
    assert application_settings(app_engine) == before
    with app_engine.connect() as conn:  # and the application's engine still works
        assert conn.execute(text("SELECT 1")).scalar() == 1


def test_the_postgresql_wakeup_listens_on_a_connection_made_by_the_applications_engine(
    tmp_path: Path,
) -> None:
    """The LISTEN connection used to be rebuilt from the URL too, dropping connect_args."""
    name = f"shop-{uuid.uuid4().hex[:8]}"
    with fresh_database("postgresql", tmp_path) as db_url:
        url = make_url(db_url)
        engine = create_engine(url, connect_args={"application_name": name})
        runtime = Runtime(engine, workers=1, **FAST)
        try:
            runtime.install()
            with runtime:
                assert runtime.ref(Stock, "w").add(n=1) == 1
                deadline = time.monotonic() + 20
                while True:
                    with engine.connect() as conn:
                        listening = conn.execute(
                            text(
                                "SELECT COUNT(*) FROM pg_stat_activity "
                                "WHERE application_name = :name AND query LIKE 'LISTEN%'"
                            ),
                            {"name": name},
                        ).scalar()
                    if listening or time.monotonic() > deadline:
                        break
                    time.sleep(0.05)
                assert listening == 1
        finally:
            runtime.close()
            engine.dispose()


def test_the_library_connections_run_transactions_even_from_an_autocommit_engine(
    backend: str, db_url: str
) -> None:
    engine = create_engine(db_url, isolation_level="AUTOCOMMIT")
    try:
        runtime = Runtime(engine, workers=1, **FAST)
        runtime.install()
        with runtime:
            with runtime.store.read() as tx:
                raw = tx.connection.driver_connection
                if backend == "postgresql":
                    assert raw.autocommit is False
                    assert tx.scalar("SHOW transaction_isolation") == "read committed"
                elif backend == "mysql":
                    assert raw.get_autocommit() is False
            assert runtime.ref(Stock, "a").add(n=1) == 1
    finally:
        engine.dispose()


def test_what_the_library_cannot_honour_is_refused_by_name(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    translated = create_engine(url).execution_options(schema_translate_map={None: "shop"})
    with pytest.raises(ConfigurationError, match="schema_translate_map"):
        Runtime(translated)
    with pytest.raises(ConfigurationError, match="StaticPool shares one connection"):
        Runtime(create_engine(url, poolclass=StaticPool))


# --- 13.6: the driver hint -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "default_module", "fixed"),
    [
        (
            "mysql://root@127.0.0.1:3306/test",
            "MySQLdb",
            "mysql+pymysql://root@127.0.0.1:3306/test",
        ),
        (
            "mariadb://root:s3cret@127.0.0.1:3306/test",
            "MySQLdb",
            "mariadb+pymysql://root:***@127.0.0.1:3306/test",
        ),
        (
            "postgresql+psycopg2://postgres@127.0.0.1:5432/test",
            "psycopg2",
            "postgresql+psycopg://postgres@127.0.0.1:5432/test",
        ),
    ],
)
def test_a_url_without_the_installed_driver_names_the_url_that_works(
    url: str, default_module: str, fixed: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLAlchemy's default driver is missing (as on a machine with only the extras
    installed); PyMySQL / psycopg 3 are there."""
    monkeypatch.setitem(sys.modules, default_module, None)  # import fails: not installed
    with pytest.raises(ConfigurationError) as caught:
        Runtime(url)
    message = str(caught.value)
    assert f"is installed: name it in the URL, {fixed}" in message
    assert "install solid-objects[" not in message
    assert "s3cret" not in message


def test_a_missing_supported_driver_says_which_extra_installs_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pymysql", None)
    with pytest.raises(ConfigurationError, match=r"install solid-objects\[mysql\]"):
        Runtime("mysql+pymysql://root@127.0.0.1:3306/test")


def test_a_postgresql_url_without_a_driver_works_or_names_psycopg(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``postgresql://`` means SQLAlchemy's default driver: psycopg 3 from SQLAlchemy 2.1
    (the URL just works), psycopg2 before (missing here: the hint names psycopg)."""
    url = "postgresql://postgres@127.0.0.1:5432/test"
    default = make_url(url).get_dialect().driver
    if default == "psycopg":
        Runtime(url).close()
        return
    monkeypatch.setitem(sys.modules, default, None)
    with pytest.raises(ConfigurationError, match=r"postgresql\+psycopg://postgres@127"):
        Runtime(url)
