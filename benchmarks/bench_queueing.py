#!/usr/bin/env python
"""What message priority and coalescing cost per send, and how many turns a burst of
coalesced sends runs.

Per database, a caller-only runtime (``workers=0``) sends ``--sends`` messages from one
thread in three modes, alternating over ``--passes`` passes: ``plain`` (no option),
``priority`` (``with_options(priority=5)``) and ``coalesce`` (``coalesce_key=``, to one
actor, so every send after the first replaces the one before it). Per mode: wall time
and this process's CPU per send (medians over the passes) and statements per send
(counted through the library's ``Tx``, every thread). Then the bursts: ``--burst``
coalesced sends to an actor no worker holds, then a worker drains it (turns run); and
the same burst, one send a millisecond, while a worker holds and runs the actor (each
turn 20 ms). Last, the poller's claim scan (``find_ready``) over ``--ready`` actors with
a queued message: before schema 19's ranked part, with no urgent message, and with
``--urgent`` of them urgent. Examples::

    python benchmarks/bench_queueing.py
    python benchmarks/bench_queueing.py --sends 500 --passes 3 --burst 100
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from solid_objects import Actor, Runtime  # noqa: E402
from solid_objects.pytest_plugin import fresh_database  # noqa: E402
from solid_objects.store import Tx  # noqa: E402

DEFAULT_URLS = {
    "sqlite": None,
    "postgresql": os.environ.get(
        "SOLID_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
    ),
    "mariadb": os.environ.get("SOLID_TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/test"),
}

MODES = ("plain", "priority", "coalesce")


class Queued(Actor, auto_register=False):
    ran: int = 0

    def work(self, n: int, ms: int = 0) -> int:
        time.sleep(ms / 1000)
        self.ran += 1
        return n


class Statements:
    """Counts the statements run through the library's ``Tx`` while ``on``."""

    def __init__(self) -> None:
        self.count = 0
        self.on = False
        for name in ("run", "row", "rows"):
            original = getattr(Tx, name)

            def wrapper(tx: Tx, template: str, *args: Any, _original: Any = original) -> Any:
                if self.on:
                    self.count += 1
                return _original(tx, template, *args)

            setattr(Tx, name, wrapper)


def one_pass(rt: Runtime, mode: str, sends: int, actor: str, seen: Statements) -> list[float]:
    """[wall µs, CPU µs, statements] per send, to one actor per pass."""
    handle = rt.ref(Queued, actor).work
    if mode == "priority":
        handle = handle.with_options(priority=5)
    elif mode == "coalesce":
        handle = handle.with_options(coalesce_key="k")
    handle.send(n=-1)  # its row
    seen.count, seen.on = 0, True
    wall, cpu = time.perf_counter(), time.process_time()
    for n in range(sends):
        handle.send(n=n)
    done = [
        (time.perf_counter() - wall) / sends * 1e6,
        (time.process_time() - cpu) / sends * 1e6,
    ]
    seen.on = False
    return [*done, seen.count / sends]


def burst(url: str, size: int, *, running: bool) -> dict[str, int]:
    """Turns run for ``size`` coalesced sends, without or with a worker running."""
    caller = Runtime(url, workers=0, actors=[Queued], max_mailbox_length=None)
    caller.install()
    actor = f"burst-{'running' if running else 'idle'}"
    handle = caller.ref(Queued, actor).work.with_options(coalesce_key="k")
    worker = Runtime(url, workers=2, actors=[Queued], poll_interval=0.01)
    if running:  # the worker holds the actor and runs its first turn during the burst
        worker.start()
        handle.send(n=-1, ms=20).wait(timeout=60)
    for n in range(size):
        handle.send(n=n, ms=20)
        if running:
            time.sleep(0.001)  # a burst over about as long as a few turns
    if not running:
        worker.start()
    last = handle.send(n=size, ms=20)
    last.wait(timeout=300)
    worker.testing.drain(timeout=300)
    turns = int(worker.ref(Queued, actor).snapshot()["ran"]) - (1 if running else 0)
    with caller.store.read() as tx:
        replaced = int(
            tx.scalar(
                "SELECT COUNT(*) FROM {messages} WHERE actor_id = :i AND status = 'replaced'",
                {"i": actor},
            )
        )
    worker.close()
    caller.close()
    return {"sends": size + 1, "turns": turns, "replaced": replaced}


#: The claim scan before schema 19 (``find_ready`` without the ranked part), to compare.
_PLAIN_SCAN = (
    "SELECT pk, CASE WHEN lease_expires_at <= {now} THEN NULL ELSE lease_owner END, "
    "lease_generation, actor_type, actor_id FROM {actors} WHERE ready_at <= {now} "
    "AND paused = 0 AND (lease_owner IS NULL OR lease_expires_at <= {now} "
    "OR lease_owner = :owner) AND actor_type IN (:t0) ORDER BY ready_at LIMIT :limit"
)


