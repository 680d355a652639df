"""A call's timeout bounds the call, and what ``CallTimeout`` says about the message is
true.

No latency is asserted: each test checks the outcome (``CallTimeout`` rather than a
``DatabaseError`` after ``busy_timeout``, or a result returned late) and what became of
the message once the obstacle is gone. ``busy_timeout`` is set far above the call's
timeout, so the old behaviour (wait for the lock until ``busy_timeout``) shows as the
wrong exception, not as a slow test.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy

from solid_objects import Actor, AsyncRuntime, Runtime
from solid_objects.errors import CallTimeout, MessageNotFound
from solid_objects.faults import inject

from .apps.deadline_app import NAP, TIMEOUT, Sleeper
from .conftest import FAST, count_rows

UVICORN = [sys.executable, "-m", "uvicorn", "--factory", "tests.apps.deadline_app:build"]
BUSY = 20.0  # seconds: how long the old code waited for the lock before DatabaseError


class Slot(Actor):
    n: int = 0

    def take(self) -> int:
        self.n += 1
        return self.n

    def nap(self, seconds: float) -> int:
        time.sleep(seconds)
        self.n += 1
        return self.n


@contextmanager
def actor_row_locked(db_url: str) -> Iterator[None]:
    """Another connection holds the actors' row locks (SQLite: the write lock) open."""
    holder = sqlalchemy.create_engine(db_url, poolclass=sqlalchemy.pool.NullPool)
    with holder.connect() as conn:
        if holder.dialect.name == "sqlite":
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        conn.exec_driver_sql("UPDATE solid_actors SET updated_at = updated_at")
        try:
            yield
        finally:
            conn.rollback()
    holder.dispose()


def held_idle(rt: Runtime, actor_id: str) -> None:
    """Wait until the worker that ran the claim has put the activation back to idle, so
    the next call is one a direct turn could take."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        act = rt.kernel.client.pool.table.by_identity(Slot.actor_type, actor_id)
        if act is not None and act.status == "idle":
            return
        time.sleep(0.005)
    raise AssertionError("the activation never went idle")


def check_truthful(rt: Runtime, timeout: CallTimeout, before: int) -> int:
    """After the lock is gone: the message is where the CallTimeout said; return n."""
    if timeout.message is None:  # "nothing was written"
        assert "nothing was written" in str(timeout)
        assert count_rows(rt, "messages") == before
        return 0
    try:
        timeout.message.wait(timeout=30)
    except MessageNotFound:
        # Allowed only when it said the enqueue might not commit.
        assert "had not committed when the deadline passed" in str(timeout)
        return 0
    assert timeout.message.status() == "completed"
    return 1


@pytest.mark.timeout(120)
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_a_held_lock_ends_the_call_with_a_truthful_call_timeout(
    make_runtime: Callable[..., Runtime], db_url: str, warm: bool
) -> None:
    rt = make_runtime(workers=2, busy_timeout=BUSY)
    if not warm:  # the actor's row exists, and no worker holds it
        other = make_runtime(workers=0)
        other.ref(Slot, "s").take.send()
        other.testing.drain()
    with rt:
        slot = rt.ref(Slot, "s")
        if warm:
            assert slot.take() == 1  # held idle here: the next call is a direct turn
        before = count_rows(rt, "messages")
        started = time.monotonic()
        with actor_row_locked(db_url):
            with pytest.raises(CallTimeout) as raised:
                slot.with_options(timeout=0.5).take()
            assert time.monotonic() - started < BUSY / 2  # did not wait for busy_timeout
        ran = check_truthful(rt, raised.value, before)
        assert slot.take() == 1 + ran + 1  # the actor works once the lock is gone
        assert slot.snapshot()["n"] == 1 + ran + 1


@pytest.mark.timeout(120)
def test_async_calls_are_bounded_by_their_timeout_too(db_url: str) -> None:
    art = AsyncRuntime(db_url, **{**FAST, "workers": 2, "busy_timeout": BUSY})
    rt = art.sync
    rt.install()
    other = Runtime(db_url, workers=0)  # the actor's row exists, and no worker holds it
    other.ref(Slot, "a").take.send()
    other.testing.drain()
    other.close()
    before = count_rows(rt, "messages")

    async def call() -> None:
        async with art:
            with actor_row_locked(db_url), pytest.raises(CallTimeout) as raised:
                await art.ref(Slot, "a").with_options(timeout=0.5).take()
            ran = await asyncio.to_thread(check_truthful, rt, raised.value, before)
            assert await art.ref(Slot, "a").take() == 1 + ran + 1

    try:
        asyncio.run(call())
    finally:
        rt.close()


@pytest.mark.timeout(120)
def test_a_warm_call_to_a_slow_operation_times_out_instead_of_returning_late(
    make_runtime: Callable[..., Runtime],
) -> None:
    """A warm call ran its turn in the caller's thread, past the timeout, and returned."""
    rt = make_runtime(workers=2, **FAST)
    with rt:
        slot = rt.ref(Slot, "slow")
        with pytest.raises(CallTimeout) as first:
            slot.with_options(timeout=0.3).nap(seconds=1.5)
        assert first.value.message is not None
        assert first.value.message.wait(timeout=30) == 1  # it ran; the actor is now warm
        with pytest.raises(CallTimeout) as second:
            slot.with_options(timeout=0.3).nap(seconds=1.5)
        assert second.value.message is not None
        assert "running it" in str(second.value)  # said while the worker ran it: true
        assert second.value.message.wait(timeout=30) == 2


