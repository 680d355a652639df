"""Lock waits and races around an open application transaction and actor expiry.

Each test holds a real transaction open on a separate connection (the application's
own, at the server's default isolation: REPEATABLE READ on MariaDB), or holds one of
the library's own transactions open with a crash-point hook, and checks what other
actors' work does meanwhile: it must not wait for the held transaction, and no message
may be lost or run twice. PostgreSQL and MariaDB only: SQLite has one writer, so an
open write transaction holds every other writer by design (design-decisions.md).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, pool

from solid_objects import Actor, Runtime, faults
from solid_objects.admin import allow
from solid_objects.errors import CallTimeout

from .conftest import BACKENDS, FAST, count_rows, fresh_database
from .test_processes import wait_until

SERVERS = [b for b in BACKENDS if b != "sqlite"]

#: How long a test holds a transaction open at most: far longer than any lock wait
#: the library may spend on its own work, far shorter than ``busy_timeout``.
HOLD = 8.0


class WaitLedger(Actor):
    total: int = 0

    def add(self, n: int) -> int:
        self.total += n
        return self.total


class WaitRelay(Actor):
    sent: int = 0

    def forward(self, to: str, n: int) -> int:
        self.send_to(WaitLedger, to).add(n=n)
        self.sent += 1
        return self.sent


#: The expiry races (design-decisions.md, "Lock waits around application transactions and
#: expiry"): an advisory lock on PostgreSQL, locking reads on MariaDB.
RACE_SERVERS = SERVERS


@pytest.fixture(params=SERVERS)
def server_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_database(str(request.param), tmp_path) as url:
        yield url


@pytest.fixture
def runtimes(server_url: str) -> Iterator[Callable[..., Runtime]]:
    created: list[Runtime] = []

    def make(**options: Any) -> Runtime:
        runtime = Runtime(server_url, **{**FAST, **options})
        runtime.install()
        runtime.start()
        created.append(runtime)
        return runtime

    yield make
    for runtime in reversed(created):
        runtime.close()


@pytest.fixture
def app_engine(server_url: str) -> Iterator[Engine]:
    """The application's engine: the driver's and server's defaults, nothing the library sets."""
    engine = create_engine(server_url, poolclass=pool.NullPool)
    yield engine
    engine.dispose()


def ledger_messages(rt: Runtime, actor_id: str, status: str) -> int:
    return count_rows(rt, "messages", f"actor_id = '{actor_id}' AND status = '{status}'")


@pytest.mark.timeout(90)
def test_an_open_application_transaction_does_not_hold_up_sends_to_other_new_actors(
    runtimes: Callable[..., Runtime], app_engine: Engine
) -> None:
    """The application's enqueue to a new actor locks that actor's row only: sends to
    new actors whose ids sort just before and after it (the gap a REPEATABLE READ
    locking read of a missing row would lock) commit while it is open."""
    rt = runtimes(workers=1, busy_timeout=HOLD * 2)
    rt.ref(WaitLedger, "a-existing").add(n=1)
    rt.ref(WaitLedger, "z-existing").add(n=1)
    others = ["a-new", "m", "m-held-", "m-held-0", "n-new", "y-new", "zz-new"]
    done = threading.Event()
    failures: list[BaseException] = []

    def send_others() -> None:
        try:
            for name in others:
                rt.ref(WaitLedger, name).add.send(n=1)
        except BaseException as exc:
            failures.append(exc)
        done.set()

    with app_engine.connect() as conn:
        held = rt.ref(WaitLedger, "m-held").add.with_options(connection=conn).send(n=10)
        sender = threading.Thread(target=send_others)
        sender.start()
        finished_while_open = done.wait(HOLD)
        conn.commit()
    sender.join()
    assert not failures
    assert finished_while_open, "the sends waited for the application's transaction"
    assert held.wait(timeout=10) == 10
    wait_until(
        lambda: all(rt.ref(WaitLedger, n).snapshot() == {"total": 1} for n in others),
        20,
        "the other sends to run",
    )


