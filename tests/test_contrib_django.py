"""solid_objects.contrib.django: a real Django project (tests/apps/djangoproject) in subprocesses.

On SQLite, PostgreSQL and MariaDB (Django's MySQL backend on PyMySQL through
``pymysql.install_as_MySQLdb()``, in the project's settings): ``manage.py migrate``
installs the tables, ``manage.py test`` runs the project's own tests with the runtime
on the *test* database (and none of its rows reach the development database), the
outbox on Django's connection and ``send_on_commit`` inside ``transaction.atomic()``
(in the project's tests.py), and ``manage.py solid_objects worker`` runs turns and
exits 0 on SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
import sqlalchemy
from sqlalchemy.engine import URL, make_url

from solid_objects.cli.main import main
from solid_objects.contrib.django.management.commands.solid_objects import project_cli

from .conftest import BACKENDS

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "tests" / "apps" / "djangoproject"
STEP = 120


@dataclass
class Project:
    """The test project on one backend: its environment and its two databases."""

    env: dict[str, str]
    dev_url: URL
    test_url: URL

    def manage(
        self, *args: str, timeout: float = STEP, **env: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=PROJECT,
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "manage.py", *args],
            cwd=PROJECT,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def rows(self, url: URL, table: str) -> int | None:
        """Rows of ``table`` in the database at ``url``; None when the table is not there."""
        engine = sqlalchemy.create_engine(url)
        try:
            with engine.connect() as db:
                if not sqlalchemy.inspect(db).has_table(table):
                    return None
                return int(
                    db.execute(sqlalchemy.text(f"SELECT count(*) FROM {table}")).scalar_one()
                )
        finally:
            engine.dispose()


@pytest.fixture(params=BACKENDS)
def project(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Project]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(PROJECT)]),
        "SHOP_DIR": str(tmp_path),
        "SOLID_WORKERS": "2",
    }
    if request.param == "sqlite":
        env["SHOP_DATABASE"] = "sqlite"
        yield Project(
            env,
            URL.create("sqlite", database=str(tmp_path / "db.sqlite3")),
            URL.create("sqlite", database=str(tmp_path / "test.sqlite3")),
        )
        return
    variable = {"postgresql": "SOLID_TEST_POSTGRES_URL", "mysql": "SOLID_TEST_MYSQL_URL"}
    server = make_url(os.environ[variable[request.param]])
    name = f"dj_{uuid.uuid4().hex[:12]}"
    admin = sqlalchemy.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as db:
        db.exec_driver_sql(f"CREATE DATABASE {name}")
    env.update(
        SHOP_DATABASE=request.param,
        SHOP_DB_NAME=name,
        SHOP_DB_USER=server.username or "",
        SHOP_DB_PASSWORD=server.password or "",
        SHOP_DB_HOST=server.host or "",
        SHOP_DB_PORT=str(server.port or ""),
    )
    force = " WITH (FORCE)" if request.param == "postgresql" else ""
    try:
        yield Project(env, server.set(database=name), server.set(database=f"{name}_test"))
    finally:
        with admin.connect() as db:
            for database in (name, f"{name}_test"):
                db.exec_driver_sql(f"DROP DATABASE IF EXISTS {database}{force}")
        admin.dispose()


def migrate(project: Project) -> None:
    done = project.manage("migrate", "--noinput")
    assert done.returncode == 0, done.stderr
    assert "Applying solid_objects.0001_initial... OK" in done.stdout, done.stdout


def test_migrate_installs_the_library_tables(project: Project) -> None:
    assert project.rows(project.dev_url, "solid_messages") is None
    migrate(project)
    assert project.rows(project.dev_url, "solid_messages") == 0
    assert project.rows(project.dev_url, "solid_actors") == 0
    again = project.manage("migrate", "--noinput")
    assert again.returncode == 0, again.stderr
    assert "No migrations to apply" in again.stdout


def test_manage_py_test_runs_the_runtime_on_the_test_database(project: Project) -> None:
    """The issue's bug: ``manage.py test`` wrote into the development database."""
    migrate(project)
    kept = project.manage("test", "--keepdb", "--noinput", "-v", "2")
    assert kept.returncode == 0, kept.stderr
    assert "Ran 14 tests" in kept.stderr and "OK" in kept.stderr, kept.stderr
    # The turns ran on the test database ...
    assert project.rows(project.test_url, "solid_messages") == 17
    assert (project.rows(project.test_url, "solid_actors") or 0) >= 3
    # ... and the development database did not see one row.
    assert project.rows(project.dev_url, "solid_messages") == 0
    assert project.rows(project.dev_url, "solid_actors") == 0

    # Without --keepdb Django drops the test database at the end: the runner closed the
    # runtime's connections first (PostgreSQL refuses to drop a database in use).
    dropped = project.manage("test", "--noinput")
    assert dropped.returncode == 0, dropped.stderr
    assert "Traceback" not in dropped.stderr, dropped.stderr
    assert project.rows(project.dev_url, "solid_messages") == 0


