"""Coalescing: a keyed message replaces the still-queued ones of its actor with the same
key and operation, never one a worker may have read (all databases)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable

import pytest

from solid_objects import Actor, AsyncRuntime, Runtime
from solid_objects.admin import allow
from solid_objects.errors import (
    ActorDestroyed,
    IdempotencyConflict,
    InvalidActorId,
    InvalidArguments,
)
from tests.apps.queueing_app import Recompute
from tests.test_processes import (
    LEASE_LOST,
    STEP,
    Cluster,
    cluster,
    poll_for,
    stop_outside_write_lock,
    wait_until,
)

from .conftest import count_rows

__all__ = ["cluster"]


def dashboard_page(rt: Runtime, path: str) -> str:
    """The dashboard's page at ``path``, for an operator (the policy must allow ops:)."""
    import warnings

    from solid_objects.web import dashboard

    with warnings.catch_warnings():  # Starlette 1.x prefers httpx2; httpx works the same
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    app = dashboard(rt, principal=lambda request: "ops:test")
    with TestClient(app) as client:
        response = client.get(path)
    assert response.status_code == 200, response.text
    return response.text


def rows_of(rt: Runtime, actor_id: str) -> list[tuple[str, int, str, str | None, str | None]]:
    """(id, seq, status, replaced_by, arguments) of the actor's messages, by seq."""
    with rt.store.read() as tx:
        return [
            (str(r[0]), int(r[1]), str(r[2]), r[3], r[4])
            for r in tx.rows(
                "SELECT id, seq, status, replaced_by, arguments FROM {messages} "
                "WHERE actor_id = :i ORDER BY seq",
                {"i": actor_id},
            )
        ]


def test_a_burst_of_keyed_sends_runs_once_with_the_last_arguments(
    make_runtime: Callable[..., Runtime],
) -> None:
    import prometheus_client  # the dev extra

    from solid_objects.observability import PrometheusMetrics, observe

    caller = make_runtime(workers=0, actors=[Recompute])
    registry = prometheus_client.CollectorRegistry()
    observe(caller, PrometheusMetrics(registry))
    run = caller.ref(Recompute, "r").run.with_options(coalesce_key="recompute")
    sent = [run.send(n=n) for n in range(5)]
    labels = {"actor_type": "Recompute", "operation": "run"}
    assert registry.get_sample_value("solid_messages_replaced_total", labels) == 4
    rows = rows_of(caller, "r")
    assert [r[2] for r in rows] == ["replaced"] * 4 + ["queued"]
    # Each replaced message names the one that replaced it: the chain ends at the last.
    assert [r[3] for r in rows[:4]] == [m.id for m in sent[1:]]
    assert sent[0].status() == "replaced"
    caller.admin.set_policy(allow({"ops:*": "*"}))
    shown = caller.admin.as_principal("ops:test").inspect_actor("Recompute", "r").queued
    assert [(m.status, m.coalesce_key, m.replaced_by) for m in shown] == [
        ("replaced", "recompute", m.id) for m in sent[1:]
    ] + [("queued", "recompute", None)]
    page = dashboard_page(caller, "/actors/Recompute/r")
    assert f"replaced by <code>{sent[1].id}</code>" in page
    with make_runtime(actors=[Recompute]) as worker:
        # Every sender gets the outcome of the message that ran: the last arguments.
        assert [m.wait(timeout=30) for m in sent] == [4] * 5
        assert [m.result() for m in sent] == [4] * 5
        assert worker.ref(Recompute, "r").snapshot()["ran"] == [4]
    assert [m.status() for m in sent] == ["replaced"] * 4 + ["completed"]
    # The worker passed each replaced one: retention may prune them like finished ones.
    assert count_rows(caller, "messages", "status = 'replaced' AND completed_at IS NULL") == 0


def test_the_head_of_a_held_actor_is_never_replaced_but_later_ones_are(
    make_runtime: Callable[..., Runtime],
) -> None:
    """With a live lease a worker may have the head in hand: it stays and runs; the
    keyed messages behind it, which no worker has read, are replaced."""
    caller = make_runtime(workers=0, actors=[Recompute])
    run = caller.ref(Recompute, "h").run.with_options(coalesce_key="k")
    head = run.send(n=0)
    caller.store.transact(  # a live lease: a worker may have the head in hand
        lambda tx: tx.run(
            "UPDATE {actors} SET lease_owner = 'elsewhere', lease_token = 'x', "
            "lease_expires_at = {now} + 600000 WHERE actor_id = 'h'"
        )
    )
    second, third = run.send(n=1), run.send(n=2)
    assert [r[2] for r in rows_of(caller, "h")] == ["queued", "replaced", "queued"]
    caller.store.transact(
        lambda tx: tx.run(
            "UPDATE {actors} SET lease_owner = NULL, lease_token = NULL, "
            "lease_expires_at = NULL WHERE actor_id = 'h'"
        )
    )
    with make_runtime(actors=[Recompute]) as worker:
        assert [m.wait(timeout=30) for m in (head, second, third)] == [0, 2, 2]
        assert worker.ref(Recompute, "h").snapshot()["ran"] == [0, 2]


