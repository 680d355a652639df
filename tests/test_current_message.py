"""``self.current_message``: the running message's id, attempt, enqueued and
due time (database clock, UTC), idempotency key and sender, on every database."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from solid_objects import Actor, EffectContext, MessageInfo, NotInTurn, Runtime, Sender, query

from .conftest import db_now
from .test_outbox import at

_seen: list[MessageInfo] = []
_fail_first: set[str] = set()


@pytest.fixture(autouse=True)
def _reset() -> None:
    _seen.clear()
    _fail_first.clear()


class Inbox(Actor):
    count: int = 0

    def note(self, label: str = "") -> str:
        info = self.current_message
        _seen.append(info)
        if label in _fail_first:
            _fail_first.discard(label)
            raise ConnectionError("transient")
        self.count += 1
        return info.id

    def forward(self, to: str) -> None:
        self.send_to(Inbox, to).note(label="forwarded")

    def remind(self) -> None:
        self.schedule(delay=timedelta(hours=1), key="hourly").note(label="reminded")

    def ask(self) -> None:
        self.emit("lookup", on_success="looked_up")

    def looked_up(self, result: Any) -> None:
        _seen.append(self.current_message)

    @query
    def peek(self) -> str:
        return self.current_message.id


def test_a_callers_message_carries_its_id_key_times_and_attempt(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0)
    ref = rt.ref(Inbox, "a")
    before = db_now(rt)
    sent = ref.note.with_options(idempotency_key="k-1", delay=timedelta(seconds=30)).send()
    rt.testing.run_due_reminders(at(rt, minutes=1))
    (info,) = _seen
    assert info.id == sent.id
    assert info.operation == "note"
    assert info.attempt == 1
    assert info.idempotency_key == "k-1"
    assert info.sender == Sender("caller")
    assert info.enqueued_at.tzinfo is UTC
    assert before <= info.enqueued_at.timestamp() * 1000 <= db_now(rt)
    assert info.due_at - info.enqueued_at == timedelta(seconds=30)


def test_a_retry_sees_the_next_attempt_and_the_same_id(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0, retry_base_delay=0.001)
    _fail_first.add("flaky")
    sent = rt.ref(Inbox, "a").note.send(label="flaky")
    rt.testing.drain()
    rt.testing.run_due_reminders(at(rt, minutes=1))
    assert [(i.id, i.attempt) for i in _seen] == [(sent.id, 1), (sent.id, 2)]


def test_a_retry_held_back_by_its_backoff_runs_at_the_test_clock(
    make_runtime: Callable[..., Runtime],
) -> None:
    """``run_due_reminders(now)`` runs a retry due before ``now``, not only after real time."""
    rt = make_runtime(workers=0, retry_base_delay=30.0, retry_max_delay=30.0)
    _fail_first.add("flaky")
    sent = rt.ref(Inbox, "a").note.send(label="flaky")
    rt.testing.drain()
    assert [(i.id, i.attempt) for i in _seen] == [(sent.id, 1)]  # held back for 30 s
    assert rt.testing.run_due_reminders(at(rt, minutes=1)) == 1
    assert [(i.id, i.attempt) for i in _seen] == [(sent.id, 1), (sent.id, 2)]
    assert sent.result() == sent.id


def test_an_actor_send_names_the_sending_actor(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(workers=0)
    rt.ref(Inbox, "from").forward.send(to="to")
    rt.testing.drain()
    (info,) = _seen
    assert info.sender == Sender("actor", actor_type="Inbox", actor_id="from")
    assert info.idempotency_key is None


def test_a_reminder_firing_names_the_reminder(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(workers=0)
    rt.ref(Inbox, "a").remind.send()
    rt.testing.drain()
    assert rt.testing.run_due_reminders(at(rt, minutes=61)) == 1
    (info,) = _seen
    assert info.sender == Sender("reminder", key="hourly")


def test_an_effect_callback_names_the_effect(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(workers=0)
    effects: list[str] = []

    @rt.effect("lookup")
    def lookup(ctx: EffectContext) -> int:
        effects.append(ctx.id)
        return 1

    rt.ref(Inbox, "a").ask.send()
    for _ in range(3):
        rt.testing.drain()
    (info,) = _seen
    assert info.sender == Sender("effect", key=effects[0])


def test_a_direct_turn_sees_its_message(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(workers=1)
    with rt:
        ref = rt.ref(Inbox, "warm")
        ref.note(label="first")
        returned = ref.note(label="second")  # warm: may run in this thread
    assert [i.id for i in _seen][-1] == returned
    assert _seen[-1].sender == Sender("caller")
    assert _seen[-1].due_at >= _seen[-1].enqueued_at


def test_outside_a_turn_current_message_raises_not_in_turn(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0)
    rt.ref(Inbox, "a").note.send()
    rt.testing.drain()
    with pytest.raises(NotInTurn):
        rt.ref(Inbox, "a").peek()
    with pytest.raises(NotInTurn):
        Inbox().current_message  # noqa: B018
    assert isinstance(_seen[0].enqueued_at, datetime)


def test_a_schema_6_database_upgrades_and_its_messages_read_as_from_a_caller(
    make_runtime: Callable[..., Runtime],
) -> None:
    from solid_objects.store.schema import SCHEMA_VERSION

    rt = make_runtime(workers=0)
    rt.ref(Inbox, "old").note.with_options(delay=30).send(label="old")
    with rt.store.engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE solid_messages DROP COLUMN sender")
        conn.exec_driver_sql("UPDATE solid_schema SET version = 6")
    upgraded = make_runtime(workers=0)  # install() runs migration 7
    with upgraded.store.read() as tx:
        assert tx.scalar("SELECT version FROM solid_schema") == SCHEMA_VERSION
        assert tx.scalar("SELECT COUNT(*) FROM solid_messages WHERE sender IS NULL") == 1
    upgraded.ref(Inbox, "new").forward.send(to="old")
    upgraded.testing.drain()
    upgraded.testing.run_due_reminders(at(upgraded, minutes=1))
    assert sorted(i.sender.kind for i in _seen) == ["actor", "caller"]
