"""``MessageReference.cancel()`` of a message that has not started (all databases)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from solid_objects import Actor, AsyncRuntime, Runtime
from solid_objects.admin import allow
from solid_objects.errors import MessageCancelled, NotFound

from .conftest import count_rows


class Tape(Actor):
    items: list[str] = []

    def put(self, item: str) -> list[str]:
        self.items.append(item)
        return self.items


def test_cancelling_the_head_and_a_middle_message_keeps_the_order(
    make_runtime: Callable[..., Runtime],
) -> None:
    caller = make_runtime(workers=0)
    tape = caller.ref(Tape, "t")
    sent = [tape.put.send(item=x) for x in "abcde"]
    assert sent[0].cancel() is True  # the head
    assert sent[2].cancel() is True  # a middle one
    assert sent[2].cancel() is True  # again: still cancelled
    assert sent[2].status() == "cancelled"
    with make_runtime() as worker:
        assert worker.ref(Tape, "t").put.send(item="f").wait(timeout=30) == ["b", "d", "e", "f"]
        with pytest.raises(MessageCancelled):
            sent[0].wait(timeout=30)
        with pytest.raises(MessageCancelled):
            sent[2].result()
        assert sent[1].result() == ["b"]
    assert [m.status() for m in sent] == [
        "cancelled", "completed", "cancelled", "completed", "completed"
    ]
    assert count_rows(caller, "messages", "status = 'cancelled' AND completed_at IS NOT NULL") == 2


def test_a_finished_message_cannot_be_cancelled(make_runtime: Callable[..., Runtime]) -> None:
    with make_runtime() as rt:
        tape = rt.ref(Tape, "done")
        m = tape.put.send(item="a")
        assert m.wait(timeout=30) == ["a"]
        assert m.cancel() is False
        assert m.status() == "completed"


def test_a_delayed_message_is_cancelled_and_never_enters_the_mailbox(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0)
    tape = rt.ref(Tape, "later")
    m = tape.put.with_options(delay=0.01).send(item="never")
    assert m.status() == "scheduled"
    assert m.cancel() is True
    with make_runtime() as worker:
        assert worker.ref(Tape, "later").put(item="now") == ["now"]
        worker.testing.drain(timeout=30)
    assert m.status() == "cancelled"
    assert rt.ref(Tape, "later").snapshot()["items"] == ["now"]


def test_a_queued_message_of_a_held_actor_says_it_cannot_be_cancelled(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0)
    tape = rt.ref(Tape, "held")
    m = tape.put.send(item="a")
    rt.store.transact(  # a live lease: a worker may have it in hand
        lambda tx: tx.run(
            "UPDATE {actors} SET lease_owner = 'elsewhere', lease_token = 'x', "
            "lease_expires_at = {now} + 600000 WHERE actor_id = 'held'"
        )
    )
    assert m.cancel() is False
    assert m.status() == "queued"


def test_admin_cancel_message_is_audited_and_unknown_ids_are_not_found(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0)
    rt.admin.set_policy(allow({"ops:*": "*"}))
    admin = rt.admin.as_principal("ops:alice")
    m = rt.ref(Tape, "adm").put.send(item="a")
    assert admin.cancel_message(m.id, reason="typo") is True
    assert m.status() == "cancelled"
    [entry] = [a for a in admin.audit_log().items if a.action == "messages.cancel"]
    assert entry.target_id == m.id
    with pytest.raises(NotFound):
        admin.cancel_message("no-such-message")


def test_async_face_cancels_too(db_url: str) -> None:
    async def scenario() -> None:
        rt = AsyncRuntime(db_url, workers=0)
        await rt.install()
        try:
            m = await rt.ref(Tape, "a").put.send(item="x")
            assert await m.cancel() is True
            assert await m.status() == "cancelled"
        finally:
            await rt.close()

    asyncio.run(scenario())
