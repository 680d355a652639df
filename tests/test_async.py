"""The asyncio face mirrors the sync one: same names, awaited."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from solid_objects import (
    Actor,
    AsyncMessageReference,
    AsyncRuntime,
    EffectContext,
    MessageReference,
    Rejected,
    Runtime,
    query,
)
from solid_objects.actor import definition_of
from solid_objects.engine.actions import CommitContext
from solid_objects.errors import CallTimeout, RuntimeNotStarted

T = TypeVar("T")


class Account(Actor):
    balance: int = 0

    async def deposit(self, amount: int) -> int:
        await asyncio.sleep(0)
        self.balance += amount
        return self.balance

    def withdraw(self, amount: int) -> int:
        if amount > self.balance:
            raise Rejected("insufficient", f"balance is {self.balance}")
        self.balance -= amount
        return self.balance

    @query
    def current(self) -> int:
        return self.balance


def test_async_runtime_calls_sends_queries_and_typed_calls(db_url: str) -> None:
    async def main() -> None:
        runtime = AsyncRuntime(db_url, workers=2)
        await runtime.install()
        async with runtime:
            account = runtime.ref(Account, "acct")
            assert await account.deposit(amount=10) == 10
            message = await account.withdraw.send(amount=3)
            assert await message.wait(timeout=10) == 7
            assert await message.status() == "completed"
            assert await message.result() == 7
            assert await account.current() == 7
            assert await account.call(Account.deposit, amount=1) == 8
            sent = await account.send(Account.withdraw, amount=8)
            assert await sent.wait() == 0
            with pytest.raises(Rejected):
                await account.withdraw(amount=1)
            results = await asyncio.gather(*(account.deposit(amount=1) for _ in range(50)))
            assert sorted(results) == list(range(1, 51))
            assert await account.snapshot() == {"balance": 50}
            assert await account.destroy() is True

    asyncio.run(main())


def test_async_call_timeout_and_drain(db_url: str) -> None:
    async def main() -> None:
        runtime = AsyncRuntime(db_url, workers=0)
        await runtime.install()
        account = runtime.ref(Account, "later")
        with pytest.raises(CallTimeout):
            await account.with_options(timeout=0.1).deposit(amount=5)
        assert await runtime.testing.drain() == 1
        assert await account.current() == 5
        await runtime.close()

    asyncio.run(main())


# --- the two faces offer the same names (the httpx rule) ---------------------------------

#: Names only the async face has, and why. The sync face has none of its own.
ASYNC_ONLY = {
    "sync": "AsyncRuntime.sync is the underlying Runtime, for code in a thread of its own",
}


def _public(obj: object) -> set[str]:
    return {name for name in dir(obj) if not name.startswith("_")}


def _parameters(function: Callable[..., Any]) -> list[str]:
    return list(inspect.signature(function).parameters)


def test_the_async_face_offers_the_names_of_the_sync_face(db_url: str) -> None:
    runtime = Runtime(db_url, workers=0)
    aruntime = AsyncRuntime(db_url, workers=0)
    operation = definition_of(Account).operation("deposit")
    assert operation is not None
    ref, aref = runtime.ref(Account, "a"), aruntime.ref(Account, "a")
    pairs: list[tuple[object, object]] = [
        (runtime, aruntime),
        (runtime.testing, aruntime.testing),
        (ref, aref),
        (ref.deposit, aref.deposit),
        (ref.with_options(timeout=1), aref.with_options(timeout=1)),
        (
            MessageReference(runtime, "m", operation, "Account", "a"),
            AsyncMessageReference(aruntime, "m", operation, "Account", "a"),
        ),
    ]
    for sync, asynchronous in pairs:
        what = type(sync).__name__
        assert _public(sync) - _public(asynchronous) == set(), f"{what}: missing on async"
        assert _public(asynchronous) - _public(sync) <= set(ASYNC_ONLY), f"{what}: async-only"
        for name in _public(sync) & _public(asynchronous):
            a, b = getattr(sync, name), getattr(asynchronous, name)
            if inspect.ismethod(a) and inspect.ismethod(b):
                assert _parameters(a) == _parameters(b), f"{what}.{name}: parameters differ"
    assert _public(aruntime) - _public(runtime) == set(ASYNC_ONLY)


class Notifier(Actor):
    total: int = 0

    def add(self, amount: int) -> int:
        self.total += amount
        self.emit("notify", amount=amount)
        self.commit_action("audit", amount=amount)
        return self.total


def test_async_effects_commit_actions_messages_and_request_stop(db_url: str) -> None:
    """What users reached for ``runtime.sync`` to get, on the async face itself."""
    notified: list[int] = []
    audited: list[int] = []

    async def main() -> None:
        runtime = AsyncRuntime(db_url, workers=2)
        await runtime.install()

        @runtime.effect("notify")
        async def notify(ctx: EffectContext, amount: int) -> None:
            notified.append(amount)

        @runtime.commit_action("audit")
        def audit(ctx: CommitContext, amount: int) -> None:
            audited.append(amount)

        running = asyncio.create_task(runtime.run())
        try:
            notifier = runtime.ref(Notifier, "n")
            sent = await _retry_until_started(lambda: notifier.add.send(amount=2))
            again = await runtime.message(Notifier, sent.id)
            assert isinstance(again, AsyncMessageReference)
            assert await again.wait(timeout=20) == 2
            assert audited == [2]
            for _ in range(2000):  # the effect runs after the commit, in its own thread
                if notified:
                    break
                await asyncio.sleep(0.01)
            assert notified == [2]
            runtime.request_stop()
            await asyncio.wait_for(running, 30)
        finally:
            running.cancel()
            await runtime.close()

    asyncio.run(main())


async def _retry_until_started(send: Callable[[], Awaitable[T]]) -> T:
    """``send()`` once the workers started by a concurrent ``run()`` are up."""
    for _ in range(2000):
        await asyncio.sleep(0.01)
        try:
            return await send()
        except RuntimeNotStarted:
            continue
    raise AssertionError("run() did not start the workers")
