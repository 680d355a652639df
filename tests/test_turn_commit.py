"""A turn's fenced commit, statement by statement.

On PostgreSQL a turn that staged nothing commits as one data-modifying ``WITH``:
the fenced ``UPDATE`` of the actor row, the message's ``UPDATE`` (only if the
fence held), the outcome's NOTIFY (one per returned row, so only if the fence
held) and the read of the next head. What must not change with it: a lost lease
writes and announces nothing and raises ``LeaseLost``; a message enqueued while
the turn ran is returned as the next head, even one whose enqueue committed
while the fence waited for the actor row's lock (after the statement's
snapshot); a turn that staged anything takes the general path. SQLite and
MariaDB keep their statements. Everything here is counted, never timed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from solid_objects import Actor, Runtime
from solid_objects.engine.turn import Limits, TurnOutcome, execute
from solid_objects.engine.wakeup import PostgresListener
from solid_objects.errors import LeaseLost
from solid_objects.store import Claimed, Store
from solid_objects.store.dialect import Tx
from solid_objects.store.notices import outcome_notice
from solid_objects.store.rows import Committed, new_id
from tests.conftest import BACKENDS, count_rows, statements_seen
from tests.test_processes import STEP, wait_until
from tests.test_server_faults import lock_waiters

POSTGRESQL = [b for b in BACKENDS if b == "postgresql"]  # NOTIFY
SERVERS = [b for b in BACKENDS if b != "sqlite"]  # row locks: an enqueue can wait on one

#: The statements of a turn's commit that staged nothing and announces its outcome,
#: when the next message was enqueued during the turn.
ONE_TURN = {
    "postgresql": ["WITH"],  # fence, message, NOTIFY and next head in one statement
    "sqlite": ["UPDATE {actors}", "UPDATE {messages}", "SELECT"],  # no NOTIFY
    "mysql": ["UPDATE {actors}", "UPDATE {messages}", "SELECT"],  # no NOTIFY
}


class OneStatementTally(Actor):
    n: int = 0

    def add(self, n: int = 1, effect: bool = False) -> int:
        self.n += n
        if effect:
            self.emit("tally_noted", n=self.n)
        return self.n


def kind(template: str) -> str:
    """``UPDATE {actors}``, ``INSERT INTO {effects}``, ``WITH``, ``SELECT``, ..."""
    words = template.split()
    if words[0] == "UPDATE":
        return " ".join(words[:2])
    if words[0] == "INSERT":
        return " ".join(words[:3])
    return words[0]


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The kind of every statement run through ``Tx`` (on SQLite, by the writer thread)."""
    seen: list[str] = []
    for name in ("run", "row", "rows"):
        original = getattr(Tx, name)

        def counted(self: Tx, template: str, params: Any = None, _original: Any = original) -> Any:
            seen.append(kind(template))
            return _original(self, template, params)

        monkeypatch.setattr(Tx, name, counted)
    yield seen


def tally(make_runtime: Callable[..., Runtime]) -> Runtime:
    rt = make_runtime(workers=0)
    rt.register(OneStatementTally)
    return rt


def claim(rt: Runtime, actor_id: str, owner: str, generation: int | None = None) -> Claimed:
    """Take the actor's lease as ``owner`` (after the holder's lease expired, if any)."""
    store = rt.store
    with store.read() as tx:
        pk, current = tx.row(
            "SELECT pk, lease_generation FROM {actors} WHERE actor_type = :t AND actor_id = :i",
            {"t": "OneStatementTally", "i": actor_id},
        )
    if generation is not None:  # the holder stalled past its lease
        store.transact(
            lambda tx: tx.run("UPDATE {actors} SET lease_expires_at = 0 WHERE pk = :pk", {"pk": pk})
        )
    claimed = store.transact(
        lambda tx: store.leases.claim(tx, int(pk), int(current), owner, 60_000)
    )
    assert claimed is not None and claimed.head is not None
    return claimed


def run(rt: Runtime, claimed: Claimed) -> TurnOutcome:
    """The turn of the claimed head, as a worker runs it (no database)."""
    definition = rt.registry.get("OneStatementTally")
    instance = definition.instantiate(claimed.actor_id, definition.load_state(claimed.state, 1))
    assert claimed.head is not None
    return execute(definition, instance, claimed.state, claimed.head, Limits(1 << 20, 1 << 20))


