"""Cross-process wake-ups reach the process that must act, and waiters trust them.

Two costs of the deployed topology (caller-only processes, worker processes;
``docs/benchmarks.md``): every enqueue woke every worker process's
poller (each then read the ready actors and the due times, to find one actor
another process held), and a caller waiting for a message that another process
runs read its row with a 2-50 ms backoff even while that process announces the
finished message (``d:<id>``). Now an enqueue to an actor whose lease is held
announces ``h:<pk>:<owner>``, which only the owner acts on, and a waiter whose
runtime is listening reads the row when told, or as a safety net every 0.25 s.
What is checked here is counted (payloads, wake-ups, row reads), never timed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from solid_objects import Actor, Rejected, Runtime
from solid_objects.store import mailbox
from solid_objects.store.dialect import Tx
from solid_objects.store.notices import held_hint, parse_message_hint
from tests.apps.procapp import AppendLog
from tests.conftest import BACKENDS
from tests.test_processes import STEP, Cluster, wait_until
from tests.test_redis_wakeup import RedisServer, caller

pytestmark = pytest.mark.slow

# Each test runs only where what it checks exists (no skipped parametrizations).
POSTGRESQL = [b for b in BACKENDS if b == "postgresql"]  # NOTIFY, outcomes in it
WITHOUT_LISTENER = [b for b in BACKENDS if b != "postgresql"]  # no NOTIFY, no Redis here


class HeldHintCounter(Actor):
    n: int = 0

    def add(self) -> int:
        self.n += 1
        return self.n


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def cluster(tmp_path: Path, db_url: str) -> Iterator[Cluster]:
    c = Cluster(tmp_path, db_url)
    try:
        yield c
    finally:
        c.close()


def test_an_enqueue_to_a_held_actor_names_its_owner_and_one_to_a_free_actor_wakes_all(
    db_url: str,
) -> None:
    """The payload a caller's enqueue publishes: ``h:<pk>:<owner>`` while a lease is held."""
    holder = Runtime(db_url, workers=1, poll_interval=5.0)
    holder.register(HeldHintCounter)
    sender = Runtime(db_url, workers=0)
    try:
        holder.install()
        holder.start()
        assert holder.ref(HeldHintCounter, "held").add() == 1  # the holder claims it
        payloads: list[str] = []
        sender.store.publish = payloads.append  # after each commit, instead of NOTIFY
        sender.ref(HeldHintCounter, "held").add.send()
        sender.ref(HeldHintCounter, "free").add.send()
        wait_until(lambda: len(payloads) == 2, STEP, "both enqueues to publish")
        with holder.store.read() as tx:
            pk = tx.scalar(
                "SELECT pk FROM {actors} WHERE actor_type = :t AND actor_id = :i",
                {"t": "HeldHintCounter", "i": "held"},
            )
        # The message fits: m: carries it to the owner (h: only when it is too large).
        assert payloads[1] == "w" and payloads[0].startswith(f"m:{pk}:{holder.owner}:")
        carried = parse_message_hint(payloads[0], holder.owner, holder.store.notice_key)
        assert carried is not None and carried[0] == int(pk)
        assert carried[1] is not None and carried[1].operation == "add"
    finally:
        sender.close()
        holder.close()


