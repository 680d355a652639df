"""An enqueue's statements, and the exact fallbacks of PostgreSQL's one-statement enqueue.

On PostgreSQL an unkeyed message due now to an existing actor is one data-modifying
``WITH`` (lock, next seq, optional lease take, insert, wake-up payload) instead of
four statements (each is a round trip and psycopg CPU). Whatever it does
not cover (no actor row, a full mailbox, an idempotency key, a delay) falls back to
the general path, having written nothing. Each case is checked on every database:
the same rows, the same claim and the same wake-up payload; the statement counts
per database are pinned, so a regression to more statements fails.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from solid_objects import Actor, Runtime
from solid_objects.errors import MailboxFull
from solid_objects.store import Enqueued, MessageRow, Store, Tx, mailbox
from solid_objects.store.notices import held_hint, parse_message_hint
from solid_objects.store.rows import new_id

from .conftest import BACKENDS, count_rows, statements_seen


class EnqueueCounted(Actor):
    n: int = 0

    def add(self) -> int:
        self.n += 1
        return self.n


TYPE = "EnqueueCounted"
#: Statements of one enqueue to an existing actor's mailbox: PostgreSQL's one ``WITH``;
#: elsewhere the lock, the seq ``UPDATE`` and the ``INSERT`` (no NOTIFY there).
COMMON = {"postgresql": 1, "sqlite": 3, "mysql": 3}


@contextmanager
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Statements run through ``Tx`` meanwhile, by their first word."""
    kinds: Counter[str] = Counter()
    for name in ("run", "row", "rows"):
        original = getattr(Tx, name)

        def wrapper(self: Tx, template: str, *args: Any, _original: Any = original) -> Any:
            kinds[template.split()[0].upper()] += 1
            return _original(self, template, *args)

        monkeypatch.setattr(Tx, name, wrapper)
    yield kinds
    monkeypatch.undo()


def enqueue(store: Store, actor_id: str, payloads: list[str], **fields: Any) -> Enqueued:
    """One enqueue in its own transaction; the wake-up payloads it published."""
    store.publish = payloads.append
    try:
        return store.transact(
            lambda tx: store.mailbox.enqueue(
                tx,
                message_id=new_id(),
                actor_type=TYPE,
                actor_id=actor_id,
                operation="add",
                arguments="{}",
                **{
                    "idempotency_key": None,
                    "delay_ms": 0,
                    "claim_for": None,
                    "lease_ms": 30_000,
                    **fields,
                },
            )
        )
    finally:
        store.publish = None


def actor(rt: Runtime, actor_id: str) -> dict[str, Any]:
    with rt.store.read() as tx:
        row = tx.row(
            "SELECT pk, next_seq, done_seq, lease_owner, lease_generation, attempt, ready_at "
            "FROM {actors} WHERE actor_type = :t AND actor_id = :i",
            {"t": TYPE, "i": actor_id},
        )
    keys = ("pk", "next_seq", "done_seq", "owner", "generation", "attempt", "ready_at")
    return dict(zip(keys, row, strict=True))


def set_actor(rt: Runtime, actor_id: str, assignments: str) -> None:
    rt.store.transact(
        lambda tx: tx.run(
            "UPDATE {actors} SET " + assignments + " WHERE actor_type = :t AND actor_id = :i",
            {"t": TYPE, "i": actor_id},
        )
    )


@pytest.fixture
def rt(make_runtime: Callable[..., Runtime]) -> Runtime:
    runtime = make_runtime(workers=0)
    runtime.register(EnqueueCounted)
    return runtime


def existing(rt: Runtime, actor_id: str) -> None:
    """An actor row with one message already through its mailbox."""
    enqueue(rt.store, actor_id, [])
    set_actor(rt, actor_id, "done_seq = 1, ready_at = NULL")


