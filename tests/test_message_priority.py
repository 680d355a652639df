"""Message priority: an actor with an urgent message queued is claimed before actors
with only plainer ones, and one actor's mailbox keeps its order (all databases)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import text

from solid_objects import Actor, Runtime
from solid_objects.admin import allow
from solid_objects.database import engine_for
from solid_objects.errors import InvalidArguments, MessageFailed
from tests.apps.queueing_app import Job
from tests.apps.turnlimit_app import LOG_TABLE, create_log
from tests.test_message_coalescing import dashboard_page
from tests.test_processes import STEP, Cluster, cluster, wait_until

from .conftest import count_rows

__all__ = ["cluster"]


def start_order(url: str) -> list[str]:
    """The actors whose turns started, in the order the database's clock stamped."""
    engine = engine_for(url)
    try:
        with engine.connect() as conn:
            found = conn.execute(
                text(f"SELECT actor_id FROM {LOG_TABLE} WHERE phase = 'start' ORDER BY at_us")
            )
            return [str(r[0]) for r in found]
    finally:
        engine.dispose()


@pytest.mark.slow
def test_urgent_actors_are_claimed_first_by_worker_processes(cluster: Cluster) -> None:
    """Thirty plain messages to thirty actors, then four urgent ones to four others,
    all queued before two worker processes of one worker each start: the turns' own
    start rows, stamped by the database's clock, show the urgent actors among the
    first, though they were sent last."""
    rt = cluster.caller()
    engine = engine_for(cluster.url)
    create_log(engine)
    engine.dispose()
    plain = [rt.ref(Job, f"p{i:02}").work.send(ms=30) for i in range(30)]
    urgent = [
        rt.ref(Job, f"u{i}").work.with_options(priority=5 + i).send(ms=30) for i in range(4)
    ]
    cluster.start_workers(2, app="tests.apps.queueing_app:runtime", workers=1, poll_interval=0.05)
    assert [m.wait(timeout=STEP * 3) for m in plain + urgent] == [
        f"p{i:02}" for i in range(30)
    ] + [f"u{i}" for i in range(4)]
    order = start_order(cluster.url)
    assert len(order) == 34
    urgent_at = [i for i, actor in enumerate(order) if actor.startswith("u")]
    # Two processes claim up to two actors each per round, the urgent ones first.
    assert max(urgent_at) < 8, order


class Tally(Actor, auto_register=False):
    seen: list[str] = []

    def note(self, item: str) -> list[str]:
        self.seen.append(item)
        return self.seen

    def forward(self, to: str, item: str, priority: int) -> None:
        self.send_to(Tally, to, priority=priority).note(item=item)


def test_an_urgent_message_waits_for_the_ones_queued_before_it_in_its_actor(
    make_runtime: Callable[..., Runtime],
) -> None:
    """Priority never reorders one mailbox: a sender's messages run in the order sent,
    whatever their priorities, and so do messages of different senders."""
    import prometheus_client  # the dev extra

    from solid_objects.observability import PrometheusMetrics, observe

    caller = make_runtime(workers=0, actors=[Tally])
    registry = prometheus_client.CollectorRegistry()
    observe(caller, PrometheusMetrics(registry))
    tally = caller.ref(Tally, "t")
    sent = [
        tally.note.send(item="a"),
        tally.note.with_options(priority=9).send(item="b"),
        tally.note.send(item="c"),
        tally.note.with_options(priority=3).send(item="d"),
    ]
    forward = caller.ref(Tally, "f").forward.send(to="t", item="e", priority=9)
    caller.admin.set_policy(allow({"ops:*": "*"}))
    shown = caller.admin.as_principal("ops:test").inspect_actor("Tally", "t").queued
    assert [m.priority for m in shown] == [0, 9, 0, 3]
    assert "(priority 9)" in dashboard_page(caller, "/actors/Tally/t")
    for rank, count in (("9", 1), ("3", 1), ("5", None)):
        labels = {"actor_type": "Tally", "priority": rank}
        assert registry.get_sample_value("solid_urgent_messages", labels) == count
    with make_runtime(actors=[Tally]) as worker:
        assert sent[-1].wait(timeout=30) == ["a", "b", "c", "d"]
        forward.wait(timeout=30)  # its staged message is in t's mailbox, or ran
        seen = wait_until(
            lambda: (s := worker.ref(Tally, "t").snapshot()["seen"])[4:] and s, 30, "e to run"
        )
        assert seen == ["a", "b", "c", "d", "e"]
        # To an actor this process holds (the held actor's short path): still ranked.
        held = worker.ref(Tally, "t").note.with_options(priority=7)
        assert held.send(item="g").wait(timeout=30)[-1] == "g"
    assert count_rows(caller, "messages", "priority = 9") == 2
    assert count_rows(caller, "messages", "priority = 3") == 1
    assert count_rows(caller, "messages", "priority = 7") == 1


@pytest.mark.parametrize("bad", [-1, 10, True, 1.0, "1"])
def test_a_bad_priority_is_refused_and_writes_nothing(
    make_runtime: Callable[..., Runtime], bad: object
) -> None:
    caller = make_runtime(workers=0, actors=[Tally])
    with pytest.raises(InvalidArguments, match="priority"):
        caller.ref(Tally, "b").note.with_options(priority=bad).send(item="x")  # type: ignore[arg-type]
    assert count_rows(caller, "messages") == 0


def test_a_bad_priority_in_a_turn_fails_the_turn_and_stages_nothing(
    make_runtime: Callable[..., Runtime],
) -> None:
    with make_runtime(actors=[Tally]) as rt:
        with pytest.raises(MessageFailed, match="InvalidArguments: priority must be"):
            rt.ref(Tally, "f").forward(to="t", item="x", priority=12)
        rt.testing.drain(timeout=30)
        assert count_rows(rt, "messages", "actor_id = 't'") == 0
