"""A runtime's lifecycle: start again after close, say what a refused call means,
and end ``run()`` from ``stop()`` or ``close()`` in another thread.

Web frameworks' test clients run the application's lifespan once per client,
so a module-level runtime is started and closed many times in one process
(each time, for asyncio, on a new event loop).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import pytest

from solid_objects import Actor, AsyncRuntime, Runtime
from solid_objects.errors import RuntimeClosed, RuntimeNotStarted

from .conftest import FAST

T = TypeVar("T")


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