@pytest.mark.timeout(120)
@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_warm_call_to_an_operation_not_timed_yet_returns_at_its_timeout(
    make_runtime: Callable[..., Runtime], db_url: str, face: str
) -> None:
    """The actor is held idle here, but this process has never timed ``nap``: a worker
    runs it, and the caller gets control back at its timeout, not after the nap."""
    if face == "sync":
        rt = make_runtime(workers=2, **FAST)
        with rt:
            slot = rt.ref(Slot, "w")
            assert slot.take() == 1
            held_idle(rt, "w")  # warm: the next call could run in this thread
            started = time.monotonic()
            with pytest.raises(CallTimeout) as raised:
                slot.with_options(timeout=0.2).nap(seconds=1.5)
            took = time.monotonic() - started
            assert raised.value.message is not None
            assert raised.value.message.wait(timeout=30) == 2
            assert slot.snapshot()["n"] == 2
            assert count_rows(rt, "messages", "operation = 'nap'") == 1
    else:
        art = AsyncRuntime(db_url, **{**FAST, "workers": 2})
        art.sync.install()

        async def call() -> tuple[float, CallTimeout]:
            async with art:
                slot = art.ref(Slot, "w")
                assert await slot.take() == 1
                await asyncio.to_thread(held_idle, art.sync, "w")
                started = time.monotonic()
                with pytest.raises(CallTimeout) as raised:
                    await slot.with_options(timeout=0.2).nap(seconds=1.5)
                took = time.monotonic() - started
                assert raised.value.message is not None
                assert await asyncio.to_thread(raised.value.message.wait, 30) == 2
                return took, raised.value

        try:
            took, _ = asyncio.run(call())
            assert count_rows(art.sync, "messages", "operation = 'nap'") == 1
            assert art.sync.ref(Slot, "w").snapshot()["n"] == 2
        finally:
            art.sync.close()
    assert took < 1.0  # back before the 1.5 s turn ended (it ran on a worker)


