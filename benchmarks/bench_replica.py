"""Snapshot throughput on the primary vs a streaming replica (``replica_url``).

    scripts/pg-replica start
    python benchmarks/bench_replica.py postgresql+psycopg://postgres@127.0.0.1:5432/test \\
        postgresql+psycopg://postgres@127.0.0.1:5433/test

One thread, one actor, ``seconds`` of ``snapshot()`` each way; then the admin listings
the dashboard's pages make (``status()`` and ``list_actors``), on the primary
(``replica_for_admin=False``) and on the replica; prints calls per second.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

from solid_objects import Actor, Runtime
from solid_objects.admin import allow


class Shelf(Actor):
    """One counter to read back."""

    items: int = 0

    def put(self) -> int:
        self.items += 1
        return self.items


def rate(ref: object, seconds: float) -> float:
    return calls(ref.snapshot, seconds)  # type: ignore[attr-defined]


def calls(call: Callable[[], Any], seconds: float) -> float:
    done, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        call()
        done += 1
    return done / seconds


def listings(primary: str, replica: str, seconds: float) -> None:
    for where, on in (("primary", False), ("replica", True)):
        with Runtime(primary, replica_url=replica, actors=[Shelf], replica_for_admin=on) as rt:
            rt.admin.set_policy(allow({"bench:*": "read"}))
            ops = rt.admin.as_principal("bench:b")
            time.sleep(1.5)  # two lag checks: the replica is known to be fresh
            ops.status()
            assert (ops.status().replica_lag_ms is not None) == on
            status = calls(partial(ops.status, actors_up_to=1000), seconds)
            listed = calls(partial(ops.list_actors, "Shelf", limit=50), seconds)
            print(f"{where} admin status():        {status:8.0f}/s")
            print(f"{where} admin list_actors():   {listed:8.0f}/s")


def main(primary: str, replica: str, seconds: float = 5.0) -> None:
    with Runtime(primary, replica_url=replica, actors=[Shelf]) as rt:
        rt.install()
        ref = rt.ref(Shelf, uuid.uuid4().hex)
        ref.put()
        time.sleep(1.5)  # two lag checks: the replica is known to be fresh
        print(f"primary snapshot():            {rate(ref, seconds):8.0f}/s")
        stale = ref.with_options(stale_ok=True)
        print(f"replica snapshot() (stale_ok): {rate(stale, seconds):8.0f}/s")
    listings(primary, replica, seconds)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
