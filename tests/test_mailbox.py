"""Mailbox semantics: idempotency, delays, destroy, and the lease fence (2.1, 2.3, §6)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from solid_objects import Actor, Runtime
from solid_objects.errors import ActorDestroyed, IdempotencyConflict, LeaseLost
from solid_objects.store import Lease

from .conftest import count_rows, db_now


class Journal(Actor):
    entries: list[str] = []

    def write(self, text: str, extra: dict[str, int] | None = None) -> int:
        self.entries.append(text)
        return len(self.entries)


def test_idempotency_key_returns_the_same_message_compared_as_canonical_json(
    make_runtime: Callable[..., Runtime],
) -> None:
    with make_runtime() as rt:
        ref = rt.ref(Journal, "j")
        keyed = ref.write.with_options(idempotency_key="once")
        first = keyed.send(text="a", extra={"x": 1, "y": 2})
        again = keyed.send(extra={"y": 2, "x": 1}, text="a")  # same meaning, other order
        assert again.id == first.id
        assert first.wait() == 1
        assert keyed(text="a", extra={"x": 1, "y": 2}) == 1  # a repeat after completion
        assert ref.snapshot() == {"entries": ["a"]}
        with pytest.raises(IdempotencyConflict):
            keyed.send(text="b")
        # keys are scoped per actor
        assert rt.ref(Journal, "other").write.with_options(idempotency_key="once")(text="z") == 1


def test_delayed_message_does_not_block_messages_due_before_it(
    make_runtime: Callable[..., Runtime],
) -> None:
    with make_runtime() as rt:
        ref = rt.ref(Journal, "d")
        later = ref.write.with_options(delay=timedelta(milliseconds=400)).send(text="later")
        assert later.status() == "scheduled"
        assert ref.write(text="now") == 1  # did not wait behind the delayed message
        started = time.monotonic()
        assert later.wait(timeout=10) == 2
        assert time.monotonic() - started > 0.2
        assert ref.snapshot() == {"entries": ["now", "later"]}


def test_run_due_reminders_fires_delayed_work_at_a_given_database_time(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0)
    ref = rt.ref(Journal, "r")
    in_three_days = ref.write.with_options(delay=timedelta(days=3)).send(text="follow-up")
    assert rt.testing.drain() == 0
    assert rt.testing.run_due_reminders(datetime.now(UTC) + timedelta(days=1)) == 0
    assert in_three_days.status() == "scheduled"
    assert rt.testing.run_due_reminders(datetime.now(UTC) + timedelta(days=3, minutes=1)) == 1
    assert in_three_days.result() == 1


def test_destroy_ends_the_incarnation_and_pending_callers_get_actor_destroyed(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0)
    ref = rt.ref(Journal, "x")
    ref.write.send(text="kept")
    rt.testing.drain()
    pending = ref.write.send(text="never")
    delayed = ref.write.with_options(delay=60).send(text="never either")
    keyed = ref.write.with_options(idempotency_key="k").send(text="keyed")
    assert ref.destroy() is True
    assert ref.destroy() is False
    for message in (pending, delayed, keyed):
        assert message.status() == "destroyed"
        with pytest.raises(ActorDestroyed):
            message.result()
    # a new incarnation starts from defaults, with fresh idempotency keys
    assert ref.snapshot() == {"entries": []}
    fresh = ref.write.with_options(idempotency_key="k").send(text="new life")
    assert fresh.id != keyed.id
    rt.testing.drain()
    assert fresh.result() == 1


def test_a_stale_lease_cannot_commit_over_a_newer_holder(
    make_runtime: Callable[..., Runtime],
) -> None:
    """The fence is in the UPDATE itself: an expired holder's commit changes nothing."""
    rt = make_runtime(workers=0)
    store = rt.store
    message = rt.ref(Journal, "f").write.send(text="m")
    with store.read() as tx:
        pk, generation = tx.row("SELECT pk, lease_generation FROM solid_actors")
    stale = store.transact(lambda tx: store.leases.claim(tx, pk, generation, "worker-a", 60_000))
    assert stale is not None and stale.head is not None
    # worker-a stalls past its lease; worker-b takes over and commits
    store.transact(
        lambda tx: tx.run("UPDATE solid_actors SET lease_expires_at = 0 WHERE pk = :pk", {"pk": pk})
    )
    fresh = store.transact(
        lambda tx: store.leases.claim(tx, pk, stale.lease.generation, "worker-b", 60_000)
    )
    assert fresh is not None and fresh.lease.generation == stale.lease.generation + 1
    head = fresh.head
    assert head is not None
    store.transact(
        lambda tx: store.turns.finish_turn(
            tx,
            fresh.lease,
            head,
            status="completed",
            state='{"entries":["by-b"]}',
            state_version=1,
            result="1",
            error=None,
            attempt=1,
            lease_ms=60_000,
        )
    )
    # worker-a wakes up and tries to commit its (stale) turn
    stale_head = stale.head
    with pytest.raises(LeaseLost):
        store.transact(
            lambda tx: store.turns.finish_turn(
                tx,
                stale.lease,
                stale_head,
                status="completed",
                state='{"entries":["by-a"]}',
                state_version=1,
                result="1",
                error=None,
                attempt=1,
                lease_ms=60_000,
            )
        )
    assert rt.ref(Journal, "f").snapshot() == {"entries": ["by-b"]}
    assert message.result() == 1
    # the same holds for a lease that merely expired, with nobody else taking over
    forged = Lease(pk, "worker-b", fresh.lease.token, fresh.lease.generation)
    store.transact(
        lambda tx: tx.run("UPDATE solid_actors SET lease_expires_at = 0 WHERE pk = :pk", {"pk": pk})
    )
    late = rt.ref(Journal, "f").write.send(text="late")
    with store.read() as tx:
        late_row = store.message(tx, late.id)
    assert late_row is not None
    with pytest.raises(LeaseLost):
        store.transact(
            lambda tx: store.turns.finish_turn(
                tx,
                forged,
                late_row,
                status="completed",
                state='{"entries":[]}',
                state_version=1,
                result="0",
                error=None,
                attempt=1,
                lease_ms=60_000,
            )
        )
    assert count_rows(rt, "messages", "status = 'completed'") == 1


def test_idle_activation_keeps_a_renewed_lease_then_is_released(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=1, lease_duration=0.3, idle_timeout=1.0)
    with rt:
        ref = rt.ref(Journal, "idle")
        ref.write(text="a")
        time.sleep(0.6)  # twice the lease: the cached activation must have been renewed
        live = count_rows(
            rt, "actors", f"lease_owner IS NOT NULL AND lease_expires_at > {db_now(rt)}"
        )
        assert live == 1
        assert ref.write(text="b") == 2
        deadline = time.monotonic() + 5
        while count_rows(rt, "actors", "lease_owner IS NOT NULL") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert count_rows(rt, "actors", "lease_owner IS NOT NULL") == 0
        assert ref.write(text="c") == 3


def test_shutdown_releases_every_lease(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(workers=2, lease_duration=60)
    with rt:
        for i in range(5):
            rt.ref(Journal, f"s{i}").write(text="x")
        assert count_rows(rt, "actors", "lease_owner IS NOT NULL") == 5
    assert count_rows(rt, "actors", "lease_owner IS NOT NULL") == 0
