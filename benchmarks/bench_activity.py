"""Cost of ``admin.activity()`` (the overview's charts) over a table of finished messages.

Not a test. Seeds ``--messages`` finished message rows straight into a temporary SQLite
file (a set-up shortcut: half finished in the last hour, half in the hour before, 1 % dead,
2 % retried), then times ``activity()`` (the last hour by the minute) and its two queries.

    .venv/bin/python benchmarks/bench_activity.py --messages 100000
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from typing import Any

from solid_objects import Runtime
from solid_objects.admin import allow

BATCH = 50_000


def seed(rt: Runtime, n: int, now: int) -> None:
    def body(tx: Any, start: int, stop: int) -> None:
        for i in range(start, stop):
            completed = now - (i % 7200) * 1000
            tx.run(
                "INSERT INTO {messages} (id, actor_pk, actor_type, actor_id, seq, operation, "
                "arguments, status, available_at, attempts, created_at, completed_at) VALUES "
                "(:id, :pk, 'T', :a, :s, 'op', '{{}}', :st, :c, :at, :cr, :c)",
                {
                    "id": f"{i:032d}",
                    "pk": i % 1000,
                    "a": str(i % 1000),
                    "s": i,
                    "st": "dead" if i % 100 == 0 else "completed",
                    "c": completed,
                    "at": 2 if i % 50 == 0 else 1,
                    "cr": completed - i % 300,
                },
            )

    for start in range(0, n, BATCH):
        rt.store.transact(lambda tx, start=start: body(tx, start, min(n, start + BATCH)))


def timed(f: Any, loads: int) -> float:
    times = []
    for _ in range(loads):
        t = time.perf_counter()
        f()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--loads", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        rt = Runtime(f"sqlite:///{folder}/bench.db", workers=0)
        rt.install()
        rt.admin.set_policy(allow({"bench:*": "read"}))
        store = rt.store
        with store.read() as tx:
            now = store.now(tx)
        seed(rt, args.messages, now)
        ops = rt.admin.as_principal("bench:me")
        since = now - 3_600_000

        def counts() -> None:
            with store.read() as tx:
                store.activity.activity_counts(tx, since=since, bucket_ms=60_000)

        def sample() -> None:
            with store.read() as tx:
                store.activity.latency_sample(tx, since=since, limit=10_001)

        print(f"{args.messages:,} finished messages, median of {args.loads} (ms)")
        print(f"activity()            {timed(ops.activity, args.loads):8.1f}")
        print(f"  GROUP BY counts     {timed(counts, args.loads):8.1f}")
        print(f"  latency sample      {timed(sample, args.loads):8.1f}")
        rt.close()


if __name__ == "__main__":
    main()
