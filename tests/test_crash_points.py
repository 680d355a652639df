"""Crash every named point of a call's life, recover with a fresh runtime, check the contract.

For each point in ``solid_objects.faults.POINTS`` that the workload reaches, on
every database: a runtime runs a workload (calls that change state, emit
effects, schedule reminders and message another actor) and "dies" at the
point — a ``SimulatedCrash`` stops its thread there, and the runtime is then
abandoned without any cleanup, its leases and claims left behind as a killed
process would leave them. A fresh runtime recovers, and a model checks:

- every acknowledged message was applied exactly once, in send order; the one
  whose send was interrupted at most once;
- every committed turn has exactly one effect row, every effect row was handled
  at least once, and every handling carried its row's id (``ctx.id``);
- every scheduled reminder fired exactly once; every message sent to another
  actor arrived exactly once; every committed request got exactly one answer
  (its reply, never the timeout: the answer commits long before it is due);
  nothing became a dead letter.

A last test plants a bug (a fence that checks no lease) and shows that the same
model then reports a violation, so the harness can fail.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest

from solid_objects import Actor, EffectContext, Reply, Runtime
from solid_objects.faults import POINTS, SimulatedCrash, inject
from solid_objects.store.turns import TurnStatements

from .conftest import FAST, count_rows, db_now

#: Points the in-process workload below passes through. ``lease.renew`` runs only in
#: a poller thread; the real-process SIGSTOP and SIGKILL tests cover a process that
#: stops renewing (tests/test_processes.py).
REACHED = [p for p in POINTS if p != "lease.renew"]

handled: list[tuple[str, str]] = []  # (ctx.id, tag) for every handler call
handled_lock = threading.Lock()


class Ledger(Actor):
    entries: list[str] = []

    def record(self, tag: str) -> int:
        self.entries.append(tag)
        self.emit("notify", tag=tag)
        if tag.endswith("r"):
            self.schedule(delay=timedelta(hours=1), key=tag).remind(tag=tag)
        if tag.endswith("s"):
            self.send_to(Ledger, f"{self.actor_id}-peer").forwarded(tag=tag)
        if tag.endswith("q"):
            self.request(
                Ledger,
                f"{self.actor_id}-peer",
                reply_to=self.answered,
                timeout=timedelta(hours=1),
                context=tag,
            ).forwarded(tag=tag)
        return len(self.entries)

    def answered(self, reply: Reply) -> None:
        self.entries.append(f"answer:{reply.context}:{reply.status}")

    def remind(self, tag: str) -> None:
        self.entries.append(f"reminded:{tag}")

    def forwarded(self, tag: str) -> None:
        self.entries.append(f"fwd:{tag}")


def notify(ctx: EffectContext, tag: str) -> None:
    with handled_lock:
        handled.append((ctx.id, tag))


WORKLOAD = {"a": ["a1", "a2r", "a3s", "a4q"], "b": ["b1s", "b2q", "b3r"]}


def new_runtime(url: str) -> Runtime:
    rt = Runtime(url, **{**FAST, "workers": 0, "lease_duration": 0.3, "effect_timeout": 0.3})
    rt.install()
    rt.register(Ledger)
    rt.effect("notify")(notify)
    return rt


def later(rt: Runtime) -> datetime:
    return datetime.fromtimestamp(db_now(rt) / 1000, UTC) + timedelta(hours=2)


def run_workload(rt: Runtime) -> dict[str, list[str]]:
    """Send the workload, drain, fire reminders; return the acknowledged sends."""
    acknowledged: dict[str, list[str]] = {actor: [] for actor in WORKLOAD}
    for i in range(max(len(tags) for tags in WORKLOAD.values())):
        for actor, tags in WORKLOAD.items():
            if i < len(tags):
                rt.ref(Ledger, actor).record.send(tag=tags[i])
                acknowledged[actor].append(tags[i])
    rt.testing.drain()
    rt.testing.run_due_reminders(later(rt))
    return acknowledged


def recover(url: str) -> Runtime:
    """A fresh runtime takes over once the dead one's leases and claims expired."""
    rt = new_runtime(url)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        time.sleep(0.35)  # past lease_duration and effect_timeout
        rt.testing.drain()
        rt.testing.run_due_reminders(later(rt))
        open_work = (
            count_rows(rt, "messages", "status IN ('queued', 'scheduled')")
            + count_rows(rt, "effects", "status IN ('pending', 'running')")
            + count_rows(rt, "reminders")
        )
        if open_work == 0:
            return rt
    raise AssertionError("work was left behind after recovery")


