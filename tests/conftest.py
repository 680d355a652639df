"""Shared fixtures: every database-facing test runs on SQLite, PostgreSQL and MariaDB.

Server tests take their URLs from the environment:

- ``SOLID_TEST_POSTGRES_URL`` (e.g. ``postgresql+psycopg://postgres@127.0.0.1:5432/test``)
- ``SOLID_TEST_MYSQL_URL`` (e.g. ``mysql+pymysql://root@127.0.0.1:3306/test``)

A backend whose variable is unset is not collected. ``SOLID_TEST_REQUIRE_SERVERS=1``
(set by ``scripts/test``, so always in CI) makes a missing variable an error
instead, so server tests can never be skipped silently.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import URL, make_url
from sqlalchemy.pool import NullPool

from solid_objects import Runtime
from solid_objects.pytest_plugin import fresh_database as plugin_fresh_database

FAST = {
    "retry_base_delay": 0.02,
    "retry_max_delay": 0.1,
    "poll_interval": 0.05,
    "call_timeout": 20.0,
}

SERVER_VARIABLES = {
    "postgresql": "SOLID_TEST_POSTGRES_URL",
    "mysql": "SOLID_TEST_MYSQL_URL",
}


def _backends() -> list[str]:
    backends = ["sqlite"]
    required = os.environ.get("SOLID_TEST_REQUIRE_SERVERS") == "1"
    for name, variable in SERVER_VARIABLES.items():
        if os.environ.get(variable):
            backends.append(name)
        elif required:
            raise pytest.UsageError(
                f"SOLID_TEST_REQUIRE_SERVERS=1 but {variable} is not set: the {name} tests "
                "would not run"
            )
    return backends


BACKENDS = _backends()

#: The cluster runs need a cluster that a script starts (scripts/galera, scripts/patroni):
#: separate documented commands, not collected at all without it (never a silent skip).
CLUSTER_VARIABLES = {
    "test_galera.py": "SOLID_TEST_GALERA_URLS",
    "test_patroni.py": "SOLID_TEST_PATRONI_URL",
}
collect_ignore = [module for module, var in CLUSTER_VARIABLES.items() if not os.environ.get(var)]

#: ``scripts/galera contract``: the MariaDB tests run on the Galera cluster, with
#: ``SOLID_TEST_MYSQL_URL`` naming its first node and ``SOLID_TEST_GALERA_CONTRACT`` all
#: three; each runtime a test creates there goes to the next node in turn, so a test of
#: several runtimes has writers on several nodes.
GALERA_NODES = [u for u in os.environ.get("SOLID_TEST_GALERA_CONTRACT", "").split(",") if u]
_next_node = itertools.count()


def _wait_for_database(url: URL) -> None:
    """A database made on one node reaches the others a moment later (its DDL is applied
    by each node in turn): a runtime on another node waits until it is there."""
    import time

    from sqlalchemy import create_engine, text

    engine = create_engine(url.set(database="mysql"), poolclass=NullPool)
    try:
        deadline = time.monotonic() + 30
        while True:
            with engine.connect() as conn:
                found = conn.execute(text("SHOW DATABASES LIKE :n"), {"n": url.database}).first()
            if found is not None or time.monotonic() > deadline:
                return
            time.sleep(0.05)
    finally:
        engine.dispose()


@pytest.fixture(autouse=True)
def runtimes_on_every_galera_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ``scripts/galera contract``, spread this test's runtimes over the nodes."""
    if not GALERA_NODES:
        return
    # The sync face builds the library's engine (the async face wraps a sync runtime).
    import solid_objects.runtime.sync_face as runtime_module

    first = make_url(GALERA_NODES[0])
    build = runtime_module.library_engine

    def on_the_next_node(database: Any, options: Any) -> Any:
        if isinstance(database, str | URL):
            url = make_url(database)
            if (url.host, url.port) == (first.host, first.port):
                node = make_url(GALERA_NODES[next(_next_node) % len(GALERA_NODES)])
                database = url.set(host=node.host, port=node.port)
                _wait_for_database(database)
        return build(database, options)

    monkeypatch.setattr(runtime_module, "library_engine", on_the_next_node)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database for this test: a file, a PostgreSQL schema, a MariaDB database."""
    with fresh_database(backend, tmp_path) as url:
        yield url


@contextmanager
def fresh_database(backend: str, folder: Path) -> Iterator[str]:
    """The URL of a new, empty database (dropped on exit); a SQLite file goes in ``folder``.

    The same helper the pytest plugin's ``solid_db_url`` fixture uses.
    """
    server = None if backend == "sqlite" else os.environ[SERVER_VARIABLES[backend]]
    with plugin_fresh_database(server, folder, "test.db") as url:
        yield url


@pytest.fixture
def make_runtime(db_url: str) -> Iterator[Callable[..., Runtime]]:
    """Build installed runtimes on the test's database; all are closed afterwards."""
    created: list[Runtime] = []

    def make(**options: Any) -> Runtime:
        runtime = Runtime(db_url, **{**FAST, **options})
        runtime.install()
        created.append(runtime)
        return runtime

    yield make
    for runtime in reversed(created):
        runtime.close()


def count_rows(runtime: Runtime, table: str, where: str = "1=1") -> int:
    with runtime.store.read() as tx:
        return int(tx.scalar(f"SELECT COUNT(*) FROM solid_{table} WHERE {where}"))


def db_now(runtime: Runtime) -> int:
    """The database clock in epoch milliseconds."""
    with runtime.store.read() as tx:
        return runtime.store.now(tx)


@contextmanager
def statements_seen(
    monkeypatch: pytest.MonkeyPatch, *, this_thread: bool = True
) -> Iterator[list[tuple[str, bool]]]:
    """(first word, whether its connection was in autocommit) of each statement run
    through the library's ``Tx`` meanwhile: by this thread only (a worker's and the
    poller's are not a send's), or by every thread."""
    from solid_objects.store import Tx

    seen: list[tuple[str, bool]] = []
    me = threading.get_ident()
    for name in ("run", "row", "rows"):
        original = getattr(Tx, name)

        def wrapper(self: Tx, template: str, *args: Any, _original: Any = original) -> Any:
            if not this_thread or threading.get_ident() == me:
                autocommit = getattr(self.connection.driver_connection, "autocommit", False)
                seen.append((template.split()[0].upper(), bool(autocommit)))
            return _original(self, template, *args)

        monkeypatch.setattr(Tx, name, wrapper)
    yield seen
    monkeypatch.undo()
