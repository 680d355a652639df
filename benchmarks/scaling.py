#!/usr/bin/env python
"""Scaling study: how calls behave as actor rows, state size and mailbox depth grow.

Three studies, each on a fresh runtime over one database (a temporary SQLite
file by default, or ``--url``), with the counting of ``bench_calls.py``:

- ``rows``: the tables hold N actors (10 ... ``--max-rows``), created by calls
  from 16 threads. Then 16 caller threads measure sync calls for ``--seconds``
  over 100 warm identities, and over identities spread across all N rows
  (each call most likely finds no cached activation: a claim, a turn, a
  release later).
- ``state``: one operation on an actor whose state holds a string of S bytes
  (100 B ... 1 MB); 16 caller threads over 16 identities. Every turn commits
  the whole state.
- ``depth``: a caller-only runtime (no workers) sends D messages to one
  identity (durable enqueues from one thread), so they wait in its mailbox.
  Then a runtime with workers starts, and one sync call to the same identity,
  which runs after all of them (mailbox order), times the drain: turns/s and
  write transactions and commits per drained message (how many queued turns
  one commit holds). It does not ``wait()`` on each handle: see the 250 ms
  ``send().wait()`` finding in docs/benchmarks.md.

Usage::

    .venv/bin/python benchmarks/scaling.py --quick
    .venv/bin/python benchmarks/scaling.py --max-rows 100000 --json scaling.json
    .venv/bin/python benchmarks/scaling.py --studies depth --url postgresql+psycopg://...
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import bench_calls
import scaling_fill
from bench_calls import BenchCounter, Meter, identity_plan, instrument, run_phase
from raw_commit import percentile
from sqlalchemy import create_engine, make_url, text

from solid_objects import Actor, Runtime
from solid_objects.admin import allow
from solid_objects.store import Tx


class BenchBlob(Actor):
    """An actor with a large state: ``data`` keeps its size, ``n`` counts turns."""

    actor_type = "BenchBlob"
    data: str = ""
    n: int = 0

    def touch(self, size: int) -> int:
        if len(self.data) != size:
            self.data = "x" * size
        self.n += 1
        return self.n


def runtime(url: str, workers: int) -> tuple[Runtime, Meter]:
    rt = Runtime(url, workers=workers, call_timeout=120.0)
    meter = Meter()
    instrument(rt, meter, trace_statements=False)
    rt.register(BenchCounter)
    rt.register(BenchBlob)
    return rt, meter


def timed(
    rt: Runtime, meter: Meter, call: Any, ids: Any, threads: int, seconds: float
) -> dict[str, Any]:
    marks: list[bench_calls.Sample] = []
    phase = run_phase(
        call,
        ids,
        threads,
        calls=None,
        duration=seconds,
        before=lambda: marks.append(meter.sample()),
    )
    delta = meter.sample() - marks[0]
    n = len(phase.latencies)
    lat = phase.latencies
    return {
        "calls": n,
        "errors": len(phase.errors),
        "ops_per_s": n / phase.seconds,
        "p50_ms": percentile(lat, 50) * 1000,
        "p99_ms": percentile(lat, 99) * 1000,
        "write_tx_per_call": delta.write_tx / n if n else None,
        "cpu_ms_per_call": delta.cpu_s * 1000 / n if n else None,
    }


def study_rows(url: str, steps: list[int], seconds: float, workers: int) -> list[dict[str, Any]]:
    out = []
    rt, meter = runtime(url, workers)
    with rt:

        def add(actor_id: str) -> None:
            rt.ref(BenchCounter, actor_id).add(n=1)

        created = 0
        fill = identity_plan("new", "rows", 0)
        for rows in steps:

            def fresh(k: int, first: int = created) -> str:
                return fill(first + k)

            run_phase(add, fresh, 16, calls=rows - created, duration=None)
            created = rows
            warm = identity_plan("warm", "rows-warm", 100)
            run_phase(add, warm, 16, calls=100, duration=None)
            warm_cell = timed(rt, meter, add, warm, 16, seconds)

            def spread(k: int, n: int = rows) -> str:
                return fill((k * 7919) % n)

            spread_cell = timed(rt, meter, add, spread, 16, seconds)
            out.append({"rows": rows + 100, "warm": warm_cell, "spread": spread_cell})
            print(
                f"rows {rows + 100:>7}: warm {warm_cell['ops_per_s']:,.0f} ops/s "
                f"(p99 {warm_cell['p99_ms']:.1f} ms), spread "
                f"{spread_cell['ops_per_s']:,.0f} ops/s (p99 {spread_cell['p99_ms']:.1f} ms)",
                file=sys.stderr,
            )
    return out


def study_state(url: str, sizes: list[int], seconds: float, workers: int) -> list[dict[str, Any]]:
    out = []
    rt, meter = runtime(url, workers)
    with rt:
        for size in sizes:
            ids = identity_plan("warm", f"blob{size}", 16)

            def touch(actor_id: str, size: int = size) -> None:
                rt.ref(BenchBlob, actor_id).touch(size=size)

            run_phase(touch, ids, 16, calls=32, duration=None)
            cell = timed(rt, meter, touch, ids, 16, seconds)
            out.append({"state_bytes": size, **cell})
            print(
                f"state {size:>8} B: {cell['ops_per_s']:,.0f} ops/s, "
                f"p50 {cell['p50_ms']:.1f} ms, p99 {cell['p99_ms']:.1f} ms",
                file=sys.stderr,
            )
    return out


def study_depth(url: str, depths: list[int], workers: int) -> list[dict[str, Any]]:
    """D queued messages for one identity, enqueued while no worker runs, then drained."""
    out = []
    for depth in depths:
        actor_id = f"depth-{depth}-{time.time_ns()}"
        sender, _ = runtime(url, 0)  # caller-only: the messages wait in the mailbox
        with sender:
            ref = sender.ref(BenchCounter, actor_id)
            t0 = time.perf_counter()
            for _ in range(depth):
                ref.add.send(n=1)
            enqueue_s = time.perf_counter() - t0
        rt, meter = runtime(url, workers)
        with rt:
            before = meter.sample()
            t1 = time.perf_counter()
            total = rt.ref(BenchCounter, actor_id).add(n=0)  # runs after the D queued turns
            drain_s = time.perf_counter() - t1
            delta = meter.sample() - before
        if total != depth:
            raise RuntimeError(f"depth {depth}: the counter reads {total}")
        cell = {
            "depth": depth,
            "enqueue_per_s": depth / enqueue_s,
            "drain_seconds": drain_s,
            "drain_turns_per_s": depth / drain_s,
            "write_tx_per_message": delta.write_tx / depth,
            "db_commits_per_message": delta.commits / depth,
            "cpu_ms_per_message": delta.cpu_s * 1000 / depth,
        }
        out.append(cell)
        print(
            f"depth {depth:>5}: enqueue {cell['enqueue_per_s']:,.0f}/s (one thread), drain "
            f"{cell['drain_turns_per_s']:,.0f} turns/s, "
            f"{cell['write_tx_per_message']:.2f} write tx and "
            f"{cell['db_commits_per_message']:.2f} commits per drained message",
            file=sys.stderr,
        )
    return out


class OutOfTime(Exception):
    """Stops a maintenance run once its time budget is spent (its rate is known by then)."""


def maintenance_rate(run: Any, budget_s: float) -> dict[str, Any]:
    """Rows/s of ``run(progress)``, cut off after ``budget_s`` seconds."""
    done = [0]
    t0 = time.perf_counter()

    def progress(_kind: str, deleted: int) -> None:
        done[0] = deleted
        if time.perf_counter() - t0 > budget_s:
            raise OutOfTime

    try:
        report = run(progress)
        counts = getattr(report, "rows", None) or getattr(report, "actors", {})
        done[0] = sum(counts.values())
    except OutOfTime:
        pass
    seconds = time.perf_counter() - t0
    return {"rows": done[0], "seconds": seconds, "rows_per_s": done[0] / seconds}


def study_fill(
    url: str, steps: list[int], per_actor: int, seconds: float, workers: int, budget_s: float
) -> dict[str, Any]:
    """Set-based fill to N actors (and N x per_actor retained messages), then real calls
    over warm (100 identities) and cold (spread over all N) identities; then the sizes,
    and ``prune`` / ``expire_actors`` throughput at the largest N."""
    engine = create_engine(url)
    cells = []
    filled = 0
    rt = Runtime(url, workers=workers, call_timeout=120.0, state_ttl={"BenchCounter": 86_400})
    meter = Meter()
    instrument(rt, meter, trace_statements=False)
    rt.register(BenchCounter)
    base = scaling_fill.pk_base(engine, rt.store.prefix)
    with rt:

        def add(actor_id: str) -> None:
            rt.ref(BenchCounter, actor_id).add(n=1)

        for n in steps:
            fill_s = scaling_fill.fill(engine, rt.store.prefix, base, filled + 1, n, per_actor)
            filled = n

            def warm(k: int) -> str:
                return f"fill-{k % 100 + 1}"

            def cold(k: int, n: int = n) -> str:
                return f"fill-{(k * 7919 + 101) % n + 1}"

            run_phase(add, warm, 16, calls=200, duration=None)
            warm_cell = timed(rt, meter, add, warm, 16, seconds)
            cold_cell = timed(rt, meter, add, cold, 16, seconds)
            size = scaling_fill.sizes(engine, rt.store.prefix)
            cells.append(
                {
                    "actors": n,
                    "messages": n * per_actor,
                    "fill_seconds": fill_s,
                    "warm": warm_cell,
                    "cold": cold_cell,
                    "sizes": size,
                }
            )
            print(
                f"fill {n:>9} actors ({fill_s:.0f} s): warm p50 {warm_cell['p50_ms']:.1f} ms "
                f"{warm_cell['ops_per_s']:,.0f}/s, cold p50 {cold_cell['p50_ms']:.1f} ms "
                f"{cold_cell['ops_per_s']:,.0f}/s, tables {size['tables']}",
                file=sys.stderr,
            )
        rt.admin.set_policy(allow({"ops:*": "*"}))
        admin = rt.admin.as_principal("ops:bench")
        prune = maintenance_rate(
            lambda progress: admin.prune(timedelta(days=1), kinds=["messages"], progress=progress),
            budget_s,
        )
        candidates = admin.expire_actors(dry_run=True).actors
        print(f"expirable: {candidates}", file=sys.stderr)
        expire = maintenance_rate(lambda progress: admin.expire_actors(progress=progress), budget_s)
    engine.dispose()
    print(f"prune {prune}, expire {expire}", file=sys.stderr)
    return {
        "per_actor": per_actor,
        "steps": cells,
        "prune": prune,
        "expirable": sum(candidates.values()),
        "expire_actors": expire,
    }


@contextmanager
def timed_statements(into: collections.Counter[str]) -> Iterator[None]:
    """Count (``n:``) and time (``s:``) each statement the library runs through ``Tx``
    meanwhile, by its first six words."""
    originals = {name: getattr(Tx, name) for name in ("run", "row", "rows")}

    def wrap(original: Any) -> Any:
        def timed(self: Tx, template: str, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return original(self, template, *args, **kwargs)
            finally:
                key = " ".join(template.split()[:6])
                into["s:" + key] += time.perf_counter() - t0
                into["n:" + key] += 1

        return timed

    for name, original in originals.items():
        setattr(Tx, name, wrap(original))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(Tx, name, original)


def study_expire(url: str, actors: int, per_actor: int, budget_s: float) -> dict[str, Any]:
    """``expire_actors`` alone: a set-based fill of N quiet actors (``per_actor`` retained
    messages each), then one expiry run cut off after ``budget_s``, with the statements
    it ran (the library's ``Tx``) and the seconds spent in each kind. Run it with each
    virtualenv's Python to compare two versions of the library on the same fill."""
    engine = create_engine(url)
    rt = Runtime(url, workers=0, state_ttl={"BenchCounter": 86_400})
    rt.register(BenchCounter)
    base = scaling_fill.pk_base(engine, rt.store.prefix)
    with rt:
        fill_s = scaling_fill.fill(engine, rt.store.prefix, base, 1, actors, per_actor)
        rt.admin.set_policy(allow({"ops:*": "*"}))
        admin = rt.admin.as_principal("ops:bench")
        seconds: collections.Counter[str] = collections.Counter()
        with timed_statements(seconds):
            expire = maintenance_rate(
                lambda progress: admin.expire_actors(progress=progress), budget_s
            )
    engine.dispose()
    expire["statements_per_actor"] = sum(seconds[k] for k in seconds if k.startswith("n:")) / max(
        1, expire["rows"]
    )
    expire["statement_seconds"] = {
        k[2:]: round(v, 2) for k, v in seconds.most_common() if k.startswith("s:")
    }
    print(
        f"expire {actors} actors x {per_actor} messages (fill {fill_s:.0f} s): {expire}",
        file=sys.stderr,
    )
    return {"actors": actors, "per_actor": per_actor, "fill_seconds": fill_s, **expire}


def scratch_database(url: str) -> str:
    """Create a fresh ``scaling`` database on the server of ``url``; return its URL."""
    u = make_url(url)
    admin = create_engine(u, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text("DROP DATABASE IF EXISTS scaling"))
        c.execute(text("CREATE DATABASE scaling"))
    admin.dispose()
    return u.set(database="scaling").render_as_string(hide_password=False)


def drop_database(url: str) -> None:
    u = make_url(url)
    admin = create_engine(u, isolation_level="AUTOCOMMIT")
    force = " WITH (FORCE)" if u.get_backend_name() == "postgresql" else ""
    with admin.connect() as c:
        c.execute(text("DROP DATABASE IF EXISTS scaling" + force))
    admin.dispose()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", help="database URL (default: a temporary SQLite file)")
    p.add_argument(
        "--studies", default="rows,state,depth,fill", help="also: expire (expire_actors alone)"
    )
    p.add_argument("--quick", action="store_true", help="small steps, a few seconds")
    p.add_argument("--max-rows", type=int, default=100_000)
    p.add_argument("--seconds", type=float, default=3.0, help="timed seconds per step")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--json", type=Path)
    p.add_argument("--fill-max", type=int, default=1_000_000, help="fill study: most actors")
    p.add_argument("--per-actor", type=int, default=10, help="fill study: messages per actor")
    p.add_argument("--budget", type=float, default=60.0, help="fill study: s per maintenance run")
    p.add_argument("--keep", action="store_true", help="keep the scratch `scaling` database")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still remove the temp file
    studies = [s for s in args.studies.split(",") if s]
    temp_dir = None
    url = args.url
    server_url = None
    if url is not None and {"fill", "expire"} & set(studies) and not url.startswith("sqlite"):
        server_url = url
        url = scratch_database(url)
    if url is None:
        temp_dir = Path(tempfile.mkdtemp(prefix="solid-scaling-"))
        url = f"sqlite:///{temp_dir / 'scaling.db'}"
    rows = (
        [10, 100]
        if args.quick
        else [r for r in (10, 100, 1_000, 10_000, 100_000, 1_000_000) if r <= args.max_rows]
    )
    sizes = [100, 10_000] if args.quick else [100, 1_000, 10_000, 100_000, 1_000_000]
    depths = [1, 10] if args.quick else [1, 10, 100, 1_000, 5_000]
    seconds = 0.5 if args.quick else args.seconds
    report: dict[str, Any] = {
        "machine": bench_calls.machine(),
        "workers": args.workers,
        "seconds": seconds,
    }
    try:
        setup = Runtime(url, workers=0)
        setup.install()
        setup.close()
        report["database"] = setup.engine.dialect.name
        if "rows" in studies:
            report["rows"] = study_rows(url, rows, seconds, args.workers)
        if "state" in studies:
            report["state"] = study_state(url, sizes, seconds, args.workers)
        if "depth" in studies:
            report["depth"] = study_depth(url, depths, args.workers)
        if "fill" in studies:
            fills = (
                [100, 1_000]
                if args.quick
                else [f for f in (1_000, 100_000, 1_000_000) if f <= args.fill_max]
            )
            per_actor = 2 if args.quick else args.per_actor
            budget = 2.0 if args.quick else args.budget
            report["fill"] = study_fill(url, fills, per_actor, seconds, args.workers, budget)
        if "expire" in studies:
            actors = 1_000 if args.quick else args.fill_max
            per_actor = 2 if args.quick else args.per_actor
            budget = 2.0 if args.quick else args.budget
            report["expire"] = study_expire(url, actors, per_actor, budget)
    finally:
        if server_url is not None and not args.keep:
            drop_database(server_url)
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)
    report["machine"]["load_average_end"] = bench_calls.machine()["load_average"]
    text = json.dumps(report, indent=2)
    if args.json is not None:
        args.json.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
