"""Failure paths: retries with strict order, dead letters, deterministic failures (2.7, §6)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import ClassVar

import pytest

from solid_objects import Actor, Runtime
from solid_objects.errors import MessageFailed

from .conftest import count_rows


class Flaky(Actor):
    """``work`` fails until ``failures_left[actor_id]`` reaches zero (process-local knob)."""

    failures_left: ClassVar[dict[str, int]] = {}
    calls: ClassVar[list[str]] = []
    lock: ClassVar[threading.Lock] = threading.Lock()
    log: list[str] = []

    def work(self, tag: str) -> list[str]:
        with Flaky.lock:
            Flaky.calls.append(tag)
            left = Flaky.failures_left.get(self.actor_id, 0)
            if left > 0:
                Flaky.failures_left[self.actor_id] = left - 1
                self.log.append(f"partial-{tag}")  # must be rolled back
                raise ConnectionError(f"transient failure for {tag}")
        self.log.append(tag)
        return list(self.log)


@pytest.fixture(autouse=True)
def reset_flaky() -> None:
    Flaky.failures_left.clear()
    Flaky.calls.clear()


def test_retryable_failure_rolls_back_retries_and_blocks_later_messages(
    make_runtime: Callable[..., Runtime],
) -> None:
    Flaky.failures_left["a"] = 2
    with make_runtime(max_attempts=5) as rt:
        ref = rt.ref(Flaky, "a")
        first = ref.work.send(tag="first")
        second = ref.work.send(tag="second")
        assert first.wait(timeout=10) == ["first"]
        assert second.wait(timeout=10) == ["first", "second"]
    # the second message never ran before the first succeeded (strict order)
    assert Flaky.calls == ["first", "first", "first", "second"]
    assert count_rows(rt, "messages", "status = 'completed' AND attempts = 3") == 1


def test_message_becomes_a_dead_letter_after_max_attempts_then_mailbox_moves_on(
    make_runtime: Callable[..., Runtime],
) -> None:
    Flaky.failures_left["d"] = 100
    with make_runtime(max_attempts=3) as rt:
        ref = rt.ref(Flaky, "d")
        poisoned = ref.work.send(tag="poison")
        with pytest.raises(MessageFailed) as info:
            poisoned.wait(timeout=10)
        assert info.value.message_id == poisoned.id
        assert info.value.error["type"] == "ConnectionError"
        Flaky.failures_left["d"] = 0
        assert ref.work(tag="after") == ["after"]
    assert Flaky.calls.count("poison") == 3
    assert poisoned.status() == "dead"


class Versioned(Actor):
    actor_type = "Versioned"
    n: int = 0

    def old_op(self) -> int:
        return 1

    def takes_int(self, x: int) -> int:
        return x


class VersionedLater(Actor):
    """The same actor type after a deploy removed ``old_op`` and changed ``takes_int``."""

    actor_type = "Versioned"
    n: int = 0

    def takes_int(self, x: int, y: int) -> int:
        return x + y


def test_stored_message_for_a_removed_operation_fails_as_unknown_operation(
    make_runtime: Callable[..., Runtime],
) -> None:
    caller = make_runtime(workers=0)
    gone = caller.ref(Versioned, "v").old_op.send()
    changed = caller.ref(Versioned, "v").takes_int.send(x=1)
    # No live process runs old_op, and it may not wait (incapable_timeout=0).
    worker = make_runtime(workers=0, incapable_timeout=0)
    worker.register(VersionedLater)
    worker.testing.drain()
    with pytest.raises(MessageFailed) as info:
        gone.result()
    assert info.value.error["type"] == "UnknownOperation"
    assert "no live process runs Versioned.old_op" in info.value.error["message"]
    with pytest.raises(MessageFailed) as info:
        changed.result()
    assert info.value.error["type"] == "InvalidArguments"
    # deterministic: failed at the first attempt, never retried
    assert count_rows(caller, "messages", "status = 'dead' AND attempts = 1") == 2


class BadResult(Actor):
    value: int = 0

    def wrong_type(self) -> int:
        return "not an int"  # type: ignore[return-value]

    def not_json(self) -> object:
        return object()

    def bad_state(self) -> None:
        self.value = "x"  # type: ignore[assignment]


@pytest.mark.parametrize("operation", ["wrong_type", "not_json", "bad_state"])
def test_results_and_state_that_break_their_annotations_fail_at_once(
    make_runtime: Callable[..., Runtime], operation: str
) -> None:
    rt = make_runtime(workers=0)
    message = getattr(rt.ref(BadResult, "b"), operation).send()
    rt.testing.drain()
    with pytest.raises(MessageFailed):
        message.result()
    assert count_rows(rt, "messages", "status = 'dead' AND attempts = 1") == 1
    assert rt.ref(BadResult, "b").snapshot() == {"value": 0}


class Migrating(Actor):
    actor_type = "Migrating"
    count: int = 0

    def bump(self) -> int:
        self.count += 1
        return self.count


class MigratingV2(Actor):
    actor_type = "Migrating"
    state_version = 2
    migrations = {1: lambda s: {"total": s["count"] * 10}}
    total: int = 0

    def bump(self) -> int:
        self.total += 1
        return self.total


class MigratingBroken(Actor):
    actor_type = "Migrating"
    state_version = 2
    migrations = {1: lambda s: 1 // 0}
    total: int = 0

    def bump(self) -> int:
        return self.total


def test_state_migrates_from_an_older_version(make_runtime: Callable[..., Runtime]) -> None:
    v1 = make_runtime(workers=0)
    v1.ref(Migrating, "m").bump.send()
    v1.testing.drain()
    v2 = make_runtime(workers=0)
    message = v2.ref(MigratingV2, "m").bump.send()
    v2.testing.drain()
    assert message.result() == 11
    assert v2.ref(MigratingV2, "m").snapshot() == {"total": 11}
    # old code refuses state written by the newer version instead of corrupting it:
    # it leaves it for newer code, and with none live (and no wait) it is dead
    with make_runtime(workers=1, max_attempts=2, incapable_timeout=0) as old:
        stale = old.ref(Migrating, "m").bump.send()
        with pytest.raises(MessageFailed) as info:
            stale.wait(timeout=10)
    assert info.value.error["type"] == "StateMigrationError"
    assert "no live process runs state version 2 of Migrating" in info.value.error["message"]
    assert v2.ref(MigratingV2, "m").snapshot() == {"total": 11}


def test_failing_migration_uses_the_attempt_budget_and_never_loops(
    make_runtime: Callable[..., Runtime],
) -> None:
    v1 = make_runtime(workers=0)
    v1.ref(Migrating, "x").bump.send()
    v1.testing.drain()
    with make_runtime(workers=1, max_attempts=3) as broken:
        message = broken.ref(MigratingBroken, "x").bump.send()
        with pytest.raises(MessageFailed) as info:
            message.wait(timeout=10)
    assert info.value.error["type"] == "StateMigrationError"
    assert count_rows(v1, "messages", "status = 'dead' AND attempts = 3") == 1


def test_a_message_that_keeps_killing_its_worker_becomes_a_dead_letter(
    make_runtime: Callable[..., Runtime],
) -> None:
    """Each crash mid-turn leaves the attempt counter raised; past the budget, no re-run."""
    rt = make_runtime(workers=0, max_attempts=3)
    message = rt.ref(Flaky, "k").work.send(tag="killer")
    with rt.store.read() as tx:
        pk = tx.scalar("SELECT pk FROM solid_actors WHERE actor_id = 'k'")
    for n in range(3):  # three claims that never commit: three workers died in turn
        with rt.store.read() as tx:
            generation = tx.scalar(
                "SELECT lease_generation FROM solid_actors WHERE pk = :pk", {"pk": pk}
            )
        claimed = rt.store.transact(
            lambda tx, g=generation, n=n: rt.store.leases.claim(tx, pk, g, f"dead-worker-{n}", 1)
        )
        assert claimed is not None
        rt.store.transact(
            lambda tx: tx.run(
                "UPDATE solid_actors SET lease_expires_at = 0 WHERE pk = :pk", {"pk": pk}
            )
        )
    rt.testing.drain()
    with pytest.raises(MessageFailed) as info:
        message.result()
    assert "without finishing" in info.value.error["message"]
    assert "killer" not in Flaky.calls


def test_a_process_retaking_its_own_expired_lease_uses_up_no_attempt(
    make_runtime: Callable[..., Runtime],
) -> None:
    """A live process whose lease expired (paused, slow commit) is not a crash: retaking
    the actor does not count as another start of the head message."""
    rt = make_runtime(workers=0, max_attempts=2)
    message = rt.ref(Flaky, "p").work.send(tag="paused")
    with rt.store.read() as tx:
        pk = tx.scalar("SELECT pk FROM solid_actors WHERE actor_id = 'p'")
    for _ in range(5):
        with rt.store.read() as tx:
            generation = tx.scalar(
                "SELECT lease_generation FROM solid_actors WHERE pk = :pk", {"pk": pk}
            )
        assert rt.store.transact(
            lambda tx, g=generation: rt.store.leases.claim(tx, pk, g, rt.owner, 1)
        )
        rt.store.transact(
            lambda tx: tx.run(
                "UPDATE solid_actors SET lease_expires_at = 0 WHERE pk = :pk", {"pk": pk}
            )
        )
    with rt.store.read() as tx:
        assert tx.scalar("SELECT attempt FROM solid_actors WHERE pk = :pk", {"pk": pk}) == 1
    rt.testing.drain()
    assert message.result() == ["paused"]