def commit(
    store: Store, tx: Tx, claimed: Claimed, outcome: TurnOutcome, *, notify_done: bool = True
) -> Committed:
    assert claimed.head is not None
    return store.turns.finish_turn(
        tx,
        claimed.lease,
        claimed.head,
        status=outcome.kind,
        state=outcome.state,
        state_version=1,
        result=outcome.result,
        error=outcome.error,
        attempt=1,
        lease_ms=60_000,
        staged=outcome.staged,
        notify_done=notify_done,
    )


def test_a_turn_that_staged_nothing_commits_in_one_statement_with_the_next_head(
    make_runtime: Callable[..., Runtime], backend: str, statements: list[str]
) -> None:
    """PostgreSQL: one statement; it returns the message enqueued during the turn."""
    rt = tally(make_runtime)
    ref = rt.ref(OneStatementTally, "one")
    first = ref.add.send(n=2)
    claimed = claim(rt, "one", "worker-a")
    outcome = run(rt, claimed)
    assert outcome.kind == "completed" and not outcome.staged
    second = ref.add.send(n=3)  # arrives while the turn runs
    statements.clear()
    committed = rt.store.transact(lambda tx: commit(rt.store, tx, claimed, outcome))
    assert statements == ONE_TURN[backend]
    assert committed.next_head is not None and committed.next_head.id == second.id
    assert committed.next_head.status == "queued" and committed.next_head.seq == 2
    assert first.result() == 2 and ref.snapshot() == {"n": 2}
    with rt.store.read() as tx:
        assert tx.row(
            "SELECT done_seq, lease_owner FROM {actors} WHERE pk = :pk", {"pk": claimed.lease.pk}
        ) == (1, "worker-a")


@pytest.fixture
def taken_over(make_runtime: Callable[..., Runtime]) -> dict[str, Any]:
    """Two actors claimed by worker-a, whose lease on ``stale`` worker-b then took over
    (between worker-a's turn and its commit); both turns ran."""
    rt = tally(make_runtime)
    sent = {name: rt.ref(OneStatementTally, name).add.send(n=5) for name in ("stale", "held")}
    stale, held = claim(rt, "stale", "worker-a"), claim(rt, "held", "worker-a")
    outcomes = {"stale": run(rt, stale), "held": run(rt, held)}
    fresh = claim(rt, "stale", "worker-b", generation=stale.lease.generation)
    assert fresh.lease.generation == stale.lease.generation + 1
    return {"rt": rt, "sent": sent, "stale": stale, "held": held, "outcomes": outcomes}


def commit_both(case: dict[str, Any]) -> list[str]:
    """Commit worker-a's two turns in one transaction, as a worker's batch does."""
    store: Store = case["rt"].store
    refused: list[str] = []

    def body(tx: Tx) -> None:
        for name in ("stale", "held"):
            try:
                commit(store, tx, case[name], case["outcomes"][name])
            except LeaseLost:
                refused.append(name)

    store.transact(body)
    return refused


def assert_nothing_written_for_stale(case: dict[str, Any]) -> None:
    rt: Runtime = case["rt"]
    stale = case["stale"]
    with rt.store.read() as tx:
        assert tx.row(
            "SELECT done_seq, state, lease_owner FROM {actors} WHERE pk = :pk",
            {"pk": stale.lease.pk},
        ) == (0, None, "worker-b")
        assert tx.row(
            "SELECT status, attempts, result, completed_at FROM {messages} WHERE id = :id",
            {"id": case["sent"]["stale"].id},
        ) == ("queued", 0, None, None)
    assert case["sent"]["held"].result() == 5  # the other turn of the batch committed
    assert count_rows(rt, "messages", "status = 'completed'") == 1


def test_a_lease_taken_over_before_the_commit_writes_and_publishes_nothing(
    taken_over: dict[str, Any], statements: list[str]
) -> None:
    """Through a broker (Redis): only the turn whose fence held hands its id over."""
    rt: Runtime = taken_over["rt"]
    published: list[str] = []
    rt.store.publish = published.append  # after each commit, instead of NOTIFY
    statements.clear()
    assert commit_both(taken_over) == ["stale"]
    if rt.store.dialect.writable_cte:  # each turn one statement, the refused one too
        assert statements == ["WITH", "WITH"]
    else:  # the refused fence alone; the held one says its mailbox is empty: no head read
        assert statements == ["UPDATE {actors}", "UPDATE {actors}", "UPDATE {messages}"]
    assert_nothing_written_for_stale(taken_over)
    assert published == [f"d:{taken_over['sent']['held'].id}"]


