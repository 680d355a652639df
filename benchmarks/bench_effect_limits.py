"""Flow control benchmark: throughput of a rate-limited effect against its limit.

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_effect_limits.py                 # SQLite, temporary file
    .venv/bin/python benchmarks/bench_effect_limits.py --url postgresql+psycopg://postgres@127.0.0.1/test
    .venv/bin/python benchmarks/bench_effect_limits.py --quick --json out.json

``--processes`` worker processes (each ``workers=1``, ``effect_workers=4``) declare
``limited_send`` with ``rate=Rate(--rate, per=--per)``; one turn emits ``--effects``
of them with a no-op handler. Everything is read from the effects table afterwards:
each attempt's claim time (``started_at``, database clock). Reported: the observed
rate, ``effects / (last start - first start + per)`` (the starts fill that many
windows), its ratio to the limit, the most starts in any window of ``per`` (at most
the limit when it holds), and the wall time until the last effect was done.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from solid_objects import Actor, EffectContext, Rate, Runtime

PREFIX = "bench_limits_"


class LimitBench(Actor):
    emitted: int = 0

    def burst(self, n: int) -> int:
        for i in range(n):
            self.emit("limited_send", i=i)
        self.emitted += n
        return self.emitted


def limited_send(ctx: EffectContext, i: int) -> int:
    return i


def serve(url: str, rate: int, per: float) -> None:
    """A worker process: runs ``LimitBench`` and the rate-limited handler until SIGTERM."""
    runtime = Runtime(
        url, workers=1, effect_workers=4, actors=[LimitBench], table_prefix=PREFIX
    )
    runtime.effect("limited_send", rate=Rate(rate, per=per))(limited_send)
    runtime.run()


def most_in_window(starts: list[int], window_ms: int) -> int:
    best, j = 0, 0
    for i, t in enumerate(starts):
        while starts[j] <= t - window_ms:
            j += 1
        best = max(best, i - j + 1)
    return best


def measure(url: str, processes: int, rate: int, per: float, effects: int) -> dict[str, Any]:
    rt = Runtime(url, workers=0, actors=[LimitBench], table_prefix=PREFIX)
    rt.install()
    with rt.store.read() as tx:
        before = int(tx.scalar(f"SELECT COUNT(*) FROM {PREFIX}processes"))
    command = [sys.executable, __file__, "--serve", url, "--rate", str(rate), "--per", str(per)]
    procs = [subprocess.Popen(command, stdin=subprocess.DEVNULL) for _ in range(processes)]
    try:
        deadline = time.monotonic() + 60
        while True:
            with rt.store.read() as tx:
                live = int(tx.scalar(f"SELECT COUNT(*) FROM {PREFIX}processes")) - before
            if live >= processes:
                break
            if time.monotonic() > deadline:
                raise SystemExit("the worker processes did not start")
            time.sleep(0.05)
        began = time.monotonic()
        burst = f"burst-{os.getpid()}-{time.time_ns()}"  # this run's effects alone
        rt.ref(LimitBench, burst).burst(n=effects)
        deadline = began + effects / rate * per * 3 + 60
        while True:
            with rt.store.read() as tx:
                rows = tx.rows(
                    f"SELECT started_at FROM {PREFIX}effects WHERE status = 'done' "
                    "AND actor_id = :a ORDER BY started_at",
                    {"a": burst},
                )
            if len(rows) >= effects:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"only {len(rows)} of {effects} effects finished")
            time.sleep(0.05)
        wall = time.monotonic() - began
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(30)
        rt.close()
    starts = [int(r[0]) for r in rows]
    span = (starts[-1] - starts[0]) / 1000
    observed = len(starts) / (span + per)
    return {
        "database": url.split(":", 1)[0],
        "processes": processes,
        "effects": len(starts),
        "limit_per_s": rate / per,
        "observed_per_s": round(observed, 2),
        "ratio": round(observed / (rate / per), 3),
        "most_in_window": most_in_window(starts, int(per * 1000)),
        "limit_count": rate,
        "wall_s": round(wall, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="database URL (default: a temporary SQLite file)")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--rate", type=int, default=20)
    parser.add_argument("--per", type=float, default=1.0)
    parser.add_argument("--effects", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="small: 2 processes, 30 at 10/s")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.rate, args.per)
        return
    if args.quick:
        args.rate, args.effects = 10, 30
    folder = None
    url = args.url
    if url is None:
        folder = tempfile.mkdtemp(prefix="bench-limits-")
        url = f"sqlite:///{folder}/bench.db"
    try:
        result = measure(url, args.processes, args.rate, args.per, args.effects)
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    if result["most_in_window"] > args.rate:
        raise SystemExit(f"the limit did not hold: {result['most_in_window']} > {args.rate}")


if __name__ == "__main__":
    main()
