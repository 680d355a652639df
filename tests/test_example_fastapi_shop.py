"""examples/fastapi_shop end to end: through FastAPI's TestClient and a real uvicorn."""

from __future__ import annotations

import importlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fastapi.testclient import TestClient

from solid_objects import Runtime

from .conftest import FAST, count_rows

ROOT = Path(__file__).resolve().parents[1]
ALICE = {"x-user": "alice@example.com"}


@pytest.fixture
def shop(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The example's modules, imported again for this test's database and mail log."""
    monkeypatch.setenv("SHOP_DATABASE_URL", db_url)
    monkeypatch.setenv("SHOP_MAIL_LOG", str(tmp_path / "mail.log"))
    actors = importlib.reload(importlib.import_module("examples.fastapi_shop.actors"))
    app = importlib.reload(importlib.import_module("examples.fastapi_shop.app"))
    yield app
    actors.runtime.sync.close()


def sent_when(actors: ModuleType, count: int) -> list[dict[str, Any]]:
    """The mail log once it holds ``count`` emails (effects run after their turn commits)."""
    deadline = time.monotonic() + 30
    while len(actors.mail.sent()) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    sent: list[dict[str, Any]] = actors.mail.sent()
    return sent


def test_checkout_sends_one_receipt_and_cancels_the_reminder(shop: ModuleType) -> None:
    actors = importlib.import_module("examples.fastapi_shop.actors")
    with TestClient(shop.app) as client:
        cart = "/carts/alice@example.com"
        assert client.post(f"{cart}/items?sku=tea", headers=ALICE).json() == {"count": 1}
        assert client.post(f"{cart}/items?sku=cup", headers=ALICE).json() == {"count": 2}
        assert client.post(f"{cart}/checkout", headers=ALICE).json() == {"items": ["tea", "cup"]}
        again = client.post(f"{cart}/checkout", headers=ALICE)
        assert (again.status_code, again.json()["code"]) == (409, "checked_out")
        assert client.get(cart, headers={"x-user": "bob@example.com"}).status_code == 403

        [receipt] = sent_when(actors, 1)
        assert (receipt["to"], receipt["template"]) == ("alice@example.com", "receipt")
        assert receipt["items"] == ["tea", "cup"] and receipt["key"]
        # The checkout's commit removed the reminder row (remind_abandoned would skip a
        # checked-out cart anyway, so the emails alone cannot show the cancel).
        assert count_rows(actors.runtime.sync, "reminders") == 0
        later = datetime.now(UTC) + actors.ABANDONED_AFTER + timedelta(minutes=1)
        assert actors.runtime.sync.testing.run_due_reminders(later) == 0  # cancelled
    assert len(actors.mail.sent()) == 1


def test_a_retried_post_with_the_same_idempotency_key_adds_once(shop: ModuleType) -> None:
    actors = importlib.import_module("examples.fastapi_shop.actors")
    with TestClient(shop.app) as client:
        cart = "/carts/alice@example.com"
        retried = {**ALICE, "Idempotency-Key": '"0b6e4c1a-6f0e-4f55-9a43-5d1a8e7c2b90"'}
        for _ in range(3):
            added = client.post(f"{cart}/items?sku=tea", headers=retried)
            assert added.json() == {"count": 1}, added.text
        assert client.post(f"{cart}/items?sku=cup", headers=ALICE).json() == {"count": 2}
    cart_ref = actors.runtime.sync.ref(actors.Cart, "alice@example.com")
    state = cart_ref.with_options(authorization="alice@example.com").snapshot()
    assert state["items"] == ["tea", "cup"]  # read back from the database: tea once


def test_an_abandoned_cart_gets_one_reminder_an_hour_after_its_last_change(
    shop: ModuleType,
) -> None:
    actors = importlib.import_module("examples.fastapi_shop.actors")
    with TestClient(shop.app) as client:
        client.post("/carts/alice@example.com/items?sku=tea", headers=ALICE)
        client.post("/carts/alice@example.com/items?sku=cup", headers=ALICE)
        sync = actors.runtime.sync
        soon = datetime.now(UTC) + timedelta(minutes=30)
        assert sync.testing.run_due_reminders(soon) == 0
        later = datetime.now(UTC) + actors.ABANDONED_AFTER + timedelta(minutes=1)
        # The reminder turn runs here or in a worker that claims it first: count emails.
        sync.testing.run_due_reminders(later)
        [reminder] = sent_when(actors, 1)  # one reminder: the second add moved the first
        assert (reminder["template"], reminder["items"]) == ("abandoned-cart", ["tea", "cup"])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _request(url: str, method: str = "GET") -> dict[str, Any]:
    import json

    request = urllib.request.Request(url, method=method, headers=ALICE)
    with urllib.request.urlopen(request, timeout=30) as response:
        result: dict[str, Any] = json.loads(response.read())
        return result


def running_pids(runtime: Runtime) -> list[int]:
    with runtime.store.read() as tx:
        rows = tx.rows("SELECT pid FROM solid_processes WHERE stopped_at IS NULL")
    return sorted(int(row[0]) for row in rows)


@pytest.mark.slow
def test_uvicorn_with_two_workers_serves_the_shop_and_sigterm_releases_everything(
    db_url: str, tmp_path: Path
) -> None:
    port = _free_port()
    mail = tmp_path / "mail.log"
    env = {
        **os.environ,
        "SHOP_DATABASE_URL": db_url,
        "SHOP_MAIL_LOG": str(mail),
        "SHOP_PORT": str(port),
        "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}",
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "examples.fastapi_shop"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    observer = Runtime(db_url, **FAST)
    base = f"http://127.0.0.1:{port}/carts/alice@example.com"
    try:
        deadline = time.monotonic() + 60
        while True:  # the server takes a moment to import and bind
            assert server.poll() is None, "the server exited"
            try:
                _request(base)
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, "the server did not answer in 60 s"
                time.sleep(0.2)
        for n, sku in enumerate(["tea", "cup", "pot"], start=1):
            assert _request(f"{base}/items?sku={sku}", "POST") == {"count": n}
        assert _request(f"{base}/checkout", "POST") == {"items": ["tea", "cup", "pot"]}
        # Both uvicorn worker processes started their own runtime after the fork.
        deadline = time.monotonic() + 60
        while len(running_pids(observer)) < 2 and time.monotonic() < deadline:
            _request(base)
            time.sleep(0.1)
        pids = running_pids(observer)
        assert len(pids) == 2 and server.pid not in pids
        while (
            not (mail.exists() and mail.read_text().endswith("\n")) and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        assert [line.count('"receipt"') for line in mail.read_text().splitlines()] == [1]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        _, stderr = server.communicate(timeout=60)
    assert server.returncode == 0, stderr.decode()
    assert running_pids(observer) == []  # each process stopped its runtime, releasing leases
    observer.close()
