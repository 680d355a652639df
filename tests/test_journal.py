"""The per-turn journal: history, replay of a dead letter, fork, retention.

All run on SQLite, PostgreSQL and MariaDB.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

import pytest

from solid_objects import Actor, NonRetryableError, Rejected, Runtime
from solid_objects.admin import Administration, NotFound, OperationRefused, allow
from solid_objects.errors import MessageFailed

from .conftest import count_rows


class Wallet(Actor, auto_register=False):
    journaled = True
    balance: int = 0
    limits: dict[str, int] = {}

    def deposit(self, amount: int) -> int:
        self.balance += amount
        return self.balance

    def peek(self) -> int:
        return self.balance

    def refuse(self) -> None:
        raise Rejected("no", "refused")

    def spend(self, category: str) -> int:
        """Fails for a category with no limit: a KeyError two calls deep."""
        if self.limits[category] < 1:
            raise NonRetryableError("over the limit")
        self.balance -= 1
        return self.balance

    def set_limit(self, category: str, limit: int) -> None:
        self.limits = {**self.limits, category: limit}


class Plain(Actor, auto_register=False):
    n: int = 0

    def bump(self) -> int:
        self.n += 1
        return self.n


def admin(rt: Runtime) -> Administration:
    rt.admin.set_policy(allow({"ops:*": "*"}))
    return rt.admin.as_principal("ops:ann")


def test_each_finished_turn_of_a_journaled_class_is_recorded_with_its_states(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0, actors=[Wallet, Plain], max_attempts=1)
    ref = rt.ref(Wallet, "w")
    sent = [
        ref.deposit.send(amount=5),
        ref.peek.send(),
        ref.refuse.send(),
        ref.spend.send(category="food"),
        ref.deposit.send(amount=2),
    ]
    rt.ref(Plain, "p").bump.send()
    rt.testing.drain()
    history = admin(rt).actor_history("Wallet", "w")
    assert [(e.operation, e.status) for e in history] == [
        ("deposit", "completed"),
        ("spend", "dead"),
        ("refuse", "rejected"),
        ("peek", "completed"),
        ("deposit", "completed"),
    ]
    assert [e.message_id for e in history] == [m.id for m in reversed(sent)]
    first, peek = history[-1], history[-2]
    assert first.state_before is None  # never written before: the defaults
    assert first.state_after == {"balance": 5, "limits": {}}
    assert peek.state_before == {"balance": 5, "limits": {}} and peek.state_after is None
    assert peek.state == {"balance": 5, "limits": {}}
    assert history[1].state_before == {"balance": 5, "limits": {}}  # what the dead turn saw
    assert history[1].state_after is None
    assert [e.seq for e in admin(rt).actor_history("Wallet", "w", limit=2, before_seq=4)] == [3, 2]
    assert count_rows(rt, "journal") == 5  # Plain is not journaled
    assert admin(rt).actor_history("Plain", "p") == []


def test_replay_reproduces_a_dead_letter_from_its_recorded_state(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0, actors=[Wallet], max_attempts=1)
    ref = rt.ref(Wallet, "w")
    ref.deposit.send(amount=3)
    dead = ref.spend.send(category="fuel")  # no limit for fuel: KeyError
    rt.testing.drain()
    with pytest.raises(MessageFailed) as failed:
        dead.result()
    assert failed.value.error["type"] == "KeyError"
    ref.set_limit.send(category="fuel", limit=5)  # the state moves on
    spent = ref.spend.send(category="fuel")
    rt.testing.drain()
    assert spent.result() == 2

    with pytest.raises(KeyError, match="fuel"):  # against the state it ran on, again
        rt.testing.replay(dead.id)
    with rt.store.read() as tx:
        before = tx.scalar("SELECT COUNT(*) FROM solid_messages")
    with pytest.raises(KeyError):
        rt.testing.replay(dead.id)
    with rt.store.read() as tx:
        assert tx.scalar("SELECT COUNT(*) FROM solid_messages") == before  # nothing written
    assert ref.snapshot()["balance"] == 2


def test_replay_of_a_completed_message_returns_its_result_again(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0, actors=[Wallet, Plain])
    ref = rt.ref(Wallet, "w")
    first = ref.deposit.send(amount=4)
    ref.deposit.send(amount=10)
    rt.testing.drain()
    assert rt.testing.replay(first.id) == 4  # ran against balance 0, as the first time
    plain = rt.ref(Plain, "p").bump.send()
    rt.testing.drain()
    with pytest.raises(NotFound, match="no journal entry"):
        rt.testing.replay(plain.id)


def test_fork_makes_an_independent_actor_from_a_past_state(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0, actors=[Wallet])
    ref = rt.ref(Wallet, "w")
    first = ref.deposit.send(amount=5)
    ref.deposit.send(amount=7)
    rt.testing.drain()
    ops = admin(rt)
    forked = ops.fork_actor("Wallet", "w", "w-then", at_message_id=first.id, reason="debug")
    assert forked.state == {"balance": 5, "limits": {}}
    copy = rt.ref(Wallet, "w-then").deposit.send(amount=1)
    rt.testing.drain()
    assert copy.result() == 6
    assert ref.snapshot()["balance"] == 12  # the original is untouched
    now = ops.fork_actor("Wallet", "w", "w-now")
    assert now.state == {"balance": 12, "limits": {}}
    with pytest.raises(OperationRefused, match="exists"):
        ops.fork_actor("Wallet", "w", "w-then")
    with pytest.raises(NotFound):
        ops.fork_actor("Wallet", "w", "w-other", at_message_id="no-such-message")
    audit = ops.audit_log().items
    assert [(a.action, a.target_id) for a in audit[:2]] == [
        ("actors.fork", "Wallet/w-now"),
        ("actors.fork", "Wallet/w-then"),
    ]


def test_pruning_a_message_removes_its_journal_entry(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0, actors=[Wallet])
    ref = rt.ref(Wallet, "w")
    for amount in (1, 2, 3):
        ref.deposit.send(amount=amount)
    rt.testing.drain()
    assert count_rows(rt, "journal") == 3
    time.sleep(0.05)
    admin(rt).prune(timedelta(0), kinds=("messages",))
    assert count_rows(rt, "messages") == 0
    assert count_rows(rt, "journal") == 0
    assert ref.snapshot()["balance"] == 6


def test_the_journal_is_written_in_the_turns_commit_on_every_path(
    make_runtime: Callable[..., Runtime],
) -> None:
    """A warm sync call (a direct turn in the caller's thread) is journaled too."""
    rt = make_runtime(workers=2, actors=[Wallet])
    with rt:
        ref = rt.ref(Wallet, "direct")
        for amount in range(1, 6):
            ref.deposit(amount=amount)
    history = admin(rt).actor_history("Wallet", "direct")
    assert [e.state_after["balance"] for e in reversed(history)] == [1, 3, 6, 10, 15]
    assert all(
        e.state_before == (None if n == 0 else history[::-1][n - 1].state_after)
        for n, e in enumerate(reversed(history))
    )
