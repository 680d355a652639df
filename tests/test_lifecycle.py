"""A runtime's lifecycle: start again after close, say what a refused call means,
and end ``run()`` from ``stop()`` or ``close()`` in another thread.

Web frameworks' test clients run the application's lifespan once per client,
so a module-level runtime is started and closed many times in one process
(each time, for asyncio, on a new event loop).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

import pytest

from solid_objects import Actor, AsyncRuntime, Runtime
from solid_objects.errors import RuntimeClosed, RuntimeNotStarted
from tests.apps.procapp import Tally

from .conftest import FAST

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[1]


class Visits(Actor):
    count: int = 0

    def visit(self) -> int:
        self.count += 1
        return self.count


def test_start_close_start_close_in_one_process(db_url: str) -> None:
    runtime = Runtime(db_url, workers=2, **FAST)
    runtime.install()
    visits = runtime.ref(Visits, "v")
    for expected in (1, 2):
        with runtime:
            assert visits.visit() == expected
    runtime.start()
    assert visits.visit() == 3
    runtime.close()
    runtime.start()
    runtime.stop()
    runtime.start()
    assert visits.visit() == 4
    runtime.close()
    runtime.close()  # closing twice is harmless
    assert visits.snapshot() == {"count": 4}


def test_an_async_runtime_runs_one_lifespan_after_another(db_url: str) -> None:
    """Each lifespan on its own event loop, as each TestClient(app) runs it."""
    runtime = AsyncRuntime(db_url, workers=2, **FAST)

    @asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        async with runtime:
            yield

    async def serve_one_request() -> int:
        async with lifespan():
            return await runtime.ref(Visits, "v").visit()

    asyncio.run(runtime.install())
    assert [asyncio.run(serve_one_request()) for _ in range(3)] == [1, 2, 3]

    async def start_close_start_close() -> int:
        await runtime.start()
        await runtime.close()
        await runtime.start()
        try:
            return await runtime.ref(Visits, "v").visit()
        finally:
            await runtime.close()

    assert asyncio.run(start_close_start_close()) == 4


def test_a_call_after_close_says_the_runtime_was_closed(db_url: str) -> None:
    runtime = Runtime(db_url, workers=2, **FAST)
    runtime.install()
    visits = runtime.ref(Visits, "v")
    with pytest.raises(RuntimeNotStarted, match="runs no workers yet"):
        visits.visit()
    with runtime:
        visits.visit()
    with pytest.raises(RuntimeClosed, match=r"was closed .* start it again with runtime\.start"):
        visits.visit()
    runtime.start()
    runtime.stop()
    with pytest.raises(RuntimeNotStarted, match="stopped") as stopped:
        visits.visit()
    assert not isinstance(stopped.value, RuntimeClosed)
    runtime.close()
    with pytest.raises(RuntimeClosed):
        visits.visit()

    async def after_async_close() -> None:
        aruntime = AsyncRuntime(db_url, workers=2, **FAST)
        async with aruntime:
            await aruntime.ref(Visits, "v").visit()
        with pytest.raises(RuntimeClosed, match="was closed"):
            await aruntime.ref(Visits, "v").visit()

    asyncio.run(after_async_close())


def _in_thread(target: Callable[[], None]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            target()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


def _call_once_started(call: Callable[[], T], thread: threading.Thread) -> T:
    """``call()`` once the ``run()`` in ``thread`` has started the workers."""
    while thread.is_alive():
        try:
            return call()
        except RuntimeNotStarted:
            thread.join(0.01)
    raise AssertionError("run() returned before its workers started")


@pytest.mark.parametrize("end", ["close", "stop", "request_stop"])
def test_run_in_a_thread_returns_when_another_thread_ends_it(db_url: str, end: str) -> None:
    runtime = Runtime(db_url, workers=2, **FAST)
    runtime.install()
    thread, errors = _in_thread(runtime.run)
    try:
        assert _call_once_started(runtime.ref(Visits, "v").visit, thread) == 1
        getattr(runtime, end)()
        thread.join(30)
        assert not thread.is_alive(), f"run() still blocks after {end}()"
        assert errors == []
        with pytest.raises(RuntimeNotStarted):
            runtime.ref(Visits, "v").visit()
    finally:
        runtime.close()
        thread.join(30)


@pytest.mark.parametrize("end", ["close", "stop", "request_stop"])
def test_async_run_returns_when_the_runtime_is_ended(db_url: str, end: str) -> None:
    async def main() -> None:
        runtime = AsyncRuntime(db_url, workers=2, **FAST)
        await runtime.install()
        running = asyncio.create_task(runtime.run())
        try:
            for _ in range(3000):
                await asyncio.sleep(0.01)
                try:
                    assert await runtime.ref(Visits, "v").visit() == 1
                    break
                except RuntimeNotStarted:
                    continue
            ended = getattr(runtime, end)()
            if ended is not None:
                await ended
            await asyncio.wait_for(running, 30)
        finally:
            running.cancel()
            await runtime.close()

    asyncio.run(main())


# --- a process that exits without close() gives its leases back --------------


@pytest.mark.parametrize(
    ("mode", "signum"),
    [("return", None), ("wait", signal.SIGTERM), ("with", signal.SIGTERM), ("wait", signal.SIGINT)],
)
def test_a_process_that_exits_without_close_releases_its_leases(
    db_url: str, mode: str, signum: signal.Signals | None
) -> None:
    """The program returns from main, or is sent SIGTERM/SIGINT, with a started runtime.

    Its lease lasts 120 s, so the lease row is free afterwards only if the process
    released it; then another process's call is answered by that process's worker.
    """
    runtime = Runtime(db_url, workers=1, **FAST)
    runtime.install()
    program = subprocess.Popen(
        [sys.executable, "-m", "tests.apps.exits", mode],
        cwd=ROOT,
        env={**os.environ, "SOLID_TEST_DB": db_url},
        # A suite started in the background (``cmd &``) inherits SIGINT ignored, and so
        # would the program, which must see the signal as a terminal sends it.
        preexec_fn=_default_sigint,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert program.stdout is not None
        assert program.stdout.readline() == "ready\n", (
            program.stderr.read() if program.stderr else ""
        )
        assert _lease_owner(runtime) is not None  # the program holds the actor now
        if signum is not None:
            program.send_signal(signum)
        else:
            assert program.stdin is not None
            program.stdin.write("return now\n")
            program.stdin.flush()
        code = program.wait(60)
    finally:
        if program.poll() is None:
            program.kill()
            program.wait(10)
    stderr = program.stderr.read()
    expected = {None: 0, signal.SIGTERM: 128 + signal.SIGTERM, signal.SIGINT: -signal.SIGINT}
    assert code == expected[signum], stderr
    assert _lease_owner(runtime) is None, "the exited process kept its lease"
    with runtime.store.read() as tx:
        stopped = tx.scalar("SELECT COUNT(*) FROM solid_processes WHERE stopped_at IS NOT NULL")
    assert stopped == 1, "the exited process is not marked stopped"
    with runtime:
        assert runtime.ref(Tally, "t").add(n=1) == 2
    runtime.close()


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _lease_owner(runtime: Runtime) -> str | None:
    with runtime.store.read() as tx:
        owner = tx.scalar(
            "SELECT lease_owner FROM solid_actors WHERE actor_type = 'Tally' AND actor_id = 't'"
        )
    return None if owner is None else str(owner)
