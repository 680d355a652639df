"""A process remembers what it sent, so ``send().wait()`` needs no read of the row.

A wait that starts after its message's enqueue (``send()`` then ``wait()``) had to read
the message row at once (~1.34 reads per call from a caller-only process without it), since
the outcome may have been announced before anyone waited. Now a message sent while the
wake-up listener is connected is remembered (``Waiters.sent``, bounded), and so is its
outcome's announcement: the wait settles from memory, or waits for the announcement.
Counted (row reads), never timed.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from solid_objects import Actor, Runtime
from solid_objects.engine import outcomes as outcomes_module
from solid_objects.engine.outcomes import NUDGE, Outcome, Waiters
from tests.conftest import BACKENDS
from tests.test_processes import STEP, wait_until

pytestmark = pytest.mark.slow

POSTGRESQL = [b for b in BACKENDS if b == "postgresql"]  # NOTIFY carries outcomes


class SentMemoryCounter(Actor):
    n: int = 0

    def add(self, gate: str = "") -> int:
        if gate:
            assert GATES[gate].wait(STEP)
        self.n += 1
        return self.n


GATES: dict[str, threading.Event] = {}


def test_sent_messages_are_remembered_within_a_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outcomes_module, "SENT_MEMORY", 3)
    w = Waiters()
    for i in range(4):
        w.sent(f"m{i}", 1)
    assert w.adopt("m0", 1) is None  # evicted: the wait reads the row
    w.resolve("m1", Outcome("completed", "1", None))
    done = w.adopt("m1", 1)
    assert done is not None and done.result() == Outcome("completed", "1", None)
    w.forget("m1")
    assert w.adopt("m2", 2) is None  # the listener reconnected since: read
    pending = w.adopt("m3", 1)  # nothing announced yet, same connection: wait for it
    assert pending is not None and not pending.done()
    w.resolve("m3", Outcome("completed", "3", None))
    assert pending.result().result == "3"
    w.sent("m4", 1)
    w.nudge("m4")  # announced by id (Redis, or too large): read it at once
    nudged = w.adopt("m4", None)
    assert nudged is not None and nudged.result() is NUDGE
    w.forget("m4")
    assert w.adopt("never-sent", 1) is None
    assert not w._sent and not w._futures


@pytest.fixture
def pair(db_url: str) -> Any:
    worker = Runtime(db_url, workers=2)
    worker.register(SentMemoryCounter)
    caller = Runtime(db_url, workers=0, call_timeout=STEP)
    try:
        worker.install()
        worker.start()
        caller.start()
        assert caller.kernel.listener is not None
        wait_until(caller.kernel.listener.listening.is_set, STEP, "the caller to LISTEN")
        yield worker, caller
    finally:
        caller.close()
        worker.close()


def counted_reads(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    reads = [0]
    poll = rt.kernel.client.messages.poll_outcome

    def counted(message_id: str) -> Any:
        reads[0] += 1
        return poll(message_id)

    monkeypatch.setattr(rt.kernel.client.messages, "poll_outcome", counted)
    return reads


@pytest.mark.parametrize("backend", POSTGRESQL, indirect=True)
def test_send_then_wait_from_a_caller_only_process_reads_no_row(
    pair: tuple[Runtime, Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, caller = pair
    reads = counted_reads(caller, monkeypatch)
    ref = caller.ref(SentMemoryCounter, "remembered")
    assert [ref.add.send().wait(STEP) for _ in range(5)] == [1, 2, 3, 4, 5]
    sent = [ref.add.send() for _ in range(5)]  # outcomes announced before anyone waits
    assert [m.wait(STEP) for m in sent] == [6, 7, 8, 9, 10]
    assert reads[0] == 0, reads
    assert not caller.kernel.client.waiters._sent  # every wait took its entry


@pytest.mark.parametrize("backend", POSTGRESQL, indirect=True)
def test_send_then_wait_reads_the_row_when_the_listener_went_down(
    pair: tuple[Runtime, Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, caller = pair
    reads = counted_reads(caller, monkeypatch)
    ref = caller.ref(SentMemoryCounter, "unheard")
    assert ref.add.send().wait(STEP) == 1
    GATES["down"] = threading.Event()
    gated = ref.add.send(gate="down")  # remembered, on the listener's connection
    assert caller.kernel.listener is not None
    caller.kernel.listener.stop()  # its outcome's announcement will not be heard
    GATES["down"].set()
    assert gated.wait(STEP) == 2
    assert reads[0] >= 1
    assert ref.add.send().wait(STEP) == 3  # sent while down: not remembered, read
    assert reads[0] >= 2
