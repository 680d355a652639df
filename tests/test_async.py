"""The asyncio face mirrors the sync one: same names, awaited."""

from __future__ import annotations

import asyncio

import pytest

from solid_objects import Actor, AsyncRuntime, Rejected, query
from solid_objects.errors import CallTimeout


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