def test_only_the_same_key_and_operation_are_replaced(
    make_runtime: Callable[..., Runtime],
) -> None:
    caller = make_runtime(workers=0, actors=[Recompute])
    ref = caller.ref(Recompute, "o")
    ref.run.with_options(coalesce_key="a").send(n=1)
    ref.run.with_options(coalesce_key="b").send(n=2)
    ref.run.send(n=3)
    last = ref.run.with_options(coalesce_key="a").send(n=4)
    assert [r[2] for r in rows_of(caller, "o")] == ["replaced", "queued", "queued", "queued"]
    with make_runtime(actors=[Recompute]) as worker:
        assert last.wait(timeout=30) == 4  # the last in the mailbox: all before it ran
        assert worker.ref(Recompute, "o").snapshot()["ran"] == [2, 3, 4]


def test_a_keyed_send_with_a_used_idempotency_key_is_the_earlier_message(
    make_runtime: Callable[..., Runtime],
) -> None:
    """The idempotency key is answered first: the duplicate replaces nothing and writes
    nothing; the same key with other arguments is a conflict that writes nothing."""
    caller = make_runtime(workers=0, actors=[Recompute])
    run = caller.ref(Recompute, "i").run
    first = run.with_options(coalesce_key="k", idempotency_key="once").send(n=1)
    later = run.with_options(coalesce_key="k").send(n=2)
    again = run.with_options(coalesce_key="k", idempotency_key="once").send(n=1)
    assert again.id == first.id
    with pytest.raises(IdempotencyConflict):
        run.with_options(coalesce_key="k", idempotency_key="once").send(n=3)
    assert [r[2] for r in rows_of(caller, "i")] == ["replaced", "queued"]
    with make_runtime(actors=[Recompute]) as worker:
        assert again.wait(timeout=30) == 2 == later.wait(timeout=30)
        assert worker.ref(Recompute, "i").snapshot()["ran"] == [2]


def test_a_keyed_send_in_an_application_transaction_replaces_only_once_it_commits(
    make_runtime: Callable[..., Runtime], db_url: str
) -> None:
    """``connection=``: the replacement is a write of the application's transaction,
    so a rollback leaves the earlier message queued, and a commit replaces it."""
    from sqlalchemy import create_engine

    caller = make_runtime(workers=0, actors=[Recompute])
    run = caller.ref(Recompute, "a").run
    first = run.with_options(coalesce_key="k").send(n=1)
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            run.with_options(coalesce_key="k", connection=conn).send(n=2)
            conn.rollback()
        assert [r[2] for r in rows_of(caller, "a")] == ["queued"]
        with engine.connect() as conn:
            run.with_options(coalesce_key="k", connection=conn).send(n=3)
            conn.commit()
    finally:
        engine.dispose()
    assert [r[2] for r in rows_of(caller, "a")] == ["replaced", "queued"]
    with make_runtime(actors=[Recompute]) as worker:
        assert first.wait(timeout=30) == 3
        assert worker.ref(Recompute, "a").snapshot()["ran"] == [3]


def test_the_async_face_sends_with_priority_and_coalesces(db_url: str) -> None:
    async def scenario() -> None:
        rt = AsyncRuntime(db_url, workers=0, actors=[Recompute])
        await rt.install()
        try:
            run = rt.ref(Recompute, "async").run
            first = await run.with_options(coalesce_key="k", priority=4).send(n=1)
            second = await run.with_options(coalesce_key="k").send(n=2)
            assert await first.status() == "replaced"
            assert await second.status() == "queued"
        finally:
            await rt.close()

    asyncio.run(scenario())
    with Runtime(db_url, workers=2, actors=[Recompute]) as worker:
        with worker.store.read() as tx:
            first_id = tx.scalar("SELECT id FROM {messages} WHERE priority = 4")
        assert worker.message(Recompute, str(first_id)).wait(timeout=30) == 2


class JournaledRecompute(Actor, auto_register=False):
    journaled = True
    ran: list[int] = []

    def run(self, n: int) -> int:
        self.ran.append(n)
        return n


def test_the_journal_records_a_replaced_message_as_replaced(
    make_runtime: Callable[..., Runtime],
) -> None:
    caller = make_runtime(workers=0, actors=[JournaledRecompute])
    run = caller.ref(JournaledRecompute, "j").run.with_options(coalesce_key="k")
    first, last = run.send(n=1), run.send(n=2)
    with make_runtime(actors=[JournaledRecompute]):
        assert last.wait(timeout=30) == 2 == first.wait(timeout=30)
    with caller.store.read() as tx:
        journal = tx.rows("SELECT message_id, status FROM solid_journal ORDER BY seq")
    assert [tuple(r) for r in journal] == [(first.id, "replaced"), (last.id, "completed")]


