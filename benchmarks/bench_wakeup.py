#!/usr/bin/env python
"""Cross-process wake-up latency and idle cost, per wake-up path.

For each path (``poll``: adaptive polling only; ``notify``: PostgreSQL
LISTEN/NOTIFY; ``redis``: Redis Pub/Sub with ``--redis``; ``peer``: datagrams
between the processes, ``wakeup_url="peer://"``) it starts one worker
*process* (``workers=2``, library defaults otherwise, so ``poll_interval=0.5``)
and a caller-only runtime in this process on the same path, then:

- **latency**: sequential sync calls to one identity held by the worker, in two
  patterns: ``back-to-back`` (the next call right after the previous answer) and
  ``sporadic`` (a random 0.5-1.5 x ``--gap`` seconds between calls, so the worker's
  poller has backed off to ``poll_interval``, the case a wake-up exists for).
  p50/p95 in ms.
- **idle**: the worker process does nothing for ``--idle-seconds`` after its
  activations were released; its CPU (utime+stime from ``/proc``), the SQL
  statements it ran through the library's ``Tx`` and its pool checkouts (each a
  pre-ping round trip on the servers), per second.

``poll`` is not available on PostgreSQL (NOTIFY is always on there) and
``notify`` only there. Examples::

    python benchmarks/bench_wakeup.py --url mysql+pymysql://root@127.0.0.1:3306/test \\
        --redis redis://127.0.0.1:6379/0
    python benchmarks/bench_wakeup.py --url postgresql+psycopg://postgres@127.0.0.1:5432/test \\
        --redis redis://127.0.0.1:6379/0
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from solid_objects import Actor, Runtime  # noqa: E402


class Tally(Actor):
    value: int = 0

    def add(self, n: int = 1) -> int:
        self.value += n
        return self.value


# --- the worker process ---------------------------------------------------------------


def serve(url: str, options: dict[str, Any]) -> None:
    """Run workers; answer ``stats`` on stdin with counters as one JSON line."""
    import logging

    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s worker %(levelname)s %(name)s: %(message)s"
    )
    from sqlalchemy import event

    from solid_objects.store.dialect import Tx

    statements = [0]
    for name in ("run", "row", "rows"):
        original = getattr(Tx, name)

        def counted(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            statements[0] += 1
            return _original(self, *args, **kwargs)

        setattr(Tx, name, counted)
    rt = Runtime(url, **options)
    checkouts = [0]
    event.listen(rt.engine, "checkout", lambda *_: checkouts.__setitem__(0, checkouts[0] + 1))
    rt.register(Tally)
    rt.start()
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "stats":
            held = rt.kernel.pool.table.held()
            print(json.dumps({"statements": statements[0], "checkouts": checkouts[0],
                              "held": held}), flush=True)
        else:
            break
    rt.close()


# --- the measuring process ------------------------------------------------------------


class WorkerProcess:
    def __init__(self, url: str, options: dict[str, Any]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", url, json.dumps(options)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
        )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"worker did not start: {line!r}")

    def stats(self) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("stats\n")
        self.proc.stdin.flush()
        stats: dict[str, Any] = json.loads(self.proc.stdout.readline())
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        stats["cpu_s"] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return stats

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("quit\n")
        self.proc.stdin.flush()
        self.proc.wait(30)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def latency(rt: Runtime, actor_id: str, calls: int, gap: float) -> dict[str, float]:
    ref = rt.ref(Tally, actor_id)
    samples = []
    pauses = random.Random(7)
    for _ in range(calls):
        # A random pause: a fixed one would lock the call's arrival to the poller's phase.
        time.sleep(pauses.uniform(gap / 2, gap * 3 / 2))
        start = time.perf_counter()
        ref.add(n=1)
        samples.append((time.perf_counter() - start) * 1000)
        if samples[-1] > 5000:
            print(f"{time.strftime('%H:%M:%S')} slow call: {samples[-1]:.0f} ms",
                  file=sys.stderr, flush=True)
    return {"p50_ms": statistics.median(samples), "p95_ms": percentile(samples, 0.95),
            "max_ms": max(samples)}


def measure(url: str, path: str, args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {"workers": 2}
    if path == "redis":
        options["wakeup_url"] = args.redis
    elif path == "peer":
        options["wakeup_url"] = "peer://"
    if args.poll_interval is not None:
        options["poll_interval"] = args.poll_interval
    shared = {k: v for k, v in options.items() if k != "workers"}
    caller = Runtime(url, workers=0, call_timeout=120, **shared)
    caller.install()
    caller.start()
    worker = WorkerProcess(url, options)
    try:
        time.sleep(1.0)  # subscriptions up
        actor = f"{path}-{uuid.uuid4().hex[:8]}"
        caller.ref(Tally, actor).add(n=1)
        result: dict[str, Any] = {"path": path}
        result["back-to-back"] = latency(caller, actor, args.calls, 0.0)
        result["sporadic"] = latency(caller, actor, args.sporadic_calls, args.gap)
        # Idle: wait until the worker released the activation (idle_timeout, 10 s).
        deadline = time.monotonic() + 60
        while worker.stats()["held"] and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(1.0)
        before = worker.stats()
        time.sleep(args.idle_seconds)
        after = worker.stats()
        seconds = args.idle_seconds
        result["idle"] = {
            "cpu_percent": 100 * (after["cpu_s"] - before["cpu_s"]) / seconds,
            "statements_per_s": (after["statements"] - before["statements"]) / seconds,
            "checkouts_per_s": (after["checkouts"] - before["checkouts"]) / seconds,
        }
        return result
    finally:
        worker.close()
        caller.close()


def fresh(url: str) -> tuple[str, Any]:
    """A new schema (PostgreSQL) or database (MySQL) for the run, and how to drop it."""
    base = make_url(url)
    name = f"solid_bw_{uuid.uuid4().hex[:8]}"
    admin = sqlalchemy.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        if base.get_backend_name() == "postgresql":
            conn.exec_driver_sql(f"CREATE SCHEMA {name}")
            new = base.update_query_dict({"options": f"-csearch_path={name}"})
            drop = f"DROP SCHEMA {name} CASCADE"
        else:
            conn.exec_driver_sql(f"CREATE DATABASE {name}")
            new = base.set(database=name)
            drop = f"DROP DATABASE {name}"

    def cleanup() -> None:
        with admin.connect() as conn:
            conn.exec_driver_sql(drop)
        admin.dispose()

    return new.render_as_string(hide_password=False), cleanup


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(sys.argv[2], json.loads(sys.argv[3]))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", required=True, help="a PostgreSQL or MySQL/MariaDB URL")
    p.add_argument("--redis", help="Redis URL; adds the redis path")
    p.add_argument("--no-peer", action="store_true", help="skip the peer:// path")
    p.add_argument("--calls", type=int, default=200, help="back-to-back calls (200)")
    p.add_argument("--sporadic-calls", type=int, default=30, help="sporadic calls (30)")
    p.add_argument("--gap", type=float, default=1.0, help="mean seconds between sporadic calls")
    p.add_argument("--idle-seconds", type=float, default=20.0)
    p.add_argument("--poll-interval", type=float, help="override the default poll_interval")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    url, cleanup = fresh(args.url)
    postgres = make_url(url).get_backend_name() == "postgresql"
    paths = ["notify" if postgres else "poll"] + (["redis"] if args.redis else [])
    if not args.no_peer:
        paths.append("peer")
    try:
        results = [measure(url, path, args) for path in paths]
    finally:
        cleanup()
    print(f"{make_url(args.url).get_backend_name()}: worker process with workers=2, "
          f"poll_interval={args.poll_interval or 0.5}; caller process workers=0")
    print(f"{'path':8} {'back-to-back p50/p95 ms':>24} {'sporadic p50/p95 ms':>22} "
          f"{'idle CPU %':>10} {'stmts/s':>8} {'checkouts/s':>11}")
    for r in results:
        b, s, i = r["back-to-back"], r["sporadic"], r["idle"]
        print(f"{r['path']:8} {b['p50_ms']:>11.1f} / {b['p95_ms']:<10.1f} "
              f"{s['p50_ms']:>9.1f} / {s['p95_ms']:<10.1f} {i['cpu_percent']:>10.2f} "
              f"{i['statements_per_s']:>8.2f} {i['checkouts_per_s']:>11.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
