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
- ``solid_app_runtime``: the application's own runtime, named ``MODULE:RUNTIME`` by
  the ini option ``solid_objects_runtime`` (or ``--solid-runtime``), else None; an
  application may override the fixture to return its runtime instead. Never used
  to reach a database: the runtimes below copy its options, actor classes, effect
  handlers, commit actions and administration policy onto the test's database.
- ``solid_runtime_factory``: ``make(**options) -> Runtime``, like the application's
  runtime (the ``options`` override its own), installed on that database; every
  runtime it made is closed after the test.
- ``solid_runtime``: ``solid_runtime_factory(workers=0)``: nothing runs in the
  background, so the test decides when turns run (``runtime.testing.drain()``)
  and what time it is for reminders (``runtime.testing.run_due_reminders(now)``).
- ``solid_async_runtime``: the same as an :class:`~solid_objects.AsyncRuntime`.

Their runtimes have ``allow_reset=True``: ``runtime.testing.reset()`` works there.

With pytest-django, ``solid_objects.contrib.django``'s runtime follows the test
database (it is built from ``DATABASES`` as pytest-django renamed it) and is closed
before pytest-django drops the test database (a hook on ``django_db_setup``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
import pytest

from .options import Options
from .runtime import AsyncRuntime, Runtime
from .testing import copy_registrations

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
    from sqlalchemy.engine import make_url

    from .database import engine_for

    base = make_url(server_url)
    name = f"solid_t_{uuid.uuid4().hex[:12]}"
    postgres = base.get_backend_name() == "postgresql"
    admin = engine_for(base, isolation_level="AUTOCOMMIT")
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
    """Add ``--solid-db URL``: the server the fixtures make fresh databases on."""
    group = parser.getgroup("solid-objects")
    group.addoption(
        "--solid-db",
        default=None,
        help=f"Server URL for the solid_runtime fixtures (default: ${URL_VARIABLE}, else SQLite).",
    )
    group.addoption(
        "--solid-runtime",
        default=None,
        metavar="MODULE:RUNTIME",
        help="The application's runtime, whose options and registrations the fixtures copy "
        "(default: the solid_objects_runtime ini option).",
    )
    parser.addini(
        "solid_objects_runtime",
        "MODULE:RUNTIME of the application's runtime: the solid_runtime fixtures copy its "
        "options, actor classes, effect handlers, commit actions and policy",
        default="",
    )


@pytest.fixture
def solid_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of a fresh, empty database for this test (dropped afterwards)."""
    server = request.config.getoption("--solid-db") or os.environ.get(URL_VARIABLE) or None
    with fresh_database(server, tmp_path) as url:
        yield url


@pytest.fixture(scope="session")
def solid_app_runtime(request: pytest.FixtureRequest) -> Runtime | AsyncRuntime | None:
    """The application's own runtime, installed on this test's fresh database."""
    target = (
        request.config.getoption("--solid-runtime")
        or str(request.config.getini("solid_objects_runtime")).strip()
        or None
    )
    if target is None:
        return None
    from .cli.common import load_runtime

    try:
        return load_runtime(target)
    except click.UsageError as exc:
        raise pytest.UsageError(
            f"solid_objects_runtime = {target}: {exc.format_message()}"
        ) from None


def _like(app: Runtime | AsyncRuntime | None, overrides: dict[str, Any]) -> dict[str, Any]:
    """The options of a runtime like ``app`` for a test: its own, then ``overrides``."""
    options: dict[str, Any] = {}
    if app is not None:
        own = app.options
        options = {f.name: getattr(own, f.name) for f in dataclasses.fields(Options)}
        options["wakeup_url"] = None  # the application's broker is not the test's
        # nor its pooler and direct URL: the test database is reached as its URL says
        options["pooler"] = options["listen_url"] = None
    return {**options, "allow_reset": True, **overrides}


def _register_like(runtime: Runtime | AsyncRuntime, app: Runtime | AsyncRuntime | None) -> None:
    """Give ``runtime`` the application's classes, handlers and administration policy."""
    if app is not None:
        copy_registrations(runtime, app)


@pytest.fixture
def solid_runtime_factory(
    solid_db_url: str, solid_app_runtime: Runtime | AsyncRuntime | None
) -> Iterator[Callable[..., Runtime]]:
    """Build installed runtimes on this test's database; all are closed afterwards."""
    made: list[Runtime] = []

    def make(**options: Any) -> Runtime:
        runtime = Runtime(solid_db_url, **_like(solid_app_runtime, options))
        made.append(runtime)
        _register_like(runtime, solid_app_runtime)
        runtime.install()
        return runtime

    yield make
    for runtime in reversed(made):
        runtime.close()


@pytest.fixture
def solid_runtime(solid_runtime_factory: Callable[..., Runtime]) -> Runtime:
    """An installed, started runtime on this test's fresh database."""
    return solid_runtime_factory(workers=0)


@pytest.fixture
def solid_async_runtime(
    solid_db_url: str, solid_app_runtime: Runtime | AsyncRuntime | None
) -> Iterator[AsyncRuntime]:
    """An installed AsyncRuntime like the application's, with ``workers=0``.

    A plain fixture, so it serves ``async def`` tests whichever plugin runs them
    (anyio, pytest-asyncio); it is closed after the test on a loop of its own.
    """
    runtime = AsyncRuntime(solid_db_url, **_like(solid_app_runtime, {"workers": 0}))
    _register_like(runtime, solid_app_runtime)
    runtime.sync.install()
    try:
        yield runtime
    finally:
        asyncio.run(runtime.close())


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> Any:
    """Close Django's runtime before pytest-django's ``django_db_setup`` drops the database.

    A finalizer added after the fixture's own teardown was registered runs before it:
    PostgreSQL refuses to drop a database the runtime's pool is still connected to.
    """
    result = yield
    if fixturedef.argname == "django_db_setup":
        fixturedef.addfinalizer(_close_django_runtime)
    return result


def _close_django_runtime() -> None:
    django_integration = sys.modules.get("solid_objects.contrib.django")
    if django_integration is not None:
        django_integration.close()
