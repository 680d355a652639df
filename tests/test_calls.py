"""Calls, sends, queries and snapshots through a running runtime (contract 2.1, 2.2, 2.9)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from solid_objects import Actor, Rejected, Runtime, query
from solid_objects.errors import (
    CallTimeout,
    MessagePending,
    QueryMutatedState,
    RuntimeNotStarted,
)

from .conftest import count_rows


class Counter(Actor):
    value: int = 0
    log: list[int] = []

    def add(self, n: int = 1) -> int:
        if n < 0:
            raise Rejected("negative", "n must be >= 0", {"n": n})
        self.value += n
        self.log.append(n)
        return self.value

    async def add_async(self, n: int = 1) -> int:
        self.value += n
        return self.value

    @query
    def current(self) -> int:
        return self.value

    @query
    def mutating_query(self) -> int:
        self.value = 999
        return self.value


def test_call_returns_committed_result_and_send_waits(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime()
    with rt:
        c = rt.ref(Counter, "a")
        assert c.add(n=2) == 2
        m = c.add.send(n=3)
        assert m.wait(timeout=10) == 5
        assert m.status() == "completed"
        assert m.result() == 5
        assert c.current() == 5
        assert c.snapshot() == {"value": 5, "log": [2, 3]}
        assert c.call(Counter.add, n=1) == 6
        assert c.add_async(n=4) == 10
        assert c.send(Counter.add, n=0).wait() == 10


def test_waiting_for_a_message_a_local_worker_already_finished_reads_it_at_once(
    make_runtime: Callable[..., Runtime],
) -> None:
    """``send()`` registers no waiter: a worker here may commit the turn before
    ``wait()`` starts, and nobody hands the outcome over. ``wait`` reads the row first
    instead of trusting the local worker to resolve it (which took up to 250 ms)."""
    rt = make_runtime(workers=2)
    with rt:
        c = rt.ref(Counter, "late")
        c.add(n=1)  # this process now holds the actor: its messages run here
        m = c.add.send(n=1)
        for _ in range(1000):
            if m.status() == "completed":
                break
            threading.Event().wait(0.005)
        assert rt.kernel.pool.table.holds_identity("Counter", "late")
        assert m.wait(timeout=0.1) == 2  # well under the 250 ms safety-net read


_hold = threading.Event()
_holding = threading.Event()


class Gate(Actor):
    opened: int = 0

    def wait_for_gate(self) -> int:
        _holding.set()
        assert _hold.wait(10)
        self.opened += 1
        return self.opened


def test_waiting_for_a_message_still_queued_here_makes_no_read(
    make_runtime: Callable[..., Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The counterpart of the test above: while a local worker still has the message
    to run, the waiter registered now will get the outcome handed over, so ``wait``
    does not read the row first (a read is three round trips on a server)."""
    _hold.clear()
    _holding.clear()
    rt = make_runtime(workers=2)
    with rt:
        g = rt.ref(Gate, "g")
        first = g.wait_for_gate.send()
        assert _holding.wait(10)  # the worker holds the actor, busy with the first
        second = g.wait_for_gate.send()
        reads: list[str] = []
        outcome = rt.kernel.client.messages.outcome
        monkeypatch.setattr(
            rt.kernel.client.messages,
            "outcome",
            lambda message_id: reads.append(message_id) or outcome(message_id),
        )
        results: list[int] = []
        waiter = threading.Thread(target=lambda: results.append(second.wait(timeout=10)))
        waiter.start()
        threading.Event().wait(0.05)
        _hold.set()
        waiter.join(10)
        assert results == [2]
        assert reads == []
        assert first.wait(timeout=10) == 1


def test_positional_arguments_bind_to_the_signature(make_runtime: Callable[..., Runtime]) -> None:
    with make_runtime() as rt:
        assert rt.ref(Counter, "p").add(7) == 7


def test_many_threads_one_identity_each_result_exactly_once(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=4)
    n = 300
    with rt, ThreadPoolExecutor(16) as pool:
        c = rt.ref(Counter, "hot")
        results = list(pool.map(lambda _: c.add(n=1), range(n)))
        assert sorted(results) == list(range(1, n + 1))
        assert c.current() == n
    assert count_rows(rt, "messages", "status = 'completed'") == n


