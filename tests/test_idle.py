"""Hazard 6.11: an idle process must be near-free: a heartbeat, few reads.

The only write of an idle process is its registry heartbeat, one commit every
``lease_duration / 3`` seconds (10 s by default), never one per poll.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from solid_objects import Actor, Runtime


class Ping(Actor):
    n: int = 0

    def ping(self) -> int:
        self.n += 1
        return self.n


def test_an_idle_runtime_writes_nothing_and_reads_rarely(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=4, poll_interval=0.2, idle_timeout=0.3, lease_duration=3)
    rt.register(Ping)
    writes: list[Any] = []
    reads = 0
    transact, read = rt.store.transact, rt.store.read

    def counting_transact(body: Any, **options: Any) -> Any:
        writes.append(body)
        return transact(body, **options)

    def counting_read() -> Any:
        nonlocal reads
        reads += 1
        return read()

    rt.store.transact = counting_transact  # type: ignore[method-assign]
    rt.store.read = counting_read  # type: ignore[method-assign]
    with rt:
        rt.ref(Ping, "p").ping()
        deadline = time.monotonic() + 10
        while rt.kernel.pool.table.holds(1) and time.monotonic() < deadline:
            time.sleep(0.05)  # the activation goes idle and is released after 0.3 s
        assert not rt.kernel.pool.table.holds(1)
        time.sleep(0.5)
        writes.clear()
        reads = 0
        time.sleep(1.5)
        idle_writes, idle_reads = len(writes), reads
    # lease_duration=3: a heartbeat each second, so at most two in 1.5 s, and nothing else
    assert idle_writes <= 2
    # two reads per poll (ready actors, next due time) at most every poll_interval
    assert idle_reads <= 2 * (1.5 / 0.2) + 4
