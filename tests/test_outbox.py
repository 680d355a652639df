"""The transactional outbox: effects, reminders and actor-to-actor messages (2.2, 2.5, 2.6)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from solid_objects import Actor, EffectContext, Rejected, Runtime
from solid_objects.errors import LeaseLost, MessageFailed
from solid_objects.observability import Instrumentation, observe

from .conftest import count_rows, db_now


class Payment(Actor):
    state: str = "new"
    outcome: dict[str, Any] = {}

    def charge(self, amount: int, reject: bool = False) -> str:
        self.state = "charging"
        self.emit("charge_card", amount=amount, on_success="charged", on_failure="declined")
        if reject:
            raise Rejected("no", "changed my mind")  # the effect must not exist
        return self.state

    def charged(self, effect_id: str, arguments: dict[str, Any], result: Any) -> None:
        self.state = "paid"
        self.outcome = {"effect_id": effect_id, "arguments": arguments, "result": result}

    def declined(self, error: dict[str, Any]) -> None:
        self.state = "declined"
        self.outcome = {"error": error["message"]}


class Card:
    """A fake payment provider that fails a configurable number of times."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.calls: list[tuple[str, int]] = []
        self.lock = threading.Lock()

    def handler(self, ctx: EffectContext, amount: int) -> dict[str, Any]:
        with self.lock:
            self.calls.append((ctx.id, ctx.attempt))
            if self.failures > 0:
                self.failures -= 1
                raise ConnectionError("provider unavailable")
        return {"charged": amount, "key": ctx.id}


def payments(make_runtime: Callable[..., Runtime], card: Card, **options: Any) -> Runtime:
    rt = make_runtime(**options)
    rt.register(Payment)
    rt.effect("charge_card")(card.handler)
    return rt


def test_effect_runs_after_commit_with_a_stable_id_and_calls_back(
    make_runtime: Callable[..., Runtime],
) -> None:
    card = Card(failures=2)
    rt = payments(make_runtime, card, workers=0, effect_max_attempts=5)
    ref = rt.ref(Payment, "p1")
    ref.charge.send(amount=42)
    for _ in range(10):
        rt.testing.drain()
        if ref.snapshot()["state"] == "paid":
            break
        rt.store.transact(lambda tx: tx.run("UPDATE solid_effects SET available_at = 0"))
    snapshot = ref.snapshot()
    assert snapshot["state"] == "paid"
    ids = {effect_id for effect_id, _ in card.calls}
    assert len(ids) == 1  # every attempt carried the same ctx.id
    assert [attempt for _, attempt in card.calls] == [1, 2, 3]
    assert snapshot["outcome"] == {
        "effect_id": ids.pop(),
        "arguments": {"amount": 42},
        "result": {"charged": 42, "key": card.calls[0][0]},
    }
    assert count_rows(rt, "effects", "status = 'done' AND attempts = 3") == 1


def test_an_effect_run_where_the_actor_type_is_unknown_calls_back_correctly(
    make_runtime: Callable[..., Runtime],
) -> None:
    """The runner offers every callback argument (it cannot see the signature); the
    callback keeps those it declares (``declined`` takes only ``error``)."""
    card = Card(failures=1)
    actors = make_runtime(workers=0)
    actors.register(Payment)
    runner = make_runtime(workers=0, effect_max_attempts=1)
    runner.effect("charge_card")(card.handler)
    ref = actors.ref(Payment, "elsewhere")
    ref.charge.send(amount=7)
    actors.testing.drain()
    runner.testing.drain()  # runs the effect, which dies: the on_failure offer is queued
    actors.testing.drain()
    assert ref.snapshot()["state"] == "declined"
    assert ref.snapshot()["outcome"] == {"error": "provider unavailable"}
    assert count_rows(actors, "messages", "status = 'dead'") == 0


def test_an_effect_exists_only_if_its_turn_committed(
    make_runtime: Callable[..., Runtime],
) -> None:
    card = Card()
    rt = payments(make_runtime, card, workers=0)
    message = rt.ref(Payment, "p2").charge.send(amount=1, reject=True)
    rt.testing.drain()
    with pytest.raises(Rejected):
        message.result()
    assert count_rows(rt, "effects") == 0
    assert card.calls == []


def test_dead_effect_calls_on_failure_with_the_error(make_runtime: Callable[..., Runtime]) -> None:
    card = Card(failures=100)
    rt = payments(make_runtime, card, workers=0, effect_max_attempts=2)
    ref = rt.ref(Payment, "p3")
    ref.charge.send(amount=5)
    for _ in range(5):
        rt.testing.drain()
        rt.store.transact(lambda tx: tx.run("UPDATE solid_effects SET available_at = 0"))
    assert ref.snapshot() == {"state": "declined", "outcome": {"error": "provider unavailable"}}
    assert count_rows(rt, "effects", "status = 'dead' AND attempts = 2") == 1
    assert count_rows(rt, "messages", "operation = 'declined'") == 1


