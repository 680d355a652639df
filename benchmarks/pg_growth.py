#!/usr/bin/env python
"""Why a warm PostgreSQL call got slower from 1k to 100k filled actors (issue 28).

The scaling study (``scaling.py --studies fill``) measured the warm call's p50 1.26x
and 1.45x higher at 100k and 1M filled actors than at 1k, flat from 100k to 1M, with
one cell per size, one after the other. This script separates the size from the time:

1. one scratch database per step (``pg_growth_<N>``), filled as the study fills
   (``scaling_fill.py``), vacuumed, then one ``CHECKPOINT`` for all of them, so no
   step runs in another's write-back;
2. warm cells (100 identities, 16 callers) of the steps *alternating*, ``--repeat``
   times, with the server's WAL and buffer-write counters over each cell
   (server-wide: other sessions add to them);
3. ``--explain`` warm calls per step from one thread whose one statement (the direct
   turn's ``WITH turn AS (UPDATE ...) INSERT ...``, in autocommit) runs as
   ``EXPLAIN (ANALYZE, BUFFERS, WAL, FORMAT JSON)`` instead: it still executes once
   and commits, so the plan is of the real statement with its real parameters;
4. the B-tree depth of each index (``pageinspect``) and shared_buffers.

Usage::

    .venv/bin/python benchmarks/pg_growth.py \\
        --url postgresql+psycopg://postgres@127.0.0.1:5432/test \\
        --steps 1000,100000 --seconds 3 --repeat 5 --explain 300 --json pg-growth.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import bench_calls
import scaling_fill
from bench_calls import BenchCounter, Meter, instrument, run_phase
from scaling import timed
from sqlalchemy import Engine, create_engine, make_url, text

from solid_objects import Runtime
from solid_objects.store import Tx

#: The direct turn's one statement (store/turns.py ``finish_direct_in_one``).
DIRECT_TURN = "WITH turn AS ("
_PLANS: list[dict[str, Any]] = []
_EXPLAINING = [False]


def explain_direct_turns() -> None:
    """While ``_EXPLAINING``, run the direct turn's statement under EXPLAIN ANALYZE."""
    original = Tx.run

    def run(self: Tx, template: str, params: Any = None) -> int:
        if not (_EXPLAINING[0] and template.startswith(DIRECT_TURN)):
            return original(self, template, params)
        plan = self.scalar("EXPLAIN (ANALYZE, BUFFERS, WAL, FORMAT JSON) " + template, params)
        _PLANS.append((json.loads(plan) if isinstance(plan, str) else plan)[0])
        return 1  # the statement ran once (EXPLAIN ANALYZE executes it): one turn row

    Tx.run = run  # type: ignore[method-assign]


def server_counters(engine: Engine) -> dict[str, int]:
    with engine.connect() as c:
        wal = c.execute(text("SELECT wal_records, wal_fpi, wal_bytes FROM pg_stat_wal")).one()
        bg = c.execute(
            text(
                "SELECT buffers_checkpoint, buffers_clean, buffers_backend, checkpoints_timed "
                "+ checkpoints_req FROM pg_stat_bgwriter"
            )
        ).one()
    return {
        "wal_records": int(wal[0]),
        "wal_fpi": int(wal[1]),
        "wal_bytes": int(wal[2]),
        "buffers_checkpoint": int(bg[0]),
        "buffers_clean": int(bg[1]),
        "buffers_backend": int(bg[2]),
        "checkpoints": int(bg[3]),
    }


def warm_cell(rt: Runtime, meter: Meter, engine: Engine, seconds: float) -> dict[str, Any]:
    def add(actor_id: str) -> None:
        rt.ref(BenchCounter, actor_id).add(n=1)

    def warm(k: int) -> str:
        return f"fill-{k % 100 + 1}"

    run_phase(add, warm, 16, calls=200, duration=None)
    before = server_counters(engine)
    cell = timed(rt, meter, add, warm, 16, seconds)
    after = server_counters(engine)
    n = max(1, cell["calls"])
    cell["server_per_call"] = {k: round((after[k] - before[k]) / n, 2) for k in before}
    return cell


