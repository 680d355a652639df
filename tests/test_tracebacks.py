"""Where a failure happened: the traceback of a failed turn, effect attempt or
commit is kept with the message or effect (bounded, redacted), logged with
``exc_info``, and shown by the admin API, the CLI, the dashboard and OpenTelemetry."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import playwright.sync_api as playwright_api
import pytest
import uvicorn
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from solid_objects import Runtime
from solid_objects.observability import OpenTelemetryTracing, observe
from solid_objects.tracebacks import LIMIT, bound, format_traceback, redact_text
from solid_objects.web import dashboard

from .apps import failing_app
from .apps.failing_app import Acct
from .conftest import FAST
from .test_dashboard_browser import ARGS, CHROMIUM, SECRET, free_port

ROOT = Path(__file__).resolve().parents[1]
APP_FILE = str(Path(failing_app.__file__).resolve())
WHERE = f'File "{APP_FILE}", line {failing_app.raising_line()}, in lookup'


@pytest.fixture
def rt(db_url: str) -> Iterator[Runtime]:
    runtime = failing_app.build_runtime(
        db_url, **{**FAST, "workers": 0, "max_attempts": 2, "effect_max_attempts": 1}
    )
    runtime.install()
    try:
        yield runtime
    finally:
        runtime.close()


def settle(rt: Runtime) -> None:
    """Run the work and its retries to the end (backoffs skipped by a later clock)."""
    rt.testing.drain()
    for minutes in range(1, 4):
        rt.testing.run_due_reminders(datetime.now(UTC) + timedelta(minutes=minutes))


def dead_bump(rt: Runtime, actor_id: str = "a") -> str:
    sent = rt.ref(Acct, actor_id).bump.send(key="missing")
    settle(rt)
    return sent.id


def test_a_dead_letter_keeps_the_traceback_of_the_raising_frame_two_calls_deep(
    rt: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="solid_objects"):
        message_id = dead_bump(rt)
    failed = [r for r in caplog.records if getattr(r, "solid_action", "") == "turn_failed"]
    assert failed and failed[0].exc_info is not None
    logged = logging.Formatter().formatException(failed[0].exc_info)
    assert WHERE in logged and "KeyError: 'missing'" in logged
    ops = rt.admin.as_principal("ops:alice")
    letter = ops.get_dead_letter(message_id)
    assert letter.traceback is not None
    assert WHERE in letter.traceback
    assert "in balance_of" in letter.traceback and "in bump" in letter.traceback
    assert letter.traceback.rstrip().endswith("KeyError: 'missing'")
    (listed,) = ops.list_dead_letters().items
    assert listed.traceback == letter.traceback
    (recent,) = ops.actor_messages("Acct", "a").items
    assert recent.traceback == letter.traceback


def test_a_retrying_message_shows_the_traceback_of_its_last_attempt(
    rt: Runtime, db_url: str
) -> None:
    rt.close()
    retrying = failing_app.build_runtime(db_url, **{**FAST, "workers": 0, "max_attempts": 50})
    try:
        sent = retrying.ref(Acct, "r").bump.send(key="missing")
        retrying.testing.drain()
        detail = retrying.admin.as_principal("ops:a").inspect_actor("Acct", "r")
        (head,) = detail.queued
        assert head.id == sent.id and head.traceback is not None and WHERE in head.traceback
    finally:
        retrying.close()


def test_a_retry_that_succeeds_clears_the_traceback_of_the_failed_attempt(rt: Runtime) -> None:
    ops = rt.admin.as_principal("ops:alice")
    failing_app.FLAKY.clear()  # another backend's run of this test in the same process
    sent = rt.ref(Acct, "f").flaky.send(failures=1)
    settle(rt)
    assert sent.wait(timeout=5) == 2  # the first attempt failed (and stored its traceback)
    (done,) = ops.actor_messages("Acct", "f").items
    assert done.status == "completed" and done.traceback is None


def test_an_effect_attempt_keeps_its_traceback(rt: Runtime) -> None:
    rt.ref(Acct, "e").send_mail.send(to="nobody")
    settle(rt)
    ops = rt.admin.as_principal("ops:alice")
    (effect,) = ops.list_effects(status="dead").items
    assert effect.traceback is not None and WHERE in effect.traceback
    assert "in mail" in effect.traceback


def test_secrets_in_the_failing_code_are_redacted_like_the_rest_of_the_error_path(
    rt: Runtime,
) -> None:
    sent = rt.ref(Acct, "s").leak.send(password="tops3cret-word")
    settle(rt)
    trace = rt.admin.as_principal("ops:alice").get_dead_letter(sent.id).traceback
    assert trace is not None and "ValueError" in trace
    assert "hunter2-secret" not in trace and "tops3cret-word" not in trace
    assert "postgresql://ledger:***@db.internal/ledger" in trace
    assert "password=***" in trace


def test_redaction_masks_url_passwords_and_secret_named_values() -> None:
    text = "x = connect('mysql+pymysql://u:pw1@h/db?ssl_key_password=pw2', api_token='pw3')"
    masked = redact_text(text)
    assert "pw1" not in masked and "pw2" not in masked and "pw3" not in masked
    assert "KeyError: 'missing'" == redact_text("KeyError: 'missing'")


def test_a_deep_traceback_is_bounded_and_keeps_the_innermost_frames() -> None:
    # Distinct functions: Python folds a repeated frame into one line.
    source = "def f0():\n    raise KeyError('bottom')\n" + "".join(
        f"def f{i}():\n    f{i - 1}()\n" for i in range(1, 700)
    )
    scope: dict[str, Any] = {}
    exec(compile(source, "generated.py", "exec"), scope)
    try:
        scope["f699"]()
    except KeyError as exc:
        trace = format_traceback(exc)
    assert trace is not None
    assert len(trace) <= LIMIT
    assert trace.startswith("Traceback (most recent call last):\n")
    assert "lines omitted" in trace
    assert trace.rstrip().endswith("KeyError: 'bottom'")
    assert 'File "generated.py", line 2, in f0' in trace
    one_line = bound("Traceback\n" + "x" * (3 * LIMIT), LIMIT)
    assert len(one_line) <= LIMIT and one_line.endswith("x")


def test_the_cli_shows_the_traceback_in_text_and_json(rt: Runtime, db_url: str) -> None:
    message_id = dead_bump(rt)
    env = {**os.environ, "SOLID_FAILING_APP_DB": db_url, "PYTHONPATH": str(ROOT / "src")}

    def cli(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "solid_objects", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    target = "tests.apps.failing_app:runtime"
    shown = json.loads(cli("dead-letters", "show", target, message_id, "--json"))
    assert WHERE in shown["traceback"]
    listed = json.loads(cli("dead-letters", "list", target, "--json"))
    assert WHERE in listed["items"][0]["traceback"]
    text = cli("dead-letters", "show", target, message_id)
    assert f"traceback of {message_id}:" in text and WHERE in text


def test_the_otel_turn_and_effect_spans_carry_the_stored_stacktrace(rt: Runtime) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    observe(rt, OpenTelemetryTracing(tracer_provider=provider))
    try:
        rt.ref(Acct, "o").bump.send(key="missing")
        rt.ref(Acct, "o2").send_mail.send(to="nobody")
        settle(rt)
        events: dict[str, list[Any]] = {}
        for span in exporter.get_finished_spans():
            for event in span.events:
                if event.name == "exception":
                    events.setdefault(span.name, []).append(event)
    finally:
        provider.shutdown()
    for name in ("solid.turn Acct.bump", "solid.effect mail"):
        assert name in events, sorted(events)
        attributes = events[name][0].attributes
        assert attributes is not None
        assert attributes["exception.type"] == "KeyError"
        assert WHERE in str(attributes["exception.stacktrace"])
        assert "hunter2-secret" not in str(attributes["exception.stacktrace"])


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_dashboard_shows_the_traceback_escaped_where_the_error_is(rt: Runtime) -> None:
    rt.ref(Acct, "d").bump.send(key="<b>missing</b>")
    settle(rt)
    app = dashboard(rt, principal=lambda request: "ops:alice", secret=SECRET)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive(), "uvicorn did not start"
        threading.Event().wait(0.02)
    expect = playwright_api.expect
    try:
        with playwright_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page()
            base = f"http://127.0.0.1:{port}"
            for path in ("/dead-letters", "/actors/Acct/d"):
                page.goto(base + path)
                trace = page.locator("pre.traceback").first
                page.locator("details.traceback summary").first.click()  # folded until asked
                expect(trace).to_be_visible()
                expect(trace).to_contain_text(WHERE)
                expect(trace).to_contain_text("KeyError: '<b>missing</b>'")
                assert page.locator("pre.traceback b").count() == 0  # shown, not rendered
            browser.close()
    finally:
        server.should_exit = True
        thread.join(10)
