"""Direct turns: a sync call to an actor this process holds idle runs in the caller's
thread and commits enqueue and turn in one transaction (``DirectTurns.run_here``).

The contract is unchanged: per-identity order (the commit is fenced on the mailbox
being empty, so a direct turn never overtakes a queued message), the lease fence, and
the attempt budget. These tests run on every database.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from solid_objects import Actor, Runtime
from solid_objects.errors import MessageFailed, Rejected

from .conftest import count_rows

_threads: list[int] = []
_gate = threading.Event()
_entered = threading.Event()
_runs: list[str] = []
_failures_left: dict[str, int] = {}


class Ledger(Actor):
    entries: list[str] = []

    def write(self, text: str) -> int:
        _threads.append(threading.get_ident())
        _runs.append(text)
        self.entries.append(text)
        return len(self.entries)

    def gated(self, text: str) -> int:
        _threads.append(threading.get_ident())
        _runs.append(text)
        self.entries.append(text)
        if not _gate.is_set():
            _entered.set()
            _gate.wait(10)
        return len(self.entries)

    def flaky(self, text: str) -> int:
        _runs.append(text)
        if _failures_left.get(text, 0) > 0:
            _failures_left[text] -= 1
            raise ConnectionError(f"{text}: not yet")
        self.entries.append(text)
        return len(self.entries)

    def refuse(self, text: str) -> int:
        self.entries.append(text)
        raise Rejected("no", text)


@pytest.fixture(autouse=True)
def _reset() -> None:
    _threads.clear()
    _runs.clear()
    _failures_left.clear()
    _gate.clear()
    _entered.clear()


def _wait_idle(rt: Runtime, actor_id: str) -> None:
    """Wait until the worker that ran the claim has put the activation back to idle."""
    pool = rt.kernel.client.pool
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        act = pool.table.by_identity(Ledger.actor_type, actor_id)
        if act is not None and act.status == "idle":
            return
        time.sleep(0.005)
    raise AssertionError("the activation never went idle")


def _timed(rt: Runtime, *operations: str) -> None:
    """Let the pool know these operations run briefly: a call runs in the caller's thread
    only for an operation this process has timed (``TurnRunner.fits``)."""
    for operation in operations:
        rt.kernel.client.pool.runner.record_turn_seconds(Ledger.actor_type, operation, 0.001)


def _transactions(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[int]]:
    """Count write transactions started from each thread (by kind)."""
    seen: dict[str, list[int]] = {"transact": [], "transact_future": [], "finish_direct": []}
    for name in seen:
        owner = rt.store.turns if name == "finish_direct" else rt.store
        original = getattr(owner, name)

        def counted(*args: Any, _name: str = name, _original: Any = original, **kw: Any) -> Any:
            seen[_name].append(threading.get_ident())
            return _original(*args, **kw)

        monkeypatch.setattr(owner, name, counted)
    return seen


def test_a_warm_call_runs_in_the_callers_thread_in_one_transaction(
    make_runtime: Callable[..., Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    with make_runtime() as rt:
        ref = rt.ref(Ledger, "l")
        assert ref.write(text="a") == 1  # claims the actor: runs on a worker thread
        assert _threads[-1] != threading.get_ident()
        _wait_idle(rt, "l")
        seen = _transactions(rt, monkeypatch)
        assert ref.write(text="b") == 2
        me = threading.get_ident()
        assert _threads[-1] == me
        # enqueue and turn: one transaction (one statement on PostgreSQL)
        # (the direct commit is a transact_future: the caller waits for it until its deadline)
        assert sum(seen[kind].count(me) for kind in seen) == 1
        assert seen["finish_direct"].count(me) == (1 if rt.store.dialect.writable_cte else 0)
        assert ref.snapshot() == {"entries": ["a", "b"]}
        with rt.store.read() as tx:
            row = tx.row(
                "SELECT status, seq, attempts, completed_at, result FROM solid_messages "
                "WHERE operation = 'write' ORDER BY seq DESC"
            )
            actor = tx.row("SELECT next_seq, done_seq, ready_at FROM solid_actors")
        assert (row[0], row[1], row[2], row[4]) == ("completed", 2, 1, "2")
        assert row[3] is not None
        assert (actor[0], actor[1], actor[2]) == (3, 2, None)


def test_a_direct_turn_never_overtakes_a_message_another_process_queued(
    make_runtime: Callable[..., Runtime],
) -> None:
    # The holder polls rarely, so it does not know of the other process's message
    # when its own caller arrives: only the commit's mailbox fence can keep the order.
    with make_runtime(poll_interval=30.0) as rt:
        ref = rt.ref(Ledger, "l")
        assert ref.write(text="a") == 1
        other = make_runtime(workers=0)
        sent = other.ref(Ledger, "l").write.send(text="x")
        assert ref.write(text="b") == 3
        assert sent.wait(timeout=10) == 2
        assert ref.snapshot() == {"entries": ["a", "x", "b"]}
        assert count_rows(rt, "messages", "status = 'completed'") == 3


def test_a_direct_turn_whose_lease_lapses_mid_turn_is_applied_once(
    make_runtime: Callable[..., Runtime],
) -> None:
    with make_runtime() as rt:
        ref = rt.ref(Ledger, "l")
        assert ref.write(text="a") == 1
        _wait_idle(rt, "l")
        _timed(rt, "gated")
        results: list[int] = []
        caller = threading.Thread(target=lambda: results.append(ref.gated(text="b")))
        caller.start()
        assert _entered.wait(10)
        assert _threads[-1] == caller.ident  # a direct turn
        # The lease lapses while the turn runs (a long GC pause, a stalled VM).
        rt.store.transact(lambda tx: tx.run("UPDATE solid_actors SET lease_expires_at = 0"))
        _gate.set()
        caller.join(20)
        assert results == [2]
        # The refused turn ran again (on the stale activation, refused too, then
        # after a fresh claim) ...
        assert _runs[:2] == ["a", "b"] and len(_runs) >= 3
        assert ref.snapshot() == {"entries": ["a", "b"]}  # ... and was applied once
        assert count_rows(rt, "messages") == 2


def test_a_retryable_failure_in_a_direct_turn_counts_as_an_attempt(
    make_runtime: Callable[..., Runtime],
) -> None:
    with make_runtime(max_attempts=3) as rt:
        ref = rt.ref(Ledger, "l")
        assert ref.write(text="a") == 1
        _wait_idle(rt, "l")
        _timed(rt, "flaky")
        _failures_left["b"] = 1
        assert ref.flaky(text="b") == 2
        assert _runs == ["a", "b", "b"]
        with rt.store.read() as tx:
            attempts = tx.scalar("SELECT attempts FROM solid_messages WHERE operation = 'flaky'")
        assert attempts == 2
        assert ref.write(text="c") == 3  # the actor is claimed again and goes on


def test_a_direct_turn_within_a_budget_of_one_attempt_is_a_dead_letter(
    make_runtime: Callable[..., Runtime],
) -> None:
    with make_runtime(max_attempts=1) as rt:
        ref = rt.ref(Ledger, "l")
        assert ref.write(text="a") == 1
        _timed(rt, "flaky", "refuse")
        _failures_left["b"] = 1
        with pytest.raises(MessageFailed):
            ref.flaky(text="b")
        assert _runs == ["a", "b"]
        with pytest.raises(Rejected):
            ref.refuse(text="c")
        assert ref.snapshot() == {"entries": ["a"]}  # neither changed the state
        assert ref.write(text="d") == 2
        assert count_rows(rt, "messages", "status = 'dead'") == 1
        assert count_rows(rt, "messages", "status = 'rejected'") == 1


def test_a_retry_on_a_worker_counts_a_warm_start_too(
    make_runtime: Callable[..., Runtime],
) -> None:
    # The worker-path counterpart (``send`` never runs direct): a message started on an
    # actor that was already held, then failed, must count that start (it did not).
    with make_runtime(max_attempts=3) as rt:
        ref = rt.ref(Ledger, "l")
        assert ref.write(text="a") == 1
        _wait_idle(rt, "l")
        _failures_left["b"] = 1
        assert ref.flaky.send(text="b").wait(timeout=10) == 2
        assert _runs == ["a", "b", "b"]
        with rt.store.read() as tx:
            attempts = tx.scalar("SELECT attempts FROM solid_messages WHERE operation = 'flaky'")
        assert attempts == 2


class Tape(Actor):
    """Records the order of its turns; ``hold`` blocks on the gate to let a queue build."""

    items: list[int] = []

    def hold(self) -> int:
        if not _gate.is_set():
            _entered.set()
            _gate.wait(10)
        return len(self.items)

    def push(self, n: int) -> int:
        self.items.append(n)
        return len(self.items)

    def spoil(self, n: int) -> int:
        self.items.append(-n)  # mutates the instance, then refuses: must not persist
        raise Rejected("spoiled")


def test_a_hot_identitys_queued_turns_commit_several_per_transaction_in_order(
    make_runtime: Callable[..., Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    with make_runtime(max_turns_per_activation=1000) as rt:
        pool = rt.kernel.client.pool
        batches: list[list[str]] = []
        commit = pool._commit

        def recorded(pending: list[Any]) -> Any:
            batches.append([message.operation for _, message, _ in pending])
            return commit(pending)

        monkeypatch.setattr(pool, "_commit", recorded)
        ref = rt.ref(Tape, "t")
        held = ref.hold.send()
        assert _entered.wait(10)
        sent = [ref.push.send(n=i) for i in range(20)]
        spoiled = ref.spoil.send(n=99)
        after = [ref.push.send(n=i) for i in range(20, 25)]
        _gate.set()
        assert held.wait(timeout=10) == 0
        assert [m.wait(timeout=10) for m in sent] == list(range(1, 21))
        with pytest.raises(Rejected):
            spoiled.wait(timeout=10)
        assert [m.wait(timeout=10) for m in after] == list(range(21, 26))
        assert ref.snapshot() == {"items": list(range(25))}
        assert max(len(b) for b in batches) >= 5  # chained: many turns, one commit
        assert sum(len(b) for b in batches) == 27  # every turn committed once
        with rt.store.read() as tx:
            seqs = [r[0] for r in tx.rows("SELECT seq FROM solid_messages ORDER BY seq")]
            attempts = {r[0] for r in tx.rows("SELECT attempts FROM solid_messages")}
        assert seqs == list(range(1, 28))
        assert attempts == {1}


class Trail(Actor):
    """Appends each message's tag: the state must replay the mailbox in order."""

    tags: list[str] = []

    def mark(self, tag: str) -> int:
        self.tags.append(tag)
        return len(self.tags)


