"""Rejection codes, NonRetryableError, QueryMutatedState (all three databases)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from solid_objects import (
    Actor,
    AsyncRuntime,
    MessageFailed,
    NonRetryableError,
    QueryMutatedState,
    Rejected,
    Runtime,
    query,
)
from solid_objects.errors import InvalidRejectionCode

from .conftest import count_rows


class OutOfStock(NonRetryableError):
    """An application's own deterministic failure."""


_runs: list[str] = []


class Shop(Actor):
    stock: int = 0
    tags: list[str] = []

    def refuse(self, code: str) -> int:
        raise Rejected(code, "refused")

    def sell(self) -> int:
        _runs.append("sell")
        self.stock -= 1
        raise OutOfStock("nothing left")

    @query
    def peek(self) -> int:
        return self.stock

    @query
    def sneaky(self) -> int:
        self.tags.append("written in a query")
        return len(self.tags)

    @query
    async def sneaky_async(self) -> int:
        self.stock = 42
        return self.stock


@pytest.mark.parametrize("code", ["", " ", "two words", "1st", "a" * 65, "tab\t", "é"])
def test_rejected_refuses_a_bad_code_at_construction(code: str) -> None:
    with pytest.raises(InvalidRejectionCode):
        Rejected(code)
    with pytest.raises(ValueError):  # a generic handler keeps working
        Rejected(code, "message")


@pytest.mark.parametrize("code", ["a", "_x", "out_of_stock", "http:429", "v1.too-late", "a" * 64])
def test_rejected_accepts_machine_readable_codes(code: str) -> None:
    assert Rejected(code).code == code


def test_rejected_with_a_bad_code_in_a_turn_dead_letters_at_once(
    make_runtime: Callable[..., Runtime],
) -> None:
    with make_runtime(max_attempts=5) as rt:
        shop = rt.ref(Shop, "bad-code")
        with pytest.raises(Rejected) as ok:
            shop.refuse(code="sold_out")
        assert ok.value.code == "sold_out"
        with pytest.raises(MessageFailed) as info:
            shop.refuse(code="sold out")
        assert info.value.error["type"] == "InvalidRejectionCode"
    assert count_rows(rt, "messages", "status = 'dead' AND attempts = 1") == 1


def test_non_retryable_error_dead_letters_without_retry(
    make_runtime: Callable[..., Runtime],
) -> None:
    _runs.clear()
    with make_runtime(max_attempts=5) as rt:
        shop = rt.ref(Shop, "nonretry")
        with pytest.raises(MessageFailed) as info:
            shop.sell()
        assert info.value.error["type"] == "OutOfStock"
        assert shop.snapshot()["stock"] == 0
    assert _runs == ["sell"]
    assert count_rows(rt, "messages", "status = 'dead' AND attempts = 1") == 1


def test_query_that_changes_state_raises_and_commits_nothing(
    make_runtime: Callable[..., Runtime],
) -> None:
    with make_runtime() as rt:
        shop = rt.ref(Shop, "q")
        assert shop.peek() == 0
        with pytest.raises(QueryMutatedState):
            shop.sneaky()
        with pytest.raises(QueryMutatedState):
            shop.sneaky_async()
        assert shop.snapshot() == {"stock": 0, "tags": []}
    assert count_rows(rt, "messages") == 0


def test_async_face_query_that_changes_state_raises(db_url: str) -> None:
    async def scenario() -> None:
        rt = AsyncRuntime(db_url, workers=0)
        await rt.install()
        try:
            with pytest.raises(QueryMutatedState):
                await rt.ref(Shop, "aq").sneaky()
            assert await rt.ref(Shop, "aq").peek() == 0
        finally:
            await rt.close()

    asyncio.run(scenario())
