"""Forged wake-ups: anyone on the channel can wake a runtime, none can decide for it.

The forger is a real outsider: on PostgreSQL a second login role with no privilege
on the test's schema (it cannot read a table) that ``LISTEN``s and ``NOTIFY``s on
the wake-up channel; on SQLite and MariaDB a plain Redis client on the runtime's
Pub/Sub channel (``wakeup_url``). It overhears the library's own payloads, learns
message ids and sequence numbers from them, and answers with forged ones:

- an ``o:`` outcome for a pending call: the call returns the committed result;
- an ``m:`` carrying a refused operation for the actor's next seq: it never runs,
  and the next real call gets that seq and runs;
- garbage (a Unicode digit ``²`` where a number goes, bytes that are not UTF-8,
  truncated JSON): the listener keeps its connection, and what is sent after still
  arrives.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from solid_objects import Actor, AuthorizationRequest, Runtime
from solid_objects.engine.notices import NoticeDispatch
from tests.test_processes import STEP, wait_until
from tests.test_redis_wakeup import RedisServer

pytestmark = pytest.mark.slow

#: The turn of a ``deposit`` waits for this while it is cleared (a pending call).
GATE = threading.Event()
GATE.set()
#: Every amount a ``deposit`` turn ran with, in any runtime of this process.
RAN: list[int] = []


class ForgeAccount(Actor):
    balance: int = 0

    def deposit(self, amount: int) -> int:
        RAN.append(amount)
        GATE.wait(STEP)
        self.balance += amount
        return self.balance


def no_666(request: AuthorizationRequest) -> bool:
    """Deposits of 666 are refused to every caller."""
    return request.arguments.get("amount") != 666


class Forger:
    """An outsider on the wake-up channel: hears every payload, sends any."""

    heard: list[str]

    def send(self, payload: str | bytes) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def overheard(self, prefix: str) -> str:
        wait_until(lambda: any(p.startswith(prefix) for p in self.heard), STEP, prefix)
        return [p for p in self.heard if p.startswith(prefix)][-1]


class PostgresForger(Forger):
    """A login role of its own, with no privilege on the library's schema."""

    def __init__(self, db_url: str, channel: str) -> None:
        import psycopg

        self.role = f"forger_{secrets.token_hex(4)}"
        self.admin_url = db_url.replace("postgresql+psycopg://", "postgresql://").split("?")[0]
        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            admin.execute(f"CREATE ROLE {self.role} LOGIN")
        user_url = self.admin_url.replace("://postgres@", f"://{self.role}@", 1)
        assert self.role in user_url
        self.conn = psycopg.connect(user_url, autocommit=True)
        self.channel = channel
        self.heard = []
        self._stop = threading.Event()
        self.conn.execute(f'LISTEN "{channel}"')
        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._thread.start()

    def cannot_read(self, table: str) -> bool:
        import psycopg

        try:
            self.conn.execute(f"SELECT 1 FROM {table}")
        except psycopg.errors.InsufficientPrivilege:
            return True
        return False

    def _listen(self) -> None:
        while not self._stop.is_set():
            for note in self.conn.notifies(timeout=0.2):
                self.heard.append(note.payload)

    def send(self, payload: str | bytes) -> None:
        import psycopg

        text = payload.decode(errors="replace") if isinstance(payload, bytes) else payload
        with psycopg.connect(self.conn.info.dsn, autocommit=True) as other:
            other.execute("SELECT pg_notify(%s, %s)", (self.channel, text))

    def close(self) -> None:
        import psycopg

        self._stop.set()
        self._thread.join(5)
        self.conn.close()
        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            admin.execute(f"DROP ROLE IF EXISTS {self.role}")


class RedisForger(Forger):
    """Any client of the Redis server the runtimes publish wake-ups on."""

    def __init__(self, server: RedisServer, channel: str) -> None:
        self.client = server.client()
        self.channel = channel
        self.heard = []
        self.pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        self.pubsub.psubscribe("*")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        while not self._stop.is_set():
            message = self.pubsub.get_message(timeout=0.2)
            if message is not None and message["type"] == "pmessage":
                self.heard.append(message["data"].decode(errors="replace"))

    def send(self, payload: str | bytes) -> None:
        self.client.publish(self.channel, payload)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.pubsub.close()
        self.client.close()


class Scene:
    """A worker runtime holding the account, a caller-only runtime, and a forger."""

    def __init__(self, worker: Runtime, caller: Runtime, forger: Forger) -> None:
        self.worker, self.caller, self.forger = worker, caller, forger
        self.ref = caller.ref(ForgeAccount, "acct")


@pytest.fixture
def dispatched(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str]]:
    """Every payload a runtime's listener handed over: (id of its dispatch, payload)."""
    seen: list[tuple[int, str]] = []
    original = NoticeDispatch.__call__

    def record(self: NoticeDispatch, payload: str) -> None:
        seen.append((id(self), payload))
        original(self, payload)

    monkeypatch.setattr(NoticeDispatch, "__call__", record)
    return seen


