"""Realtime in a real browser: ``python -m examples.live_counter`` in a
subprocess, two browser contexts of the system Chromium driven by Playwright."""

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

import playwright.sync_api as playwright_api
import pytest

from examples.live_counter import LiveCounter
from solid_objects import Runtime

from .conftest import FAST, fresh_database

expect = playwright_api.expect

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
#: Generous: the machine is shared; nothing here measures time.
WAIT_MS = 30_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """The example in a subprocess, which the test may kill and start again."""

    def __init__(self, database: str, folder: Path) -> None:
        self.database, self.folder = database, folder
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
        command = [sys.executable, "-m", "examples.live_counter", "--port", str(self.port)]
        self.process = subprocess.Popen(
            [*command, "--database", self.database, "--lease-duration", "2"],
            cwd=self.folder,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while True:
            assert self.process.poll() is None, "the example exited"
            try:
                urllib.request.urlopen(self.base + "/", timeout=5).close()
                return
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, "the example did not answer in 60 s"
                time.sleep(0.1)

    def kill(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def post(self, path: str) -> Any:
        request = urllib.request.Request(self.base + path, method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
        return json.loads(body) if body else None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    assert os.path.exists(CHROMIUM), "apt-get install chromium (the CI does, see .ci/run)"
    with playwright_api.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield launched
        launched.close()


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_database(str(request.param), tmp_path) as url:
        Runtime(url, **FAST).install()
        yield url


@pytest.fixture
def server(database: str, tmp_path: Path) -> Iterator[Server]:
    served = Server(database, tmp_path)
    served.start()
    try:
        yield served
    finally:
        served.stop()


@pytest.fixture
def open_page(browser: Any, server: Server) -> Iterator[Callable[..., Any]]:
    """Open the page as ``user`` in a browser context of its own; frames it receives
    are collected in ``page.frames_received``."""
    contexts: list[Any] = []

    def open_as(user: str, counter: str = "shared") -> Any:
        context = browser.new_context()
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        received: list[str] = []

        def on_socket(ws: Any) -> None:
            ws.on(
                "framereceived",
                lambda f: received.append(f if isinstance(f, str) else str(f.get("payload"))),
            )

        page.on("websocket", on_socket)
        page.frames_received = received
        page.goto(f"{server.base}/?user={user}&counter={counter}")
        return page

    yield open_as
    for context in contexts:
        context.close()


def live(page: Any) -> None:
    expect(page.locator("#status")).to_have_text("live", timeout=WAIT_MS)


def shown(page: Any) -> list[list[int]]:
    return page.evaluate("window.solidLog")  # type: ignore[no-any-return]


def test_a_change_in_one_browser_appears_in_the_other_in_order(
    open_page: Callable[..., Any],
) -> None:
    alice, bob = open_page("alice"), open_page("bob")
    live(alice)
    live(bob)
    for n in range(1, 4):
        alice.click("#increment")
        expect(alice.locator("#value")).to_have_text(str(n), timeout=WAIT_MS)
    expect(bob.locator("#value")).to_have_text("3", timeout=WAIT_MS)
    bob.click("#increment")
    expect(alice.locator("#value")).to_have_text("4", timeout=WAIT_MS)
    for page in (alice, bob):
        log = shown(page)
        assert log == sorted(log) and len({tuple(e) for e in log}) == len(log)
        values = [entry[2] for entry in log]
        assert values == sorted(values) and values[-1] == 4


def test_the_htmx_hook_refetches_a_fragment_on_change(open_page: Callable[..., Any]) -> None:
    page = open_page("alice", "fragmented")
    live(page)
    expect(page.locator("#fragment-value")).to_have_text("0", timeout=WAIT_MS)
    page.click("#increment")
    expect(page.locator("#fragment-value")).to_have_text("1", timeout=WAIT_MS)
    page.click("#increment")
    expect(page.locator("#fragment-value")).to_have_text("2", timeout=WAIT_MS)


def test_forbidden_and_missing_counters_look_the_same(
    open_page: Callable[..., Any], server: Server
) -> None:
    # The HTTP routes refuse private counters too: the application makes this one itself.
    with pytest.raises(urllib.error.HTTPError) as refused:
        server.post("/increment?counter=private-existing&user=alice")
    assert refused.value.code == 403
    with Runtime(server.database, **FAST) as app:
        assert app.ref(LiveCounter, "private-existing").increment(user="alice") == 1
    pages = [open_page("alice", "private-existing"), open_page("alice", "private-missing")]
    for page in pages:
        expect(page.locator("#status")).to_have_text("error: unauthorized", timeout=WAIT_MS)
    existing, missing = (p.frames_received for p in pages)
    assert existing == missing
    assert all("values" not in frame for frame in existing)
    assert [p.locator("#value").text_content() for p in pages] == ["…", "…"]


def test_the_page_reconnects_and_converges_after_a_server_restart(
    open_page: Callable[..., Any], server: Server
) -> None:
    page = open_page("alice")
    live(page)
    page.click("#increment")
    expect(page.locator("#value")).to_have_text("1", timeout=WAIT_MS)
    server.kill()
    expect(page.locator("#status")).not_to_have_text("live", timeout=WAIT_MS)
    with Runtime(server.database, **FAST) as other:  # a change while the server is down
        assert other.ref(LiveCounter, "shared").increment(user="offline") == 2
    server.start()
    expect(page.locator("#value")).to_have_text("2", timeout=WAIT_MS)
    live(page)
    page.click("#increment")
    expect(page.locator("#value")).to_have_text("3", timeout=WAIT_MS)
    assert page.evaluate("window.solidClient.stats.connects") >= 2


def test_a_destroyed_and_recreated_counter_never_rolls_the_page_back(
    open_page: Callable[..., Any], server: Server
) -> None:
    page = open_page("alice", "phoenix")
    live(page)
    for _ in range(5):
        server.post("/increment?counter=phoenix&user=alice")
    expect(page.locator("#value")).to_have_text("5", timeout=WAIT_MS)
    old_incarnation = shown(page)[-1][0]
    server.post("/reset?counter=phoenix")
    expect(page.locator("#value")).to_have_text("0", timeout=WAIT_MS)
    server.post("/increment?counter=phoenix&user=alice")
    expect(page.locator("#value")).to_have_text("1", timeout=WAIT_MS)
    assert shown(page)[-1][0] > old_incarnation
    # A late change of the old incarnation, however high its revision, is dropped.
    dropped = page.evaluate(
        """(old) => {
            const client = window.solidClient, sub = window.solidSubscription;
            const before = client.stats.dropped;
            client._onMessage(JSON.stringify({v: 1, type: "change", id: sub.ref,
                incarnation: old, revision: 1000000, values: {value: 42}, invalidated: []}));
            client._onMessage(JSON.stringify({v: 1, type: "snapshot", id: sub.ref,
                incarnation: sub.position[0], revision: sub.position[1], exists: true,
                values: {value: 41}, invalidated: []}));
            return client.stats.dropped - before;
        }""",
        old_incarnation,
    )
    assert dropped == 2
    expect(page.locator("#value")).to_have_text("1")


def test_personalized_payloads_differ_per_user_and_never_leak(
    open_page: Callable[..., Any],
) -> None:
    alice, bob = open_page("alice", "mine"), open_page("bob", "mine")
    live(alice)
    live(bob)
    alice.click("#increment")
    expect(alice.locator("#value")).to_have_text("1", timeout=WAIT_MS)
    alice.click("#increment")
    expect(alice.locator("#mine")).to_have_text("2 clicks", timeout=WAIT_MS)
    bob.click("#increment")
    expect(bob.locator("#mine")).to_have_text("1 clicks", timeout=WAIT_MS)
    expect(alice.locator("#value")).to_have_text("3", timeout=WAIT_MS)
    expect(alice.locator("#mine")).to_have_text("2 clicks")
    assert not any("bob" in frame for frame in alice.frames_received)
    assert not any("alice" in frame for frame in bob.frames_received)
    assert any('"user":"bob"' in frame for frame in bob.frames_received)
    guest = open_page("guest", "mine")  # authorize_query denies the guest its payload
    live(guest)
    expect(guest.locator("#value")).to_have_text("3")
    assert not any('"payload"' in frame for frame in guest.frames_received)