def test_pytest_django_runs_the_runtime_on_its_test_database(project: Project) -> None:
    """pytests/checks_pytest_django.py, run by pytest-django as the project's own tests."""
    migrate(project)

    def pytest_django(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "pytests", *args],
            cwd=PROJECT,
            env=project.env,
            capture_output=True,
            text=True,
            timeout=STEP,
        )

    kept = pytest_django("--reuse-db")
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "3 passed" in kept.stdout, kept.stdout
    assert project.rows(project.test_url, "solid_messages") == 2
    assert project.rows(project.dev_url, "solid_messages") == 0
    # Without --reuse-db pytest-django drops the test database at the end: the runtime
    # was closed first (PostgreSQL refuses to drop a database in use, and pytest-django
    # turns that failure into a warning; the bundled plugin's django_db_setup hook).
    dropped = pytest_django("-k", "not refused")  # the last test leaves the runtime open
    assert dropped.returncode == 0, dropped.stdout + dropped.stderr
    assert "teardown test databases" not in dropped.stdout + dropped.stderr, dropped.stdout
    assert project.rows(project.dev_url, "solid_messages") == 0


def test_view_refs_idempotency_keys_and_a_clean_library_per_test(project: Project) -> None:
    """shop/checks_requests.py: a view's ref with no policy is refused unless the opt-in
    or a policy lets it through; a retried request with the same Idempotency-Key applies
    once; two tests expecting the same first outcome both pass (the library's tables are
    emptied before each test, with the ``TransactionTestCase`` of the integration)."""
    migrate(project)
    for _ in range(2):  # twice on the kept test database: nothing leaks between runs
        done = project.manage("test", "shop.checks_requests", "--keepdb", "--noinput")
        assert done.returncode == 0, done.stderr
        assert "Ran 6 tests" in done.stderr and "OK" in done.stderr, done.stderr
    assert project.rows(project.dev_url, "solid_messages") == 0
    # Outside the test runner, reset() refuses: it would empty the development database.
    refused = project.manage(
        "shell", "-c", "from solid_objects.contrib.django.testing import reset; reset()"
    )
    assert refused.returncode != 0
    assert "only on Django's test database" in refused.stderr, refused.stderr


def test_the_worker_command_runs_turns_and_exits_0_on_sigterm(project: Project) -> None:
    migrate(project)
    worker = project.popen("solid_objects", "worker", "--workers", "1")
    try:
        call = project.manage(
            "shell",
            "-c",
            "from solid_objects.contrib.django import runtime\n"
            "from shop.actors import DjangoTally\n"
            "print(runtime().ref(DjangoTally, 'w').add.send(n=3).wait(timeout=60))",
            SOLID_WORKERS="0",  # a caller only: the worker process runs the turn
        )
        assert call.returncode == 0, call.stderr
        assert call.stdout.strip().splitlines()[-1] == "3", call.stdout
        assert worker.poll() is None
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            _, stderr = worker.communicate(timeout=STEP)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            raise AssertionError("the worker did not exit after SIGTERM") from None
    assert worker.returncode == 0, stderr
    assert "types ('DjangoOrders', 'DjangoTally')" in stderr, stderr
    assert "Traceback" not in stderr, stderr


def test_the_operator_commands_run_on_the_project_runtime(project: Project) -> None:
    migrate(project)
    status = project.manage("solid_objects", "--log-level", "warning", "status", "--json")
    assert status.returncode == 0, status.stderr
    assert isinstance(json.loads(status.stdout), dict)
    listed = project.manage("solid_objects", "dead-letters", "list")
    assert listed.returncode == 0, listed.stderr


