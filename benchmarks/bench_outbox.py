"""Outbox benchmarks: reminder firing delay and effect throughput.

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_outbox.py                  # SQLite, temporary file
    .venv/bin/python benchmarks/bench_outbox.py --url postgresql+psycopg://postgres@127.0.0.1/test
    .venv/bin/python benchmarks/bench_outbox.py --quick --json out.json

Firing delay: one actor schedules ``--reminders`` one-shot reminders at times
spread over ``--spread`` seconds, with workers running and a long
``poll_interval`` (so only the due-time wake-up can fire them early enough). Each
reminder's operation records how late it ran: wall clock at the start of the
turn minus its due time (the database runs on this machine, so both clocks
agree to well under a millisecond). Reported: median, p95, p99, max.

Effect throughput: ``--turns`` turns each emit ``--fanout`` effects with a no-op
handler; the time from the first enqueue until every effect is ``done`` gives
effects per second, with ``--effect-workers`` handler threads.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from solid_objects import Actor, EffectContext, Runtime

DELAYS: list[float] = []
_lock = threading.Lock()


class Alarm(Actor):
    armed: int = 0

    def arm(self, due_ms: list[int]) -> int:
        for i, due in enumerate(due_ms):
            at = datetime.fromtimestamp(due / 1000, UTC)
            self.schedule(at=at, key=str(i)).ring(due_ms=due)
        self.armed += len(due_ms)
        return self.armed

    def ring(self, due_ms: int) -> None:
        with _lock:
            DELAYS.append(time.time() * 1000 - due_ms)


class Fanout(Actor):
    emitted: int = 0

    def burst(self, n: int) -> int:
        for i in range(n):
            self.emit("noop", i=i)
        self.emitted += n
        return self.emitted


def noop(ctx: EffectContext, i: int) -> None:
    pass


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def firing_delay(url: str, reminders: int, spread: float) -> dict[str, Any]:
    DELAYS.clear()
    rt = Runtime(url, workers=2, poll_interval=5.0, table_prefix="bench_outbox_")
    rt.install()
    with rt:
        start = time.time() * 1000 + 500
        due = [int(start + spread * 1000 * i / reminders) for i in range(reminders)]
        rt.ref(Alarm, "alarm").arm(due_ms=due)
        deadline = time.monotonic() + spread + 30
        while len(DELAYS) < reminders and time.monotonic() < deadline:
            time.sleep(0.05)
    rt.close()
    got = list(DELAYS)
    return {
        "reminders": reminders,
        "fired": len(got),
        "median_ms": round(statistics.median(got), 2),
        "p95_ms": round(percentile(got, 0.95), 2),
        "p99_ms": round(percentile(got, 0.99), 2),
        "max_ms": round(max(got), 2),
        "early": sum(1 for d in got if d < 0),
    }


def effect_throughput(url: str, turns: int, fanout: int, effect_workers: int) -> dict[str, Any]:
    rt = Runtime(url, workers=2, effect_workers=effect_workers, table_prefix="bench_outbox_")
    rt.install()
    rt.effect("noop")(noop)
    total = turns * fanout
    with rt:
        started = time.perf_counter()
        for i in range(turns):
            rt.ref(Fanout, f"f{i % 20}").burst.send(n=fanout)
        deadline = time.monotonic() + 120
        done = 0
        while time.monotonic() < deadline:
            with rt.store.read() as tx:
                done = int(
                    tx.scalar("SELECT COUNT(*) FROM bench_outbox_effects WHERE status = 'done'")
                )
            if done >= total:
                break
            time.sleep(0.02)
        elapsed = time.perf_counter() - started
    rt.close()
    return {
        "effects": total,
        "done": done,
        "seconds": round(elapsed, 3),
        "effects_per_s": round(done / elapsed, 1),
        "effect_workers": effect_workers,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="database URL (default: a temporary SQLite file)")
    parser.add_argument("--reminders", type=int, default=200)
    parser.add_argument("--spread", type=float, default=5.0, help="seconds")
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--fanout", type=int, default=10)
    parser.add_argument("--effect-workers", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="small sizes, a few seconds")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    if args.quick:
        args.reminders, args.spread, args.turns, args.fanout = 30, 1.0, 20, 5
    folder = None
    url = args.url
    if url is None:
        folder = Path(tempfile.mkdtemp(prefix="solid-bench-outbox-"))
        url = f"sqlite:///{folder / 'bench.db'}"
    try:
        results = {
            "url": url.split("@")[-1],
            "firing_delay": firing_delay(url, args.reminders, args.spread),
            "effects": effect_throughput(url, args.turns, args.fanout, args.effect_workers),
        }
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    fd, fx = results["firing_delay"], results["effects"]
    print(
        f"reminder firing delay ({fd['fired']}/{fd['reminders']} fired): median "
        f"{fd['median_ms']} ms, p95 {fd['p95_ms']} ms, p99 {fd['p99_ms']} ms, "
        f"max {fd['max_ms']} ms, early {fd['early']}"
    )
    print(
        f"effects: {fx['done']}/{fx['effects']} done in {fx['seconds']} s = "
        f"{fx['effects_per_s']} effects/s ({fx['effect_workers']} handler threads)"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    complete = fd["fired"] == fd["reminders"] and fx["done"] == fx["effects"]
    return 0 if complete and fd["early"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