def check_contract(rt: Runtime, acknowledged: dict[str, list[str]], interrupted: set[str]) -> None:
    reminders = {t for tags in WORKLOAD.values() for t in tags if t.endswith("r")}
    for actor, tags in WORKLOAD.items():
        entries = rt.ref(Ledger, actor).snapshot()["entries"]
        recorded = [e for e in entries if not e.startswith(("reminded:", "answer:"))]
        # exactly once and in send order; an interrupted send at most once
        assert [t for t in recorded if t not in interrupted] == acknowledged[actor]
        assert all(recorded.count(t) <= 1 for t in tags), entries
        for tag in tags:
            if tag in reminders and tag in recorded:
                assert entries.count(f"reminded:{tag}") == 1, entries
        peer = rt.ref(Ledger, f"{actor}-peer").snapshot()["entries"]
        forwarded = [t for t in recorded if t.endswith(("s", "q"))]
        assert peer == [f"fwd:{t}" for t in forwarded]
        for tag in recorded:
            if tag.endswith("q"):  # one outcome per committed request: the answer
                answers = [e for e in entries if e.startswith(f"answer:{tag}:")]
                assert answers == [f"answer:{tag}:completed"], entries
    with rt.store.read() as tx:
        effects = {row[0]: row[1] for row in tx.rows("SELECT id, arguments FROM solid_effects")}
    applied = sum(
        len([e for e in rt.ref(Ledger, a).snapshot()["entries"] if ":" not in e]) for a in WORKLOAD
    )
    assert len(effects) == applied  # one effect per committed turn, no duplicate rows
    ids = {effect_id for effect_id, _ in handled}
    assert set(effects) <= ids  # every effect ran at least once...
    assert ids <= set(effects)  # ...and nothing ran that was not committed
    for effect_id, tag in handled:
        assert tag in effects[effect_id]  # each run carried its own row's id
    assert count_rows(rt, "messages", "status IN ('dead', 'rejected')") == 0


@contextmanager
def crash_once_at(point: str) -> Iterator[list[str]]:
    hit: list[str] = []

    def hook(name: str) -> None:
        if name == point and not hit:
            hit.append(name)
            raise SimulatedCrash(name)

    with inject(hook):
        yield hit


@pytest.fixture(autouse=True)
def clear_handled() -> None:
    handled.clear()


@pytest.mark.parametrize("point", REACHED)
def test_a_crash_at_each_point_keeps_the_contract(db_url: str, point: str) -> None:
    dead = new_runtime(db_url)
    acknowledged: dict[str, list[str]] = {actor: [] for actor in WORKLOAD}
    interrupted: set[str] = set()
    with crash_once_at(point) as hit:
        try:
            acknowledged = run_workload(dead)
        except SimulatedCrash:
            # Sends that did not return are not acknowledged; one may have committed.
            sent = {t for tags in WORKLOAD.values() for t in tags}
            with dead.store.read() as tx:
                stored = {
                    r[0]
                    for r in tx.rows(
                        "SELECT arguments FROM solid_messages WHERE operation = 'record'"
                    )
                }
            acknowledged = {
                actor: [t for t in tags if any(f'"{t}"' in s for s in stored)]
                for actor, tags in WORKLOAD.items()
            }
            interrupted = sent - {t for tags in acknowledged.values() for t in tags}
    assert hit == [point], f"the workload never reached {point}"
    survivor = recover(db_url)
    try:
        check_contract(survivor, acknowledged, interrupted)
    finally:
        survivor.close()
        dead.store.close()
        dead.engine.dispose()


def test_the_harness_catches_a_planted_fence_bug(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the lease check taken out of the fence, a stalled worker's commit lands."""

    def scenario() -> None:
        handled.clear()
        stalled = new_runtime(db_url)
        survivor_done = threading.Event()

        def hook(name: str) -> None:
            if name == "turn.executed" and threading.current_thread().name == "stalled":
                survivor_done.wait(20)  # a stall past the lease, like SIGSTOP

        stalled.ref(Ledger, "a").record.send(tag="a1")
        with inject(hook):
            thread = threading.Thread(target=stalled.testing.drain, name="stalled")
            thread.start()
            time.sleep(0.5)  # the stalled turn holds an expired lease now
            survivor = recover(db_url)
            survivor.ref(Ledger, "a").record.send(tag="a2")
            survivor.testing.drain()
            survivor_done.set()
            thread.join(20)
        try:
            check_contract(survivor, {"a": ["a1", "a2"], "b": []}, set())
        finally:
            survivor.close()
            stalled.close()

    scenario()  # the real fence refuses the stalled commit
    empty_tables(db_url)
    # The planted bug: no lease check, and no check of the message row either (that one
    # alone refuses the stalled commit of a message the survivor already finished).
    monkeypatch.setattr(TurnStatements, "_FENCE", "pk = :pk")
    monkeypatch.setattr(TurnStatements, "_QUEUED_FENCE", "")
    monkeypatch.setattr(TurnStatements, "_THE_MESSAGE", "id = :id")
    with pytest.raises(AssertionError) as violation:
        scenario()
    # the model saw the stalled worker's stale state overwrite the survivor's commit
    assert "a2" in str(violation.value), violation.value


def empty_tables(db_url: str) -> None:
    rt = Runtime(db_url, workers=0)
    rt.store.transact(
        lambda tx: [
            tx.run(f"DELETE FROM solid_{table}")
            for table in ("actors", "messages", "effects", "reminders")
        ]
    )
    rt.close()