def walk(command: click.Command) -> Iterator[tuple[str, click.Command]]:
    yield command.name or "", command
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            for name, found in walk(sub):
                yield f"{command.name} {name}", found


def test_the_project_commands_take_no_module_runtime_argument() -> None:
    derived = dict(walk(project_cli()))
    original = dict(walk(main))
    assert "main worker" in derived and "main dead-letters list" in derived
    assert "main quickstart" not in derived  # a demo, not about the project
    for name, command in derived.items():
        assert not any(p.name == "target" for p in command.params), name
        assert "MODULE:RUNTIME" not in (command.help or "") + (command.short_help or ""), name
    # The shell's command line keeps its argument: the project's copy changed nothing.
    assert any(p.name == "target" for p in original["main worker"].params)


def test_help_lists_the_subcommands_without_a_module_runtime_argument(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(PROJECT)]),
        "SHOP_DIR": str(tmp_path),
        "SHOP_DATABASE": "sqlite",
    }
    project = Project(env, URL.create("sqlite"), URL.create("sqlite"))
    for args in (("solid_objects", "--help"), ("help", "solid_objects")):
        shown = project.manage(*args)
        assert shown.returncode == 0, shown.stderr
        assert "Usage: manage.py solid_objects [OPTIONS] COMMAND [ARGS]..." in shown.stdout
        for command in ("worker", "doctor", "status", "dead-letters", "actors", "inspect"):
            assert f"\n  {command} " in shown.stdout, (command, shown.stdout)
        assert "MODULE:RUNTIME" not in shown.stdout, shown.stdout
    worker = project.manage("solid_objects", "worker", "--help")
    assert worker.returncode == 0, worker.stderr
    assert "Usage: manage.py solid_objects worker [OPTIONS]\n" in worker.stdout, worker.stdout
    assert "Run the workers of the project's runtime" in worker.stdout
    assert "MODULE:RUNTIME" not in worker.stdout
    listed = project.manage("solid_objects", "dead-letters", "list", "--help")
    assert "Usage: manage.py solid_objects dead-letters list [OPTIONS]\n" in listed.stdout


SETTINGS_PROBE = """
import json, django
from django.conf import settings
settings.configure(DATABASES=json.loads(__import__("sys").argv[1]), INSTALLED_APPS=[])
django.setup()
from solid_objects.contrib.django import database_url
from solid_objects.errors import ConfigurationError
try:
    print(database_url("default").render_as_string(hide_password=False))
except ConfigurationError as exc:
    print("ConfigurationError:", exc)
"""


def database_url_of(default: dict[str, object]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", SETTINGS_PROBE, json.dumps({"default": default})],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        capture_output=True,
        text=True,
        timeout=STEP,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_databases_settings_become_sqlalchemy_urls() -> None:
    assert (
        database_url_of(
            {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": "shop",
                "USER": "web",
                "PASSWORD": "s3cret",
                "HOST": "db",
                "PORT": "5433",
                "OPTIONS": {"sslmode": "require", "isolation_level": 2},
            }
        )
        == "postgresql+psycopg://web:s3cret@db:5433/shop?sslmode=require"
    )
    assert (
        database_url_of({"ENGINE": "django.db.backends.mysql", "NAME": "shop", "HOST": "db"})
        == "mysql+pymysql://db/shop"
    )
    assert (
        database_url_of({"ENGINE": "django.db.backends.sqlite3", "NAME": "/srv/app/db.sqlite3"})
        == "sqlite:////srv/app/db.sqlite3"
    )


def test_an_in_memory_sqlite_database_is_refused_with_the_setting_to_change() -> None:
    for name in (":memory:", "file:memorydb_default?mode=memory&cache=shared"):
        refused = database_url_of({"ENGINE": "django.db.backends.sqlite3", "NAME": name})
        assert refused.startswith("ConfigurationError: DATABASES['default'] is an in-memory")
        assert "['TEST'] = {'NAME':" in refused
    oracle = database_url_of({"ENGINE": "django.db.backends.oracle", "NAME": "x"})
    assert oracle.startswith("ConfigurationError: DATABASES['default'] uses")