@pytest.mark.timeout(120)
def test_a_direct_turn_that_overruns_the_timeout_says_truthfully_what_it_left(
    make_runtime: Callable[..., Runtime],
) -> None:
    """An operation timed short suddenly runs long in the caller's thread: it cannot be
    interrupted, and what the caller gets is true: the result (its commit ended) or a
    CallTimeout naming the message that may have committed, which then completes once."""
    rt = make_runtime(workers=2, **FAST)
    with rt:
        slot = rt.ref(Slot, "o")
        assert slot.nap(seconds=0.01) == 1  # runs on a worker, which times it
        assert slot.nap(seconds=0.01) == 2  # short next to the timeout: a direct turn
        held_idle(rt, "o")
        try:
            result = slot.with_options(timeout=0.2).nap(seconds=1.5)
        except CallTimeout as timeout:
            text = str(timeout)
            assert "has not committed" not in text
            # Its commit was open at the deadline, or ended just before the diagnosis
            # (or, on a loaded machine, a worker took the turn and was running it).
            assert any(
                said in text
                for said in ("may have committed since", "finished as completed", "running it")
            ), text
            assert timeout.message is not None and timeout.message.id in text
            assert timeout.message.wait(timeout=30) == 3
            assert timeout.message.status() == "completed"
        else:
            assert result == 3  # committed, returned late
        assert slot.snapshot()["n"] == 3
        assert count_rows(rt, "messages", "operation = 'nap'") == 3


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_direct_turns_commit_still_open_at_the_deadline_is_named_as_such(
    make_runtime: Callable[..., Runtime], backend: str
) -> None:
    """SQLite's writer thread commits a direct turn: held past the caller's deadline,
    the CallTimeout says the message may have committed since (never "has not
    committed"), with its id; the message then completes once."""
    rt = make_runtime(workers=2, **FAST)
    stalled = threading.Event()
    armed = threading.Event()

    def hold_the_commit(name: str) -> None:
        if name == "commit.body" and armed.is_set() and not stalled.is_set():
            stalled.set()
            time.sleep(1.0)  # the writer thread, inside the direct turn's transaction

    with rt:
        slot = rt.ref(Slot, "c")
        assert slot.take() == 1  # on a worker, which times ``take``
        held_idle(rt, "c")
        with inject(hold_the_commit):
            armed.set()
            with pytest.raises(CallTimeout) as raised:
                slot.with_options(timeout=0.3).take()
        assert stalled.is_set()  # it was a direct turn, committed by the writer
        text = str(raised.value)
        assert "has not committed" not in text
        assert "direct turn" in text and "may have committed since" in text, text
        assert raised.value.message is not None and raised.value.message.id in text
        assert raised.value.message.wait(timeout=30) == 2
        assert slot.snapshot()["n"] == 2
        assert count_rows(rt, "messages", "operation = 'take'") == 2


def _post(url: str) -> tuple[int, dict[str, object] | int, float]:
    """POST ``url``: status, decoded JSON body, and seconds until the response."""
    started = time.monotonic()
    request = urllib.request.Request(url, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, body = error.code, error.read()
    return status, json.loads(body), time.monotonic() - started


@pytest.fixture
def deadline_server(make_runtime: Callable[..., Runtime], db_url: str) -> Iterator[str]:
    """uvicorn serving ``tests.apps.deadline_app`` in a subprocess: its base URL."""
    make_runtime(workers=0)  # installs the schema
    root = Path(__file__).resolve().parents[1]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    env = {
        **os.environ,
        "SOLID_DEADLINE_DB": db_url,
        "PYTHONPATH": f"{root / 'src'}{os.pathsep}{root}",
    }
    process = subprocess.Popen(
        [*UVICORN, "--port", str(port), "--log-level", "warning"],
        cwd=root,
        env=env,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, "uvicorn exited"
            try:
                urllib.request.urlopen(f"{base}/live", timeout=5)
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, "uvicorn did not answer in 60 s"
                time.sleep(0.1)
        yield base
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=60)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("route", ["nap", "nap-sync"], ids=["async-handler", "def-handler"])
def test_an_http_handlers_call_timeout_answers_near_it_and_the_message_runs_once(
    deadline_server: str, make_runtime: Callable[..., Runtime], route: str
) -> None:
    """A real uvicorn process: a handler calls, with ``timeout=0.2``, an operation that
    sleeps 1.5 s on an actor the server holds warm. The response is the documented
    504 problem, back before the turn ends; the message completes later, exactly once."""
    status, body, _ = _post(f"{deadline_server}/slots/h/take")
    assert (status, body) == (200, 1)  # the server now holds the actor idle
    status, body, took = _post(f"{deadline_server}/slots/h/{route}")
    assert status == 504, body
    assert isinstance(body, dict) and body["code"] == "CallTimeout"
    assert took < NAP - TIMEOUT  # the handler got control back long before the turn ended
    message_id = body["message_id"]
    assert isinstance(message_id, str)
    reader = make_runtime(workers=0)
    deadline = time.monotonic() + 30
    while True:  # the message row exists once its enqueue committed
        try:
            message = reader.message(Sleeper, message_id)
            break
        except MessageNotFound:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert message.wait(timeout=30) == 2
    assert reader.ref(Sleeper, "h").snapshot()["n"] == 2
    assert count_rows(reader, "messages", "operation = 'nap'") == 1
