"""Broker-less wake-ups (``wakeup_url="peer://"``): processes tell each other directly.

Workers are real ``solid-objects worker`` processes polling only every 10 s, so a
call from the caller-only test process that answers in well under that was woken
by a datagram; the worker finds it, runs it and sends the outcome back the same
way. Forged datagrams come from a plain UDP socket of the test's own: whatever they
say, a call returns what was committed. A peer that cannot be reached (a dead
address in the directory) costs polling latency, never the call.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from solid_objects import Actor, Runtime
from solid_objects.engine.peers import PeerWakeup, parse_address, parse_peer_url
from solid_objects.errors import ConfigurationError
from tests.apps.procapp import Tally
from tests.test_pgbouncer import Pooled, pooler  # noqa: F401 (the fixture)
from tests.test_processes import STEP, Cluster, wait_until

pytestmark = pytest.mark.slow

#: How long an idle worker's poller sleeps: longer than any answer here may take.
SLOW_POLL = 10.0


@pytest.fixture
def cluster(tmp_path: Path, db_url: str) -> Iterator[Cluster]:
    c = Cluster(tmp_path, db_url)
    try:
        yield c
    finally:
        c.close()


def peer_caller(cluster: Cluster, **options: Any) -> tuple[Runtime, PeerWakeup]:
    """A started caller-only runtime on peer wake-ups; closed with the cluster."""
    rt = cluster.caller(wakeup_url="peer://", **options)
    rt.start()
    listener = rt.kernel.listener
    assert isinstance(listener, PeerWakeup)
    wait_until(listener.listening.is_set, STEP, "the caller's peer socket")
    return rt, listener


def test_a_caller_only_process_is_answered_long_before_the_poll_would_have(
    cluster: Cluster,
) -> None:
    """Two worker processes poll at most every 10 s (and check for gone peers never,
    which would poll too). Three calls to new actors, each 5 s after the last answer,
    when a worker's poller has backed off to sleeping seconds: found by polling each
    would wait about 3 s (the poller doubles its sleep from 4 ms: 4.1 s, then 8.2 s
    after its last find), so about 10 s for the three; woken, a fraction of a second."""
    rt, listener = peer_caller(cluster)
    cluster.start_workers(
        2,
        workers=2,
        poll_interval=SLOW_POLL,
        takeover_interval=None,
        lease_duration=60.0,
        wakeup_url="peer://",
    )
    wait_until(lambda: len(listener.peers) == 3, STEP, "both workers in the directory")
    assert rt.ref(Tally, "peer-warm").add(n=1) == 1

    latencies = []
    for i in range(3):
        time.sleep(5.0)
        started = time.monotonic()
        assert rt.ref(Tally, f"peer-{i}").add(n=i) == i
        latencies.append(time.monotonic() - started)
    assert sum(latencies) < 2.5, f"{latencies}: the wake-ups did not arrive"
    assert listener.received > 0 and listener.sent >= 4
    assert listener.refused == listener.garbage == 0


def test_a_killed_worker_still_in_the_directory_costs_latency_never_the_call(
    cluster: Cluster,
) -> None:
    """SIGKILL the worker process holding an actor: its directory row stays live for a
    lease, so the next call's ``m:`` goes to a dead socket. The survivor takes the
    actor over (the dead process's session mark is free) and its poll finds the
    message: the call answers, with its state intact."""
    rt, listener = peer_caller(cluster)
    workers = cluster.start_workers(2, workers=2, poll_interval=1.0, wakeup_url="peer://")
    wait_until(lambda: len(listener.peers) == 3, STEP, "both workers in the directory")
    tally = rt.ref(Tally, "survivor")
    assert tally.add(n=1) == 1

    with rt.store.read() as tx:
        owner = str(tx.scalar("SELECT lease_owner FROM {actors} WHERE actor_id = 'survivor'"))
        pid = int(
            tx.scalar(f"SELECT pid FROM {rt.store.prefix}processes WHERE owner = :o", {"o": owner})
        )
    workers[pid].kill()
    assert owner in listener.peers  # still listed: its row has not expired
    sent = listener.sent
    assert tally.add(n=1) == 2
    assert listener.sent > sent


def test_behind_a_transaction_pooler_peers_wake_what_listen_cannot(
    pooler: Callable[..., Pooled],  # noqa: F811
    tmp_path: Path,
) -> None:
    """PostgreSQL through PgBouncer in transaction mode, no direct connection: no
    LISTEN is possible, yet calls from a caller-only process to worker processes that
    poll every 10 s answer at once, after the pollers backed off."""
    pooled = pooler("transaction")
    options: dict[str, Any] = {"pooler": "transaction", "wakeup_url": "peer://"}
    cluster = Cluster(tmp_path, pooled.url)
    try:
        rt = cluster.caller(**options)
        rt.start()
        listener = rt.kernel.listener
        assert isinstance(listener, PeerWakeup)
        cluster.start_workers(
            2, poll_interval=SLOW_POLL, takeover_interval=None, lease_duration=60.0, **options
        )
        wait_until(lambda: len(listener.peers) == 3, STEP, "both workers in the directory")
        assert rt.ref(Tally, "pooled-warm").add(n=1) == 1
        latencies = []
        for i in range(2):
            time.sleep(5.0)
            started = time.monotonic()
            assert rt.ref(Tally, f"pooled-{i}").add(n=i) == i
            latencies.append(time.monotonic() - started)
        assert sum(latencies) < 2.0, f"{latencies}: the wake-ups did not arrive"
    finally:
        cluster.close()


class Vault(Actor):
    balance: int = 0

    def deposit(self, amount: int) -> int:
        GATE.wait(STEP)
        self.balance += amount
        return self.balance


#: A ``deposit`` turn waits while this is cleared (a pending call to forge for).
GATE = threading.Event()
GATE.set()


@pytest.fixture
def pair(db_url: str) -> Iterator[tuple[Runtime, Runtime]]:
    """A worker runtime polling every 30 s and a caller-only one, both on peers."""
    worker = Runtime(db_url, workers=1, poll_interval=30.0, wakeup_url="peer://")
    caller = Runtime(db_url, workers=0, call_timeout=STEP, wakeup_url="peer://")
    GATE.set()
    try:
        worker.install()
        for rt in (worker, caller):
            rt.register(Vault)
            rt.start()
            assert rt.kernel.listener is not None
            wait_until(rt.kernel.listener.listening.is_set, STEP, "the peer socket")
        yield worker, caller
    finally:
        GATE.set()
        caller.close()
        worker.close()


def address_of(rt: Runtime) -> tuple[str, int]:
    listener = rt.kernel.listener
    assert isinstance(listener, PeerWakeup) and listener.address is not None
    found = parse_address(listener.address)
    assert found is not None
    return found


@pytest.mark.parametrize(
    "signature", ["", "#" + "0" * 64, "#" + "0" * 64 + "#" + "1" * 64], ids=str
)
def test_a_forged_datagram_never_becomes_a_call_result(
    pair: tuple[Runtime, Runtime], signature: str
) -> None:
    """A pending call's id, and a datagram to the caller's socket claiming it finished
    with a million: unsigned, with a wrong MAC, or with a wrong MAC in a wrong
    envelope. The call returns the committed balance."""
    caller = pair[1]
    vault = caller.ref(Vault, "v")
    assert vault.deposit(amount=1) == 1
    GATE.clear()
    results: list[Any] = []
    call = threading.Thread(target=lambda: results.append(vault.deposit(amount=1)))
    call.start()

    def pending() -> str | None:
        with caller.store.read() as tx:
            found = tx.scalar("SELECT id FROM {messages} WHERE status = 'queued' ORDER BY seq DESC")
        return None if found is None else str(found)

    message_id = wait_until(pending, STEP, "the second deposit to run")
    listener = caller.kernel.listener
    assert isinstance(listener, PeerWakeup)
    before = listener.unverified
    forged = "o:" + json.dumps([message_id, "completed", "1000000", None]) + signature
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as outsider:
        outsider.sendto(forged.encode(), address_of(caller))
    wait_until(lambda: listener.unverified > before, STEP, "the forged datagram")
    time.sleep(0.3)  # a waiter it nudged has read the row (still running)
    assert call.is_alive() and results == []
    GATE.set()
    call.join(STEP)
    assert results == [2]
    assert vault.snapshot() == {"balance": 2}


def test_garbage_and_floods_are_dropped_and_the_socket_keeps_working(
    pair: tuple[Runtime, Runtime],
) -> None:
    """Oversized, non-ASCII and a flood of unsigned datagrams: counted, at most a few
    per second acted on, and the next real wake-up still arrives."""
    worker, caller = pair
    listener = worker.kernel.listener
    assert isinstance(listener, PeerWakeup)
    target = address_of(worker)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as outsider:
        outsider.sendto(b"w" * 9000, target)
        outsider.sendto(b"\xff\xfe h:1:x", target)
        started = time.monotonic()
        for _ in range(500):
            outsider.sendto(b"w", target)
    wait_until(lambda: listener.garbage == 2, STEP, "the garbage to be counted")
    # The kernel may drop some of the flood itself (a full receive buffer).
    wait_until(lambda: listener.unverified + listener.refused >= 100, STEP, "the flood")
    allowed = 20 + 20 * (time.monotonic() - started) + 1
    assert listener.unverified <= allowed, (listener.unverified, allowed)
    assert listener.refused > 0
    received = listener.received
    assert caller.ref(Vault, "after-garbage").deposit(amount=5) == 5
    assert listener.received > received  # the real wake-up was heard


def test_a_stale_or_unreachable_peer_costs_polling_latency_never_the_call(
    db_url: str,
) -> None:
    """The directory names a peer whose row expired (never sent to) and gives the
    worker a dead address: the caller's wake-ups are lost, the worker's poll finds
    the message, the call answers."""
    worker = Runtime(db_url, workers=1, poll_interval=1.0, wakeup_url="peer://")
    caller: Runtime | None = None
    try:
        worker.install()
        worker.register(Vault)
        worker.start()
        assert worker.kernel.listener is not None
        wait_until(worker.kernel.listener.listening.is_set, STEP, "the worker's socket")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as closed:
            closed.bind(("127.0.0.1", 0))
            dead = f"127.0.0.1:{closed.getsockname()[1]}"

        def rewire(tx: Any) -> None:
            tx.run(
                f"UPDATE {worker.store.prefix}peers SET address = :a WHERE owner = :o",
                {"a": dead, "o": worker.owner},
            )
            worker.store.peers.advertise_peer(tx, "ghost", "127.0.0.1:9", -1000)

        worker.store.transact(rewire)
        caller = Runtime(db_url, workers=0, call_timeout=STEP, wakeup_url="peer://")
        caller.register(Vault)
        caller.start()
        listener = caller.kernel.listener
        assert isinstance(listener, PeerWakeup)
        wait_until(listener.listening.is_set, STEP, "the caller's socket")
        assert "ghost" not in listener.peers
        assert listener.peers[worker.owner] == dead
        assert caller.ref(Vault, "far").deposit(amount=3) == 3
    finally:
        if caller is not None:
            caller.close()
        worker.close()


@pytest.mark.parametrize(
    ("url", "carried"),
    [("peer://", "o:"), ("peer://0.0.0.0:0?advertise=127.0.0.1", "d:")],
    ids=["loopback", "every-interface"],
)
def test_outcomes_travel_whole_only_when_no_datagram_leaves_the_host(
    db_url: str, url: str, carried: str
) -> None:
    """Bound to loopback, a finished message is announced with its signed outcome (the
    caller reads no row); bound beyond, only its id travels and the result stays in
    the database."""
    worker = Runtime(db_url, workers=1, wakeup_url=url)
    caller = Runtime(db_url, workers=0, call_timeout=STEP, wakeup_url=url)
    try:
        worker.install()
        for rt in (worker, caller):
            rt.register(Vault)
            rt.start()
            assert rt.kernel.listener is not None
            wait_until(rt.kernel.listener.listening.is_set, STEP, "the peer socket")
        listener = caller.kernel.listener
        assert isinstance(listener, PeerWakeup)
        heard = worker.kernel.listener
        assert isinstance(heard, PeerWakeup)
        wait_until(lambda: worker.owner in listener.peers, STEP, "the worker's row")
        wait_until(lambda: caller.owner in heard.peers, STEP, "the caller's row")
        sent = caller.ref(Vault, "whole").deposit.send(amount=7)
        assert sent.wait(STEP) == 7

        def announced() -> list[str]:
            return [p for p in listener.recent if sent.id in p and p[:2] in ("o:", "d:")]

        kinds = {p[:2] for p in wait_until(announced, STEP, "the announcement")}
        assert kinds == {carried}
    finally:
        caller.close()
        worker.close()


def test_a_stopped_peer_leaves_the_directory_and_comes_back_on_start(db_url: str) -> None:
    rt = Runtime(db_url, workers=0, wakeup_url="peer://")
    try:
        rt.install()
        rt.start()
        assert rt.kernel.listener is not None
        wait_until(rt.kernel.listener.listening.is_set, STEP, "the socket")
        with rt.store.read() as tx:
            assert [owner for owner, _ in rt.store.peers.live_peers(tx)] == [rt.owner]
        rt.stop()
        with rt.store.read() as tx:
            assert rt.store.peers.live_peers(tx) == []
        rt.start()  # started again (a web framework's lifespan per test client)
        wait_until(rt.kernel.listener.listening.is_set, STEP, "the socket again")
        with rt.store.read() as tx:
            assert rt.store.peers.live_peers(tx) == [(rt.owner, rt.kernel.listener.address)]
    finally:
        rt.close()


def test_a_peer_advertised_by_name_is_looked_up_once_per_refresh(db_url: str) -> None:
    """``advertise=localhost``: the directory holds the name, the sends go to its
    address (looked up when the directory is read); calls are woken."""
    worker = Runtime(db_url, workers=1, poll_interval=30.0, wakeup_url="peer://")
    caller = Runtime(
        db_url, workers=0, call_timeout=STEP, wakeup_url="peer://0.0.0.0:0?advertise=localhost"
    )
    try:
        worker.install()
        for rt in (worker, caller):
            rt.register(Vault)
            rt.start()
            assert rt.kernel.listener is not None
            wait_until(rt.kernel.listener.listening.is_set, STEP, "the peer socket")
        listener = caller.kernel.listener
        assert isinstance(listener, PeerWakeup) and listener.address is not None
        assert listener.address.startswith("localhost:")
        with caller.store.read() as tx:
            assert (caller.owner, listener.address) in caller.store.peers.live_peers(tx)
        heard = worker.kernel.listener
        assert isinstance(heard, PeerWakeup)
        wait_until(lambda: caller.owner in heard.peers, STEP, "the caller's row")
        assert heard.peers[caller.owner].startswith("127.0.0.1:")
        received = listener.received
        assert caller.ref(Vault, "named").deposit(amount=2) == 2
        wait_until(lambda: listener.received > received, STEP, "the worker's announcement")
    finally:
        caller.close()
        worker.close()


def test_a_port_already_taken_is_a_configuration_error(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        rt = Runtime(f"sqlite:///{tmp_path / 'db.sqlite'}", wakeup_url=f"peer://127.0.0.1:{port}")
        try:
            rt.install()
            with pytest.raises(ConfigurationError, match="cannot listen for peers"):
                rt.start()
        finally:
            rt.close()


def test_peer_urls() -> None:
    assert parse_peer_url("peer://") == ("127.0.0.1", 0, None)
    assert parse_peer_url("peer://0.0.0.0:7400?advertise=10.0.0.5") == (
        "0.0.0.0",
        7400,
        "10.0.0.5",
    )
    assert parse_address("[::1]:7400") == ("::1", 7400)
    assert parse_address("nonsense") is None
    for bad in ("peer://0.0.0.0:7400", "peer://:x", "peer://?port=1"):
        with pytest.raises(ConfigurationError):
            Runtime("sqlite://", wakeup_url=bad)