def test_effects_run_in_the_background_with_workers(make_runtime: Callable[..., Runtime]) -> None:
    card = Card()
    rt = payments(make_runtime, card, workers=2)
    with rt:
        refs = [rt.ref(Payment, f"bg{i}") for i in range(5)]
        for ref in refs:
            ref.charge(amount=1)
        deadline = datetime.now(UTC) + timedelta(seconds=15)
        while datetime.now(UTC) < deadline and any(r.snapshot()["state"] != "paid" for r in refs):
            threading.Event().wait(0.02)
    assert [r.snapshot()["state"] for r in refs] == ["paid"] * 5
    assert len(card.calls) == 5


def test_a_stale_turn_stages_no_effect(make_runtime: Callable[..., Runtime]) -> None:
    """A worker that lost its lease has its commit refused, and so its effects too."""
    rt = payments(make_runtime, Card(), workers=0)
    store = rt.store
    rt.ref(Payment, "stale").charge.send(amount=9)
    with store.read() as tx:
        pk, generation = tx.row("SELECT pk, lease_generation FROM solid_actors")
    stale = store.transact(lambda tx: store.leases.claim(tx, pk, generation, "worker-a", 60_000))
    assert stale is not None and stale.head is not None
    store.transact(
        lambda tx: tx.run("UPDATE solid_actors SET lease_expires_at = 0 WHERE pk = :pk", {"pk": pk})
    )
    fresh = store.transact(
        lambda tx: store.leases.claim(tx, pk, stale.lease.generation, "worker-b", 60_000)
    )
    assert fresh is not None
    from solid_objects.engine.turn import Limits, execute

    definition = rt.registry.get("Payment")
    instance = definition.instantiate("stale", definition.default_state())
    head = stale.head
    outcome = execute(definition, instance, None, head, Limits(1 << 20, 1 << 20))
    assert outcome.staged is not None and len(outcome.staged.effects) == 1
    with pytest.raises(LeaseLost):
        store.transact(
            lambda tx: store.turns.finish_turn(
                tx,
                stale.lease,
                head,
                status="completed",
                state=outcome.state,
                state_version=1,
                result=outcome.result,
                error=None,
                attempt=1,
                lease_ms=60_000,
                staged=outcome.staged,
            )
        )
    assert count_rows(rt, "effects") == 0


class Clock(Actor):
    fired: list[str] = []

    def start(self, every_minutes: int | None = None, missed: str = "latest") -> None:
        if every_minutes is None:
            self.schedule(delay=timedelta(hours=1)).tick(label="once")
        else:
            self.schedule(
                delay=timedelta(minutes=every_minutes),
                every=timedelta(minutes=every_minutes),
                missed=missed,  # type: ignore[arg-type]
            ).tick(label="recurring")

    def move(self, hours: int) -> None:
        self.schedule(delay=timedelta(hours=hours)).tick(label="moved")

    def keyed(self) -> None:
        for key in ("a", "b", "c"):
            self.schedule(delay=timedelta(hours=1), key=key).tick(label=key)

    def stop(self) -> None:
        self.cancel_schedule("tick")

    def tick(self, label: str) -> None:
        self.fired.append(label)


def at(rt: Runtime, **delta: float) -> datetime:
    return datetime.fromtimestamp(db_now(rt) / 1000, UTC) + timedelta(**delta)


def test_reminder_fires_once_at_its_due_time_and_rescheduling_moves_it(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0)
    ref = rt.ref(Clock, "c")
    ref.start.send()
    rt.testing.drain()
    assert rt.testing.run_due_reminders(at(rt, minutes=59)) == 0
    ref.move.send(hours=2)  # one alarm per (actor, operation, key): this moves it
    rt.testing.drain()
    assert count_rows(rt, "reminders") == 1
    assert rt.testing.run_due_reminders(at(rt, minutes=61)) == 0
    assert rt.testing.run_due_reminders(at(rt, minutes=121)) == 1
    assert rt.testing.run_due_reminders(at(rt, hours=10)) == 0
    assert ref.snapshot()["fired"] == ["moved"]
    assert count_rows(rt, "reminders") == 0


