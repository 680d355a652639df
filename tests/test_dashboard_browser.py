"""The operator dashboard in a real browser: the system Chromium, driven by Playwright,
against the dashboard served by uvicorn on 127.0.0.1 (in a thread, or the
``solid-objects dashboard`` command in a subprocess).

The principal comes from an ``x-user`` header the browser context sends, as a
proxy in front of the dashboard would set it. The operator scenario also writes
the screenshots in ``docs/dashboard/`` that ``docs/dashboard.md`` shows.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import playwright.sync_api as playwright_api
import pytest
import uvicorn

from solid_objects import Actor, Runtime
from solid_objects.admin import allow
from solid_objects.errors import InvalidArguments
from solid_objects.web import dashboard
from solid_objects.web.security import CsrfTokens

from .conftest import FAST, count_rows, fresh_database

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "docs" / "dashboard"
CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SECRET = b"browser-test-secret-0123456789ab"
SCRIPT = "<script>alert('state')</script>"
IMG = "<img src=x onerror=alert('arguments')>"


class Safe(Actor):
    """``store`` fails for good while ``broken``: the bug the operator fixes."""

    broken: ClassVar[bool] = False
    items: list[str] = []
    note: str = ""

    def store(self, item: str) -> list[str]:
        if Safe.broken:
            raise InvalidArguments("the safe is jammed")
        self.items.append(item)
        return list(self.items)

    def label(self, note: str) -> None:
        self.note = note


@pytest.fixture(autouse=True)
def _reset() -> None:
    Safe.broken = False


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    assert os.path.exists(CHROMIUM), "apt-get install chromium (the CI does, see .ci/run)"
    with playwright_api.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield launched
        launched.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def rt(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Runtime]:
    with fresh_database(str(request.param), tmp_path) as url:
        runtime = Runtime(url, **{**FAST, "workers": 0})
        runtime.install()
        runtime.register(Safe)
        runtime.admin.set_policy(allow({"ops:*": "*", "viewer:*": "read"}))
        try:
            yield runtime
        finally:
            runtime.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve(rt: Runtime) -> Iterator[str]:
    """The dashboard of ``rt`` under uvicorn on 127.0.0.1, in a thread: its base URL."""

    def user(request: Any) -> str | None:
        return request.headers.get("x-user")  # type: ignore[no-any-return]

    app = dashboard(rt, principal=user, secret=SECRET)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    started = threading.Event()
    while not server.started:
        assert thread.is_alive(), "uvicorn did not start"
        started.wait(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture
def served(rt: Runtime) -> Iterator[str]:
    with serve(rt) as url:
        yield url


class Watched:
    """A browser context acting as ``user``; records dialogs and CSP violations."""

    def __init__(self, browser: Any, user: str | None) -> None:
        headers = {"x-user": user} if user else {}
        self.context = browser.new_context(
            extra_http_headers=headers, viewport={"width": 1280, "height": 800}
        )
        self.page = self.context.new_page()
        self.dialogs: list[str] = []
        self.console: list[str] = []
        self.page.on("dialog", self._dialog)
        self.page.on("console", lambda m: self.console.append(m.text))

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def csp_violations(self) -> list[str]:
        return [m for m in self.console if "Content Security Policy" in m]


@pytest.fixture
def open_as(browser: Any) -> Iterator[Callable[[str | None], Watched]]:
    made: list[Watched] = []

    def make(user: str | None) -> Watched:
        made.append(Watched(browser, user))
        return made[-1]

    yield make
    for w in made:
        w.context.close()


def dead_letter(rt: Runtime, actor_id: str = "s1", item: str = "precious") -> str:
    Safe.broken = True
    sent = rt.ref(Safe, actor_id).store.send(item=item)
    rt.testing.drain()
    Safe.broken = False
    return sent.id


def shot(page: Any, name: str, backend_is_sqlite: bool) -> None:
    if backend_is_sqlite:
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_operator_retries_a_dead_letter_after_fixing_the_cause_and_sees_the_state_change(
    rt: Runtime, served: str, open_as: Callable[[str | None], Watched]
) -> None:
    expect = playwright_api.expect
    sqlite = rt.engine.dialect.name == "sqlite"
    for i in range(3):
        rt.ref(Safe, f"other-{i}").store.send(item=f"item {i}")
    rt.ref(Safe, "s1").store.send(item="first")
    rt.testing.drain()
    message_id = dead_letter(rt)
    ops = open_as("ops:alice")
    page = ops.page

    page.goto(served + "/")
    expect(page.locator("#counts")).to_contain_text("Safe")
    expect(page.locator("#activity svg.chart")).to_have_count(4)  # loaded after the page
    shot(page, "overview", sqlite)
    page.get_by_role("link", name="Actors", exact=True).click()
    page.fill("input[name=type]", "Safe")
    page.get_by_role("button", name="Search").click()
    expect(page.get_by_role("link", name="s1", exact=True)).to_be_visible()
    shot(page, "actors", sqlite)
    page.get_by_role("link", name="s1", exact=True).click()
    expect(page.locator("#state")).to_contain_text("first")
    expect(page.locator("#state")).not_to_contain_text("precious")

    # The actor page links its open dead letter; the operator follows it.
    page.locator("dd a.bad").click()
    row = page.locator("tr.letter", has_text="the safe is jammed")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("precious")
    shot(page, "dead-letters", sqlite)
    # The cause is fixed (Safe.broken is False again): retry this one letter.
    row.get_by_role("button", name="Retry").click()
    expect(page.get_by_text("No dead letters.")).to_be_visible()

    page.goto(f"{served}/actors/Safe/s1")
    expect(page.locator("#state")).not_to_contain_text("precious")
    rt.testing.drain()  # a worker runs the retried message
    # htmx refreshes the actor's section in place: no reload.
    expect(page.locator("#state")).to_contain_text("precious", timeout=15_000)
    shot(page, "actor", sqlite)
    page.get_by_role("link", name="Audit log").click()
    expect(page.locator("tbody")).to_contain_text("dead_letters.retry")
    expect(page.locator("tbody")).to_contain_text("ops:alice")
    shot(page, "audit", sqlite)
    assert rt.ref(Safe, "s1").snapshot()["items"] == ["first", "precious"]
    assert [d.id for d in rt.admin.as_principal("ops:x").list_dead_letters().items] == []
    assert message_id in page.content()  # the audit names the letter retried
    assert ops.dialogs == [] and ops.csp_violations() == []


def test_read_only_principal_sees_no_controls_and_its_forged_post_is_refused(
    rt: Runtime, served: str, open_as: Callable[[str | None], Watched]
) -> None:
    message_id = dead_letter(rt)
    viewer = open_as("viewer:bob")
    page = viewer.page
    for path in ("/", "/actors/Safe/s1", "/dead-letters", "/effects", "/reminders", "/processes"):
        response = page.goto(served + path)
        assert response is not None and response.status == 200, path
        assert page.locator("button.control").count() == 0, path
        assert page.locator("form[method=post]").count() == 0, path
    page.goto(served + "/dead-letters")
    assert "the safe is jammed" in page.content()  # bob reads what he may not change
    # A hand-made POST with a token valid for bob: the policy refuses it.
    forged = viewer.context.request.post(
        served + "/dead-letters/retry",
        form={"one": message_id, "csrf": CsrfTokens(SECRET).issue("viewer:bob")},
        max_redirects=0,
    )
    assert forged.status == 403
    assert "viewer:bob may not dead_letters.retry" in forged.text()
    assert count_rows(rt, "audit") == 0
    open_letters = rt.admin.as_principal("ops:x").list_dead_letters().items
    assert [d.id for d in open_letters] == [message_id]


def test_stored_xss_in_state_and_arguments_renders_inert(
    rt: Runtime, served: str, open_as: Callable[[str | None], Watched]
) -> None:
    expect = playwright_api.expect
    rt.ref(Safe, "s1").label.send(note=SCRIPT)
    rt.testing.drain()
    dead_letter(rt, "s1", item=IMG)
    ops = open_as("ops:alice")
    page = ops.page
    page.goto(f"{served}/actors/Safe/s1")
    expect(page.locator("#state")).to_contain_text(SCRIPT)
    page.goto(f"{served}/dead-letters")
    expect(page.locator("code.arguments")).to_contain_text(IMG)
    assert page.locator("main script").count() == 0 and page.locator("main img").count() == 0
    assert ops.dialogs == []


def test_mutation_without_csrf_token_is_refused(
    rt: Runtime, served: str, open_as: Callable[[str | None], Watched]
) -> None:
    message_id = dead_letter(rt)
    ops = open_as("ops:alice")
    refused = ops.context.request.post(
        served + "/dead-letters/retry", form={"one": message_id}, max_redirects=0
    )
    assert refused.status == 403 and "CSRF" in refused.text()
    assert count_rows(rt, "audit") == 0


def test_anonymous_gets_401(
    rt: Runtime, served: str, open_as: Callable[[str | None], Watched]
) -> None:
    page = open_as(None).page
    for path in ("/", "/dead-letters", "/actors/Safe/s1"):
        response = page.goto(served + path)
        assert response is not None and response.status == 401, path
        assert "Not signed in" in page.content()
        assert page.locator("button").count() == 0


def test_cli_serves_the_dashboard_behind_its_access_token(
    browser: Any, db_url: str, tmp_path: Path
) -> None:
    """``solid-objects dashboard``, a real process: the first line is the URL to open."""
    from tests.apps.admin_app import build_runtime

    setup = build_runtime(db_url, workers=0)
    setup.install()
    setup.close()
    env = {**os.environ, "SOLID_ADMIN_APP_DB": db_url, "PYTHONPATH": str(ROOT / "src")}
    command = [sys.executable, "-m", "solid_objects", "dashboard",
               "tests.apps.dashboard_app:runtime", "--port", "0"]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        match = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/\?token=([\w-]{40,})", url)
        assert match, url
        base = f"http://127.0.0.1:{match.group(1)}"
        context = browser.new_context()
        page = context.new_page()
        response = page.goto(base + "/")
        assert response is not None and response.status == 401
        response = page.goto(f"{base}/?token=wrong")
        assert response is not None and response.status == 401
        response = page.goto(url)
        assert response is not None and response.status == 200
        assert page.url == base + "/"  # the token left the address bar
        assert "dashboard:local" in page.content()
        (cookie,) = context.cookies()
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert cookie["value"] == match.group(2)
        context.close()
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert "dashboard:local" in stderr and "allow" in stderr


@pytest.mark.parametrize("actor_id", ["alice/notes", "a b/%2F?#ü", "x/pause"])
def test_an_actor_whose_id_holds_a_slash_opens_and_pauses(
    rt: Runtime, served: str, open_as: Callable[[str | None], Watched], actor_id: str
) -> None:
    expect = playwright_api.expect
    rt.ref(Safe, actor_id).store.send(item="kept")
    rt.testing.drain()
    page = open_as("ops:alice").page

    # From the search form (the redirect) ...
    page.goto(served + "/actors")
    page.fill("input[name=type]", "Safe")
    page.fill("input[name=id]", actor_id)
    page.get_by_role("button", name="Search").click()
    expect(page.locator("#state")).to_contain_text("kept")
    # ... and from the list of the type's actors.
    page.goto(served + "/actors?type=Safe")
    page.get_by_role("link", name=actor_id, exact=True).click()
    expect(page.locator("#state")).to_contain_text("kept")

    page.get_by_role("button", name="Pause").click()
    expect(page.get_by_role("button", name="Resume")).to_be_visible()
    assert rt.admin.as_principal("ops:x").inspect_actor("Safe", actor_id).paused
    page.get_by_role("button", name="Resume").click()
    expect(page.get_by_role("button", name="Pause")).to_be_visible()
    assert not rt.admin.as_principal("ops:x").inspect_actor("Safe", actor_id).paused