def test_direct_calls_and_another_processs_sends_keep_mailbox_order_exactly_once(
    make_runtime: Callable[..., Runtime],
) -> None:
    # Callers here take the direct road whenever the actor is idle; a second runtime
    # (another process, as far as the database knows) sends to the same actors at the
    # same time. Each actor's state must be its completed messages, in sequence order,
    # each exactly once, and every call must have returned its own position.
    with make_runtime() as rt:
        other = make_runtime(workers=0)
        ids = [f"trail-{i}" for i in range(3)]
        for actor_id in ids:
            rt.ref(Trail, actor_id).mark(tag="start")
        returned: dict[str, list[tuple[str, int]]] = {actor_id: [] for actor_id in ids}
        errors: list[BaseException] = []

        def caller(k: int) -> None:
            try:
                for n in range(40):
                    actor_id = ids[(k + n) % len(ids)]
                    tag = f"c{k}-{n}"
                    returned[actor_id].append((tag, rt.ref(Trail, actor_id).mark(tag=tag)))
            except BaseException as exc:
                errors.append(exc)

        def sender() -> None:
            try:
                for n in range(60):
                    other.ref(Trail, ids[n % len(ids)]).mark.send(tag=f"s-{n}")
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=caller, args=(k,)) for k in range(6)]
        threads.append(threading.Thread(target=sender))
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors
        deadline = time.monotonic() + 30
        while count_rows(rt, "messages", "status <> 'completed'") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert count_rows(rt, "messages", "status <> 'completed'") == 0
        for actor_id in ids:
            with rt.store.read() as tx:
                rows = tx.rows(
                    "SELECT m.seq, m.arguments, m.result FROM solid_messages m "
                    "JOIN solid_actors a ON a.pk = m.actor_pk "
                    f"WHERE a.actor_id = '{actor_id}' ORDER BY m.seq"
                )
            tags = [json.loads(r[1])["tag"] for r in rows]
            assert [r[0] for r in rows] == list(range(1, len(rows) + 1))
            assert rt.ref(Trail, actor_id).snapshot() == {"tags": tags}
            assert len(set(tags)) == len(tags)
            assert [int(r[2]) for r in rows] == list(range(1, len(rows) + 1))
            for tag, position in returned[actor_id]:
                assert tags[position - 1] == tag
