"""The realtime endpoint under a real uvicorn process, over real sockets."""

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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import websockets.sync.client as websockets_sync
from websockets.exceptions import ConnectionClosed

from solid_objects import Runtime
from solid_objects.web.realtime import CLOSE_TOO_SLOW

from .apps.realtime_app import FloodBlob

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
UVICORN = [sys.executable, "-m", "uvicorn", "--factory"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served(db_url: str, tmp_path: Path) -> Iterator[str]:
    """uvicorn serving ``tests.apps.realtime_app`` in a subprocess: its ws:// URL."""
    port = free_port()
    env = {
        **os.environ,
        "SOLID_REALTIME_DB": db_url,
        "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}",
    }
    process = subprocess.Popen(
        [*UVICORN, "tests.apps.realtime_app:build", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, "uvicorn exited"
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/live/client.js", timeout=5)
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, "uvicorn did not answer in 60 s"
                time.sleep(0.1)
        yield f"ws://127.0.0.1:{port}/live/ws"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=60)


@pytest.fixture
def committer(make_runtime: Callable[..., Runtime]) -> Iterator[Runtime]:
    rt = make_runtime(actors=[FloodBlob])
    with rt:
        yield rt


def subscribe(ws: Any, actor_id: str) -> dict[str, Any]:
    assert json.loads(ws.recv(timeout=30))["type"] == "welcome"
    ws.send(
        json.dumps(
            {
                "v": 1,
                "type": "subscribe",
                "id": "s",
                "actor_type": "FloodBlob",
                "actor_id": actor_id,
            }
        )
    )
    snapshot: dict[str, Any] = json.loads(ws.recv(timeout=30))
    assert snapshot["type"] == "snapshot"
    return snapshot


def test_a_reading_client_gets_every_change_in_order(served: str, committer: Runtime) -> None:
    blob = committer.ref(FloodBlob, "steady")
    with websockets_sync.connect(served, max_size=None) as ws:
        subscribe(ws, "steady")
        versions = []
        for _ in range(5):
            blob.grow(size=10)
            frame = json.loads(ws.recv(timeout=30))
            versions.append(frame["values"]["version"])
    # the first commit starts an incarnation: a snapshot; then changes, in order
    assert versions == [1, 2, 3, 4, 5]


def test_a_client_that_stops_reading_is_dropped_with_a_close_code(
    served: str, committer: Runtime
) -> None:
    blob = committer.ref(FloodBlob, "flood")
    blob.grow(size=1)
    with websockets_sync.connect(
        served, max_size=None, max_queue=1, compression=None, ping_interval=None
    ) as ws:
        subscribe(ws, "flood")
        closed = None
        # Never read again: the socket buffers fill, then the server's queue of 4 frames.
        for _ in range(80):
            blob.grow(size=500_000)
        try:
            while True:  # drain what was buffered; the close frame comes last
                ws.recv(timeout=60)
        except ConnectionClosed as exc:
            closed = exc
    assert closed is not None and closed.rcvd is not None
    assert closed.rcvd.code == CLOSE_TOO_SLOW