def plan_summary(plans: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the sampled plans: times, buffers and WAL of the whole statement."""

    def med(f: Any) -> float:
        return statistics.median(f(p) for p in plans)

    def top(p: dict[str, Any], key: str) -> float:
        return float(p["Plan"].get(key, 0))

    out: dict[str, Any] = {
        "samples": len(plans),
        "planning_ms": med(lambda p: p.get("Planning Time", 0.0)),
        "execution_ms": med(lambda p: p.get("Execution Time", 0.0)),
    }
    for key in (
        "Shared Hit Blocks",
        "Shared Read Blocks",
        "Shared Dirtied Blocks",
        "Shared Written Blocks",
        "WAL Records",
        "WAL FPI",
        "WAL Bytes",
    ):
        out[key] = med(lambda p, key=key: top(p, key))
        out[key + " (mean)"] = statistics.fmean(top(p, key) for p in plans)
    # Per node: where the time and the buffers go (median actual total time).
    nodes: dict[str, list[dict[str, Any]]] = {}

    def walk(node: dict[str, Any], depth: int = 0) -> None:
        label = "  " * depth + node["Node Type"] + (
            f" on {node['Relation Name']}" if "Relation Name" in node else ""
        ) + (f" using {node['Index Name']}" if "Index Name" in node else "")
        nodes.setdefault(label, []).append(node)
        for child in node.get("Plans", []):
            walk(child, depth + 1)

    for p in plans:
        walk(p["Plan"])
        for cte in p["Plan"].get("Plans", []):
            _ = cte
    out["nodes"] = {
        label: {
            "ms": statistics.median(float(n.get("Actual Total Time", 0)) for n in ns),
            "hit": statistics.median(float(n.get("Shared Hit Blocks", 0)) for n in ns),
            "read": statistics.median(float(n.get("Shared Read Blocks", 0)) for n in ns),
            "dirtied": statistics.fmean(float(n.get("Shared Dirtied Blocks", 0)) for n in ns),
        }
        for label, ns in nodes.items()
    }
    return out


def index_depths(engine: Engine, prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with engine.begin() as c:
        c.execute(text("CREATE EXTENSION IF NOT EXISTS pageinspect"))
        for (name,) in c.execute(
            text(
                "SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid IN "
                f"('{prefix}actors'::regclass, '{prefix}messages'::regclass)"
            )
        ):
            level = c.scalar(text(f"SELECT level FROM bt_metap('{name}')"))
            size = c.scalar(text(f"SELECT pg_relation_size('{name}')"))
            out[name] = {"levels": int(level) + 1, "mb": round(int(size) / 1e6, 1)}
    return out


def study(
    server: Any, steps: list[int], per_actor: int, seconds: float, explain: int, repeat: int
) -> dict[str, Any]:
    """One scratch database per step, filled, checkpointed; then the warm cells of the
    steps alternate ``repeat`` times (so the machine's load falls on every size alike);
    then each step's direct turns under EXPLAIN."""
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    explain_direct_turns()
    sizes: dict[int, dict[str, Any]] = {}
    runtimes: dict[int, tuple[Runtime, Meter, Engine]] = {}
    with admin.connect() as c:
        settings = {
            k: c.scalar(text(f"SHOW {k}"))
            for k in (
                "shared_buffers",
                "max_wal_size",
                "checkpoint_timeout",
                "full_page_writes",
                "lc_collate",
            )
        }
    try:
        for n in steps:
            url = scratch(admin, server, f"pg_growth_{n}")
            engine = create_engine(url, isolation_level="AUTOCOMMIT")
            # A bounded pool per size (16 callers + 4 workers): the runtimes of every
            # size stay open at once on a server other sessions share.
            rt = Runtime(url, workers=4, call_timeout=120.0, pool_size=21, pool_overflow=2)
            meter = Meter()
            instrument(rt, meter, trace_statements=False)
            rt.register(BenchCounter)
            rt.install()
            prefix = rt.store.prefix
            fill_s = scaling_fill.fill(engine, prefix, 0, 1, n, per_actor)
            with engine.connect() as c:
                c.execute(text(f"VACUUM {prefix}actors, {prefix}messages"))
            sizes[n] = {"actors": n, "fill_seconds": fill_s, "cells": []}
            runtimes[n] = (rt, meter, engine)
            rt.start()
        with admin.connect() as c:
            c.execute(text("CHECKPOINT"))
        for r in range(repeat):
            for n in steps if r % 2 == 0 else list(reversed(steps)):
                rt, meter, engine = runtimes[n]
                cell = warm_cell(rt, meter, engine, seconds)
                sizes[n]["cells"].append(cell)
                print(
                    f"pass {r + 1}: {n:>9} actors: warm p50 {cell['p50_ms']:.2f} ms, "
                    f"p99 {cell['p99_ms']:.1f} ms, {cell['ops_per_s']:,.0f}/s",
                    file=sys.stderr,
                )
        for n in steps:
            rt, meter, engine = runtimes[n]
            _PLANS.clear()
            _EXPLAINING[0] = True
            for k in range(explain):
                rt.ref(BenchCounter, f"fill-{k % 100 + 1}").add(n=1)
            _EXPLAINING[0] = False
            step = sizes[n]
            step["explain"] = plan_summary(_PLANS)
            step["index_depths"] = index_depths(engine, rt.store.prefix)
            step["tables"] = scaling_fill.sizes(engine, rt.store.prefix)["tables"]
            step["p50_ms_median"] = statistics.median(c["p50_ms"] for c in step["cells"])
            step["ops_per_s_median"] = statistics.median(c["ops_per_s"] for c in step["cells"])
            e = step["explain"]
            print(
                f"{n:>9} actors: warm p50 median {step['p50_ms_median']:.2f} ms over "
                f"{repeat}; direct turn {e['execution_ms']:.3f} ms exec, "
                f"{e['planning_ms']:.3f} ms plan, hit {e['Shared Hit Blocks']:.0f}, read "
                f"{e['Shared Read Blocks (mean)']:.2f}, dirtied "
                f"{e['Shared Dirtied Blocks (mean)']:.2f}, WAL FPI {e['WAL FPI (mean)']:.2f}, "
                f"WAL bytes {e['WAL Bytes (mean)']:.0f}; index levels "
                f"{ {k: v['levels'] for k, v in step['index_depths'].items()} }",
                file=sys.stderr,
            )
    finally:
        for n, (rt, _meter, engine) in runtimes.items():
            rt.close()
            engine.dispose()
            with admin.connect() as c:
                c.execute(text(f"DROP DATABASE IF EXISTS pg_growth_{n} WITH (FORCE)"))
        admin.dispose()
    return {"settings": settings, "per_actor": per_actor, "steps": list(sizes.values())}


def scratch(admin: Engine, server: Any, name: str) -> str:
    with admin.connect() as c:
        c.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        c.execute(text(f"CREATE DATABASE {name}"))
    return str(server.set(database=name).render_as_string(hide_password=False))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", required=True, help="a PostgreSQL server (a scratch database is made)")
    p.add_argument("--steps", default="1000,100000")
    p.add_argument("--per-actor", type=int, default=10)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--explain", type=int, default=200, help="warm calls run under EXPLAIN")
    p.add_argument("--repeat", type=int, default=5, help="alternating warm cells per step")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    report = {
        "machine": bench_calls.machine(),
        **study(
            make_url(args.url),
            [int(s) for s in args.steps.split(",")],
            args.per_actor,
            args.seconds,
            args.explain,
            args.repeat,
        ),
    }
    report["machine"]["load_average_end"] = bench_calls.machine()["load_average"]
    out = json.dumps(report, indent=2)
    if args.json is not None:
        args.json.write_text(out + "\n")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
