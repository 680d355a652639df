"""A call's timeout bounds the call, and what ``CallTimeout`` says about the message is
true (issue 12, item 13).

No latency is asserted: each test checks the outcome (``CallTimeout`` rather than a
``DatabaseError`` after ``busy_timeout``, or a result returned late) and what became of
the message once the obstacle is gone. ``busy_timeout`` is set far above the call's
timeout, so the old behaviour (wait for the lock until ``busy_timeout``) shows as the
wrong exception, not as a slow test.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import sqlalchemy

from solid_objects import Actor, AsyncRuntime, Runtime
from solid_objects.errors import CallTimeout, MessageNotFound

from .conftest import FAST, count_rows

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
        assert "has not committed yet" in str(timeout)
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
