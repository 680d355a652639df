"""Operator controls: pause/resume an actor, steer reminders, processes, retention, reconciliation.

Runs on every backend; the process-registry tests use real worker processes.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from solid_objects import Actor, Runtime
from solid_objects.admin import Administration, NotFound, OperationRefused, allow
from solid_objects.errors import InvalidArguments, Unauthorized
from solid_objects.faults import inject
from solid_objects.store.schema import SCHEMA_VERSION

from .apps.procapp import AppendLog
from .conftest import count_rows, db_now
from .test_processes import STEP, Cluster, wait_until


class Counter(Actor):
    applied: list[int] = []

    def add(self, n: int) -> list[int]:
        self.applied.append(n)
        return list(self.applied)

    def remind(self) -> None:
        self.schedule(delay=timedelta(hours=1), key="hourly", every=timedelta(hours=1)).add(n=-1)
        self.schedule(delay=timedelta(hours=2), key="once").add(n=-2)


def ops(rt: Runtime) -> Administration:
    rt.admin.set_policy(allow({"ops:*": "*", "viewer": "read"}))
    return rt.admin.as_principal("ops:alice")


def audit_actions(rt: Runtime) -> list[str]:
    """The audited actions, sorted (records made in the same millisecond have no order)."""
    return sorted(e.action for e in ops(rt).audit_log(limit=100).items)


@pytest.fixture
def procs(tmp_path: Path, db_url: str, request: pytest.FixtureRequest) -> Cluster:
    """Worker processes on the test's database (see ``tests/test_processes.py``)."""
    c = Cluster(tmp_path, db_url)
    request.addfinalizer(c.close)
    return c


@pytest.fixture
def rt(make_runtime: Callable[..., Runtime]) -> Runtime:
    runtime = make_runtime(workers=0)
    runtime.register(Counter)
    return runtime


def hours_ahead(rt: Runtime, hours: float) -> datetime:
    return datetime.fromtimestamp(db_now(rt) / 1000, UTC) + timedelta(hours=hours)


# --- pause and resume ------------------------------------------------------------------


def test_a_paused_actor_accepts_calls_runs_none_and_resumes_in_order(rt: Runtime) -> None:
    counter = rt.ref(Counter, "c")
    counter.add.send(n=1)
    rt.testing.drain()
    admin = ops(rt)

    paused = admin.pause_actor("Counter", "c", reason="investigating")
    assert (paused.paused, paused.already) == (True, False)
    assert admin.pause_actor("Counter", "c").already  # idempotent, no second audit record
    sent = [counter.add.send(n=n) for n in (2, 3, 4)]
    assert rt.testing.drain() == 0
    assert rt.ref(Counter, "c").snapshot() == {"applied": [1]}
    assert admin.inspect_actor("Counter", "c").paused
    assert admin.status().total.paused == 1

    assert not admin.resume_actor("Counter", "c").already
    rt.testing.drain()
    assert [m.result() for m in sent][-1] == [1, 2, 3, 4]
    assert audit_actions(rt) == ["actors.pause", "actors.resume"]


def test_pausing_during_a_turn_refuses_its_commit_and_it_runs_once_after_resume(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=2)
    rt.register(Counter)
    admin = ops(rt)
    armed, in_turn, paused = threading.Event(), threading.Event(), threading.Event()

    def hook(name: str) -> None:
        if name == "turn.executed" and armed.is_set() and not paused.is_set():
            in_turn.set()
            assert paused.wait(20)

    with rt, inject(hook):
        rt.ref(Counter, "p").add(n=0)  # creates the actor
        armed.set()
        message = rt.ref(Counter, "p").add.send(n=1)
        assert in_turn.wait(20)
        admin.pause_actor("Counter", "p")
        paused.set()  # the turn goes on to its commit, which the fence refuses
        time.sleep(0.5)
        assert message.status() == "queued"
        assert rt.ref(Counter, "p").snapshot() == {"applied": [0]}
        admin.resume_actor("Counter", "p")
        assert message.wait(timeout=STEP) == [0, 1]
    assert rt.ref(Counter, "p").snapshot() == {"applied": [0, 1]}