def test_a_held_hint_wakes_only_the_owner_and_runs_its_turn(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner's worker reads the mailbox at once; another process's poller sleeps on."""
    owner = Runtime(db_url, workers=1, poll_interval=30.0)
    other = Runtime(db_url, workers=1, poll_interval=30.0)
    for rt in (owner, other):
        rt.register(HeldHintCounter)
    try:
        owner.install()
        owner.start()
        assert owner.ref(HeldHintCounter, "signalled").add() == 1  # the owner holds it
        other.start()
        for rt in (owner, other):  # a (re)connecting listener wakes its poller once
            if rt.kernel.listener is not None:
                wait_until(rt.kernel.listener.listening.is_set, STEP, "the listener")
        woken = {"owner": 0, "other": 0}
        monkeypatch.setattr(owner.kernel.pool.poller, "wake", lambda: woken.__setitem__("owner", 1))
        monkeypatch.setattr(other.kernel.pool.poller, "wake", lambda: woken.__setitem__("other", 1))
        # A message neither routed itself (as if another process sent it); on PostgreSQL
        # its NOTIFY reaches both listeners as well.
        sender = Runtime(db_url, workers=0)
        try:
            sender.ref(HeldHintCounter, "signalled").add.send()
        finally:
            sender.close()
        with owner.store.read() as tx:
            pk = tx.scalar(
                "SELECT pk FROM {actors} WHERE actor_type = :t AND actor_id = :i",
                {"t": "HeldHintCounter", "i": "signalled"},
            )
        payload = held_hint(int(pk), owner.owner)
        other.kernel.deliver_notice(payload)
        owner.kernel.deliver_notice(payload)
        # The owner's worker runs it: no poller (30 s) and no wake-up of one needed.
        wait_until(
            lambda: owner.ref(HeldHintCounter, "signalled").snapshot()["n"] == 2,
            STEP,
            "the owner's worker to run the hinted message",
        )
        assert woken == {"owner": 0, "other": 0}
    finally:
        other.close()
        owner.close()


def reads_while_held(rt: Runtime, cluster: Cluster, actor_id: str) -> tuple[int, float]:
    """One call whose turn a worker process holds (a gate): row reads, seconds waited."""
    reads = [0]
    poll = rt.kernel.client.messages.poll_outcome

    def counted(message_id: str) -> Any:
        reads[0] += 1
        return poll(message_id)

    rt.kernel.client.messages.poll_outcome = counted  # type: ignore[method-assign]
    log = rt.ref(AppendLog, actor_id)
    assert log.append(item=0)["length"] == 1  # a worker process holds it from now on
    reads[0] = 0
    cluster.gate.touch()
    done: dict[str, Any] = {}

    def call() -> None:
        start = time.monotonic()
        done["result"] = log.append(item=1, gate=str(cluster.gate), journal=str(cluster.journal))
        done["waited"] = time.monotonic() - start

    thread = threading.Thread(target=call)
    thread.start()
    cluster.first_start(actor_id, 1)
    time.sleep(0.6)  # the caller waits meanwhile; without wake-ups it would poll ~15 times
    cluster.gate.unlink()
    thread.join(STEP)
    assert done["result"]["length"] == 2
    return reads[0], done["waited"]


def assert_few_reads(reads: int, waited: float) -> None:
    # The safety net reads every 0.25 s, the nudge once more (and a read of a nudge
    # that raced the safety net); a 2-50 ms backoff would read 15+ times in 0.6 s.
    assert reads <= waited / 0.25 + 3, (reads, waited)


def test_a_caller_told_through_redis_reads_the_row_when_told(
    cluster: Cluster, redis_server: RedisServer
) -> None:
    rt, wakeup = caller(cluster, redis_server.url)
    cluster.start_workers(1, workers=2, poll_interval=0.1, wakeup_url=redis_server.url)
    wait_until(wakeup.listening.is_set, STEP, "the caller to subscribe")
    reads, waited = reads_while_held(rt, cluster, "told-redis")
    assert_few_reads(reads, waited)


@pytest.mark.parametrize("backend", POSTGRESQL, indirect=True)
def test_a_caller_told_through_notify_reads_the_row_when_told(
    cluster: Cluster, db_url: str
) -> None:
    rt = cluster.caller()
    rt.start()
    assert rt.kernel.listener is not None
    cluster.start_workers(1, workers=2, poll_interval=0.1)
    wait_until(rt.kernel.listener.listening.is_set, STEP, "the caller to LISTEN")
    reads, waited = reads_while_held(rt, cluster, "told-notify")
    assert_few_reads(reads, waited)


@pytest.mark.parametrize("backend", WITHOUT_LISTENER, indirect=True)
def test_a_caller_nobody_tells_still_polls(cluster: Cluster) -> None:
    """No listener (SQLite/MariaDB without Redis): the row is read with the backoff."""
    rt = cluster.caller()
    cluster.start_workers(1, workers=2, poll_interval=0.1)
    reads, _ = reads_while_held(rt, cluster, "untold")
    assert reads > 5  # 2, 4, 8 ... 50 ms while the gate holds the turn


# --- outcomes carried by NOTIFY (PostgreSQL) ---------------------------------------------


class OutcomeCarrier(Actor):
    n: int = 0

    def add(self, n: int = 1, pad: int = 0) -> dict[str, Any]:
        if n < 0:
            raise Rejected("negative", "n must not be negative", {"n": n})
        self.n += n
        return {"n": self.n, "pad": "x" * pad}


@pytest.mark.parametrize("backend", POSTGRESQL, indirect=True)
def test_a_caller_in_another_runtime_settles_on_the_notified_outcome(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL: the worker's NOTIFY carries the outcome; the caller reads no row.

    A result too large for a NOTIFY payload is announced by id and read, as before.
    """
    worker = Runtime(db_url, workers=2)
    worker.register(OutcomeCarrier)
    caller_rt = Runtime(db_url, workers=0, call_timeout=STEP)
    try:
        worker.install()
        worker.start()
        caller_rt.start()
        assert caller_rt.kernel.listener is not None
        wait_until(caller_rt.kernel.listener.listening.is_set, STEP, "the caller to LISTEN")
        reads, resolved = [0], [0]
        client = caller_rt.kernel.client
        poll, resolve = client.messages.poll_outcome, client.waiters.resolve

        def counted_poll(message_id: str) -> Any:
            reads[0] += 1
            return poll(message_id)

        def counted_resolve(message_id: str, outcome: Any) -> None:
            resolved[0] += 1
            resolve(message_id, outcome)

        monkeypatch.setattr(caller_rt.kernel.client.messages, "poll_outcome", counted_poll)
        monkeypatch.setattr(caller_rt.kernel.client.waiters, "resolve", counted_resolve)
        ref = caller_rt.ref(OutcomeCarrier, "carried")
        assert [ref.add(n=1)["n"] for _ in range(10)] == list(range(1, 11))
        with pytest.raises(Rejected) as info:
            ref.add(n=-1)
        assert (info.value.code, info.value.details) == ("negative", {"n": -1})
        assert resolved[0] == 11  # every outcome came with its notification
        reads[0], started = 0, time.monotonic()
        assert ref.add(n=1, pad=9000)["pad"] == "x" * 9000  # too large: d:<id>, then a read
        assert resolved[0] == 11
        assert 1 <= reads[0] <= (time.monotonic() - started) / 0.25 + 3
    finally:
        caller_rt.close()
        worker.close()


def test_a_commit_that_empties_the_mailbox_reads_no_next_head(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fence ``UPDATE … RETURNING next_seq`` says nothing follows: no head read.

    Messages sent from another runtime reach the worker's activation with no local
    inbox, so before, every commit read the (empty) next head. MySQL/MariaDB have no
    ``UPDATE … RETURNING``: the fence sets ``next_seq = LAST_INSERT_ID(next_seq)`` and
    its reply's insert id says the same. On PostgreSQL the whole commit of such a
    turn (fence, message, outcome NOTIFY) is one statement (``_finish_in_one``).
    """
    worker = Runtime(db_url, workers=1, poll_interval=0.05)
    worker.register(OutcomeCarrier)
    sender = Runtime(db_url, workers=0, call_timeout=STEP)
    try:
        worker.install()
        worker.start()
        assert worker.ref(OutcomeCarrier, "emptied").add()["n"] == 1
        inside, reads = threading.local(), [0, 0]  # in finish_turn / elsewhere
        finish, head = worker.store.turns.finish_turn, worker.store.head_message
        commits: list[list[str]] = []  # the statements of each finish_turn, by kind
        for name in ("run", "row", "rows"):
            original = getattr(Tx, name)

            def counted(self: Tx, template: str, params: Any = None, _o: Any = original) -> Any:
                if getattr(inside, "on", False):
                    commits[-1].append(" ".join(template.split()[:2]))
                return _o(self, template, params)

            monkeypatch.setattr(Tx, name, counted)

        def counted_finish(*args: Any, **kwargs: Any) -> Any:
            commits.append([])
            inside.on = True
            try:
                return finish(*args, **kwargs)
            finally:
                inside.on = False

        def counted_head(*args: Any, **kwargs: Any) -> Any:
            reads[0 if getattr(inside, "on", False) else 1] += 1
            return head(*args, **kwargs)

        monkeypatch.setattr(worker.store.turns, "finish_turn", counted_finish)
        monkeypatch.setattr(worker.store, "head_message", counted_head)
        # h: wake-ups, read by the worker (m: would carry the message: no read to see).
        monkeypatch.setattr(mailbox, "message_fields", lambda *_: None)
        ref = sender.ref(OutcomeCarrier, "emptied")
        assert [ref.add.send().wait(STEP)["n"] for _ in range(5)] == [2, 3, 4, 5, 6]
        assert reads[0] == 0, reads  # the commits read no next head...
        one = (
            ["WITH a"]  # the fence, the message, the outcome's NOTIFY
            if worker.store.dialect.writable_cte
            else ["UPDATE {actors}", "UPDATE {messages}"]  # SQLite: no NOTIFY
        )
        assert commits == [one] * 5, commits
        # ...while the counter does see the worker's other head reads (a message it was
        # told of; one found by a claim comes with the claim, so not every one is read).
        assert reads[1] >= 1, reads
    finally:
        sender.close()
        worker.close()


#: Gates of GatedTally turns, by name: a turn waits on its gate while it runs.
GATES: dict[str, threading.Event] = {}
ENTERED: dict[str, threading.Event] = {}


class GatedTally(Actor):
    n: int = 0

    def step(self, gate: str = "") -> int:
        if gate:
            ENTERED[gate].set()
            assert GATES[gate].wait(STEP)
        self.n += 1
        return self.n


@pytest.mark.parametrize("backend", POSTGRESQL, indirect=True)
def test_a_wake_up_during_a_turn_costs_no_head_read_after_its_commit(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ``h:`` that comes while the turn runs is covered by that turn's commit, which
    returns the new message as the next head: no mailbox read follows (before, the flag
    it set outlived the commit and the worker read the then empty mailbox once more)."""
    worker = Runtime(db_url, workers=1, poll_interval=30.0)
    worker.register(GatedTally)
    sender = Runtime(db_url, workers=0, call_timeout=STEP)
    try:
        worker.install()
        worker.start()
        assert worker.kernel.listener is not None
        wait_until(worker.kernel.listener.listening.is_set, STEP, "the worker to LISTEN")
        ref = sender.ref(GatedTally, "gated")
        assert ref.step.send().wait(STEP) == 1  # the worker holds it from now on
        pool = worker.kernel.pool
        act = pool.table.all()[0]
        wait_until(lambda: act.status == "idle", STEP, "the activation to go idle")
        # A late notice of that first message (its m:, or its outcome's) must land before
        # the count starts: a stale signal makes the worker read the mailbox once.
        time.sleep(0.5)
        wait_until(lambda: act.status == "idle", STEP, "the activation to go idle again")
        reads = [0]
        head = worker.store.head_message

        def counted_head(*args: Any, **kwargs: Any) -> Any:
            reads[0] += 1
            return head(*args, **kwargs)

        monkeypatch.setattr(worker.store, "head_message", counted_head)
        # The poller signals a held actor with work too (while it polls fast after the
        # first call), racing with the commits: only the h: wake-ups signal here.
        monkeypatch.setattr(pool.poller, "poll_once", lambda **_: 0)
        # h: wake-ups (a message too large to carry): m: would need no read at all.
        monkeypatch.setattr(mailbox, "message_fields", lambda *_: None)
        GATES["g"], ENTERED["g"] = threading.Event(), threading.Event()
        first = ref.step.send(gate="g")
        assert ENTERED["g"].wait(STEP)
        assert reads[0] == 1  # the h: of the first message: its read
        second = ref.step.send()  # its h: reaches the worker while the turn runs
        wait_until(lambda: act.check_mailbox, STEP, "the wake-up during the turn")
        GATES["g"].set()
        assert first.wait(STEP) == 2 and second.wait(STEP) == 3
        wait_until(lambda: act.status == "idle", STEP, "the activation to go idle")
        assert reads[0] == 1, reads  # the first commit returned the second message
        assert not act.check_mailbox
    finally:
        sender.close()
        worker.close()


# --- the message carried in the wake-up (m:) ---------------------------------------------


class CarriedNote(Actor):
    notes: list[str] = []

    def note(self, text: str = "") -> int:
        self.notes = [*self.notes, text[:8]]
        return len(self.notes)


def carried_setup(
    db_url: str, monkeypatch: pytest.MonkeyPatch, actor_id: str, **options: Any
) -> tuple[Runtime, Runtime, Runtime, list[int], dict[str, int]]:
    """An owner holding ``actor_id`` (idle), another worker runtime and a caller-only one;
    the owner's head reads and both pollers' wake-ups are counted, their polls stopped."""
    owner = Runtime(db_url, workers=1, poll_interval=30.0, **options)
    other = Runtime(db_url, workers=1, poll_interval=30.0, **options)
    sender = Runtime(db_url, workers=0, call_timeout=STEP, **options)
    for rt in (owner, other):
        rt.register(CarriedNote)
    owner.install()
    owner.start()
    assert owner.ref(CarriedNote, actor_id).note(text="first") == 1  # the owner holds it
    other.start()
    for rt in (owner, other):
        if rt.kernel.listener is not None:
            wait_until(rt.kernel.listener.listening.is_set, STEP, "the listener")
    act = next(a for a in owner.kernel.pool.table.all() if a.actor_id == actor_id)
    wait_until(lambda: act.status == "idle", STEP, "the activation to go idle")
    reads, inside = [0], threading.local()  # reads outside a commit (MySQL's read the next)
    head, finish = owner.store.head_message, owner.store.turns.finish_turn

    def counted_head(*args: Any, **kwargs: Any) -> Any:
        reads[0] += not getattr(inside, "on", False)
        return head(*args, **kwargs)

    def marked_finish(*args: Any, **kwargs: Any) -> Any:
        inside.on = True
        try:
            return finish(*args, **kwargs)
        finally:
            inside.on = False

    monkeypatch.setattr(owner.store, "head_message", counted_head)
    monkeypatch.setattr(owner.store.turns, "finish_turn", marked_finish)
    woken = {"owner": 0, "other": 0}
    for name, rt in (("owner", owner), ("other", other)):
        monkeypatch.setattr(rt.kernel.pool.poller, "poll_once", lambda **_: 0)
        monkeypatch.setattr(
            rt.kernel.pool.poller, "wake", lambda n=name: woken.__setitem__(n, woken[n] + 1)
        )
    return owner, other, sender, reads, woken


def notes_of(rt: Runtime, actor_id: str) -> list[str]:
    return list(rt.ref(CarriedNote, actor_id).snapshot()["notes"])


def test_the_owner_runs_a_carried_message_with_no_head_read(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``m:`` hands the message to the owner's inbox (no read); another process ignores
    it; a message too large for it is announced as ``h:`` and read; a malformed ``m:``
    makes the owner read the mailbox."""
    owner, other, sender, reads, woken = carried_setup(db_url, monkeypatch, "carried")
    try:
        payloads: list[str] = []
        sender.store.publish = payloads.append  # the payloads, delivered by hand below
        signals = [0]
        other_signal = other.kernel.pool.table.signal

        def counted_signal(*args: Any, **kwargs: Any) -> bool:
            signals[0] += 1
            return other_signal(*args, **kwargs)

        monkeypatch.setattr(other.kernel.pool.table, "signal", counted_signal)
        ref = sender.ref(CarriedNote, "carried")

        def deliver(reference: Any) -> Any:
            wait_until(lambda: len(payloads) == 1, STEP, "the enqueue to publish")
            payload = payloads.pop()
            other.kernel.deliver_notice(payload)
            owner.kernel.deliver_notice(payload)
            return payload, reference

        payload, second = deliver(ref.note.send(text="second"))
        assert payload.startswith("m:")
        assert second.wait(STEP) == 2
        assert reads[0] == 0  # taken from the payload
        assert signals[0] == 0 and woken == {"owner": 0, "other": 0}

        payload, third = deliver(ref.note.send(text="x" * 8000))  # too large to carry
        assert payload.startswith("h:")
        assert third.wait(STEP) == 3
        assert reads[0] == 1

        wait_until(lambda: len(payloads) == 0, STEP, "nothing pending")
        fourth = ref.note.send(text="fourth")
        wait_until(lambda: len(payloads) == 1, STEP, "the enqueue to publish")
        good = payloads.pop()
        head, _, _ = good.rpartition(":")  # the fields' JSON holds colons: cut in it
        owner.kernel.deliver_notice(good[: good.index(":[") + 1] + '["broken"]')
        assert fourth.wait(STEP) == 4
        assert reads[0] == 2 and head  # malformed: the owner read the mailbox
        assert notes_of(owner, "carried") == ["first", "second", "x" * 8, "fourth"]
        assert woken == {"owner": 0, "other": 0}
    finally:
        sender.close()
        other.close()
        owner.close()


@pytest.mark.parametrize("backend", POSTGRESQL, indirect=True)
def test_a_message_notified_to_its_owner_costs_no_head_read(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL: the one-statement enqueue's NOTIFY carries the message itself."""
    owner, other, sender, reads, woken = carried_setup(db_url, monkeypatch, "notified")
    try:
        ref = sender.ref(CarriedNote, "notified")
        assert [ref.note.send(text=f"n{i}").wait(STEP) for i in range(5)] == [2, 3, 4, 5, 6]
        assert reads[0] == 0, reads
        assert ref.note.send(text="y" * 8000).wait(STEP) == 7  # h:, then a read
        assert reads[0] == 1, reads
        assert woken == {"owner": 0, "other": 0}
    finally:
        sender.close()
        other.close()
        owner.close()


def test_a_message_published_to_its_owner_costs_no_head_read(
    db_url: str, monkeypatch: pytest.MonkeyPatch, redis_server: RedisServer
) -> None:
    """Redis: the payload published after the enqueue's commit carries the message."""
    owner, other, sender, reads, woken = carried_setup(
        db_url, monkeypatch, "published", wakeup_url=redis_server.url
    )
    try:
        ref = sender.ref(CarriedNote, "published")
        assert [ref.note.send(text=f"n{i}").wait(STEP) for i in range(5)] == [2, 3, 4, 5, 6]
        assert reads[0] == 0, reads
        assert ref.note.send(text="y" * 8000).wait(STEP) == 7  # h:, then a read
        assert reads[0] == 1, reads
        assert woken == {"owner": 0, "other": 0}
    finally:
        sender.close()
        other.close()
        owner.close()
