"""Requests between actors: the answer comes back later as a message, exactly once."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from solid_objects import (
    Actor,
    InvalidArguments,
    MessageFailed,
    NonRetryableError,
    Rejected,
    Reply,
    ReplyFailed,
    Runtime,
    UnknownOperation,
)
from solid_objects.admin import allow

from .conftest import count_rows


def ask(rt: Runtime, amount: int, timeout: float | None = None) -> str:
    """Have the teller make a request, and run everything it leads to."""
    sent = rt.ref(Teller, "t").ask.send(amount=amount, timeout=timeout)
    rt.testing.drain()
    result: str = sent.result()
    return result


class Strongbox(Actor):
    balance: int = 10

    def withdraw(self, amount: int) -> int:
        if amount > self.balance:
            raise Rejected("insufficient_funds", f"only {self.balance} left")
        self.balance -= amount
        return self.balance

    def lock(self) -> None:
        pass

    def explode(self) -> None:
        raise NonRetryableError("the vault is on fire")


class Teller(Actor):
    replies: list[dict[str, Any]] = []
    asked: list[str] = []

    def ask(self, amount: int, timeout: float | None = None) -> str:
        request_id = self.request(
            Strongbox, "v", reply_to=self.on_funds, timeout=timeout, context={"amount": amount}
        ).withdraw(amount=amount)
        self.asked.append(request_id)
        return request_id

    def on_funds(self, reply: Reply) -> None:
        try:
            value = reply.value()
        except ReplyFailed as exc:
            value = exc.reply.error
        self.replies.append(
            {"id": reply.request_id, "status": reply.status, "value": value, "ctx": reply.context}
        )

    def ask_to_explode(self) -> str:
        return self.request(Strongbox, "v", reply_to=self.on_funds, context="boom").explode()

    def bad_reply_to(self) -> None:
        self.request(Strongbox, "v", reply_to="ask").withdraw(amount=1)

    def bad_target(self) -> None:
        self.request(Strongbox, "v", reply_to=self.on_funds).nothing()

    def bad_timeout(self) -> None:
        self.request(Strongbox, "v", reply_to=self.on_funds, timeout=0).withdraw(amount=1)


def test_a_completed_request_replies_with_its_result_and_context(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime()
    request_id = ask(rt, 3)
    state = rt.ref(Teller, "t").snapshot()
    assert state["replies"] == [
        {"id": request_id, "status": "completed", "value": 7, "ctx": {"amount": 3}}
    ]
    assert rt.ref(Strongbox, "v").snapshot()["balance"] == 7


def test_a_rejected_request_replies_with_the_rejection(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime()
    request_id = ask(rt, 30)
    [reply] = rt.ref(Teller, "t").snapshot()["replies"]
    assert reply["id"] == request_id and reply["status"] == "rejected"
    assert reply["value"]["code"] == "insufficient_funds"
    assert reply["ctx"] == {"amount": 30}


def test_the_request_commits_with_the_asker_and_the_reply_is_keyed(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime()
    request_id = ask(rt, 1)
    assert count_rows(rt, "messages", f"idempotency_key = 'reply:{request_id}'") == 1
    assert count_rows(rt, "messages", "operation = 'on_funds' AND status = 'completed'") == 1


@pytest.mark.parametrize(
    ("operation", "error"),
    [
        ("bad_reply_to", InvalidArguments),
        ("bad_target", UnknownOperation),
        ("bad_timeout", InvalidArguments),
    ],
)
def test_a_bad_request_fails_the_turn_and_sends_nothing(
    make_runtime: Callable[..., Runtime], operation: str, error: type[Exception]
) -> None:
    rt = make_runtime()
    sent = getattr(rt.ref(Teller, "t"), operation).send()
    rt.testing.drain()
    with pytest.raises(MessageFailed) as failed:
        sent.result()
    assert failed.value.error["type"] == error.__name__
    assert count_rows(rt, "messages", "actor_type = 'Strongbox'") == 0


def test_the_answer_before_the_timeout_is_the_one_outcome(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime()
    request_id = ask(rt, 2, timeout=30)
    rt.testing.run_due_reminders(datetime.now(UTC) + timedelta(minutes=5))
    replies = rt.ref(Teller, "t").snapshot()["replies"]
    assert [(r["id"], r["status"]) for r in replies] == [(request_id, "completed")]


def test_the_timeout_before_the_answer_is_the_one_outcome(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime()
    rt.admin.set_policy(allow({"ops:*": "*"}))
    ops = rt.admin.as_principal("ops:test")
    rt.ref(Strongbox, "v").lock.send()
    rt.testing.drain()
    ops.pause_actor("Strongbox", "v")  # the request waits in the vault's mailbox
    request_id = ask(rt, 2, timeout=30)
    rt.testing.run_due_reminders(datetime.now(UTC) + timedelta(minutes=5))
    ops.resume_actor("Strongbox", "v")
    rt.testing.drain()  # the vault answers now: too late, the answer is dropped
    replies = rt.ref(Teller, "t").snapshot()["replies"]
    assert [(r["id"], r["status"]) for r in replies] == [(request_id, "timed_out")]
    assert replies[0]["value"]["type"] == "RequestTimedOut"
    assert rt.ref(Strongbox, "v").snapshot()["balance"] == 8  # the withdrawal itself ran
    assert count_rows(rt, "messages", f"idempotency_key = 'reply:{request_id}'") == 1
    # The stored outcome is still the one delivered: the late answer rewrote nothing.
    outcome = f"idempotency_key = 'reply:{request_id}' AND status = 'completed'"
    assert count_rows(rt, "messages", f"{outcome} AND arguments LIKE '%timed_out%'") == 1


def test_a_dead_lettered_request_replies_failed(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime()
    sent = rt.ref(Teller, "t").ask_to_explode.send()
    rt.testing.drain()
    request_id = sent.result()
    [reply] = rt.ref(Teller, "t").snapshot()["replies"]
    assert (reply["id"], reply["status"], reply["ctx"]) == (request_id, "failed", "boom")
    assert reply["value"] == {"type": "NonRetryableError", "message": "the vault is on fire"}


def test_a_request_to_a_destroyed_actor_replies_destroyed_once(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime()
    rt.admin.set_policy(allow({"ops:*": "*"}))
    ops = rt.admin.as_principal("ops:test")
    rt.ref(Strongbox, "v").lock.send()
    rt.testing.drain()
    ops.pause_actor("Strongbox", "v")
    request_id = ask(rt, 2, timeout=30)
    assert rt.ref(Strongbox, "v").destroy()
    rt.testing.run_due_reminders(datetime.now(UTC) + timedelta(minutes=5))
    replies = rt.ref(Teller, "t").snapshot()["replies"]
    assert [(r["id"], r["status"]) for r in replies] == [(request_id, "destroyed")]
    assert replies[0]["value"]["type"] == "ActorDestroyed"


class Broker(Actor):
    """B: answers A's request only once it has C's answer (it asks while answering)."""

    pending: dict[str, str] = {}

    def quote(self, amount: int) -> None:
        self.request(Strongbox, "c", reply_to=self.on_vault, context=amount).withdraw(amount=amount)

    def on_vault(self, reply: Reply) -> None:
        self.send_to(Desk, "a").done(note=f"{reply.status}:{reply.result}")


class Desk(Actor):
    """A: asks B, records what finally came back."""

    notes: list[str] = []

    def start(self) -> str:
        return self.request(Broker, "b", reply_to=self.on_broker, context="A").quote(amount=4)

    def on_broker(self, reply: Reply) -> None:
        self.notes.append(f"broker:{reply.status}:{reply.context}")

    def done(self, note: str) -> None:
        self.notes.append(f"vault:{note}")


def test_a_chain_of_requests_answers_each_asker_once(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime()
    rt.ref(Desk, "a").start.send()
    rt.testing.drain()
    notes = rt.ref(Desk, "a").snapshot()["notes"]
    # B's own turn completes first (A's answer), C's answer reaches A through B after.
    assert sorted(notes) == ["broker:completed:A", "vault:completed:6"]
    assert rt.ref(Strongbox, "c").snapshot()["balance"] == 6
