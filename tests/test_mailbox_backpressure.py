"""Backpressure (``max_mailbox_length`` / ``MailboxFull``) on all three databases."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from sqlalchemy import create_engine

from solid_objects import Actor, MailboxFull, Runtime
from solid_objects.contrib import problems
from solid_objects.errors import ConfigurationError

from .conftest import count_rows

_started = threading.Event()
_release = threading.Event()


class BoundedInbox(Actor):
    items: list[str] = []

    def put(self, item: str) -> int:
        self.items.append(item)
        return len(self.items)

    def hold(self) -> None:
        """Keeps the actor busy (held by this process) until the test releases it."""
        _started.set()
        _release.wait(30)


def test_an_enqueue_past_the_limit_raises_mailbox_full_and_writes_nothing(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0, max_mailbox_length=2)
    box = rt.ref(BoundedInbox, "b")
    first = box.put.send(item="a")
    box.put.send(item="b")
    with pytest.raises(MailboxFull):
        box.put.send(item="c")
    with pytest.raises(MailboxFull):
        box.put.with_options(idempotency_key="new").send(item="c")
    assert count_rows(rt, "messages") == 2
    # another actor's mailbox is its own
    rt.ref(BoundedInbox, "other").put.send(item="x")
    # a delayed send waits outside the mailbox: not refused
    box.put.with_options(delay=3600).send(item="later")
    assert count_rows(rt, "messages") == 4
    with make_runtime(max_mailbox_length=2) as worker:
        assert first.wait(timeout=30) == 1
        worker.testing.drain(timeout=30)
    assert box.put.send(item="d").status() == "queued"  # room again once drained


def test_an_idempotent_duplicate_is_answered_even_when_full(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0, max_mailbox_length=1)
    box = rt.ref(BoundedInbox, "dup")
    sent = box.put.with_options(idempotency_key="k").send(item="a")
    again = box.put.with_options(idempotency_key="k").send(item="a")
    assert again.id == sent.id
    assert count_rows(rt, "messages") == 1


def test_a_running_message_counts_and_the_held_fast_path_refuses_too(
    make_runtime: Callable[..., Runtime],
) -> None:
    _started.clear()
    _release.clear()
    with make_runtime(workers=2, max_mailbox_length=2) as rt:
        box = rt.ref(BoundedInbox, "held")
        running = box.hold.send()
        assert _started.wait(30)
        queued = box.put.send(item="a")  # running + this one = 2
        try:
            with pytest.raises(MailboxFull):
                box.put.send(item="b")
            with pytest.raises(MailboxFull):
                box.put(item="b")
        finally:
            _release.set()
        running.wait(timeout=30)
        assert queued.wait(timeout=30) == 1
        assert box.put(item="c") == 2
    assert count_rows(rt, "messages") == 3


def test_the_application_transaction_path_is_refused_too(
    make_runtime: Callable[..., Runtime], db_url: str
) -> None:
    rt = make_runtime(workers=0, max_mailbox_length=1)
    box = rt.ref(BoundedInbox, "conn")
    box.put.send(item="a")
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            with pytest.raises(MailboxFull):
                box.put.with_options(connection=conn).send(item="b")
            conn.commit()
    finally:
        engine.dispose()
    assert count_rows(rt, "messages") == 1


def test_unbounded_and_bad_limits(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(workers=0, max_mailbox_length=None)
    for n in range(3):
        rt.ref(BoundedInbox, "free").put.send(item=str(n))
    assert count_rows(rt, "messages") == 3
    for bad in (0, -1, 1.5, "10"):
        with pytest.raises(ConfigurationError):
            Runtime("sqlite://", max_mailbox_length=bad)


def test_mailbox_full_is_a_429_problem() -> None:
    assert problems.document(MailboxFull("full"))["status"] == 429
