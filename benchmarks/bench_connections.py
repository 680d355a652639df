#!/usr/bin/env python
"""The connection budget: N processes against one PostgreSQL, counted by the server.

Starts ``--processes`` (40) OS processes, each a runtime with workers
(``--workers``, ``--pool-size``, ``--pool-overflow``), all on one fresh schema. Each
process then makes ``--calls`` sync calls from ``--threads`` threads to
``--actors`` identities shared by all processes, so every process is a caller and
a worker at once. The server's count of their connections
(``pg_stat_activity``, by the ``application_name`` every process sets) is read
at rest after the start, every 0.1 s during the load (the peak), and at rest
after it; it is compared with the bound the options give:
``processes x (pool_size + pool_overflow + 1 LISTEN + 1 session mark)``. At the
end every identity's value must equal the calls that returned, and no call may
have failed. Method and results: ``docs/deployment.md`` section 3. Example::

    python benchmarks/bench_connections.py --processes 40 --pool-size 4 --pool-overflow 4
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from sqlalchemy import create_engine, text  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402
from sqlalchemy.pool import NullPool  # noqa: E402

from solid_objects import Actor, Runtime  # noqa: E402
from solid_objects.pytest_plugin import fresh_database  # noqa: E402

SERVER = os.environ.get(
    "SOLID_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
APP_NAME = "solid-connection-budget"


class Tally(Actor):
    value: int = 0

    def add(self, n: int = 1) -> int:
        self.value += n
        return self.value


def serve(url: str, options: dict[str, Any], calls: int, threads: int, actors: int) -> None:
    """One process: start, say ready, wait for ``go``, call, report, wait for ``stop``."""
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s process %(message)s")
    runtime = Runtime(url, actors=[Tally], **options)
    runtime.start()
    print("ready", flush=True)
    sys.stdin.readline()
    done: list[str] = []
    failures: list[str] = []

    def call(_: int) -> None:
        actor = f"t{random.randrange(actors)}"
        try:
            runtime.ref(Tally, actor).with_options(timeout=120).add(n=1)
            done.append(actor)
        except Exception as exc:  # counted and reported, never hidden
            failures.append(repr(exc))

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(call, range(calls)))
    print(json.dumps({"done": done, "failures": failures[:5], "failed": len(failures)}), flush=True)
    sys.stdin.readline()
    runtime.close()


def count(engine: Any) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                text("SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = :name"),
                {"name": APP_NAME},
            ).scalar()
        )


def run(args: argparse.Namespace) -> dict[str, Any]:
    options = {
        "workers": args.workers,
        "effect_workers": 1,
        "pool_size": args.pool_size,
        "pool_overflow": args.pool_overflow,
    }
    with tempfile.TemporaryDirectory() as folder, fresh_database(
        SERVER, Path(folder), "unused.db"
    ) as url:
        named = make_url(url).update_query_dict({"application_name": APP_NAME})
        url = named.render_as_string(hide_password=False)
        Runtime(url, actors=[Tally]).install()
        observer = create_engine(SERVER, poolclass=NullPool)
        started = time.monotonic()
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--serve",
                    url,
                    "--options",
                    json.dumps(options),
                    *("--calls", str(args.calls), "--threads", str(args.threads)),
                    *("--actors", str(args.actors)),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            for _ in range(args.processes)
        ]
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        start_seconds = time.monotonic() - started
        time.sleep(2.0)
        at_rest = count(observer)
        peak = at_rest
        stop = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, count(observer))
                stop.wait(0.1)

        sampler = threading.Thread(target=sample)
        sampler.start()
        load_started = time.monotonic()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            proc.stdin.flush()
        reports = []
        for proc in procs:
            assert proc.stdout is not None
            reports.append(json.loads(proc.stdout.readline()))
        load_seconds = time.monotonic() - load_started
        stop.set()
        sampler.join()
        after = count(observer)
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"stop\n")
            proc.stdin.flush()
        for proc in procs:
            proc.wait(60)
        expected: dict[str, int] = {}
        for report in reports:
            for actor in report["done"]:
                expected[actor] = expected.get(actor, 0) + 1
        with Runtime(url, actors=[Tally], workers=1) as checker:
            values = {a: checker.ref(Tally, a).add(n=0) for a in expected}
        with observer.connect() as conn:
            max_connections = int(conn.execute(text("SHOW max_connections")).scalar())
        observer.dispose()
    per_process = args.pool_size + args.pool_overflow + 2
    return {
        "processes": args.processes,
        "options": options,
        "bound_per_process": per_process,
        "bound": per_process * args.processes,
        "server_max_connections": max_connections,
        "connections_at_rest": at_rest,
        "connections_peak": peak,
        "connections_after": after,
        "calls": sum(len(r["done"]) for r in reports),
        "failed_calls": sum(r["failed"] for r in reports),
        "failures": [f for r in reports for f in r["failures"]][:5],
        "lost_or_doubled": sum(values.get(a, 0) != n for a, n in expected.items()),
        "start_seconds": round(start_seconds, 1),
        "load_seconds": round(load_seconds, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--processes", type=int, default=40)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--pool-size", type=int, default=4)
    p.add_argument("--pool-overflow", type=int, default=4)
    p.add_argument("--calls", type=int, default=50, help="calls per process")
    p.add_argument("--threads", type=int, default=8, help="calling threads per process")
    p.add_argument("--actors", type=int, default=20)
    p.add_argument("--serve", help=argparse.SUPPRESS)
    p.add_argument("--options", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        serve(args.serve, json.loads(args.options), args.calls, args.threads, args.actors)
        return
    result = run(args)
    print(json.dumps(result, indent=2))
    ok = result["failed_calls"] == 0 and result["lost_or_doubled"] == 0
    ok = ok and result["connections_peak"] <= result["bound"]
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
