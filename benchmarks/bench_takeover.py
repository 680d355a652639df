#!/usr/bin/env python
"""Takeover after a crash: SIGKILL a worker process under load, per database.

Two worker *processes* (``workers=4``, library defaults otherwise: a 30 s lease,
``takeover_interval`` 1 s) serve ``Tally`` actors; this process runs a caller-only
runtime with ``--concurrency`` threads making sync ``add`` calls to ``--actors``
identities at random. Every few seconds the worker holding the most leases is
killed with SIGKILL and a replacement is started. Per kill it records:

- **answering again**: from the kill until every actor the victim held (read just
  before the kill) has answered a fresh probe call: the takeover as a caller sees it;
- **stall**: the longest any caller's call took among the calls in flight at the
  kill or started in the ``--window`` seconds (10) after it.

At the end each actor's value must equal the calls to it that returned (0 lost, 0
doubled) and no call may have failed. Examples::

    python benchmarks/bench_takeover.py --kills 5
    python benchmarks/bench_takeover.py --databases postgresql --kills 10 --takeover none
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from solid_objects import Actor, Runtime  # noqa: E402
from solid_objects.pytest_plugin import fresh_database  # noqa: E402

DEFAULT_URLS = {
    "sqlite": None,
    "postgresql": os.environ.get(
        "SOLID_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
    ),
    "mariadb": os.environ.get("SOLID_TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/test"),
}


class Tally(Actor):
    value: int = 0

    def add(self, n: int = 1) -> int:
        self.value += n
        return self.value


def serve(url: str, options: dict[str, Any]) -> None:
    """The worker process: run workers until killed."""
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s worker %(message)s")
    runtime = Runtime(url, actors=[Tally], **options)
    runtime.start()
    print("ready", flush=True)
    threading.Event().wait()


class Load:
    """Caller threads making sync calls; every call's start, end and outcome kept."""

    def __init__(self, runtime: Runtime, actors: int, concurrency: int) -> None:
        self.runtime = runtime
        self.ids = [f"t{i}" for i in range(actors)]
        self.concurrency = concurrency
        self.calls: list[tuple[float, float, str, bool]] = []
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(concurrency)

    def _caller(self) -> None:
        while not self.stop.is_set():
            actor = random.choice(self.ids)
            start = time.monotonic()
            try:
                self.runtime.ref(Tally, actor).with_options(timeout=120).add(n=1)
                ok = True
            except Exception as exc:  # counted: a failed call is a result of the run
                print(f"call failed: {exc!r}", file=sys.stderr)
                ok = False
            with self._lock:
                self.calls.append((start, time.monotonic(), actor, ok))

    def start(self) -> None:
        for _ in range(self.concurrency):
            self._pool.submit(self._caller)

    def finish(self) -> None:
        self.stop.set()
        self._pool.shutdown(wait=True)

    def stall_after(self, at: float, window: float) -> float:
        """Longest call in flight at ``at`` or started within ``window`` after it."""
        with self._lock:
            spans = [
                end - start
                for start, end, _, _ in self.calls
                if end >= at and start <= at + window
            ]
        return max(spans, default=0.0)


def spawn(url: str, options: dict[str, Any]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", url, "--options", json.dumps(options)],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    return proc


def leases_by_pid(runtime: Runtime) -> dict[int, list[str]]:
    prefix = runtime.options.table_prefix
    held: dict[int, list[str]] = {}
    with runtime.store.read() as tx:
        for pid, actor_id in tx.rows(
            f"SELECT p.pid, a.actor_id FROM {prefix}actors a JOIN {prefix}processes p "
            f"ON p.owner = a.lease_owner WHERE a.lease_expires_at > {{now}} "
            "AND p.stopped_at IS NULL"
        ):
            held.setdefault(int(pid), []).append(str(actor_id))
    return held


def one_database(name: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {"workers": 4}
    if args.takeover == "none":
        options["takeover_interval"] = None
    caller = Runtime(url, workers=0, actors=[Tally])
    caller.install()
    workers = [spawn(url, options) for _ in range(2)]
    load = Load(caller, args.actors, args.concurrency)
    load.start()
    answered: list[float] = []
    stalls: list[float] = []
    try:
        for _ in range(args.kills):
            time.sleep(args.between)
            held = leases_by_pid(caller)
            victim = max(workers, key=lambda p: len(held.get(p.pid, [])))
            actors = held.get(victim.pid, [])
            killed_at = time.monotonic()
            os.kill(victim.pid, signal.SIGKILL)
            victim.wait()
            workers.remove(victim)
            with ThreadPoolExecutor(max(1, len(actors))) as probes:
                ends = list(
                    probes.map(
                        lambda a: (
                            caller.ref(Tally, a).with_options(timeout=120).add(n=0),
                            time.monotonic(),
                        )[1],
                        actors,
                    )
                )
            answered.append(max(ends, default=killed_at) - killed_at)
            workers.append(spawn(url, options))
            time.sleep(max(0.0, killed_at + args.window - time.monotonic()))
            stalls.append(load.stall_after(killed_at, args.window))
            print(
                f"{name}: kill held {len(actors)} actors, answering again after "
                f"{answered[-1]:.2f}s, stall {stalls[-1]:.2f}s",
                file=sys.stderr,
            )
    finally:
        load.finish()
        for proc in workers:
            proc.kill()
            proc.wait()
    returned = Counter(actor for _, _, actor, ok in load.calls if ok)
    failed = sum(1 for *_, ok in load.calls if not ok)
    values = {a: caller.ref(Tally, a).snapshot()["value"] for a in load.ids}
    caller.close()
    wrong = {a: (values[a], returned[a]) for a in load.ids if values[a] != returned[a]}
    latencies = sorted(end - start for start, end, _, ok in load.calls if ok)
    return {
        "database": name,
        "kills": len(answered),
        "answering_p50_s": round(statistics.median(answered), 2),
        "answering_max_s": round(max(answered), 2),
        "stall_p50_s": round(statistics.median(stalls), 2),
        "stall_max_s": round(max(stalls), 2),
        "calls": len(load.calls),
        "call_p50_ms": round(1000 * latencies[len(latencies) // 2], 1) if latencies else None,
        "failed": failed,
        "lost_or_doubled": len(wrong),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--options", default="{}", help=argparse.SUPPRESS)
    parser.add_argument("--databases", default="sqlite,postgresql,mariadb")
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--between", type=float, default=3.0, help="seconds of load before a kill")
    parser.add_argument("--window", type=float, default=10.0, help="seconds watched after")
    parser.add_argument("--actors", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--takeover", choices=("default", "none"), default="default")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, json.loads(args.options))
        return 0
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for name in args.databases.split(","):
            with fresh_database(DEFAULT_URLS[name], Path(folder), f"{name}.db") as url:
                results.append(one_database(name, url, args))
    print("| database | kills | answering again p50 / max | caller stall p50 / max | calls | "
          "call p50 | failed | lost or doubled |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['database']} | {r['kills']} | {r['answering_p50_s']} s / "
            f"{r['answering_max_s']} s | {r['stall_p50_s']} s / {r['stall_max_s']} s | "
            f"{r['calls']} | {r['call_p50_ms']} ms | {r['failed']} | {r['lost_or_doubled']} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 1 if any(r["failed"] or r["lost_or_doubled"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
