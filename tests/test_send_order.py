"""Mailbox order of messages that enter the mailbox later (README guarantee 1).

Messages sent by an actor's turn (``send_to``) and delayed messages are stored
as ``scheduled`` rows and enter their target's ordered mailbox when they are
promoted, by the worker right after the sending commit, by the poller, or by
another process after a crash. The order rule (``docs/design-decisions.md``,
"Order of messages that enter the mailbox later"): one sender's messages that
are due at the same time enter the mailbox in send order, whoever promotes them.

- a turn stages 20 sends, its worker process is SIGKILLed right after the COMMIT,
  another process delivers them: in staging order;
- 8 threads call one actor 800 times on a runtime with 4 workers, each turn sends
  its turn number on: they arrive in turn order;
- 20 sends with equal delays from one turn, and 200 sequential delayed sends from
  one thread: in send order.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from solid_objects import Runtime, staging
from solid_objects.errors import MessageFailed
from solid_objects.store.schema import SCHEMA_VERSION
from tests.apps.orderapp import Sink, Source
from tests.test_processes import STEP, Cluster, wait_until

from .conftest import count_rows, db_now

ORDER_APP = "tests.apps.orderapp:runtime"


def seen(rt: Runtime, sink: str) -> list[int]:
    values: list[int] = rt.ref(Sink, sink).snapshot()["seen"]
    return values


def wait_for(rt: Runtime, sink: str, count: int) -> list[int]:
    """The values ``sink`` applied, once it applied ``count`` of them (bounded wait)."""
    return wait_until(
        lambda: (lambda v: v if len(v) >= count else None)(seen(rt, sink)),
        60,
        f"{sink} to apply {count} messages",
    )


def later(rt: Runtime, seconds: float) -> datetime:
    return datetime.fromtimestamp(db_now(rt) / 1000, UTC) + timedelta(seconds=seconds)


@pytest.fixture
def cluster(tmp_path: Path, db_url: str) -> Iterator[Cluster]:
    c = Cluster(tmp_path, db_url)
    try:
        yield c
    finally:
        c.close()


@pytest.mark.slow
def test_sends_staged_by_one_turn_keep_their_order_when_the_worker_is_killed_after_commit(
    cluster: Cluster,
) -> None:
    """The sending turn committed; its process dies before delivering; another delivers.

    The victim kills itself with a real SIGKILL at ``commit.committed`` (right after
    its COMMIT returned), so the 20 outbound rows are left undelivered, and a second
    worker process moves them into the Sink's mailbox: in staging order.
    """
    rt = cluster.caller()
    victim = cluster.spawn(
        "victim", ORDER_APP, workers=1, lease_duration=1.0, kill_at="commit.committed"
    )
    victim.wait_ready()
    sent = rt.ref(Source, "k").stage.send(count=20)
    assert victim.proc.wait(timeout=STEP) == -signal.SIGKILL
    assert sent.status() == "completed"  # the COMMIT happened before the kill
    assert count_rows(rt, "messages", "operation = 'put' AND status = 'scheduled'") > 0
    cluster.start_workers(1, ORDER_APP, workers=2, lease_duration=1.0)
    assert wait_for(rt, "k", 20) == list(range(20))


def test_sends_from_successive_turns_arrive_in_turn_order(
    make_runtime: Callable[..., Runtime],
) -> None:
    """4 workers, 8 caller threads, 800 turns of one actor; each sends its turn number."""
    rt = make_runtime(workers=4)
    rt.register(Source)
    rt.register(Sink)
    errors: list[BaseException] = []

    def caller() -> None:
        try:
            for _ in range(100):
                rt.ref(Source, "t").tick()
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    with rt:
        threads = [threading.Thread(target=caller) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors
        assert wait_for(rt, "t", 800) == list(range(1, 801))


def test_equal_delays_from_one_turn_keep_staging_order(
    make_runtime: Callable[..., Runtime],
) -> None:
    """Five turns each stage 20 sends with delay=60 s: each Sink applies 0..19 in order.

    (The delay outlasts any drain on a loaded machine; the test clock makes them due.)
    """
    rt = make_runtime(workers=0)
    rt.register(Source)
    rt.register(Sink)
    for round_ in range(5):
        rt.ref(Source, f"d{round_}").stage.send(count=20, delay=60.0)
    rt.testing.drain()
    assert count_rows(rt, "messages", "operation = 'put' AND status = 'scheduled'") == 100
    rt.testing.run_due_reminders(later(rt, 61))
    assert [seen(rt, f"d{round_}") for round_ in range(5)] == [list(range(20))] * 5


def test_equal_delays_from_one_turn_keep_staging_order_with_running_workers(
    make_runtime: Callable[..., Runtime],
) -> None:
    """The same with workers and the poller promoting when the delay is over."""
    rt = make_runtime(workers=2)
    rt.register(Source)
    rt.register(Sink)
    with rt:
        for round_ in range(3):
            rt.ref(Source, f"w{round_}").stage(count=20, delay=0.5)
        for round_ in range(3):
            assert wait_for(rt, f"w{round_}", 20) == list(range(20))


def test_sequential_delayed_sends_from_one_thread_keep_send_order(
    make_runtime: Callable[..., Runtime],
) -> None:
    """200 ``with_options(delay=1.0).send()``, each returned before the next."""
    rt = make_runtime(workers=0)
    rt.register(Sink)
    put = rt.ref(Sink, "q").put.with_options(delay=1.0)
    for i in range(200):
        put.send(i=i)
    rt.testing.run_due_reminders(later(rt, 2))
    assert seen(rt, "q") == list(range(200))


def test_a_turn_that_sends_too_many_messages_fails_and_sends_none(
    make_runtime: Callable[..., Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The staging index is bounded (it is the low part of ``send_order``)."""
    monkeypatch.setattr(staging, "MAX_MESSAGES_PER_TURN", 3)
    rt = make_runtime(workers=0)
    rt.register(Source)
    rt.register(Sink)
    sent = rt.ref(Source, "many").stage.send(count=4)
    rt.testing.drain()
    with pytest.raises(MessageFailed) as info:
        sent.result()
    assert info.value.error["type"] == "PayloadTooLarge"
    assert count_rows(rt, "messages", "operation = 'put'") == 0


def test_a_schema_5_database_upgrades_and_its_waiting_messages_still_arrive(
    db_url: str, make_runtime: Callable[..., Runtime]
) -> None:
    rt = make_runtime(workers=0)
    rt.register(Source)
    rt.ref(Source, "old").stage.send(count=3, delay=60.0)  # still waiting after the upgrade
    rt.testing.drain()
    with rt.store.engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE solid_messages DROP COLUMN send_order")
        conn.exec_driver_sql("UPDATE solid_schema SET version = 5")
    upgraded = make_runtime(workers=0)  # install() upgrades
    upgraded.register(Source)
    upgraded.register(Sink)
    with upgraded.store.read() as tx:
        assert tx.scalar("SELECT version FROM solid_schema") == SCHEMA_VERSION
        waiting = "status = 'scheduled' AND send_order IS NULL"
        assert tx.scalar(f"SELECT COUNT(*) FROM solid_messages WHERE {waiting}") == 3
    upgraded.testing.run_due_reminders(later(upgraded, 61))
    assert sorted(seen(upgraded, "old")) == [0, 1, 2]  # rows from before: ordered by id