def test_pause_of_an_unknown_actor_or_without_permission_writes_nothing(rt: Runtime) -> None:
    rt.ref(Counter, "c").add.send(n=1)
    admin = ops(rt)
    with pytest.raises(NotFound):
        admin.pause_actor("Counter", "nobody")
    with pytest.raises(Unauthorized):
        rt.admin.as_principal("viewer").pause_actor("Counter", "c")
    with pytest.raises(InvalidArguments):
        admin.pause_actor("Counter", "")
    assert count_rows(rt, "actors", "paused = 1") == 0
    assert count_rows(rt, "audit") == 0


def test_destroy_through_the_admin_api_is_audited(rt: Runtime) -> None:
    pending = rt.ref(Counter, "gone").add.send(n=1)
    admin = ops(rt)
    assert admin.destroy_actor("Counter", "gone", reason="GDPR request")
    assert not admin.destroy_actor("Counter", "gone")
    assert pending.status() == "destroyed"
    assert audit_actions(rt) == ["actors.destroy"]


# --- reminders --------------------------------------------------------------------------


def test_reminders_listed_paused_resumed_run_now_and_cancelled(rt: Runtime) -> None:
    for actor_id in ("a", "b", "c"):
        rt.ref(Counter, actor_id).remind.send()
    rt.testing.drain()
    admin = ops(rt)

    first = admin.list_reminders(limit=4)
    second = admin.list_reminders(limit=4, cursor=first.next_cursor)
    assert second.next_cursor is None
    listed = first.items + second.items
    assert len(listed) == 6
    assert [r.due_at for r in listed] == sorted(r.due_at for r in listed)  # type: ignore[type-var]
    assert {(r.actor_id, r.key) for r in admin.list_reminders(actor_id="b").items} == {
        ("b", "hourly"),
        ("b", "once"),
    }

    admin.pause_reminder("Counter", "a", "add", "hourly")
    assert admin.pause_reminder("Counter", "a", "add", "hourly").already
    with pytest.raises(OperationRefused):
        admin.run_reminder_now("Counter", "a", "add", "hourly")
    admin.cancel_reminder("Counter", "b", "add", "once")
    with pytest.raises(NotFound):
        admin.cancel_reminder("Counter", "b", "add", "once")

    rt.testing.run_due_reminders(hours_ahead(rt, 2.5))
    assert rt.ref(Counter, "a").snapshot() == {"applied": [-2]}  # hourly paused
    assert rt.ref(Counter, "b").snapshot() == {"applied": [-1]}  # once cancelled
    assert rt.ref(Counter, "c").snapshot() == {"applied": [-1, -2]}

    admin.resume_reminder("Counter", "a", "add", "hourly")
    admin.run_reminder_now("Counter", "c", "add", "hourly")
    rt.testing.run_due_reminders(hours_ahead(rt, 0))
    assert rt.ref(Counter, "a").snapshot() == {"applied": [-2]}  # not due at real time
    assert rt.ref(Counter, "c").snapshot() == {"applied": [-1, -2, -1]}
    assert audit_actions(rt) == [
        "reminders.cancel",
        "reminders.pause",
        "reminders.resume",
        "reminders.run_now",
    ]


# --- retention --------------------------------------------------------------------------


def test_prune_deletes_only_finished_rows_in_batches_and_previews_first(rt: Runtime) -> None:
    counter = rt.ref(Counter, "r")
    for n in range(7):
        counter.add.send(n=n)
    rt.testing.drain()
    admin = ops(rt)
    rt.admin.set_policy(allow({"ops:*": "*"}))
    admin.pause_actor("Counter", "r")
    live = counter.add.send(n=99)  # queued behind the pause: live work
    later = counter.add.with_options(delay=timedelta(hours=1)).send(n=100)
    time.sleep(0.01)  # "older than 0": finished strictly before the database's now

    preview = admin.prune(timedelta(0), dry_run=True)
    assert preview.rows == {"messages": 7, "effects": 0, "processes": 0}
    assert count_rows(rt, "messages") == 9

    progress: list[tuple[str, int]] = []
    report = admin.prune(timedelta(0), progress=lambda kind, n: progress.append((kind, n)))
    assert report.rows["messages"] == 7
    assert progress == [("messages", 7)]
    assert count_rows(rt, "messages") == 2
    assert (live.status(), later.status()) == ("queued", "scheduled")
    assert admin.prune(timedelta(days=1)).rows["messages"] == 0

    admin.resume_actor("Counter", "r")
    rt.testing.drain()
    assert live.result() == [0, 1, 2, 3, 4, 5, 6, 99]