@pytest.mark.timeout(90)
@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_a_send_to_an_actor_an_application_transaction_is_enqueuing_to_holds_no_worker(
    runtimes: Callable[..., Runtime], app_engine: Engine, outcome: str
) -> None:
    """Four turns ``send_to`` a new actor whose first message an application
    transaction holds: they commit, the two workers stay free for other actors, and
    each sent message runs once after the transaction ends, either way it ends."""
    rt = runtimes(workers=2)
    relays = [rt.ref(WaitRelay, f"r{i}") for i in range(4)]
    for relay in relays:
        relay.forward(to="warm", n=0)  # the relays exist, so their calls are quick
    with app_engine.connect() as conn:
        rt.ref(WaitLedger, "x").add.with_options(connection=conn).send(n=100)
        sent = [relay.forward.send(to="x", n=1) for relay in relays]
        relayed = [m.wait(timeout=HOLD) for m in sent]
        # Each call needs a worker: a cold actor, and a second message to it.
        first = rt.ref(WaitLedger, "cold").add.send(n=1)
        second = rt.ref(WaitLedger, "cold").add.send(n=2)
        others = [first.wait(timeout=HOLD), second.wait(timeout=HOLD)]
        assert ledger_messages(rt, "x", "completed") == 0
        if outcome == "commit":
            conn.commit()
        else:
            conn.rollback()
    assert relayed == [2, 2, 2, 2]
    assert others == [1, 3]
    expected = 104 if outcome == "commit" else 4
    wait_until(
        lambda: rt.ref(WaitLedger, "x").snapshot() == {"total": expected}, 20, "x's messages"
    )
    assert ledger_messages(rt, "x", "completed") == (5 if outcome == "commit" else 4)
    assert count_rows(rt, "messages", "status NOT IN ('completed')") == 0


def expiring(runtimes: Callable[..., Runtime]) -> Runtime:
    rt = runtimes(workers=1, state_ttl={"WaitLedger": 0.001})
    rt.admin.set_policy(allow({"ops": "*"}))
    rt.ref(WaitLedger, "target").add(n=1)
    rt.ref(WaitRelay, "sender").forward(to="warm", n=0)
    # Nothing else commits once the test's hook is in place.
    wait_until(lambda: ledger_messages(rt, "warm", "completed") == 1, 20, "warm's message")
    return rt


def release_leases(rt: Runtime, *actor_ids: str) -> None:
    """Let the leases go (the target's by default), as an idle worker would, so the
    actors can expire."""
    names = actor_ids or ("target",)
    with rt.store.read() as tx:
        now = rt.store.now(tx)
    marks = ", ".join(f":i{n}" for n in range(len(names)))
    rt.store.transact(
        lambda tx: tx.run(
            "UPDATE {actors} SET lease_owner = NULL, lease_expires_at = NULL, "
            f"updated_at = :past WHERE actor_id IN ({marks})",
            {"past": now - 1000, **{f"i{n}": name for n, name in enumerate(names)}},
        )
    )


@pytest.mark.parametrize("server_url", RACE_SERVERS, indirect=True)
@pytest.mark.timeout(90)
def test_expiry_while_a_send_to_the_actor_is_committing_keeps_the_message(
    runtimes: Callable[..., Runtime],
) -> None:
    """The sending turn's commit is held open (its message written, not committed)
    while ``expire_actors`` runs: the target stays, or the message starts a new
    incarnation; it runs once and never ends ``destroyed``."""
    rt = expiring(runtimes)
    release_leases(rt)
    with rt.store.read() as tx:
        pk = int(tx.scalar("SELECT pk FROM {actors} WHERE actor_id = 'target'"))
    holding = threading.Event()
    expired = threading.Event()

    def hold_commit(point: str) -> None:
        if point == "commit.body" and threading.current_thread().name != "expiry":
            if not holding.is_set():
                holding.set()
                expired.wait(3.0)  # MariaDB: the expiry waits for this commit instead

    reports: list[Any] = []

    def expire() -> None:
        holding.wait(HOLD)
        reports.append(rt.admin.as_principal("ops").expire_actors())
        expired.set()

    expiry = threading.Thread(target=expire, name="expiry")
    with faults.inject(hold_commit):
        expiry.start()
        sent = rt.ref(WaitRelay, "sender").forward.send(to="target", n=5)
        assert sent.wait(timeout=HOLD) == 2
        expiry.join()
    wait_until(lambda: ledger_messages(rt, "target", "completed") == 2, 20, "the sent message")
    assert ledger_messages(rt, "target", "destroyed") == 0
    # The expiry passed over the target (PostgreSQL: the send's lock) or waited for the
    # send's commit and saw its message (MariaDB): the same incarnation ran it.
    assert rt.ref(WaitLedger, "target").snapshot() == {"total": 6}
    assert reports[0].actors.get("WaitLedger", 0) == 0
    with rt.store.read() as tx:
        assert int(tx.scalar("SELECT pk FROM {actors} WHERE actor_id = 'target'")) == pk


