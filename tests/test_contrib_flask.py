"""solid_objects.contrib.flask: lazy start in the serving process, refs, problem details."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from solid_objects import Runtime
from solid_objects.authorization import AuthorizationRequest
from solid_objects.contrib.flask import SolidObjects
from solid_objects.contrib.problems import MEDIA_TYPE
from solid_objects.errors import ConfigurationError
from tests.apps.flaskapp import Cart, create_app

from .conftest import FAST

ROOT = Path(__file__).resolve().parents[1]


def running_pids(runtime: Runtime) -> list[int]:
    """The pids of the processes registered as running workers on the database."""
    with runtime.store.read() as tx:
        rows = tx.rows("SELECT pid FROM solid_processes WHERE stopped_at IS NULL")
    return sorted(int(row[0]) for row in rows)


def problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.headers["content-type"] == MEDIA_TYPE
    body: dict[str, Any] = response.get_json()
    assert body["status"] == status
    return body


def test_the_runtime_starts_on_the_first_request_not_in_init_app(db_url: str) -> None:
    app, solid = create_app(db_url)
    try:
        solid.runtime.install()
        assert running_pids(solid.runtime) == []  # init_app started nothing
        client = app.test_client()
        response = client.post("/carts/c1/items", query_string={"sku": "apple"})
        assert response.status_code == 200, response.get_data(as_text=True)
        assert response.get_json() == {"count": 1}
        assert running_pids(solid.runtime) == [os.getpid()]
    finally:
        solid.close()


def test_close_then_the_next_request_starts_it_again(db_url: str) -> None:
    app, solid = create_app(db_url)
    try:
        client = app.test_client()
        for expected in (1, 2):
            assert client.post("/carts/c1/items", query_string={"sku": "a"}).json == {
                "count": expected
            }
            solid.close()
            assert running_pids(solid.runtime) == []
    finally:
        solid.close()


def test_each_library_error_is_a_problem_details_response(db_url: str) -> None:
    app, solid = create_app(db_url)
    try:
        client = app.test_client()
        rejected = problem(client.post("/carts/c1/items?sku=a&quantity=0"), 409)
        assert (rejected["code"], rejected["details"]) == ("bad_quantity", {"quantity": 0})
        invalid = problem(client.post("/carts/c1/items?sku=a&quantity=x"), 422)
        assert invalid["code"] == "InvalidArguments"
        assert problem(client.get("/carts/c1/op/nope"), 404)["code"] == "UnknownOperation"
        assert client.get("/carts/c1").json["count"] == 0
    finally:
        solid.close()


def test_the_context_hook_reaches_the_message_policy(db_url: str) -> None:
    seen: list[Any] = []

    def owner_only(request: AuthorizationRequest) -> bool:
        seen.append(request.context)
        return request.actor_id == f"cart-{request.context}"

    app, solid = create_app(db_url, SOLID_OBJECTS_OPTIONS={**FAST, "authorize_message": owner_only})
    try:
        client = app.test_client()
        mine = client.post("/carts/cart-alice/items?sku=a", headers={"x-user": "alice"})
        assert mine.json == {"count": 1}
        theirs = client.post("/carts/cart-alice/items?sku=a", headers={"x-user": "bob"})
        assert problem(theirs, 403)["code"] == "Unauthorized"
    finally:
        solid.close()
    assert seen == ["alice", "bob"]


def test_a_missing_database_url_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="SOLID_OBJECTS_DATABASE_URL"):
        SolidObjects(Flask(__name__))


def test_an_explicit_runtime_is_used_and_found_from_the_app(db_url: str) -> None:
    runtime = Runtime(db_url, **FAST)
    app = Flask(__name__)
    solid = SolidObjects(app, runtime=runtime)
    try:
        with app.app_context():
            assert SolidObjects.of_app() is solid
            assert solid.ref(Cart, "c").add(sku="a") == 1  # a ref outside a request starts it
    finally:
        solid.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.slow
def test_flask_run_with_the_reloader_starts_workers_only_in_the_serving_child(
    db_url: str,
) -> None:
    port = _free_port()
    runtime = Runtime(db_url, **FAST)
    runtime.install()
    env = {**os.environ, "SOLID_TEST_DB": db_url, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    parent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "flask",
            "--app",
            "tests.apps.flaskapp",
            "run",
            "--reload",
            "--port",
            str(port),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        body = _get_when_up(f"http://127.0.0.1:{port}/carts/c1", parent)
        child = body["pid"]
        assert child != parent.pid  # the reloader's child served the request
        assert running_pids(runtime) == [child]  # and only it runs workers
    finally:
        os.killpg(parent.pid, signal.SIGTERM)
        parent.wait(timeout=30)
        runtime.close()


def _get_when_up(url: str, process: subprocess.Popen[bytes]) -> dict[str, Any]:
    """GET ``url`` once the server listens (it takes a moment to import and bind)."""
    import json

    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, "flask run exited"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                result: dict[str, Any] = json.loads(response.read())
                return result
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