def test_destroying_an_actor_ends_its_replaced_messages_too(
    make_runtime: Callable[..., Runtime],
) -> None:
    """Both senders learn the actor was destroyed (the replacement was), and no
    replaced row is left unfinished for retention to skip forever."""
    caller = make_runtime(workers=0, actors=[Recompute])
    ref = caller.ref(Recompute, "d")
    sent = [ref.run.with_options(coalesce_key="k").send(n=n) for n in range(2)]
    assert ref.destroy() is True
    for m in sent:
        with pytest.raises(ActorDestroyed):
            m.result()
    assert [r[2] for r in rows_of(caller, "d")] == ["replaced", "destroyed"]
    assert count_rows(caller, "messages", "completed_at IS NULL") == 0


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"coalesce_key": ""}, InvalidActorId),
        ({"coalesce_key": 5}, InvalidActorId),
        ({"coalesce_key": "k", "delay": 1.0}, InvalidArguments),
    ],
)
def test_a_bad_coalesce_key_is_refused_and_writes_nothing(
    make_runtime: Callable[..., Runtime], options: dict[str, object], error: type[Exception]
) -> None:
    caller = make_runtime(workers=0, actors=[Recompute])
    caller.ref(Recompute, "b").run.with_options(coalesce_key="k").send(n=0)
    with pytest.raises(error):
        caller.ref(Recompute, "b").run.with_options(**options).send(n=1)  # type: ignore[arg-type]
    assert [r[2] for r in rows_of(caller, "b")] == ["queued"]


@pytest.mark.slow
def test_concurrent_keyed_senders_and_a_running_worker(cluster: Cluster) -> None:
    """Three threads send sixty keyed messages to one actor that a worker process
    runs, each turn 30 ms. From the rows: no replaced message ever ran (its number is
    not in the state, its status is still ``replaced``), every other one ran once,
    the last message enqueued ran last, and every sender got a number that ran."""
    rt = cluster.caller()
    cluster.start_workers(1, app="tests.apps.queueing_app:runtime", workers=2)
    run = rt.ref(Recompute, "c").run.with_options(coalesce_key="recompute")
    sent: list[list[object]] = [[], [], []]

    def sender(k: int) -> None:
        for i in range(20):
            sent[k].append(run.send(n=k * 100 + i, ms=30))

    threads = [threading.Thread(target=sender, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = [m.wait(timeout=STEP * 3) for k in range(3) for m in sent[k]]  # type: ignore[attr-defined]
    ran = rt.ref(Recompute, "c").snapshot()["ran"]
    rows = rows_of(rt, "c")
    assert len(rows) == 60
    numbers = {r[0]: int(str(r[4]).split('"n":')[1].split(",")[0].strip("} ")) for r in rows}
    replaced = [r for r in rows if r[3] is not None]
    assert replaced, "no message was replaced"
    assert all(r[2] == "replaced" for r in replaced)
    assert not {numbers[r[0]] for r in replaced} & set(ran)
    ran_rows = [r for r in rows if r[3] is None]
    assert all(r[2] == "completed" for r in ran_rows)
    assert [numbers[r[0]] for r in ran_rows] == ran  # each once, in mailbox order
    assert ran[-1] == numbers[rows[-1][0]]  # the last enqueued ran, last
    assert set(got) <= set(ran)


def lease_of(rt: Runtime, actor_id: str) -> tuple[str | None, bool]:
    """(lease owner, whether the lease is live) of the actor's row."""
    with rt.store.read() as tx:
        row = tx.row(
            "SELECT lease_owner, CASE WHEN lease_expires_at > {now} THEN 1 ELSE 0 END "
            "FROM {actors} WHERE actor_id = :i",
            {"i": actor_id},
        )
    return (None, False) if row is None else (row[0], bool(row[1]))


@pytest.mark.slow
def test_a_head_whose_worker_stalled_past_its_lease_is_replaced_and_never_commits(
    cluster: Cluster,
) -> None:
    """A worker process runs a keyed head (a 3 s turn) and is SIGSTOPped past its
    lease: with no live lease the next keyed send replaces the head. Continued, the
    worker finishes that turn but its commit is refused; the replacement runs, alone,
    and both senders get its outcome."""
    rt = cluster.caller()
    (worker,) = cluster.start_workers(
        1, app="tests.apps.queueing_app:runtime", workers=1, lease_duration=1.0
    ).values()
    run = rt.ref(Recompute, "s").run.with_options(coalesce_key="k")
    first = run.send(n=0, ms=3000)
    wait_until(lambda: lease_of(rt, "s")[1], STEP, "the worker to claim the actor")
    time.sleep(0.3)  # inside the turn
    stop_outside_write_lock(worker, cluster)
    try:
        wait_until(lambda: not lease_of(rt, "s")[1], STEP, "the stopped worker's lease to expire")
        second = run.send(n=1)
        assert first.status() == "replaced"
    finally:
        os.kill(worker.pid, signal.SIGCONT)
    assert second.wait(timeout=STEP) == 1
    assert first.wait(timeout=STEP) == 1
    assert rt.ref(Recompute, "s").snapshot()["ran"] == [1]
    assert [r[2] for r in rows_of(rt, "s")] == ["replaced", "completed"]
    assert poll_for(lambda: LEASE_LOST.search(worker.stderr()), STEP), worker.stderr()
