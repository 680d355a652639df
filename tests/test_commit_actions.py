"""Commit actions: the application's own rows commit with the actor's state, or neither."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
import sqlalchemy
from sqlalchemy import text

from solid_objects import Actor, Rejected, Runtime
from solid_objects.engine.actions import CommitContext
from solid_objects.errors import MessageFailed

from .conftest import count_rows

FAIL_ACTION: list[str] = []  # ["always"] or ["once"]
RUNTIMES: list[Runtime] = []


class Order(Actor):
    placed: list[str] = []

    def place(self, item: str, reject: bool = False) -> int:
        self.placed.append(item)
        self.commit_action("record_order", order=self.actor_id, item=item)
        if reject:
            raise Rejected("no")
        return len(self.placed)

    def sneaky(self) -> None:
        with RUNTIMES[0].engine.connect() as conn:  # behind the commit's back: refused
            conn.execute(text("DELETE FROM app_orders"))

    def unknown(self) -> None:
        self.commit_action("no_such_action")


def record_order(ctx: CommitContext, order: str, item: str) -> None:
    if FAIL_ACTION:
        if FAIL_ACTION[0] == "once":
            FAIL_ACTION.clear()
        ctx.connection.execute(  # a partial write that the failure must take back
            text("INSERT INTO app_orders (order_id, item, message_id) VALUES (:o, 'x', :m)"),
            {"o": order, "m": ctx.message_id},
        )
        raise ConnectionError("the application's write failed")
    ctx.connection.execute(
        text("INSERT INTO app_orders (order_id, item, message_id) VALUES (:o, :i, :m)"),
        {"o": order, "i": item, "m": ctx.message_id},
    )


@pytest.fixture
def shop(make_runtime: Callable[..., Runtime], db_url: str) -> Iterator[Runtime]:
    app_engine = sqlalchemy.create_engine(db_url)
    with app_engine.begin() as conn:
        conn.execute(
            text(
                "CREATE TABLE app_orders (order_id VARCHAR(64), item VARCHAR(64), "
                "message_id VARCHAR(32))"
            )
        )
    app_engine.dispose()
    rt = make_runtime(workers=0, max_attempts=2)
    rt.register(Order)
    rt.commit_action("record_order")(record_order)
    RUNTIMES[:] = [rt]
    FAIL_ACTION.clear()
    yield rt
    RUNTIMES.clear()


def orders(rt: Runtime) -> list[tuple[str, str]]:
    with rt.store.read() as tx:
        return sorted((r[0], r[1]) for r in tx.rows("SELECT order_id, item FROM app_orders"))


def test_the_applications_row_commits_with_the_turn(shop: Runtime) -> None:
    first = shop.ref(Order, "o1").place.send(item="book")
    rejected = shop.ref(Order, "o1").place.send(item="pen", reject=True)
    shop.testing.drain()
    assert first.result() == 1
    with pytest.raises(Rejected):
        rejected.result()
    assert orders(shop) == [("o1", "book")]
    assert shop.ref(Order, "o1").snapshot() == {"placed": ["book"]}


def test_a_failing_action_rolls_the_whole_turn_back_and_retries(shop: Runtime) -> None:
    FAIL_ACTION.append("once")
    message = shop.ref(Order, "o2").place.send(item="lamp")
    for _ in range(250):
        shop.testing.drain()
        if message.status() == "completed":
            break
        time.sleep(0.02)
    assert message.result() == 1
    # the failed attempt's state, its partial application write and its row are gone
    assert orders(shop) == [("o2", "lamp")]
    assert shop.ref(Order, "o2").snapshot() == {"placed": ["lamp"]}
    assert count_rows(shop, "messages", "attempts = 2 AND status = 'completed'") == 1


def test_an_action_that_keeps_failing_becomes_a_dead_letter(shop: Runtime) -> None:
    FAIL_ACTION.append("always")
    message = shop.ref(Order, "o3").place.send(item="chair")
    for _ in range(250):
        shop.testing.drain()
        if message.status() == "dead":
            break
        time.sleep(0.02)
    with pytest.raises(MessageFailed) as info:
        message.result()
    assert info.value.error["type"] == "ConnectionError"
    assert orders(shop) == [] and shop.ref(Order, "o3").snapshot() == {"placed": []}


def test_writes_through_the_runtimes_engine_and_unknown_actions_fail_at_once(
    shop: Runtime,
) -> None:
    sneaky = shop.ref(Order, "o4").sneaky.send()
    unknown = shop.ref(Order, "o4").unknown.send()
    shop.testing.drain()
    with pytest.raises(MessageFailed) as info:
        sneaky.result()
    assert info.value.error["type"] == "ApplicationWriteForbidden"
    with pytest.raises(MessageFailed) as info:
        unknown.result()
    assert info.value.error["type"] == "UnknownOperation"
    assert count_rows(shop, "messages", "status = 'dead' AND attempts = 1") == 2