@pytest.mark.parametrize("server_url", RACE_SERVERS, indirect=True)
@pytest.mark.timeout(90)
def test_an_expiry_batch_passes_over_only_the_actor_a_send_to_is_committing_to(
    runtimes: Callable[..., Runtime],
) -> None:
    """Quiet actors expire as one batch (one statement per step, not per actor) while
    a ``send_to`` to one of them is held open: that one stays and runs the message in
    the same incarnation; every other actor of the batch expires."""
    rt = expiring(runtimes)
    bystanders = ["idle-1", "idle-2", "idle-3", "warm"]
    for name in bystanders[:-1]:
        rt.ref(WaitLedger, name).add(n=1)
    release_leases(rt, "target", *bystanders)
    with rt.store.read() as tx:
        pk = int(tx.scalar("SELECT pk FROM {actors} WHERE actor_id = 'target'"))
    holding = threading.Event()
    expired = threading.Event()

    def hold_commit(point: str) -> None:
        if point == "commit.body" and threading.current_thread().name != "expiry":
            if not holding.is_set():
                holding.set()
                expired.wait(3.0)  # MariaDB: the expiry waits for this commit instead

    reports: list[Any] = []

    def expire() -> None:
        holding.wait(HOLD)
        reports.append(rt.admin.as_principal("ops").expire_actors())
        expired.set()

    expiry = threading.Thread(target=expire, name="expiry")
    with faults.inject(hold_commit):
        expiry.start()
        sent = rt.ref(WaitRelay, "sender").forward.send(to="target", n=5)
        assert sent.wait(timeout=HOLD) == 2
        expiry.join()
    wait_until(lambda: ledger_messages(rt, "target", "completed") == 2, 20, "the sent message")
    assert ledger_messages(rt, "target", "destroyed") == 0
    assert rt.ref(WaitLedger, "target").snapshot() == {"total": 6}
    assert reports[0].actors == {"WaitLedger": len(bystanders)}
    with rt.store.read() as tx:
        assert int(tx.scalar("SELECT pk FROM {actors} WHERE actor_id = 'target'")) == pk
    assert count_rows(rt, "actors", "actor_type = 'WaitLedger'") == 1
    assert count_rows(rt, "audit", "action = 'actors.expire'") == len(bystanders)


@pytest.mark.parametrize("server_url", RACE_SERVERS, indirect=True)
@pytest.mark.timeout(90)
def test_a_send_to_committing_while_expiry_deletes_the_actor_starts_a_new_incarnation(
    runtimes: Callable[..., Runtime],
) -> None:
    """The expiry's delete is held open (not committed) while another actor's turn
    commits a ``send_to`` to the expired actor: the message starts a new incarnation
    and runs there once."""
    rt = expiring(runtimes)
    release_leases(rt)
    store = rt.store
    with store.read() as tx:
        now = store.now(tx)
        pk = int(tx.scalar("SELECT pk FROM {actors} WHERE actor_id = 'target'"))
    deleting = threading.Event()
    release = threading.Event()

    def expire_and_hold(tx: Any) -> list[tuple[str, str]]:
        gone = store.idle.expire(tx, now, [pk])
        deleting.set()
        release.wait(HOLD)
        return gone

    expiry = threading.Thread(target=lambda: store.transact(expire_and_hold))
    expiry.start()
    assert deleting.wait(HOLD)
    sent = rt.ref(WaitRelay, "sender").forward.send(to="target", n=5)
    # Let the sending turn reach its commit while the delete is uncommitted (it then
    # waits for the delete on both databases), then let the expiry commit.
    with contextlib.suppress(CallTimeout):
        sent.wait(timeout=1.0)
    release.set()
    expiry.join()
    assert sent.wait(timeout=HOLD) == 2
    wait_until(
        lambda: rt.ref(WaitLedger, "target").snapshot() == {"total": 5}, 20, "a new incarnation"
    )
    assert ledger_messages(rt, "target", "destroyed") == 0
    with store.read() as tx:
        assert int(tx.scalar("SELECT pk FROM {actors} WHERE actor_id = 'target'")) != pk