def test_prune_refuses_bad_arguments(rt: Runtime) -> None:
    admin = ops(rt)
    with pytest.raises(InvalidArguments):
        admin.prune(timedelta(seconds=-1))
    with pytest.raises(InvalidArguments):
        admin.prune(timedelta(0), kinds=["everything"])
    with pytest.raises(InvalidArguments):
        admin.prune(30)  # type: ignore[arg-type]


# --- reconciliation ---------------------------------------------------------------------


def test_reconciliation_reads(rt: Runtime) -> None:
    rt.ref(Counter, "x").add.send(n=1)
    rt.ref(Counter, "y").add.send(n=2)
    rt.testing.drain()
    rt.ref(Counter, "y").add.send(n=3)
    admin = ops(rt)
    pending = admin.actors_with_pending_work()
    assert [(a.actor_id, a.queued) for a in pending.items] == [("y", 1)]
    assert admin.actor_states("Counter", ["x", "y", "missing"]) == {
        "x": {"applied": [1]},
        "y": {"applied": [2]},
    }
    assert admin.orphans().messages == 0


# --- processes ----------------------------------------------------------------------------


def test_a_worker_process_registers_heartbeats_and_signs_off(
    make_runtime: Callable[..., Runtime],
) -> None:
    # The lease (and so the heartbeat's expiry) is long enough that a loaded CI machine
    # cannot make the process look stale between its start and the first read.
    rt = make_runtime(workers=1, lease_duration=3.0, actors=[Counter])
    admin = ops(rt)
    with rt:
        (proc,) = admin.list_processes().items
        assert (proc.state, proc.pid, proc.actor_types) == ("live", os.getpid(), ["Counter"])
        first_beat = proc.heartbeat_at
        wait_until(
            lambda: admin.list_processes().items[0].heartbeat_at != first_beat, 10, "a heartbeat"
        )
    assert admin.list_processes().items == []
    (stopped,) = admin.list_processes(include_stopped=True).items
    assert (stopped.state, stopped.stop_reason) == ("stopped", "drained")
    assert admin.prune(timedelta(0), kinds=["processes"]).rows == {"processes": 1}


@pytest.mark.slow
def test_a_killed_process_is_found_stale_and_its_leases_recovered(procs: Cluster) -> None:
    rt = procs.caller()
    admin = ops(rt)
    victim = procs.start_workers(1, workers=1, lease_duration=1.0)
    log = rt.ref(AppendLog, "v")
    procs.gate.touch()
    log.append.send(item=0, gate=str(procs.gate), journal=str(procs.journal))
    procs.first_start("v", 0)
    (worker,) = victim.values()
    os.kill(worker.pid, signal.SIGKILL)
    worker.proc.wait(timeout=10)
    procs.gate.unlink()

    # The heartbeat path: no proof from the database (tests/test_takeover.py has that).
    procs.start_workers(1, workers=1, lease_duration=1.0, takeover_interval=None)
    # The survivor's maintenance notices the dead heartbeat and recovers it.
    wait_until(
        lambda: any(
            p.pid == worker.pid and p.stop_reason == "stale"
            for p in admin.list_processes(include_stopped=True).items
        ),
        STEP,
        "the killed process to be recovered as stale",
    )
    wait_until(lambda: log.snapshot() == {"items": [0]}, STEP, "the item to be applied")


@pytest.mark.slow
def test_an_operator_recovers_a_dead_process_before_its_lease_expires(procs: Cluster) -> None:
    rt = procs.caller()
    admin = ops(rt)
    victim = procs.start_workers(1, workers=1, lease_duration=60.0)
    log = rt.ref(AppendLog, "w")
    procs.gate.touch()
    log.append.send(item=0, gate=str(procs.gate), journal=str(procs.journal))
    procs.first_start("w", 0)
    (worker,) = victim.values()
    os.kill(worker.pid, signal.SIGKILL)
    worker.proc.wait(timeout=10)
    procs.gate.unlink()
    # Only the operator may recover it here, not the survivor's takeover check.
    procs.start_workers(1, workers=1, lease_duration=60.0, takeover_interval=None)

    (dead,) = [p for p in admin.list_processes().items if p.pid == worker.pid]
    assert dead.state == "live"  # its heartbeat is good for a minute: only people know
    assert dead.leases == 1
    recovered = admin.recover_process(dead.owner, reason="host is gone")
    assert (recovered.leases_released, recovered.already) == (1, False)
    assert admin.recover_process(dead.owner).already
    lease_would_expire = dead.expires_at
    wait_until(lambda: log.snapshot() == {"items": [0]}, STEP, "the item to be applied")
    assert lease_would_expire is not None
    assert db_now(rt) < lease_would_expire.timestamp() * 1000
    with pytest.raises(NotFound):
        admin.recover_process("no-such-process")


