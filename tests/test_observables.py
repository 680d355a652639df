"""Observables and the broadcast outbox: what a turn broadcasts, and when."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from solid_objects import Actor, Rejected, Runtime, payload
from solid_objects.errors import InvalidActorDefinition, LeaseLost
from solid_objects.store.broadcasts import BroadcastRow

from .conftest import count_rows


class ObservedScore(Actor):
    points: int = 0
    title: str = ""
    secret: str = ""

    observables = {"points": "value", "title": "invalidate"}

    def score(self, n: int = 1) -> int:
        self.points += n
        return self.points

    def rename(self, title: str) -> None:
        self.title = title

    def hide(self, secret: str) -> None:
        self.secret = secret

    def refuse(self) -> None:
        self.points += 100
        raise Rejected("no", "never")

    def noop(self) -> int:
        return self.points


class ObservedNotes(Actor):
    notes: dict[str, str] = {}

    def write(self, who: str, note: str) -> None:
        self.notes = {**self.notes, who: note}

    @payload
    def mine(self, context: Any) -> dict[str, str]:
        return {"note": self.notes.get(str(context), "")}


class UnobservedTally(Actor):
    n: int = 0

    def bump(self) -> int:
        self.n += 1
        return self.n


def broadcasts(rt: Runtime, cls: type[Actor], actor_id: str) -> list[BroadcastRow]:
    with rt.store.read() as tx:
        return rt.store.broadcasts.broadcasts_after(tx, cls.actor_type, actor_id, 0, 0, 1000)


def test_value_and_invalidation_changes_commit_with_the_turn(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime()
    with rt:
        ref = rt.ref(ObservedScore, "s")
        ref.score(n=2)
        ref.rename(title="new")
        ref.hide(secret="s3cret")  # not observed: no broadcast
        ref.noop()  # state unchanged: no broadcast
        with pytest.raises(Rejected):
            ref.refuse()  # rolled back: no broadcast
        ref.score(n=1)
    rows = broadcasts(rt, ObservedScore, "s")
    assert [json.loads(r.changes) for r in rows] == [
        {"values": {"points": 2}, "invalidated": [], "payloads": False},
        {"values": {}, "invalidated": ["title"], "payloads": False},
        {"values": {"points": 3}, "invalidated": [], "payloads": False},
    ]
    assert [r.revision for r in rows] == [1, 2, 6]  # the seq of each turn
    assert len({r.incarnation for r in rows}) == 1
    assert all("s3cret" not in r.changes for r in rows)


def test_an_actor_without_observables_writes_no_broadcast(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime()
    with rt:
        rt.ref(UnobservedTally, "t").bump()
    assert count_rows(rt, "broadcasts") == 0


def test_payload_classes_broadcast_every_state_change_without_values(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime()
    with rt:
        rt.ref(ObservedNotes, "n").write(who="alice", note="private")
    (row,) = broadcasts(rt, ObservedNotes, "n")
    assert json.loads(row.changes) == {"values": {}, "invalidated": [], "payloads": True}
    assert "private" not in row.changes


def test_a_payload_is_not_an_operation() -> None:
    assert ObservedNotes.__solid_definition__.operation("mine") is None
    observables = ObservedNotes.__solid_definition__.observables
    assert observables is not None and set(observables.payloads) == {"mine"}


def test_destroy_and_recreate_is_a_later_incarnation(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime()
    with rt:
        ref = rt.ref(ObservedScore, "d")
        ref.score(n=5)
        ref.destroy()
        ref.score(n=1)
    first, destroyed, again = broadcasts(rt, ObservedScore, "d")
    assert json.loads(destroyed.changes) == {"destroyed": True}
    assert first.incarnation == destroyed.incarnation < again.incarnation
    assert destroyed.revision > first.revision
    assert json.loads(again.changes)["values"] == {"points": 1}
    # a reader past the old incarnation reads only the new one
    with rt.store.read() as tx:
        later = rt.store.broadcasts.broadcasts_after(
            tx, "ObservedScore", "d", destroyed.incarnation, 10**9, 9
        )
    assert later == [again]


def test_a_lost_lease_writes_no_broadcast(make_runtime: Callable[..., Runtime]) -> None:
    """The broadcast is part of the fenced commit: refused with it."""
    from solid_objects.engine.turn import Limits, execute

    rt = make_runtime(workers=0)
    store = rt.store
    rt.ref(ObservedScore, "stale").score.send(n=1)
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
    definition = rt.registry.get("ObservedScore")
    instance = definition.instantiate("stale", definition.default_state())
    head = stale.head
    outcome = execute(definition, instance, None, head, Limits(1 << 20, 1 << 20))
    assert outcome.staged is not None and outcome.staged.broadcast is not None
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
    assert count_rows(rt, "broadcasts") == 0


@pytest.mark.parametrize(
    "declared",
    [{"missing": "value"}, {"points": "loud"}, 42],
)
def test_bad_declarations_fail_at_class_definition(declared: object) -> None:
    with pytest.raises(InvalidActorDefinition):

        class BadObserved(Actor, auto_register=False):
            points: int = 0
            observables = declared  # type: ignore[assignment]


def test_old_broadcasts_are_pruned_but_the_end_of_an_incarnation_stays(
    make_runtime: Callable[..., Runtime],
) -> None:
    from .conftest import db_now

    rt = make_runtime()
    with rt:
        ref = rt.ref(ObservedScore, "old")
        for _ in range(3):
            ref.score(n=1)
        ref.destroy()
        rt.ref(ObservedScore, "kept").score(n=1)
    assert count_rows(rt, "broadcasts") == 5
    assert rt.store.broadcasts.prune_broadcasts(db_now(rt) + 1000) == 4
    (left,) = broadcasts(rt, ObservedScore, "old")
    assert json.loads(left.changes) == {"destroyed": True}
    assert broadcasts(rt, ObservedScore, "kept") == []


def test_automatic_retention_prunes_broadcasts(make_runtime: Callable[..., Runtime]) -> None:
    import time

    from .conftest import db_now

    rt = make_runtime(workers=1, retention=0.2, retention_interval=3600)
    with rt:
        rt.ref(ObservedScore, "auto").score(n=1)
        assert len(broadcasts(rt, ObservedScore, "auto")) == 1
        with rt.store.read() as tx:
            written = tx.scalar("SELECT created_at FROM solid_broadcasts")
        while db_now(rt) <= written + 200:  # the row is older than the retention
            time.sleep(0.05)
        assert rt.kernel.pool.poller.retention.prune()["broadcasts"] == 1
    assert count_rows(rt, "broadcasts") == 0


class ObservedLedger(Actor):
    total: int = 0

    observables = ["total"]

    def book(self, amount: int) -> int:
        self.total += amount
        self.commit_action("mirror_total", total=self.total)
        return self.total


def test_a_commit_action_that_fails_takes_the_broadcast_with_it(
    make_runtime: Callable[..., Runtime],
) -> None:
    from solid_objects.errors import MessageFailed

    rt = make_runtime(max_attempts=1)
    failing = {"on": True}

    def mirror_total(ctx: Any, total: int) -> None:
        if failing["on"]:
            raise RuntimeError("the application's table is locked")

    rt.commit_action("mirror_total")(mirror_total)
    with rt:
        with pytest.raises(MessageFailed):
            rt.ref(ObservedLedger, "l").book(amount=5)
        assert count_rows(rt, "broadcasts") == 0
        failing["on"] = False
        rt.ref(ObservedLedger, "l").book(amount=2)
    (row,) = broadcasts(rt, ObservedLedger, "l")
    assert json.loads(row.changes)["invalidated"] == ["total"]