def test_keys_give_independent_alarms_and_cancel_removes_them(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0)
    ref = rt.ref(Clock, "k")
    ref.keyed.send()
    rt.testing.drain()
    assert count_rows(rt, "reminders") == 3
    assert rt.testing.run_due_reminders(at(rt, hours=2)) == 3
    assert sorted(ref.snapshot()["fired"]) == ["a", "b", "c"]
    ref.start.send()
    ref.stop.send()
    rt.testing.drain()
    assert count_rows(rt, "reminders") == 0


@pytest.mark.parametrize("missed, expected", [("latest", 1), ("all", 5)])
def test_recurring_reminder_catches_up_after_downtime(
    make_runtime: Callable[..., Runtime], missed: str, expected: int
) -> None:
    rt = make_runtime(workers=0)
    ref = rt.ref(Clock, "r")
    ref.start.send(every_minutes=10, missed=missed)
    rt.testing.drain()
    # the runtime was down for 55 minutes: occurrences at 10, 20, 30, 40 and 50 were missed
    later = at(rt, minutes=55)
    for _ in range(10):
        rt.testing.run_due_reminders(later)
    assert ref.snapshot()["fired"] == ["recurring"] * expected
    assert count_rows(rt, "reminders") == 1  # still scheduled for the next occurrence


def test_a_reschedule_during_a_firing_is_not_lost(make_runtime: Callable[..., Runtime]) -> None:
    """Occurrences are versioned: a firing that read an older version does nothing."""
    rt = make_runtime(workers=0)
    rt.register(Clock)
    ref = rt.ref(Clock, "v")
    ref.start.send()
    rt.testing.drain()
    store = rt.store
    with store.read() as tx:
        (reminder,) = store.outbox.due_reminders(
            tx, ["Clock"], now=db_now(rt) + 4_000_000, limit=10
        )
    ref.move.send(hours=5)  # the actor reschedules while the scheduler holds the old row
    rt.testing.drain()
    fired = store.transact(
        lambda tx: store.outbox.fire_reminder(
            tx, reminder, now=db_now(rt) + 4_000_000, message_id="x" * 32
        )
    )
    assert fired is None
    assert count_rows(rt, "reminders") == 1
    assert rt.testing.run_due_reminders(at(rt, hours=6)) == 1
    assert ref.snapshot()["fired"] == ["moved"]


def test_reminder_fires_at_its_due_time_with_a_running_worker(
    make_runtime: Callable[..., Runtime],
) -> None:
    class Soon(Actor):
        fired: int = 0

        def arm(self) -> None:
            self.schedule(delay=0.3).ring()

        def ring(self) -> None:
            self.fired += 1

    with make_runtime(workers=1, poll_interval=5.0) as rt:
        ref = rt.ref(Soon, "s")
        ref.arm()
        deadline = datetime.now(UTC) + timedelta(seconds=4)
        while ref.snapshot()["fired"] == 0 and datetime.now(UTC) < deadline:
            threading.Event().wait(0.02)
        # with a 5 s poll interval, only the due-time wake-up can have fired it this soon
        assert ref.snapshot()["fired"] == 1


RUNTIMES: list[Runtime] = []


class Sender(Actor):
    sent: int = 0

    def fan_out(self, n: int, fail: bool = False) -> None:
        for i in range(n):
            self.send_to(Receiver, f"r{i}").receive(value=i)
        self.sent += n
        if fail:
            raise Rejected("abort")

    def later(self) -> None:
        self.send_to(Receiver, "late", delay=timedelta(hours=1)).receive(value=-1)

    def direct(self) -> None:
        RUNTIMES[0].ref(Receiver, "x").receive(value=1)


class Receiver(Actor):
    values: list[int] = []

    def receive(self, value: int) -> int:
        self.values.append(value)
        return len(self.values)


def test_messages_to_other_actors_commit_with_the_turn_exactly_once(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0)
    rt.register(Receiver)
    rt.ref(Sender, "s").fan_out.send(n=3)
    rejected = rt.ref(Sender, "s").fan_out.send(n=2, fail=True)
    rt.testing.drain()
    with pytest.raises(Rejected):
        rejected.result()
    assert [rt.ref(Receiver, f"r{i}").snapshot()["values"] for i in range(3)] == [[0], [1], [2]]
    assert count_rows(rt, "messages", "operation = 'receive'") == 3


def test_delayed_actor_message_enters_the_mailbox_when_due(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0)
    rt.register(Receiver)
    rt.ref(Sender, "s").later.send()
    rt.testing.drain()
    late = rt.ref(Receiver, "late")
    late.receive.send(value=1)  # not blocked by the delayed message
    rt.testing.drain()
    assert late.snapshot()["values"] == [1]
    rt.testing.run_due_reminders(at(rt, hours=2))
    assert late.snapshot()["values"] == [1, -1]


