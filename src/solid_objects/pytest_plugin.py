"""pytest plugin: an isolated, installed runtime per test, on SQLite or a server.

Installed with the package (entry point ``pytest11``), so an application's tests
can simply ask for the fixtures::

    def test_cart(solid_runtime):
        cart = solid_runtime.ref(Cart, "c1")
        cart.add.send(sku="x")
        solid_runtime.testing.drain()             # run the turns, in this thread
        assert cart.snapshot() == {"items": ["x"]}

Fixtures:

- ``solid_db_url``: a fresh, empty database for this test: a SQLite file in the
  test's ``tmp_path``, or, when ``--solid-db URL`` (or ``SOLID_OBJECTS_TEST_URL``)
  names a PostgreSQL or MySQL/MariaDB server, a schema (database) of its own,
  dropped afterwards.
- ``solid_runtime_factory``: ``make(**options) -> Runtime``, installed on that
  database; every runtime it made is closed after the test.
- ``solid_runtime``: ``solid_runtime_factory(workers=0)``: nothing runs in the
  background, so the test decides when turns run (``runtime.testing.drain()``)
  and what time it is for reminders (``runtime.testing.run_due_reminders(now)``).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from .runtime import Runtime

URL_VARIABLE = "SOLID_OBJECTS_TEST_URL"


@contextmanager
def fresh_database(
    server_url: str | None, folder: Path, filename: str = "solid-objects-test.db"
) -> Iterator[str]:
    """The URL of a new, empty database: a file in ``folder``, or a schema on a server.

    On PostgreSQL a schema (the URL sets its ``search_path``), on MySQL/MariaDB a
    database; either is dropped on exit.
    """
    if server_url is None or server_url.startswith("sqlite"):
        yield f"sqlite:///{folder / filename}"
        return
    import sqlalchemy
    from sqlalchemy.engine import make_url

    base = make_url(server_url)
    name = f"solid_t_{uuid.uuid4().hex[:12]}"
    postgres = base.get_backend_name() == "postgresql"
    admin = sqlalchemy.create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            if postgres:
                conn.exec_driver_sql(f"CREATE SCHEMA {name}")
                url = base.update_query_dict({"options": f"-csearch_path={name}"})
            else:
                conn.exec_driver_sql(f"CREATE DATABASE {name}")
                url = base.set(database=name)
        try:
            yield url.render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                if postgres:
                    conn.exec_driver_sql(f"DROP SCHEMA {name} CASCADE")
                else:
                    conn.exec_driver_sql(f"DROP DATABASE {name}")
    finally:
        admin.dispose()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("solid-objects")
    group.addoption(
        "--solid-db",
        default=None,
        help=f"Server URL for the solid_runtime fixtures (default: ${URL_VARIABLE}, else SQLite).",
    )


@pytest.fixture
def solid_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    server = request.config.getoption("--solid-db") or os.environ.get(URL_VARIABLE) or None
    with fresh_database(server, tmp_path) as url:
        yield url


@pytest.fixture
def solid_runtime_factory(solid_db_url: str) -> Iterator[Callable[..., Runtime]]:
    made: list[Runtime] = []

    def make(**options: Any) -> Runtime:
        runtime = Runtime(solid_db_url, **options)
        made.append(runtime)
        runtime.install()
        return runtime

    yield make
    for runtime in reversed(made):
        runtime.close()


@pytest.fixture
def solid_runtime(solid_runtime_factory: Callable[..., Runtime]) -> Runtime:
    return solid_runtime_factory(workers=0)