@pytest.mark.parametrize("backend", POSTGRESQL, indirect=True)
def test_a_lease_taken_over_before_the_commit_notifies_nothing(
    taken_over: dict[str, Any], statements: list[str]
) -> None:
    """NOTIFY inside the one statement: sent for the turn whose fence held alone."""
    rt: Runtime = taken_over["rt"]
    heard: list[str] = []
    listener = PostgresListener(rt.store.engine, lambda: rt.store.channel, heard.append)
    listener.start()
    try:
        wait_until(listener.listening.is_set, STEP, "the listener")
        statements.clear()
        assert commit_both(taken_over) == ["stale"]
        assert statements == ["WITH", "WITH"]
        # Notifications arrive in commit order: once the later one is heard, so is the
        # batch's.
        rt.store.transact(lambda tx: rt.store.notify(tx, "later"))
        wait_until(lambda: "later" in heard, STEP, "the later notification")
    finally:
        listener.stop()
    held = taken_over["sent"]["held"].id
    outcome = outcome_notice(rt.store.notice_key, held, "completed", "5", None)
    assert [p for p in heard if p not in ("w", "later")] == [outcome]
    assert_nothing_written_for_stale(taken_over)


@pytest.mark.parametrize("backend", SERVERS, indirect=True)
def test_a_head_enqueued_while_the_fence_waited_for_the_lock_is_returned(
    make_runtime: Callable[..., Runtime], db_url: str, statements: list[str]
) -> None:
    """The enqueue commits after the commit statement's snapshot, before its fence
    ``UPDATE`` gets the actor row: the returned ``next_seq`` counts the message, the
    snapshot does not show it, and the head is read apart (PostgreSQL)."""
    rt = tally(make_runtime)
    store = rt.store
    rt.ref(OneStatementTally, "waited").add.send(n=1)
    claimed = claim(rt, "waited", "worker-a")
    outcome = run(rt, claimed)
    enqueued, release = threading.Event(), threading.Event()
    second = new_id()

    def enqueue(tx: Tx) -> None:
        store.mailbox.enqueue(
            tx,
            message_id=second,
            actor_type="OneStatementTally",
            actor_id="waited",
            operation="add",
            arguments='{"n":2}',
            idempotency_key=None,
            delay_ms=0,
            claim_for=None,
            lease_ms=60_000,
        )
        enqueued.set()
        assert release.wait(STEP)  # holds the actor row's lock until released

    done: dict[str, Any] = {}

    def committer() -> None:
        done["committed"] = store.transact(lambda tx: commit(store, tx, claimed, outcome))

    sender = threading.Thread(target=lambda: store.transact(enqueue))
    sender.start()
    try:
        assert enqueued.wait(STEP)
        statements.clear()  # the sender only waits and commits from here on
        thread = threading.Thread(target=committer)
        thread.start()
        wait_until(lambda: lock_waiters(db_url) >= 1, STEP, "the commit to wait for the lock")
    finally:
        release.set()
        sender.join(STEP)
    thread.join(STEP)
    committed: Committed = done["committed"]
    assert committed.next_head is not None and committed.next_head.id == second
    if store.dialect.writable_cte:
        assert statements == ["WITH", "SELECT"]
    with store.read() as tx:
        assert (
            tx.scalar("SELECT done_seq FROM {actors} WHERE pk = :pk", {"pk": claimed.lease.pk}) == 1
        )


def test_a_turn_that_staged_an_effect_takes_the_general_path(
    make_runtime: Callable[..., Runtime], statements: list[str]
) -> None:
    rt = tally(make_runtime)
    sent = rt.ref(OneStatementTally, "staged").add.send(n=4, effect=True)
    claimed = claim(rt, "staged", "worker-a")
    outcome = run(rt, claimed)
    assert outcome.staged is not None and len(outcome.staged.effects) == 1
    statements.clear()
    committed = rt.store.transact(
        lambda tx: commit(rt.store, tx, claimed, outcome, notify_done=False)
    )
    assert committed.next_head is None
    # the fence says the mailbox is empty (MySQL/MariaDB: as its insert id): no head read
    assert statements == ["UPDATE {actors}", "UPDATE {messages}", "INSERT INTO {effects}"]
    assert sent.result() == 4
    assert count_rows(rt, "effects", "name = 'tally_noted'") == 1


def reclaimed_by_the_same_process(
    make_runtime: Callable[..., Runtime], effect: bool
) -> tuple[Runtime, Any, Claimed, TurnOutcome, Claimed]:
    """worker-a claimed the actor and ran its head; the lease expired before the commit
    and another thread of worker-a claimed it again: same owner, new token and
    generation. Returns (runtime, sent, the older claim, its outcome, the newer claim)."""
    rt = tally(make_runtime)
    sent = rt.ref(OneStatementTally, "same").add.send(n=5, effect=effect)
    older = claim(rt, "same", "worker-a")
    outcome = run(rt, older)
    newer = claim(rt, "same", "worker-a", generation=older.lease.generation)
    assert newer.lease.owner == older.lease.owner
    assert newer.lease.token != older.lease.token
    assert newer.lease.generation == older.lease.generation + 1
    return rt, sent, older, outcome, newer