def test_calling_another_actor_directly_from_a_turn_is_refused(
    make_runtime: Callable[..., Runtime],
) -> None:
    with make_runtime(workers=1) as rt:
        RUNTIMES[:] = [rt]
        message = rt.ref(Sender, "d").direct.send()
        with pytest.raises(MessageFailed) as info:
            message.wait(timeout=10)
    RUNTIMES.clear()
    assert info.value.error["type"] == "CallInsideTurn"
    assert "send_to" in info.value.error["message"]
    assert count_rows(rt, "messages", "status = 'dead' AND attempts = 1") == 1


def test_async_effect_handlers_run_too(make_runtime: Callable[..., Runtime]) -> None:
    import asyncio

    seen: list[tuple[str, int]] = []

    async def charge(ctx: EffectContext, amount: int) -> dict[str, int]:
        await asyncio.sleep(0)
        seen.append((ctx.id, amount))
        return {"charged": amount}

    rt = make_runtime(workers=0)
    rt.register(Payment)
    rt.effect("charge_card")(charge)
    ref = rt.ref(Payment, "async")
    ref.charge.send(amount=7)
    rt.testing.drain()
    assert ref.snapshot()["state"] == "paid"
    assert ref.snapshot()["outcome"]["result"] == {"charged": 7}
    assert [amount for _, amount in seen] == [7]


class Alarm(Actor):
    rang: list[str] = []

    def set(self, at_ms: int, label: str = "ring", every_minutes: int | None = None) -> None:
        every = None if every_minutes is None else timedelta(minutes=every_minutes)
        when = datetime.fromtimestamp(at_ms / 1000, UTC)
        self.schedule(at=when, every=every).ring(label=label)

    def weekly(self, expression: str = "0 9 * * MON") -> None:
        self.schedule(cron=expression, timezone="Europe/Paris", key="w").ring(label="weekly")

    def ring(self, label: str) -> None:
        self.rang.append(label)


class ReminderEvents(Instrumentation):
    def __init__(self) -> None:
        self.events: list[str] = []

    def reminders_changed(self, message: Any, changes: Any) -> None:
        self.events.extend(change.event for change in changes)


def test_scheduling_a_reminder_again_as_it_stands_is_unchanged_and_keeps_its_firing(
    make_runtime: Callable[..., Runtime],
) -> None:
    """Same time, arguments, period and policy: reported ``unchanged``, its version is
    not bumped, so a firing that read it goes through; anything else moves it."""
    rt = make_runtime(workers=0)
    rt.register(Alarm)
    seen = ReminderEvents()
    observe(rt, seen)
    ref = rt.ref(Alarm, "a")
    store = rt.store
    when = db_now(rt) + 3_600_000

    def stored() -> tuple[int, int]:
        with store.read() as tx:
            row = tx.row("SELECT version, due_at FROM solid_reminders WHERE operation = 'ring'")
        return int(row[0]), int(row[1])

    ref.set.send(at_ms=when)
    rt.testing.drain()
    assert stored() == (1, when)
    with store.read() as tx:  # the scheduler reads the due reminder ...
        (reminder,) = store.outbox.due_reminders(tx, ["Alarm"], now=when + 1, limit=10)
    ref.set.send(at_ms=when)  # ... the actor schedules it again, as it stands ...
    rt.testing.drain()
    assert seen.events == ["scheduled", "unchanged"]
    assert stored() == (1, when)
    fired = store.transact(  # ... and the firing goes through
        lambda tx: store.outbox.fire_reminder(tx, reminder, now=when + 1, message_id="f" * 32)
    )
    assert fired is not None
    rt.testing.drain()
    assert ref.snapshot()["rang"] == ["ring"]
    assert count_rows(rt, "reminders") == 0  # a one-shot reminder: gone once fired

    # Anything that differs moves it: the time, the arguments, the period.
    seen.events.clear()
    ref.set.send(at_ms=when)
    ref.set.send(at_ms=when + 1000)
    ref.set.send(at_ms=when + 1000, label="other")
    ref.set.send(at_ms=when + 1000, label="other", every_minutes=5)
    ref.set.send(at_ms=when + 1000, label="other", every_minutes=5)
    rt.testing.drain()
    assert seen.events == ["scheduled", "replaced", "replaced", "replaced", "unchanged"]
    assert stored() == (4, when + 1000)

    # A cron schedule scheduled again lands on the same next occurrence: unchanged.
    seen.events.clear()
    ref.weekly.send()
    ref.weekly.send()
    ref.weekly.send(expression="0 10 * * MON")
    rt.testing.drain()
    assert seen.events == ["scheduled", "unchanged", "replaced"]
