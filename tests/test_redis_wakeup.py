"""Redis Pub/Sub wake-ups (``wakeup_url``): fast when Redis is up, harmless when it is not.

Each test runs its own ``redis-server`` on a free port, so it can stop and
restart it without touching anyone else's Redis. Workers are real
``solid-objects worker`` processes (``tests/test_processes.py``); the test
process is a caller-only runtime. Whether the wake-up path was used is read from
the runtimes' counters and from a Redis subscriber of the test's own, never
from timings; the latencies are printed for the record (``-s`` shows them).
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from solid_objects import Actor, Runtime, faults
from solid_objects.engine.wakeup import RedisWakeup
from solid_objects.errors import ConfigurationError
from tests.apps.procapp import Tally
from tests.test_processes import STEP, Cluster, poll_for, wait_until

pytestmark = pytest.mark.slow

REQUIRED = os.environ.get("SOLID_TEST_REQUIRE_SERVERS") == "1"
#: A throwaway server: nothing is written to disk.
PRIVATE = ("--save", "", "--appendonly", "no")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """A private ``redis-server`` (no persistence) that a test can stop and start again."""

    def __init__(self, folder: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            if REQUIRED:
                raise AssertionError("redis-server is not installed: the Redis tests cannot run")
            pytest.skip("redis-server is not installed")
        self.binary = binary
        self.port = free_port()
        self.log = folder / "redis.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, *("--port", str(self.port), "--bind", "127.0.0.1"), *PRIVATE],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        wait_until(self.answers, STEP, "redis-server to answer")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def client(self) -> Any:
        import redis

        return redis.Redis.from_url(self.url, socket_timeout=5)


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


def caller(cluster: Cluster, wakeup_url: str) -> tuple[Runtime, RedisWakeup]:
    """A started caller-only runtime with Redis wake-ups; closed with the cluster."""
    rt = Runtime(cluster.url, workers=0, call_timeout=STEP, wakeup_url=wakeup_url)
    cluster._runtimes.append(rt)
    rt.install()
    rt.start()
    assert isinstance(rt.kernel.listener, RedisWakeup)
    return rt, rt.kernel.listener


def subscribers(server: RedisServer, channel: str) -> int:
    client = server.client()
    try:
        return int(dict(client.pubsub_numsub(channel))[channel.encode()])
    finally:
        client.close()


def timed_calls(rt: Runtime, actor_id: str, count: int) -> list[float]:
    tally = rt.ref(Tally, actor_id)
    latencies = []
    for _ in range(count):
        start = time.perf_counter()
        tally.add(n=1)
        latencies.append(time.perf_counter() - start)
        time.sleep(0.01)
    return latencies


def report(label: str, latencies: list[float]) -> None:
    ordered = sorted(latencies)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    print(
        f"{label}: {len(ordered)} calls, p50 {statistics.median(ordered) * 1000:.1f} ms, "
        f"p95 {p95 * 1000:.1f} ms",
        file=sys.stderr,
    )


def test_a_call_answered_by_another_process_is_woken_through_redis(
    cluster: Cluster, redis_server: RedisServer
) -> None:
    """The caller publishes ``w`` after its enqueue commits, the worker process publishes
    ``d:<id>`` after the turn commits, and the caller's subscriber receives it.

    The worker polls only every 5 s, so it is the wake-up that makes it run the turn.
    """
    rt, wakeup = caller(cluster, redis_server.url)
    channel = rt.store.channel
    watcher = redis_server.client().pubsub(ignore_subscribe_messages=True)
    watcher.subscribe(channel)
    cluster.start_workers(1, workers=2, poll_interval=5.0, wakeup_url=redis_server.url)
    # The caller and the worker process each hold one subscription (and so does the watcher).
    wait_until(lambda: subscribers(redis_server, channel) == 3, STEP, "both subscriptions")

    sent = rt.ref(Tally, "t").add.send(n=1)
    assert sent.wait(STEP) == 1
    wait_until(lambda: f"d:{sent.id}" in wakeup.recent, STEP, "the caller to receive d:<id>")

    received_before = wakeup.received
    latencies = timed_calls(rt, "t", 30)
    report("redis wake-up, caller and worker in two processes", latencies)
    assert rt.ref(Tally, "t").snapshot() == {"value": 31}
    # Each call: its own "w" and the worker's "d:<id>" came back through the subscription.
    assert wakeup.received - received_before >= 2 * 30
    assert wakeup.dropped == 0

    seen: list[str] = []
    deadline = time.monotonic() + STEP
    while not {f"d:{sent.id}", "w"} <= set(seen) and time.monotonic() < deadline:
        message = watcher.get_message(timeout=0.5)
        if message is not None:
            seen.append(message["data"].decode())
    watcher.close()
    assert f"d:{sent.id}" in seen  # published by the worker process after the turn committed
    # ...and "w" by the caller after its enqueue; not necessarily first: the worker's
    # first poll, as it starts, may find the message before the wake-up reaches it.
    assert "w" in seen


def test_redis_unreachable_calls_complete_by_polling(cluster: Cluster) -> None:
    """Nothing listens on the port: no call fails, payloads are dropped, polling answers."""
    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    rt, wakeup = caller(cluster, nowhere)
    cluster.start_workers(1, workers=2, poll_interval=0.05, wakeup_url=nowhere)
    tally = rt.ref(Tally, "down")
    assert [tally.add(n=1) for _ in range(10)] == list(range(1, 11))
    assert not wakeup.listening.is_set()
    assert wakeup.received == 0
    wait_until(lambda: wakeup.dropped > 0, STEP, "the caller's wake-ups to be dropped")
    assert wakeup.published == 0


def test_redis_restarted_mid_run_wakeups_resume(
    cluster: Cluster, redis_server: RedisServer
) -> None:
    """Calls keep completing while Redis is down, and wake-ups resume once it is back."""
    rt, wakeup = caller(cluster, redis_server.url)
    channel = rt.store.channel
    worker = cluster.start_workers(1, workers=2, poll_interval=0.2, wakeup_url=redis_server.url)
    wait_until(lambda: subscribers(redis_server, channel) == 2, STEP, "both subscriptions")
    tally = rt.ref(Tally, "restart")
    assert [tally.add(n=1) for _ in range(5)] == [1, 2, 3, 4, 5]
    first = tally.add.send(n=1)
    assert first.wait(STEP) == 6
    wait_until(lambda: f"d:{first.id}" in wakeup.recent, STEP, "d:<id> before the restart")

    redis_server.stop()
    wait_until(lambda: not wakeup.listening.is_set(), STEP, "the subscription to drop")
    down = timed_calls(rt, "restart", 10)
    report("redis down, polling (worker poll_interval 0.2 s)", down)
    assert tally.snapshot() == {"value": 16}
    wait_until(lambda: wakeup.dropped > 0, STEP, "the caller's wake-ups to be dropped")

    redis_server.start()
    wait_until(wakeup.listening.is_set, STEP, "the caller to subscribe again")
    wait_until(lambda: subscribers(redis_server, channel) == 2, STEP, "the worker to resubscribe")
    published_before, sends = wakeup.published, 0

    def woken_through_redis() -> bool:
        # Each process's publisher retries after its backoff (at most 5 s): send until a
        # turn's d:<id> from the worker process reaches the caller again.
        nonlocal sends
        message = tally.add.send(n=1)
        sends += 1
        message.wait(STEP)
        return poll_for(lambda: f"d:{message.id}" in wakeup.recent, 0.5) is not None

    wait_until(woken_through_redis, STEP, "d:<id> from the worker after the restart")
    wait_until(
        lambda: tally.add(n=1) and wakeup.published > published_before,
        STEP,
        "the caller to publish again",
    )
    report("redis back", timed_calls(rt, "restart", 10))
    assert tally.snapshot()["value"] > 16 + sends + 10
    assert all(w.alive() for w in worker.values())


# --- in-process: what is published, and when ----------------------------------------


class Counter(Actor):
    n: int = 0

    def add(self) -> int:
        self.n += 1
        return self.n


def test_payloads_are_published_after_the_commit_and_never_for_a_rollback(
    db_url: str,
) -> None:
    """The publish hook sees the enqueued message committed; a failed body publishes nothing."""
    rt = Runtime(db_url, workers=0)
    try:
        rt.install()
        store = rt.store
        visible: list[tuple[str, int]] = []

        def publish(payload: str) -> None:
            # Read on another connection: only a committed enqueue is visible there.
            with store.read() as tx:
                visible.append((payload, int(tx.scalar("SELECT COUNT(*) FROM solid_messages"))))

        store.publish = publish
        rt.ref(Counter, "c").add.send()
        wait_until(lambda: visible, STEP, "the publish hook")
        assert visible == [("w", 1)]

        def fails(tx: Any) -> None:
            store.notify(tx, "w")
            raise RuntimeError("the body failed after notifying")

        with pytest.raises(RuntimeError):
            store.transact(fails)
        with pytest.raises(RuntimeError):
            store.transact_future(fails).result()
        time.sleep(0.1)
        assert visible == [("w", 1)]
    finally:
        rt.close()


def test_wakeup_url_needs_the_redis_package(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)  # makes ``import redis`` fail
    with pytest.raises(ConfigurationError, match=r"solid-objects\[redis\]"):
        Runtime(db_url, wakeup_url="redis://127.0.0.1:6379/0")


def test_wakeup_url_must_be_a_redis_url(db_url: str) -> None:
    with pytest.raises(ConfigurationError, match="wakeup_url"):
        Runtime(db_url, wakeup_url="http://127.0.0.1:6379")


def test_a_nudge_that_arrives_before_the_enqueue_is_routed_is_not_lost(db_url: str) -> None:
    """Another process may finish a call, and its wake-up arrive, between the enqueue's
    commit and the caller's routing of it (a busy caller thread): the caller must still
    read the outcome instead of waiting as if the enqueue had not committed yet."""
    caller_rt = Runtime(db_url, workers=0, call_timeout=5)
    worker_rt = Runtime(db_url, workers=1, poll_interval=0.02)
    try:
        caller_rt.install()
        worker_rt.register(Counter)
        worker_rt.start()
        caller_rt.start()
        delivered: list[str] = []

        def finished_elsewhere_first(point: str) -> None:
            if point != "enqueue.committed" or delivered:
                return
            (message_id,) = list(caller_rt.kernel.client.waiters._futures)
            wait_until(
                lambda: caller_rt.kernel.client.messages.outcome(message_id) is not None,
                STEP,
                "the worker runtime to finish the message",
            )
            delivered.append(message_id)
            caller_rt.kernel.deliver_notice(f"d:{message_id}")  # the wake-up, before routing

        with faults.inject(finished_elsewhere_first):
            assert caller_rt.ref(Counter, "early").add() == 1
        assert delivered
    finally:
        caller_rt.close()
        worker_rt.close()