def analyze(rt: Runtime) -> None:
    """Table statistics, as autovacuum (or an operator) keeps them on a live database."""
    sql = {
        "postgresql": "ANALYZE {table}",
        "mysql": "ANALYZE TABLE {table}",
    }.get(rt.store.dialect.name, "ANALYZE {table}")
    for table in ("actors", "messages"):
        with rt.store.engine.connect() as conn:
            conn.exec_driver_sql(sql.format(table=rt.store.prefix + table))
            conn.commit()


def poll_cost(url: str, ready: int, urgent: int, reps: int = 200) -> dict[str, float]:
    """Median µs of one claim scan (``find_ready``, limit 20) over ``ready`` actors with
    a queued message, before and after ``urgent`` of them get priority 5; and of the
    scan as it was before schema 19."""
    rt = Runtime(url, workers=0, actors=[Queued])
    rt.install()

    def fill(tx: Tx) -> None:
        for i in range(ready):
            tx.run(
                "INSERT INTO {actors} (actor_type, actor_id, state, next_seq, done_seq, "
                "ready_at, created_at, updated_at) VALUES ('Queued', :i, NULL, 2, 0, "
                "{now} - :age, {now}, {now})",
                {"i": f"ready-{i}", "age": ready - i},
            )
        tx.run(
            "INSERT INTO {messages} (id, actor_pk, actor_type, actor_id, seq, operation, "
            "arguments, status, available_at, attempts, created_at) SELECT "
            + ("CAST(pk AS TEXT)" if rt.store.dialect.name != "mysql" else "CAST(pk AS CHAR)")
            + ", pk, actor_type, actor_id, 1, 'work', :args, 'queued', {now}, 0, "
            "{now} FROM {actors} WHERE actor_type = 'Queued'",
            {"args": '{"n": 0}'},
        )

    rt.store.transact(fill)
    analyze(rt)

    def median_us(scan: Any) -> float:
        times = []
        for _ in range(reps):
            with rt.store.read() as tx:
                started = time.perf_counter()
                scan(tx)
                times.append((time.perf_counter() - started) * 1e6)
        return statistics.median(times)

    def ranked(tx: Tx) -> Any:
        return rt.store.find_ready(tx, "nobody", 20, ["Queued"])

    def before(tx: Tx) -> Any:
        return tx.rows(_PLAIN_SCAN, {"owner": "nobody", "t0": "Queued", "limit": 20})

    found = {"before schema 19": median_us(before), "no urgent": median_us(ranked)}
    rt.store.transact(
        lambda tx: tx.run(
            "UPDATE {messages} SET priority = 5 WHERE actor_id IN "
            f"({', '.join(repr(f'ready-{i}') for i in range(0, ready, ready // urgent))})"
        )
    )
    analyze(rt)
    found[f"{urgent} urgent"] = median_us(ranked)
    rt.close()
    return found


def one_database(name: str, url: str, args: argparse.Namespace, seen: Statements) -> dict[str, Any]:
    rt = Runtime(url, workers=0, actors=[Queued], max_mailbox_length=None)
    rt.install()
    for _ in range(200):  # warm connections
        rt.ref(Queued, "warm-up").work.send(n=0)
    passes: dict[str, list[list[float]]] = {m: [] for m in MODES}
    for n in range(args.passes):
        for mode in MODES:
            passes[mode].append(one_pass(rt, mode, args.sends, f"{mode}-{n}", seen))
    rt.close()
    cells = {
        mode: [statistics.median(p[i] for p in runs) for i in range(3)]
        for mode, runs in passes.items()
    }
    return {
        "database": name,
        "cells": cells,
        "burst idle": burst(url, args.burst, running=False),
        "burst running": burst(url, args.burst, running=True),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=1000)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument("--ready", type=int, default=20_000)
    parser.add_argument("--urgent", type=int, default=100)
    parser.add_argument("--databases", default="sqlite,postgresql,mariadb")
    args = parser.parse_args()
    seen = Statements()
    results = []
    for name in args.databases.split(","):
        server = DEFAULT_URLS[name]
        with tempfile.TemporaryDirectory() as folder, fresh_database(
            server, Path(folder), "bench.db"
        ) as url:
            results.append(one_database(name, url, args, seen))
        with tempfile.TemporaryDirectory() as folder, fresh_database(
            server, Path(folder), "poll.db"
        ) as url:
            results[-1]["poll"] = poll_cost(url, args.ready, args.urgent)
    print(json.dumps(results, indent=1))
    for r in results:
        plain = r["cells"]["plain"]
        print(f"\n{r['database']}: mode | wall µs/send | CPU µs/send | statements/send | CPU ratio")
        for mode in MODES:
            wall, cpu, stmts = r["cells"][mode]
            print(f"  {mode:9} | {wall:8.0f} | {cpu:8.0f} | {stmts:5.2f} | {cpu / plain[1]:.2f}")
        print(f"  burst, no worker holding it: {r['burst idle']}")
        print(f"  burst, a worker running it:  {r['burst running']}")
        print(f"  claim scan, µs over {args.ready} ready actors: {r['poll']}")


if __name__ == "__main__":
    main()
