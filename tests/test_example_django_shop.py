"""examples/django_shop end to end: its own tests through Django's test client, and a server.

Each in a subprocess (Django's settings are per process), on SQLite, PostgreSQL and
MariaDB, each on a database of its own: ``python -m examples.django_shop test`` and
``python -m examples.django_shop`` (migrate, then serve), the documented commands.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy
from sqlalchemy.engine import make_url

from .conftest import BACKENDS, SERVER_VARIABLES

ROOT = Path(__file__).resolve().parents[1]
STEP = 180


@pytest.fixture(params=BACKENDS)
def shop_env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of the example on a new database (and Django's test database)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
        "SHOP_MAIL_LOG": str(tmp_path / "mail.log"),
        "SHOP_WORKERS": "2",
    }
    if request.param == "sqlite":
        env["SHOP_DATABASE_URL"] = f"sqlite:///{tmp_path / 'shop.db'}"
        yield env
        return
    server = make_url(os.environ[SERVER_VARIABLES[request.param]])
    name = f"ex_{uuid.uuid4().hex[:12]}"
    admin = sqlalchemy.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as db:
        db.exec_driver_sql(f"CREATE DATABASE {name}")
    env["SHOP_DATABASE_URL"] = server.set(database=name).render_as_string(hide_password=False)
    force = " WITH (FORCE)" if request.param == "postgresql" else ""
    try:
        yield env
    finally:
        with admin.connect() as db:
            for database in (name, f"test_{name}"):
                db.exec_driver_sql(f"DROP DATABASE IF EXISTS {database}{force}")
        admin.dispose()


def test_the_shops_own_tests_pass_through_djangos_test_client(
    shop_env: dict[str, str], tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "examples.django_shop", "test", "--noinput"],
        cwd=tmp_path,
        env=shop_env,
        capture_output=True,
        text=True,
        timeout=STEP,
    )
    assert done.returncode == 0, done.stderr
    assert "Ran 2 tests" in done.stderr and "\nOK" in done.stderr, done.stderr


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _request(url: str, method: str = "GET") -> dict[str, object]:
    request = urllib.request.Request(url, method=method, headers={"x-user": "dee@example.com"})
    with urllib.request.urlopen(request, timeout=30) as response:
        answer: dict[str, object] = json.loads(response.read())
        return answer


def test_python_m_examples_django_shop_migrates_and_serves(
    shop_env: dict[str, str], tmp_path: Path
) -> None:
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "examples.django_shop"],
        cwd=tmp_path,
        env={**shop_env, "SHOP_PORT": str(port)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    cart = f"http://127.0.0.1:{port}/carts/dee@example.com"
    try:
        deadline = time.monotonic() + STEP
        while True:
            try:
                added = _request(f"{cart}/items?sku=tea", "POST")
                break
            except (urllib.error.URLError, ConnectionError):
                assert server.poll() is None and time.monotonic() < deadline, "no server"
                time.sleep(0.2)
        assert added == {"count": 1}
        assert _request(f"{cart}/checkout", "POST") == {"items": ["tea"]}
        assert _request(cart) == {"items": ["tea"], "checked_out": True}
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        output, _ = server.communicate(timeout=60)
    assert "Applying solid_objects.0001_initial... OK" in output, output