@pytest.fixture
def scene(
    backend: str, db_url: str, tmp_path: Path, dispatched: list[tuple[int, str]]
) -> Iterator[Scene]:
    redis: RedisServer | None = None
    wakeup_url = None
    if backend != "postgresql":
        redis = RedisServer(tmp_path)
        redis.start()
        wakeup_url = redis.url
    options: dict[str, Any] = {"wakeup_url": wakeup_url, "authorize_message": no_666}
    worker = Runtime(db_url, workers=1, poll_interval=30.0, **options)
    caller = Runtime(db_url, workers=0, call_timeout=STEP, **options)
    forger: Forger | None = None
    RAN.clear()
    GATE.set()
    try:
        worker.install()
        worker.register(ForgeAccount)
        caller.register(ForgeAccount)
        worker.start()
        caller.start()
        for rt in (worker, caller):
            assert rt.kernel.listener is not None
            wait_until(rt.kernel.listener.listening.is_set, STEP, "the listener")
        channel = worker.store.channel
        if redis is None:
            forger = PostgresForger(db_url, channel)
            with worker.store.read() as tx:
                schema = tx.scalar("SELECT current_schema()")
            for table in ("messages", "secrets"):
                assert forger.cannot_read(f'"{schema}".{worker.store.prefix}{table}')
        else:
            forger = RedisForger(redis, channel)
        yield Scene(worker, caller, forger)
    finally:
        GATE.set()
        caller.close()
        worker.close()
        if forger is not None:
            forger.close()
        if redis is not None:
            redis.stop()


def warm(scene: Scene) -> dict[str, Any]:
    """Two deposits: the worker holds the actor, and the forger overheard an ``m:``."""
    assert scene.ref.deposit(amount=1) == 1
    assert scene.ref.deposit(amount=1) == 2
    carried = scene.forger.overheard("m:")
    pk, rest = carried[2:].split(":", 1)
    owner = scene.worker.owner
    assert rest.startswith(owner + ":")
    seq, at_ms, fields = rest[len(owner) + 1 :].split(":", 2)
    first = re.match(r'\["([^"]+)"', fields)
    assert first is not None
    return {"pk": int(pk), "owner": owner, "seq": int(seq), "at": int(at_ms), "id": first[1]}


def heard_by(dispatched: list[tuple[int, str]], rt: Runtime, payload: str) -> Callable[[], bool]:
    return lambda: (id(rt.kernel.notices), payload) in dispatched


@pytest.mark.parametrize("signature", ["", "#" + "0" * 64], ids=["unsigned", "bad-mac"])
def test_a_forged_outcome_never_becomes_a_call_result(
    scene: Scene, dispatched: list[tuple[int, str]], signature: str
) -> None:
    warm(scene)
    GATE.clear()  # the next deposit's turn waits: its call is pending
    results: list[Any] = []
    heard = len(scene.forger.heard)
    call = threading.Thread(target=lambda: results.append(scene.ref.deposit(amount=1)))
    call.start()
    wait_until(lambda: RAN == [1, 1, 1], STEP, "the turn to start")
    wait_until(
        lambda: any(p.startswith("m:") for p in scene.forger.heard[heard:]), STEP, "its m:"
    )
    carried = next(p for p in scene.forger.heard[heard:] if p.startswith("m:"))
    found = re.search(r':\["([^"]+)"', carried)
    assert found is not None
    message_id = found[1]
    forged = "o:" + json.dumps([message_id, "completed", "1000000", None]) + signature
    scene.forger.send(forged)
    wait_until(heard_by(dispatched, scene.caller, forged), STEP, "the forged outcome")
    GATE.set()
    call.join(STEP)
    assert results == [3]  # the committed balance, never 1000000
    assert scene.ref.snapshot() == {"balance": 3}


def test_a_forged_message_never_runs_and_the_next_real_one_does(
    scene: Scene, dispatched: list[tuple[int, str]]
) -> None:
    seen = warm(scene)
    fields = json.dumps(
        ["forged-1", "ForgeAccount", "acct", "deposit", '{"amount":666}', None, None, None],
        separators=(",", ":"),
    )
    for signature in ("", "#" + "0" * 64):
        forged = (
            f"m:{seen['pk']}:{seen['owner']}:{seen['seq'] + 1}:{seen['at']}:{fields}{signature}"
        )
        scene.forger.send(forged)
        wait_until(heard_by(dispatched, scene.worker, forged), STEP, "the forged message")
    assert scene.ref.deposit(amount=1) == 3  # the next seq: it ran
    assert 666 not in RAN and RAN == [1, 1, 1]
    assert scene.ref.snapshot() == {"balance": 3}
    with scene.worker.store.read() as tx:
        assert tx.row(
            "SELECT done_seq, next_seq FROM {actors} WHERE pk = :pk", {"pk": seen["pk"]}
        ) == (3, 4)
        assert tx.scalar("SELECT COUNT(*) FROM {messages} WHERE id = 'forged-1'") == 0


GARBAGE: list[str | bytes] = [
    "h:\u00b2:x",
    "h:\u00b2",
    "m:\u00b2:{owner}:1:1:[]",
    "m:{pk}:{owner}:\u00b2:1:[]",
    "m:{pk}:{owner}:1:\u00b9:[]",
    "m:{pk}:{owner}",
    "o:",
    "o:[",
    'o:["x"',
    "o:" + "[" * 5000,
    "b:[",
    "b:[1,2,3]",
    "d:",
    "",
    ":",
    "\u00b2",
    b"m:\xff\xfe:\xc3",
]


def test_garbage_on_the_channel_never_drops_the_listener(
    scene: Scene, dispatched: list[tuple[int, str]]
) -> None:
    seen = warm(scene)
    listeners = {rt: rt.kernel.listener for rt in (scene.worker, scene.caller)}
    before = {rt: listener.connections for rt, listener in listeners.items() if listener}
    for raw in GARBAGE:
        payload = (
            raw if isinstance(raw, bytes) else raw.format(pk=seen["pk"], owner=seen["owner"])
        )
        scene.forger.send(payload)
    marker = "b:" + json.dumps(["ForgeAccount", "marker"])
    scene.forger.send(marker)
    for rt in listeners:
        wait_until(heard_by(dispatched, rt, marker), STEP, "the payload sent after the garbage")
    assert {rt: listener.connections for rt, listener in listeners.items() if listener} == before
    assert scene.ref.deposit(amount=1) == 3
