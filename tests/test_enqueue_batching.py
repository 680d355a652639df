"""The servers' group commit of enqueues (``store/writer.py`` ``EnqueueBatcher``).

Enqueues to any actor made while one is in flight share the next transaction, run
sorted by ``(actor_type, actor_id)`` (stable: arrival order per actor), so two batches
lock actor rows in one order; a failing body fails only its caller. Transactions are
counted by wrapping the batcher's ``commit`` (``Store.transact``); batches are formed
deterministically by holding the first transaction until the others have queued.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from solid_objects import Actor, Runtime, deadline
from solid_objects.errors import DatabaseError, IdempotencyConflict, MailboxFull
from solid_objects.store import Store, writer
from solid_objects.store.writer import EnqueueBatcher
from tests.apps.batchapp import BatchTopologyLog
from tests.conftest import BACKENDS

SERVERS = [b for b in BACKENDS if b != "sqlite"]
ROOT = Path(__file__).resolve().parents[1]
STEP = 20.0
APP = "tests.apps.batchapp:runtime"


class BatchedInbox(Actor):
    items: list[int] = []

    def add(self, item: int) -> int:
        self.items = [*self.items, item]
        return len(self.items)


class BatchRelay(Actor):
    """Turns that ``send_to`` other inboxes while callers batch sends to them."""

    def relay(self, item: int, to: list[str]) -> None:
        for target in to:
            self.send_to(BatchedInbox, target).add(item=item)


def wait_until(predicate: Callable[[], Any], what: str, timeout: float = STEP) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)


class Gate:
    """Counts the batcher's transactions, and holds the first one until ``release()``."""

    def __init__(self, store: Store) -> None:
        self.batcher: EnqueueBatcher = store._batcher
        self.batcher._patience = STEP  # queued callers wait for the held one, however slow
        self.commits = 0
        self.held = threading.Event()
        self.go = threading.Event()
        self.batcher._commit = self._counted(self.batcher._commit)
        if self.batcher._statement is not None:  # a lone enqueue's one statement
            self.batcher._statement = self._counted(self.batcher._statement)

    def _counted(self, run: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def counted(body: Any) -> Any:
            self.commits += 1
            if self.commits == 1:
                self.held.set()
                assert self.go.wait(STEP)
            return run(body)

        return counted

    def queue(self, sends: list[Callable[[], Any]]) -> list[Future[Any]]:
        """Run the first send (its transaction is held), then queue the others behind it
        one at a time, in order; the futures of their results."""
        pool = ThreadPoolExecutor(len(sends))
        futures = [pool.submit(sends[0])]
        assert self.held.wait(STEP)
        for n, send in enumerate(sends[1:], start=1):
            futures.append(pool.submit(send))
            wait_until(lambda n=n: len(self.batcher._waiting) >= n, f"{n} queued enqueues")
        pool.shutdown(wait=False)
        return futures

    def release(self) -> None:
        self.go.set()


def count_rollbacks(runtimes: list[Runtime]) -> list[BaseException | None]:
    """The transactions the server rolled back for a conflict (deadlocks), in any of
    ``runtimes``, from now on (each is run again: the list shows they happened)."""
    found: list[BaseException | None] = []
    for rt in runtimes:
        rolled_back = rt.store.dialect.rolled_back

        def counting(error: BaseException | None, rolled_back: Any = rolled_back) -> bool:
            if rolled_back(error):
                found.append(error)
                return True
            return False

        rt.store.dialect.rolled_back = counting  # type: ignore[method-assign]
    return found


def mailbox(rt: Runtime, actor_type: str) -> dict[str, list[tuple[int, int]]]:
    """Each actor's queued messages as (seq, item), in seq order."""
    with rt.store.read() as tx:
        rows = tx.rows(
            "SELECT actor_id, seq, arguments FROM {messages} WHERE actor_type = :t "
            "AND seq IS NOT NULL ORDER BY actor_id, seq",
            {"t": actor_type},
        )
    found: dict[str, list[tuple[int, int]]] = {}
    for actor_id, seq, arguments in rows:
        found.setdefault(actor_id, []).append((int(seq), json.loads(arguments)["item"]))
    return found


# --- the batcher alone ---------------------------------------------------------------


def test_a_batch_runs_sorted_by_key_keeping_arrival_order_per_key() -> None:
    ran: list[list[str]] = []
    hold, holding = threading.Event(), threading.Event()

    def commit(body: Any) -> Any:
        if not ran:
            holding.set()
            assert hold.wait(STEP)
        result = body(None)
        ran.append(result if isinstance(result, list) else [result])
        return result

    batcher = EnqueueBatcher(commit, patience=60.0)
    arrivals = [("b", "1"), ("b", "0"), ("a", "9"), ("b", "0"), ("a", "1"), ("a", "9")]
    pool = ThreadPoolExecutor(len(arrivals) + 1)
    first = pool.submit(batcher.submit, ("z", "z"), lambda tx: "first")
    assert holding.wait(STEP)
    futures = []
    for n, key in enumerate(arrivals):
        name = f"{key[0]}{key[1]}#{n}"
        futures.append(pool.submit(batcher.submit, key, lambda tx, name=name: name))
        wait_until(lambda n=n: len(batcher._waiting) > n, "queued")
    hold.set()
    assert first.result(STEP).result() == "first"
    names = [f.result(STEP).result() for f in futures]
    assert names == [f"{k[0]}{k[1]}#{n}" for n, k in enumerate(arrivals)]
    assert ran == [["first"], ["a1#4", "a9#2", "a9#5", "b0#1", "b0#3", "b1#0"]]
    pool.shutdown()


def test_a_batch_waits_no_longer_than_its_earliest_caller_and_then_each_runs_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The batch's transaction runs under the earliest deadline of its callers; when it
    fails (here: a lock wait that gave up), each body runs alone in its caller's own
    thread, under that caller's own deadline."""
    monkeypatch.setattr(writer, "BATCH_LOCK_WAIT", 1000.0)
    calls: list[tuple[float | None, Any]] = []
    hold, holding = threading.Event(), threading.Event()

    def commit(body: Any) -> Any:
        if not calls and not holding.is_set():
            holding.set()
            assert hold.wait(STEP)
        result = body(None)
        calls.append((deadline.current(), result))
        if isinstance(result, list):
            raise DatabaseError("LockNotAvailable: canceling statement", None)
        return result

    batcher = EnqueueBatcher(commit, patience=60.0)
    now = time.monotonic()
    deadlines = {"first": None, "a": now + 300, "b": now + 200, "c": None}
    threads: dict[str, int] = {}

    def submit(name: str) -> Any:
        threads[name] = threading.get_ident()
        with deadline.bounded(deadlines[name]):
            return batcher.submit(name, lambda tx: (name, threading.get_ident())).result()

    pool = ThreadPoolExecutor(4)
    futures = {"first": pool.submit(submit, "first")}
    assert holding.wait(STEP)
    for n, name in enumerate("abc", start=1):
        futures[name] = pool.submit(submit, name)
        wait_until(lambda n=n: len(batcher._waiting) >= n, "queued")
    hold.set()
    results = {name: f.result(STEP) for name, f in futures.items()}
    pool.shutdown()
    assert all(results[name] == (name, threads[name]) for name in results)
    assert calls[1] == (now + 200, [(name, threads["a"]) for name in "abc"])  # the batch
    alone = {result[0]: bound for bound, result in calls[2:]}
    assert alone == {"a": now + 300, "b": now + 200, "c": None}


# --- (a) batches on the servers ------------------------------------------------------


@pytest.mark.parametrize("backend", SERVERS, indirect=True)
def test_sends_to_different_actors_share_one_transaction_in_per_actor_order(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0)
    gate = Gate(rt.store)
    order = ["m", "c", "m", "x", "c", "a", "m"]  # arrival order; keys sort differently
    sends = [lambda: rt.ref(BatchedInbox, "lead").add.send(item=-1)]
    sends += [
        lambda i=i, a=a: rt.ref(BatchedInbox, a).add.send(item=i) for i, a in enumerate(order)
    ]
    futures = gate.queue(sends)
    gate.release()
    ids = [f.result(STEP).id for f in futures]
    assert len(set(ids)) == len(sends)
    assert gate.commits == 2  # the first alone, then the 7 others in one transaction
    found = mailbox(rt, "BatchedInbox")
    for actor_id in set(order):
        expected = [i for i, a in enumerate(order) if a == actor_id]
        assert [item for _, item in found[actor_id]] == expected
        assert [seq for seq, _ in found[actor_id]] == list(range(1, len(expected) + 1))
    with make_runtime(workers=2) as worker:
        worker.testing.drain(timeout=STEP)
    for actor_id in set(order):
        state = rt.ref(BatchedInbox, actor_id).snapshot()
        assert state["items"] == [i for i, a in enumerate(order) if a == actor_id]


@pytest.mark.parametrize("backend", SERVERS, indirect=True)
def test_many_threads_sending_to_many_actors_commit_fewer_transactions_than_sends(
    make_runtime: Callable[..., Runtime],
) -> None:
    """16 threads, two actors each: every message runs once, in each sender's order.
    Counted: the database transactions of the sending runtime (``Dialect.write``)."""
    rt = make_runtime(workers=0)
    write = rt.store.dialect.write
    transactions: list[int] = []

    def counted(*args: Any) -> Any:
        transactions.append(1)
        return write(*args)

    rt.store.dialect.write = counted  # type: ignore[method-assign]
    threads, items = 16, 12

    def sender(t: int) -> list[Any]:
        refs = [rt.ref(BatchedInbox, f"t{t}-{k}") for k in range(2)]
        return [refs[i % 2].add.send(item=i) for i in range(items)]

    with ThreadPoolExecutor(threads) as pool:
        sent = [m for chunk in pool.map(sender, range(threads)) for m in chunk]
    assert len({m.id for m in sent}) == threads * items
    assert 0 < len(transactions) < threads * items
    with make_runtime(workers=4) as worker:
        worker.testing.drain(timeout=STEP)
    for t in range(threads):
        for k in range(2):
            state = rt.ref(BatchedInbox, f"t{t}-{k}").snapshot()
            assert state["items"] == [i for i in range(items) if i % 2 == k]


# --- (c) a failing body fails only its caller ------------------------------------------


@pytest.mark.parametrize("backend", SERVERS, indirect=True)
def test_a_refused_enqueue_in_a_batch_fails_only_its_caller(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0, max_mailbox_length=1)
    rt.ref(BatchedInbox, "full").add.send(item=0)
    rt.ref(BatchedInbox, "keyed").add.with_options(idempotency_key="k").send(item=0)
    gate = Gate(rt.store)
    sends = [
        lambda: rt.ref(BatchedInbox, "lead").add.send(item=1),
        lambda: rt.ref(BatchedInbox, "a").add.send(item=2),
        lambda: rt.ref(BatchedInbox, "full").add.send(item=3),
        lambda: rt.ref(BatchedInbox, "keyed").add.with_options(idempotency_key="k").send(item=4),
        lambda: rt.ref(BatchedInbox, "b").add.with_options(delay=3600).send(item=5),
        lambda: rt.ref(BatchedInbox, "c").add.send(item=6),
    ]
    futures = gate.queue(sends)
    gate.release()
    with pytest.raises(MailboxFull):
        futures[2].result(STEP)
    with pytest.raises(IdempotencyConflict):
        futures[3].result(STEP)
    for n in (0, 1, 4, 5):
        assert futures[n].result(STEP).id
    # the first alone, the batch of 5 (rolled back), then each of the 5 alone; where a
    # lone enqueue is one statement (PostgreSQL) the full mailbox's wrote nothing, and its
    # transaction then refused it
    assert gate.commits == 1 + 1 + 5 + (1 if rt.store.dialect.writable_cte else 0)
    found = mailbox(rt, "BatchedInbox")
    assert {a: [i for _, i in m] for a, m in found.items() if a != "b"} == {
        "lead": [1],
        "a": [2],
        "full": [0],
        "keyed": [0],
        "c": [6],
    }
    with rt.store.read() as tx:
        assert tx.scalar("SELECT COUNT(*) FROM {messages} WHERE actor_id = 'b'") == 1


# --- (b) deadlock safety ---------------------------------------------------------------


@pytest.mark.parametrize("backend", SERVERS, indirect=True)
def test_two_runtimes_batching_opposite_orders_do_not_deadlock(
    make_runtime: Callable[..., Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two caller runtimes each batch sends to X and Y, arriving in opposite orders; each
    batch's first enqueue waits (up to 3 s) for the other's, so unsorted batches would
    hold X and Y each and deadlock. Sorted, the second batch waits for the first's lock:
    no transaction is rolled back for a deadlock. (The batches' own lock wait is made
    longer than the 3 s, so that the waiting batch does not give up first.)"""
    monkeypatch.setattr(writer, "BATCH_LOCK_WAIT", 10.0)
    callers = [make_runtime(workers=0), make_runtime(workers=0)]
    for name in ("X", "Y"):  # the rows exist: only row locks are in play
        callers[0].ref(BatchedInbox, name).add.send(item=0)
    barrier = threading.Barrier(2, timeout=3)
    deadlocks = count_rollbacks(callers)
    gates = []
    for rt in callers:
        gates.append(Gate(rt.store))
        enqueue = rt.store.mailbox.enqueue
        met = threading.Event()

        def meeting(tx: Any, *, enqueue: Any = enqueue, met: Any = met, **fields: Any) -> Any:
            done = enqueue(tx, **fields)
            if fields["actor_id"] in ("X", "Y") and not met.is_set():
                met.set()
                try:
                    barrier.wait()
                except threading.BrokenBarrierError:
                    pass
            return done

        rt.store.mailbox.enqueue = meeting  # type: ignore[method-assign]
    futures = []
    for rt, gate, order in zip(callers, gates, (["X", "Y"], ["Y", "X"]), strict=True):
        sends = [lambda rt=rt: rt.ref(BatchedInbox, "lead").add.send(item=9)]
        sends += [lambda rt=rt, a=a: rt.ref(BatchedInbox, a).add.send(item=1) for a in order]
        futures += gate.queue(sends)
    for gate in gates:
        gate.release()
    assert all(f.result(STEP).id for f in futures)
    assert deadlocks == []
    assert [g.commits for g in gates] == [2, 2]
    assert {a: len(m) for a, m in mailbox(callers[0], "BatchedInbox").items()} == {
        "X": 3,
        "Y": 3,
        "lead": 2,
    }


@pytest.mark.parametrize("backend", SERVERS, indirect=True)
def test_batches_in_opposite_orders_beside_relaying_turns_run_every_message_once(
    make_runtime: Callable[..., Runtime],
) -> None:
    """Two caller runtimes' threads send to shared inboxes in opposite orders while a
    worker runtime commits turns of several inboxes together and turns that
    ``send_to`` them all (promoted in one transaction): no error surfaces, every message
    runs once, and no transaction is rolled back for a deadlock, since the batches, the
    worker's commits and ``promote`` all lock actor rows by ``(actor_type, actor_id)``.
    (A long lease: the renewal, which MariaDB cannot order, does not run meanwhile.)"""
    inboxes = [f"in{n}" for n in range(6)]
    worker = make_runtime(workers=4, lease_duration=90.0)
    callers = [make_runtime(workers=0), make_runtime(workers=0)]
    deadlocks = count_rollbacks([worker, *callers])
    threads, rounds = 6, 6

    def sender(job: tuple[int, int]) -> list[Any]:
        c, t = job
        rt = callers[c]
        order = inboxes if c == 0 else inboxes[::-1]
        sent = []
        for r in range(rounds):
            item = (c * 100 + t) * 100 + r
            for name in order:
                sent.append(rt.ref(BatchedInbox, name).add.send(item=item))
            sent.append(rt.ref(BatchRelay, f"relay{t % 3}").relay.send(item=-item, to=order))
        return sent

    with worker, ThreadPoolExecutor(2 * threads) as pool:
        jobs = [(c, t) for c in range(2) for t in range(threads)]
        sent = [m for chunk in pool.map(sender, jobs) for m in chunk]
        for m in sent:
            m.wait(timeout=STEP)
        worker.testing.drain(timeout=STEP)
    expected = sorted(
        sign * ((c * 100 + t) * 100 + r)
        for c in range(2)
        for t in range(threads)
        for r in range(rounds)
        for sign in (1, -1)
    )
    for name in inboxes:
        items = worker.ref(BatchedInbox, name).snapshot()["items"]
        assert sorted(items) == expected, name
    assert deadlocks == []


# --- (d) topology: worker processes and a caller-only process ----------------------------


@pytest.fixture
def worker_processes(db_url: str, tmp_path: Path) -> Iterator[Callable[[int], None]]:
    procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(count: int) -> None:
        env = {
            **os.environ,
            "SOLID_TEST_DB": db_url,
            "SOLID_TEST_OPTIONS": json.dumps(
                {"workers": 2, "lease_duration": 2.0, "idle_timeout": 0.05, "poll_interval": 0.1}
            ),
            "PYTHONUNBUFFERED": "1",
        }
        for n in range(count):
            err = tmp_path / f"worker{n}.stderr"
            with open(err, "wb") as stderr:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "solid_objects", "worker", APP],
                    cwd=ROOT,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                    stdin=subprocess.DEVNULL,
                )
            procs.append((proc, err))
        for proc, err in procs:
            wait_until(
                lambda proc=proc, err=err: (
                    proc.poll() is not None
                    or "solid-objects worker" in err.read_text(errors="replace")
                ),
                "a worker process to start",
                30,
            )
            assert proc.poll() is None, err.read_text(errors="replace")

    yield start
    for proc, err in procs:
        proc.kill()
        proc.wait(timeout=10)
        print(f"----- worker {proc.pid} stderr -----\n{err.read_text(errors='replace')[-3000:]}")


def test_worker_processes_and_a_batching_caller_run_each_message_once_in_order(
    make_runtime: Callable[..., Runtime], worker_processes: Callable[[int], None]
) -> None:
    """Three ``solid-objects worker`` processes; this process (workers=0) sends and calls
    from 8 threads, one actor each plus one actor shared by all: each actor applies every
    item once, and each thread's items in the order it sent them."""
    rt = make_runtime(workers=0)
    worker_processes(3)
    threads, items = 8, 24

    def work(t: int) -> list[Any]:
        own = rt.ref(BatchTopologyLog, f"own{t}")
        shared = rt.ref(BatchTopologyLog, "shared")
        sent = []
        for i in range(items):
            if i % 4 == 3:
                own.add(item=i)  # a call: waits for its result
            else:
                sent.append(own.add.send(item=i))
            sent.append(shared.add.send(item=t * 1000 + i))
        return sent

    with ThreadPoolExecutor(threads) as pool:
        sent = [m for chunk in pool.map(work, range(threads)) for m in chunk]
    for m in sent:
        m.wait(timeout=STEP)
    for t in range(threads):
        assert rt.ref(BatchTopologyLog, f"own{t}").snapshot()["items"] == list(range(items))
    shared = rt.ref(BatchTopologyLog, "shared").snapshot()["items"]
    assert sorted(shared) == sorted(t * 1000 + i for t in range(threads) for i in range(items))
    for t in range(threads):
        assert [x for x in shared if x // 1000 == t] == [t * 1000 + i for i in range(items)]


@pytest.mark.parametrize("backend", SERVERS, indirect=True)
def test_an_enqueue_stuck_on_a_row_lock_holds_up_other_actors_only_for_a_moment(
    make_runtime: Callable[..., Runtime],
) -> None:
    """A lone enqueue waiting for an actor's row lock (here: another transaction holding
    it) is the batcher's transaction in flight; an enqueue to another actor queued
    behind it leaves the queue after the batcher's patience and commits on its own,
    while the lock is still held, instead of waiting for that other actor's lock."""
    rt = make_runtime(workers=0)
    rt.store._batcher._patience = 0.2
    rt.ref(BatchedInbox, "locked").add.send(item=0)  # the actor rows exist
    rt.ref(BatchedInbox, "free").add.send(item=0)
    holder = rt.store.engine.connect()
    pool = ThreadPoolExecutor(2)
    try:
        holder.exec_driver_sql(
            f"SELECT pk FROM {rt.options.table_prefix}actors "
            "WHERE actor_type = 'BatchedInbox' AND actor_id = 'locked' FOR UPDATE"
        )
        stuck = pool.submit(lambda: rt.ref(BatchedInbox, "locked").add.send(item=1))
        wait_until(lambda: rt.store._batcher._busy, "the stuck enqueue in flight")
        free = pool.submit(lambda: rt.ref(BatchedInbox, "free").add.send(item=1))
        assert free.result(STEP).id  # committed while "locked" is still locked
        assert not stuck.done()
    finally:
        holder.rollback()
        holder.close()
    assert stuck.result(STEP).id
    pool.shutdown()
    assert [item for _, item in mailbox(rt, "BatchedInbox")["free"]] == [0, 1]
    assert [item for _, item in mailbox(rt, "BatchedInbox")["locked"]] == [0, 1]