def test_identities_are_independent_and_ids_are_case_sensitive(
    make_runtime: Callable[..., Runtime],
) -> None:
    with make_runtime() as rt:
        rt.ref(Counter, "Cart-1").add(n=1)
        rt.ref(Counter, "cart-1").add(n=5)
        assert rt.ref(Counter, "Cart-1").current() == 1
        assert rt.ref(Counter, "cart-1").current() == 5
    assert count_rows(rt, "actors") == 2


def test_rejected_changes_nothing_is_not_retried_and_later_messages_run(
    make_runtime: Callable[..., Runtime],
) -> None:
    with make_runtime() as rt:
        c = rt.ref(Counter, "r")
        c.add(n=1)
        with pytest.raises(Rejected) as info:
            c.add(n=-5)
        assert info.value.code == "negative"
        assert info.value.details == {"n": -5}
        assert info.value.message_id is not None
        assert c.add(n=1) == 2
        assert c.snapshot() == {"value": 2, "log": [1, 1]}
    assert count_rows(rt, "messages", "status = 'rejected' AND attempts = 1") == 1


def test_query_reads_committed_state_without_a_mailbox_write(
    make_runtime: Callable[..., Runtime],
) -> None:
    with make_runtime() as rt:
        c = rt.ref(Counter, "q")
        c.add(n=3)
        before = count_rows(rt, "messages")
        assert c.current() == 3
        with pytest.raises(QueryMutatedState):
            c.mutating_query()
        assert c.current() == 3  # a query's changes are never committed
        assert count_rows(rt, "messages") == before


def test_snapshot_of_a_new_actor_is_the_default_state_and_writes_nothing(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime()
    assert rt.ref(Counter, "never").snapshot() == {"value": 0, "log": []}
    assert rt.ref(Counter, "never").current() == 0
    assert count_rows(rt, "actors") == 0


def test_workers_leave_types_they_do_not_know_to_others(
    make_runtime: Callable[..., Runtime],
) -> None:
    caller = make_runtime(workers=0)
    m = caller.ref(Counter, "u").add.send(n=1)
    with make_runtime(workers=1, actors=[]) as unaware:  # serves no type at all
        assert unaware.testing.drain(timeout=2) == 0
    assert m.status() == "queued"
    assert count_rows(caller, "actors", "lease_owner IS NULL") == 1


def test_send_from_a_caller_only_process_runs_on_another_runtime(
    make_runtime: Callable[..., Runtime],
) -> None:
    caller = make_runtime(workers=0)
    m = caller.ref(Counter, "x").add.send(n=4)
    assert m.status() == "queued"
    with pytest.raises(MessagePending):
        m.result()
    worker = make_runtime(workers=2)
    worker.register(Counter)
    with worker:
        assert m.wait(timeout=10) == 4
    assert caller.ref(Counter, "x").current() == 4


def test_call_timeout_says_what_it_waits_on_and_keeps_the_message(
    make_runtime: Callable[..., Runtime],
) -> None:
    caller = make_runtime(workers=0)
    with pytest.raises(CallTimeout) as info:
        # Long enough for the enqueue to commit on a loaded machine (else the timeout
        # rightly says the enqueue had not committed yet).
        caller.ref(Counter, "t").with_options(timeout=2.0).add(n=1)
    assert "no worker" in info.value.waiting_on
    message = info.value.message
    assert message is not None
    worker = make_runtime(workers=1)
    worker.register(Counter)
    with worker:
        assert message.wait(timeout=10) == 1


def test_waiting_call_on_a_runtime_without_started_workers_is_refused(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=2)
    with pytest.raises(RuntimeNotStarted):
        rt.ref(Counter, "n").add(n=1)
    assert count_rows(rt, "messages") == 0


def test_drain_runs_everything_deterministically_without_workers(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0)
    refs = [rt.ref(Counter, f"d{i}").add.send(n=i) for i in range(5)]
    assert rt.testing.drain() == 5
    assert [m.result() for m in refs] == [0, 1, 2, 3, 4]
    assert count_rows(rt, "actors", "lease_owner IS NOT NULL") == 0


def test_concurrent_callers_on_many_identities(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(workers=4)
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            ref = rt.ref(Counter, f"m{k % 7}")
            for _ in range(20):
                ref.add(n=1)
        except BaseException as exc:
            errors.append(exc)

    with rt:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(14)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not errors
        assert sum(rt.ref(Counter, f"m{k}").current() for k in range(7)) == 14 * 20
