"""Snapshot throughput on the primary vs a streaming replica (``replica_url``).

    scripts/pg-replica start
    python benchmarks/bench_replica.py postgresql+psycopg://postgres@127.0.0.1:5432/test \\
        postgresql+psycopg://postgres@127.0.0.1:5433/test

One thread, one actor, ``seconds`` of ``snapshot()`` each way; prints reads per second.
"""

from __future__ import annotations

import sys
import time
import uuid

from solid_objects import Actor, Runtime


class Shelf(Actor):
    """One counter to read back."""

    items: int = 0

    def put(self) -> int:
        self.items += 1
        return self.items


def rate(ref: object, seconds: float) -> float:
    reads, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        ref.snapshot()  # type: ignore[attr-defined]
        reads += 1
    return reads / seconds


def main(primary: str, replica: str, seconds: float = 5.0) -> None:
    with Runtime(primary, replica_url=replica, actors=[Shelf]) as rt:
        rt.install()
        ref = rt.ref(Shelf, uuid.uuid4().hex)
        ref.put()
        time.sleep(1.5)  # two lag checks: the replica is known to be fresh
        print(f"primary snapshot():            {rate(ref, seconds):8.0f}/s")
        stale = ref.with_options(stale_ok=True)
        print(f"replica snapshot() (stale_ok): {rate(stale, seconds):8.0f}/s")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