def test_an_enqueue_to_an_existing_actor_costs_the_pinned_statements(
    rt: Runtime, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    existing(rt, "common")
    payloads: list[str] = []
    with counted(monkeypatch) as kinds:
        done = enqueue(rt.store, "common", payloads)
    assert sum(kinds.values()) == COMMON[backend], kinds
    if backend == "postgresql":
        assert kinds == {"WITH": 1}
    assert (done.existing, done.claimed, done.message.seq, done.message.status) == (
        False,
        None,
        2,
        "queued",
    )
    assert done.message.created_at == done.message.available_at
    assert payloads == ["w"]
    row = actor(rt, "common")
    assert (row["next_seq"], row["owner"]) == (3, None)
    assert row["ready_at"] is not None
    assert count_rows(rt, "messages", "seq = 2 AND status = 'queued' AND attempts = 0") == 1


def test_an_enqueue_to_a_new_actor_falls_back_and_creates_its_row(
    rt: Runtime, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    payloads: list[str] = []
    with counted(monkeypatch) as kinds:
        done = enqueue(rt.store, "new", payloads)
    if backend == "postgresql":  # the WITH finds no row; the actor's INSERT; the WITH again
        assert kinds == {"WITH": 2, "INSERT": 1}, kinds
    else:
        assert kinds["INSERT"] == 2, kinds  # the actor row, then the message
    assert (done.message.seq, payloads) == (1, ["w"])
    assert actor(rt, "new")["next_seq"] == 2
    assert count_rows(rt, "messages") == 1


def test_a_full_mailbox_refuses_and_nothing_is_written(
    rt: Runtime, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    existing(rt, "full")
    enqueue(rt.store, "full", [], max_length=1)  # one queued: the mailbox is full
    before = actor(rt, "full")
    payloads: list[str] = []
    with counted(monkeypatch) as kinds, pytest.raises(MailboxFull):
        enqueue(rt.store, "full", payloads, max_length=1)
    assert "INSERT" not in kinds and "UPDATE" not in kinds, kinds  # not taken for a new actor
    assert actor(rt, "full") == before
    assert count_rows(rt, "messages") == 2
    assert payloads == []
    with counted(monkeypatch) as kinds:
        assert enqueue(rt.store, "full", [], max_length=2).message.seq == 3
    assert sum(kinds.values()) == COMMON[backend], kinds  # below the limit: the usual cost


def test_a_duplicate_idempotency_key_is_answered_by_the_general_path(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    existing(rt, "keyed")
    first = enqueue(rt.store, "keyed", [], idempotency_key="k")
    payloads: list[str] = []
    with counted(monkeypatch) as kinds:
        again = enqueue(rt.store, "keyed", payloads, idempotency_key="k")
    assert "WITH" not in kinds
    assert (again.existing, again.message.id) == (True, first.message.id)
    assert (payloads, actor(rt, "keyed")["next_seq"], count_rows(rt, "messages")) == ([], 3, 2)


def test_a_delayed_send_is_scheduled_by_the_general_path(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    existing(rt, "later")
    with counted(monkeypatch) as kinds:
        done = enqueue(rt.store, "later", [], delay_ms=60_000)
    assert "WITH" not in kinds
    assert (done.message.seq, done.message.status) == (None, "scheduled")
    assert actor(rt, "later")["next_seq"] == 2


def test_a_paused_actor_queues_the_message_but_is_not_claimed(
    rt: Runtime, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    existing(rt, "paused")
    set_actor(rt, "paused", "paused = 1")
    payloads: list[str] = []
    with counted(monkeypatch) as kinds:
        done = enqueue(rt.store, "paused", payloads, claim_for="me-1")
    assert sum(kinds.values()) == COMMON[backend], kinds
    assert (done.claimed, done.message.seq, payloads) == (None, 2, ["w"])
    assert actor(rt, "paused")["owner"] is None


def test_a_lease_held_by_another_process_gets_its_held_hint(
    rt: Runtime, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    existing(rt, "held")
    set_actor(
        rt, "held", "lease_owner = 'other-1', lease_token = 'x', lease_expires_at = {now} + 60000"
    )
    before = actor(rt, "held")
    payloads: list[str] = []
    with counted(monkeypatch) as kinds:
        done = enqueue(rt.store, "held", payloads, claim_for="me-1")
        plain = enqueue(rt.store, "held", payloads)
    assert sum(kinds.values()) == 2 * COMMON[backend], kinds
    assert (done.claimed, plain.claimed) == (None, None)
    # The message fits: m: carries it to the owner (notices.py); too large, h: names it.
    carried = [parse_message_hint(p, "other-1", rt.store.notice_key) for p in payloads]
    assert [(pk, m.id, m.seq) for pk, m in carried if m is not None] == [
        (before["pk"], done.message.id, 2),
        (before["pk"], plain.message.id, 3),
    ]
    monkeypatch.setattr(mailbox, "message_fields", lambda *_: None)
    payloads.clear()
    enqueue(rt.store, "held", payloads)
    assert payloads == [held_hint(before["pk"], "other-1")]
    after = actor(rt, "held")
    assert (after["owner"], after["generation"], after["next_seq"]) == ("other-1", 0, 5)


def test_an_own_lease_not_taken_wakes_nobody(rt: Runtime) -> None:
    """Our own unexpired lease (the activation will read it): no claim, no wake-up."""
    existing(rt, "own")
    set_actor(
        rt, "own", "lease_owner = 'me-1', lease_token = 'x', lease_expires_at = {now} + 60000"
    )
    payloads: list[str] = []
    done = enqueue(rt.store, "own", payloads, claim_for="me-1")
    assert (done.claimed, payloads, actor(rt, "own")["generation"]) == (None, [], 0)


def test_a_free_lease_is_claimed_with_the_message_as_head(
    rt: Runtime, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    existing(rt, "free")
    set_actor(rt, "free", "lease_owner = 'gone-1', lease_token = 'x', lease_expires_at = 1")
    before = actor(rt, "free")
    payloads: list[str] = []
    with counted(monkeypatch) as kinds:
        done = enqueue(rt.store, "free", payloads, claim_for="me-1", lease_ms=45_000)
    # PostgreSQL: the WITH takes the lease and returns the claimed state (ours is the
    # head); elsewhere the claimed state is read after the INSERT.
    assert sum(kinds.values()) == (1 if backend == "postgresql" else COMMON[backend] + 1), kinds
    assert payloads == []
    assert done.claimed is not None
    lease, head = done.claimed.lease, done.claimed.head
    assert (lease.pk, lease.owner, lease.generation) == (before["pk"], "me-1", 1)
    assert head is not None and head.id == done.message.id
    after = actor(rt, "free")
    assert (after["owner"], after["generation"], after["attempt"]) == ("me-1", 1, 1)
    assert done.claimed.attempt == 1
    with rt.store.read() as tx:
        token, expires, ready, now = tx.row(
            "SELECT lease_token, lease_expires_at, ready_at, {now} FROM {actors} WHERE pk = :pk",
            {"pk": lease.pk},
        )
    assert token == lease.token
    assert ready <= now < expires <= ready + 45_000
    with rt.store.read() as tx:
        assert rt.store.leases.load_claimed(tx, lease) == done.claimed  # what a read would say
    # A second enqueue finds the lease ours: no claim, no wake-up, attempt unchanged.
    again = enqueue(rt.store, "free", payloads, claim_for="me-1")
    assert (again.claimed, payloads, actor(rt, "free")["attempt"]) == (None, [], 1)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_the_one_statement_sends_the_payload_by_notify(rt: Runtime) -> None:
    """Without a ``publish`` hook the ``WITH`` itself sends what would be published."""
    import psycopg

    existing(rt, "notified")
    set_actor(
        rt,
        "notified",
        "lease_owner = 'other-2', lease_token = 'x', lease_expires_at = {now} + 60000",
    )
    url = make_url(rt.store.engine.url).set(drivername="postgresql")
    with psycopg.connect(url.render_as_string(hide_password=False), autocommit=True) as listen:
        listen.execute(f'LISTEN "{rt.store.channel}"')
        for claim in (None, "me-2"):
            rt.store.transact(
                lambda tx, claim=claim: rt.store.mailbox.enqueue(
                    tx,
                    message_id=new_id(),
                    actor_type=TYPE,
                    actor_id="notified",
                    operation="add",
                    arguments="{}",
                    idempotency_key=None,
                    delay_ms=0,
                    claim_for=claim,
                    lease_ms=30_000,
                )
            )
        got = [n.payload for n in listen.notifies(timeout=10, stop_after=2)]
    pk = actor(rt, "notified")["pk"]
    carried = [parse_message_hint(p, "other-2", rt.store.notice_key) for p in got]
    assert [(found, m.seq) for found, m in carried if m is not None] == [(pk, 2), (pk, 3)]


# --- enqueue_to_held: an actor this process holds (UPDATE ... RETURNING) ------------------

UPDATE_RETURNING = [b for b in BACKENDS if b != "mysql"]  # SQLite 3.35+, PostgreSQL
#: PostgreSQL: the INSERT reads the UPDATE's RETURNING in one WITH; SQLite: two statements.
TO_HELD = {"postgresql": 1, "sqlite": 2}


def to_held(store: Store, actor_id: str, max_length: int | None = None) -> MessageRow | None:
    return store.transact(
        lambda tx: store.mailbox.enqueue_to_held(
            tx,
            message_id=new_id(),
            actor_type=TYPE,
            actor_id=actor_id,
            operation="add",
            arguments="{}",
            traceparent="00-tp",
            max_length=max_length,
        )
    )


@pytest.mark.parametrize("backend", UPDATE_RETURNING, indirect=True)
def test_an_enqueue_to_a_held_actor_costs_the_pinned_statements(
    rt: Runtime, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    existing(rt, "mine")
    with counted(monkeypatch) as kinds:
        message = to_held(rt.store, "mine")
    assert sum(kinds.values()) == TO_HELD[backend], kinds
    assert message is not None
    assert (message.seq, message.status, message.traceparent) == (2, "queued", "00-tp")
    assert message.created_at == message.available_at
    assert actor(rt, "mine")["next_seq"] == 3
    with rt.store.read() as tx:
        stored = rt.store.head_message(tx, message.actor_pk, 2)
    assert stored is not None
    assert (stored.id, stored.status, stored.traceparent) == (message.id, "queued", "00-tp")
    assert (stored.created_at, stored.available_at) == (message.created_at, message.available_at)


@pytest.mark.parametrize("backend", UPDATE_RETURNING, indirect=True)
def test_an_enqueue_to_held_writes_nothing_when_full_or_without_a_row(rt: Runtime) -> None:
    assert to_held(rt.store, "nobody") is None
    existing(rt, "brim")
    assert to_held(rt.store, "brim", max_length=1) is not None
    before = actor(rt, "brim")
    assert to_held(rt.store, "brim", max_length=1) is None  # the caller then raises
    assert actor(rt, "brim") == before
    assert count_rows(rt, "messages") == 2


def test_a_free_lease_behind_an_earlier_head_is_claimed_with_that_head(
    rt: Runtime, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The earlier head is read after the claim (it may have changed during a lock wait)."""
    existing(rt, "behind")
    first = enqueue(rt.store, "behind", [])  # seq 2, queued: the head
    set_actor(rt, "behind", "state = '[1]', state_version = 3, attempt = 2")
    with counted(monkeypatch) as kinds:
        done = enqueue(rt.store, "behind", [], claim_for="me-3")
    assert sum(kinds.values()) == (2 if backend == "postgresql" else COMMON[backend] + 1), kinds
    assert done.claimed is not None and done.claimed.head is not None
    assert (done.claimed.head.id, done.claimed.head.seq, done.message.seq) == (
        first.message.id,
        2,
        3,
    )
    assert (done.claimed.state, done.claimed.state_version) == ("[1]", 3)
    assert (done.claimed.done_seq, done.claimed.attempt) == (1, 3)
    with rt.store.read() as tx:
        assert rt.store.leases.load_claimed(tx, done.claimed.lease) == done.claimed


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_lone_send_is_one_statement_in_autocommit(
    make_runtime: Callable[..., Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ``BEGIN`` and ``COMMIT`` round trips around the one statement: a send that runs
    alone (no other enqueue in flight) costs one round trip, from a caller-only process
    and to an actor this process holds; keyed and delayed sends keep their transaction."""
    caller = make_runtime(workers=0)
    caller.register(EnqueueCounted)
    caller.ref(EnqueueCounted, "a").add.send()  # the actor row exists from here on
    with statements_seen(monkeypatch) as seen:
        caller.ref(EnqueueCounted, "a").add.send()
    assert seen == [("WITH", True)]

    worker = make_runtime(workers=1)
    worker.register(EnqueueCounted)
    with worker:
        assert worker.ref(EnqueueCounted, "held").add() == 1  # held by this process now
        with statements_seen(monkeypatch) as seen:
            message = worker.ref(EnqueueCounted, "held").add.send()
        assert seen == [("WITH", True)]
        assert message.wait(timeout=10) == 2

    with statements_seen(monkeypatch) as seen:
        caller.ref(EnqueueCounted, "a").add.with_options(idempotency_key="k").send()
    assert seen and all(not autocommit for _, autocommit in seen), seen