def test_schema_3_databases_upgrade_to_4(db_url: str, make_runtime: Callable[..., Any]) -> None:
    rt = make_runtime(workers=0)
    rt.register(Counter)
    rt.ref(Counter, "old").remind.send()
    rt.testing.drain()
    with rt.store.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE solid_processes")
        conn.exec_driver_sql("ALTER TABLE solid_reminders DROP COLUMN paused")
        conn.exec_driver_sql("UPDATE solid_schema SET version = 3")
    upgraded = Runtime(db_url, workers=0)
    try:
        upgraded.register(Counter)
        upgraded.install()
        with upgraded.store.read() as tx:
            assert tx.scalar("SELECT version FROM solid_schema") == SCHEMA_VERSION
        page = ops(upgraded).list_reminders(actor_id="old")
        assert [r.paused for r in page.items] == [False, False]
        assert ops(upgraded).list_processes().items == []
    finally:
        upgraded.close()


def test_automatic_retention_prunes_finished_rows_and_keeps_live_work(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=2, lease_duration=0.3, retention=0.2, retention_interval=0.1)
    rt.register(Counter)
    admin = ops(rt)
    with rt:
        for n in range(5):
            rt.ref(Counter, "auto").add(n=n)
        admin.pause_actor("Counter", "auto")
        held = rt.ref(Counter, "auto").add.send(n=99)
        wait_until(
            lambda: count_rows(rt, "messages") == 1, STEP, "the finished messages to be pruned"
        )
        assert held.status() == "queued"
        assert rt.ref(Counter, "auto").snapshot() == {"applied": [0, 1, 2, 3, 4]}
        admin.resume_actor("Counter", "auto")
        assert held.wait(timeout=STEP) == [0, 1, 2, 3, 4, 99]


def test_retention_options_are_checked(make_runtime: Callable[..., Runtime]) -> None:
    from solid_objects.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="retention"):
        make_runtime(retention=-1)
    with pytest.raises(ConfigurationError, match="retention_interval"):
        make_runtime(retention_interval=0)


def test_the_doctor_says_when_the_redis_wake_up_path_is_down(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0, wakeup_url="redis://127.0.0.1:1/0")  # nothing listens there
    report = rt.doctor(round_trip=False, app="myapp:runtime")
    (wakeup,) = [c for c in report.checks if c.name == "wake-up"]
    assert wakeup.status == "warn" and "does not answer" in wakeup.detail
    assert report.ok  # a warning: polling still carries every call


def test_a_stale_peer_is_recovered_and_logged_by_a_live_process(
    make_runtime: Callable[..., Runtime], caplog: pytest.LogCaptureFixture
) -> None:
    rt = make_runtime(workers=1, lease_duration=0.3)
    rt.register(Counter)
    rt.ref(Counter, "orphan").add.send(n=1)
    store = rt.store

    def plant(tx: Any) -> None:  # a process that died holding the actor's lease
        store.processes.register_process(
            tx, owner="999-dead", host="gone", pid=999, version="0", actor_types="[]", ttl_ms=-5000
        )
        tx.run(
            "UPDATE solid_actors SET lease_owner = '999-dead', lease_token = 't', "
            "lease_expires_at = {now} + 60000"
        )

    store.transact(plant)
    with caplog.at_level("WARNING", logger="solid_objects.processes"), rt:
        wait_until(
            lambda: rt.ref(Counter, "orphan").snapshot() == {"applied": [1]},
            STEP,
            "the dead process's actor to be taken over before its lease expired",
        )
    (record,) = [r for r in caplog.records if getattr(r, "solid_process", None) == "999-dead"]
    assert "released its 1 leases" in record.getMessage()
    (dead,) = [p for p in ops(rt).list_processes(include_stopped=True).items if p.pid == 999]
    assert (dead.state, dead.stop_reason) == ("stopped", "stale")