def rows_of(rt: Runtime, sent: Any) -> tuple[Any, ...]:
    """The actor's and the message's rows, and the effects, as the database has them."""
    with rt.store.read() as tx:
        return (
            tx.row(
                "SELECT done_seq, next_seq, state, attempt, lease_owner, lease_token, "
                "lease_generation, lease_expires_at, ready_at FROM {actors} "
                "WHERE actor_id = 'same'"
            ),
            tx.row(
                "SELECT status, seq, attempts, result, error, completed_at FROM {messages} "
                "WHERE id = :id",
                {"id": sent.id},
            ),
            tx.scalar("SELECT COUNT(*) FROM {effects}"),
        )


def assert_untouched_then_runs_once(
    rt: Runtime, sent: Any, before: tuple[Any, ...], newer: Claimed, effect: bool
) -> None:
    """Nothing of the refused commit is in the database; the newer activation then runs
    the message, whose outcome is committed exactly once."""
    assert rows_of(rt, sent) == before
    assert before[0][5] == newer.lease.token and before[1][0] == "queued"
    rt.store.transact(lambda tx: commit(rt.store, tx, newer, run(rt, newer), notify_done=False))
    assert sent.result() == 5
    assert rt.ref(OneStatementTally, "same").snapshot()["n"] == 5
    assert count_rows(rt, "messages", "status = 'completed'") == 1
    assert count_rows(rt, "effects") == (1 if effect else 0)


@pytest.mark.parametrize("effect", [False, True], ids=["staged-nothing", "staged-an-effect"])
def test_an_older_activation_of_the_same_process_cannot_commit(
    make_runtime: Callable[..., Runtime], statements: list[str], effect: bool
) -> None:
    """The fence's token and generation, not the owner, tell two activations of one
    process apart. Staging nothing is PostgreSQL's one-statement commit (``WITH``);
    staging an effect is the general path on every database."""
    rt, sent, older, outcome, newer = reclaimed_by_the_same_process(make_runtime, effect)
    before = rows_of(rt, sent)
    statements.clear()
    with pytest.raises(LeaseLost):
        rt.store.transact(lambda tx: commit(rt.store, tx, older, outcome, notify_done=False))
    if rt.store.dialect.writable_cte and not effect:
        assert statements == ["WITH"]  # the one-statement path was the one refused
    assert_untouched_then_runs_once(rt, sent, before, newer, effect)


def test_an_older_activation_of_the_same_process_cannot_record_a_retry(
    make_runtime: Callable[..., Runtime],
) -> None:
    """A retryable failure is recorded behind the same fence: refused for the older
    activation (it would release the newer one's lease and hold the mailbox back)."""
    rt, sent, older, _, newer = reclaimed_by_the_same_process(make_runtime, False)
    assert older.head is not None
    before = rows_of(rt, sent)
    with pytest.raises(LeaseLost):
        rt.store.transact(
            lambda tx: rt.store.turns.retry_later(
                tx, older.lease, older.head, error="{}", attempt=1, delay_ms=60_000
            )
        )
    assert_untouched_then_runs_once(rt, sent, before, newer, False)


@pytest.mark.parametrize("backend", POSTGRESQL, indirect=True)
def test_a_worker_commits_a_lone_turn_as_one_statement_in_autocommit(
    make_runtime: Callable[..., Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's commit of one turn that staged nothing is its one statement, its own
    transaction: no ``BEGIN`` and ``COMMIT`` round trips. A turn that staged an effect
    keeps its transaction."""
    rt = make_runtime(workers=0)
    rt.register(OneStatementTally)
    rt.ref(OneStatementTally, "lone").add.send()
    with statements_seen(monkeypatch) as seen:
        assert rt.testing.drain() == 1
    commits = [autocommit for word, autocommit in seen if word == "WITH"]
    assert commits == [True], seen
    rt.ref(OneStatementTally, "lone").add.send(effect=True)
    with statements_seen(monkeypatch) as seen:
        assert rt.testing.drain() == 1
    assert seen and not any(autocommit for word, autocommit in seen if word != "SELECT"), seen
    assert rt.ref(OneStatementTally, "lone").snapshot()["n"] == 2
