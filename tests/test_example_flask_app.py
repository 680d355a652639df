"""examples/flask_app end to end: Flask's test client, and the one documented command."""

from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def polls(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The example imported again for this test's database."""
    monkeypatch.setenv("POLLS_DATABASE_URL", db_url)
    module = importlib.reload(importlib.import_module("examples.flask_app"))
    yield module
    module.solid.close()


def test_votes_are_counted_once_per_voter(polls: ModuleType) -> None:
    client = polls.app.test_client()
    ann, bo = {"x-user": "ann"}, {"x-user": "bo"}
    assert client.post("/polls/lunch/votes?choice=soup", headers=ann).get_json() == {
        "votes": {"soup": 1}
    }
    assert client.post("/polls/lunch/votes?choice=salad", headers=bo).get_json() == {
        "votes": {"soup": 1, "salad": 1}
    }
    again = client.post("/polls/lunch/votes?choice=salad", headers=ann)
    assert again.status_code == 409
    assert again.mimetype == "application/problem+json"
    problem = again.get_json()
    assert (problem["code"], problem["details"]) == ("already_voted", {"voter": "ann"})
    anonymous = client.post("/polls/lunch/votes?choice=soup")
    assert anonymous.status_code == 403
    assert client.get("/polls/lunch").get_json() == {"votes": {"soup": 1, "salad": 1}}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _request(url: str, method: str = "GET") -> dict[str, object]:
    request = urllib.request.Request(url, method=method, headers={"x-user": "cy"})
    with urllib.request.urlopen(request, timeout=30) as response:
        answer: dict[str, object] = json.loads(response.read())
        return answer


def test_python_m_examples_flask_app_serves_the_polls(db_url: str, tmp_path: Path) -> None:
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "examples.flask_app"],
        cwd=tmp_path,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
            "POLLS_DATABASE_URL": db_url,
            "POLLS_PORT": str(port),
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                voted = _request(f"{base}/polls/tea/votes?choice=green", "POST")
                break
            except (urllib.error.URLError, ConnectionError):
                assert server.poll() is None and time.monotonic() < deadline, "no server"
                time.sleep(0.2)
        assert voted == {"votes": {"green": 1}}
        assert _request(f"{base}/polls/tea") == {"votes": {"green": 1}}
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.communicate(timeout=60)
