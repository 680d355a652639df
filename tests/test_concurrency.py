"""Different identities run concurrently whenever a worker is free.

Each turn waits at a barrier that the other identity's turn must also reach: if one
worker thread ran both one after the other while the others idled, the barrier
breaks (its generous timeout is a guard against a hang, not a latency check) and
the test sees it. The messages come from another runtime, so this runtime's poller
finds both in one round and hands them to its workers together, the case where one
thread used to take both.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from solid_objects import Actor, Runtime

BARRIERS: dict[str, threading.Barrier] = {}
BROKEN: list[str] = []


class Meeter(Actor):
    met: int = 0

    def meet(self, round: str) -> str:
        try:
            BARRIERS[round].wait()
        except threading.BrokenBarrierError:
            BROKEN.append(f"{round}:{self.actor_id}")
            return "alone"
        self.met += 1
        return "met"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("held", [True, False], ids=["idle-held", "unclaimed"])
def test_two_identities_run_side_by_side_while_workers_are_free(
    make_runtime: Callable[..., Runtime], held: bool
) -> None:
    BROKEN.clear()
    rt = make_runtime(workers=4, poll_interval=0.02)
    rt.register(Meeter)
    sender = make_runtime(workers=0)
    with rt:
        for n in range(8):
            round = f"r{n}"
            ids = (f"a{n}", f"b{n}")
            if held:  # both identities cached idle by rt's workers
                BARRIERS[f"{round}-warm"] = threading.Barrier(1)
                for actor_id in ids:
                    assert rt.ref(Meeter, actor_id).meet(round=f"{round}-warm") == "met"
            BARRIERS[round] = threading.Barrier(2, timeout=5.0)
            sent = [sender.ref(Meeter, actor_id).meet.send(round=round) for actor_id in ids]
            results = [m.wait(timeout=60) for m in sent]
            assert results == ["met", "met"], BROKEN
    assert BROKEN == []
