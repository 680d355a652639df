#!/usr/bin/env python
"""A lone send from a caller-only process: one autocommit statement against a transaction.

A runtime with ``workers=0`` (a web process, say) sends ``--sends`` messages to one warm
actor from one thread, so every enqueue runs alone. On PostgreSQL such an enqueue is its
one statement in autocommit (``Store.enqueue_in_one_statement``); the ``transaction``
passes turn that path off in the same run (the enqueue batcher's statement runner set
to None), so each send pays ``BEGIN``, the statement and ``COMMIT``. Per mode: wall
time and this process's CPU per send, medians of ``--passes`` alternating passes.
Examples::

    python benchmarks/bench_lone_send.py
    python benchmarks/bench_lone_send.py --sends 3000 --passes 5
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

DEFAULT_URLS = {
    "sqlite": None,
    "postgresql": os.environ.get(
        "SOLID_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
    ),
    "mariadb": os.environ.get("SOLID_TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/test"),
}


class LoneTarget(Actor, auto_register=False):
    n: int = 0

    def add(self) -> None:
        self.n += 1


def one_pass(rt: Runtime, sends: int, actor_id: str) -> tuple[float, float]:
    """Microseconds of wall time and of this process's CPU per send (to one actor per
    pass: a mailbox holds at most ``max_mailbox_length`` messages)."""
    ref = rt.ref(LoneTarget, actor_id)
    ref.add.send()  # its row
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(sends):
        ref.add.send()
    return (
        (time.perf_counter() - wall) / sends * 1e6,
        (time.process_time() - cpu) / sends * 1e6,
    )


def one_database(name: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    rt = Runtime(url, workers=0, actors=[LoneTarget])
    rt.install()
    batcher = rt.store._batcher  # the benchmark's switch: no public option for this
    one_statement = batcher._statement
    for _ in range(200):  # warm connections
        rt.ref(LoneTarget, "warm-up").add.send()
    passes: dict[str, list[tuple[float, float]]] = {"one statement": [], "transaction": []}
    for n in range(args.passes):
        for mode in passes:
            batcher._statement = one_statement if mode == "one statement" else None
            passes[mode].append(one_pass(rt, args.sends, f"{mode}-{n}"))
    rt.close()
    return {
        "database": name,
        "available": one_statement is not None,
        "cells": {
            mode: {
                "wall_us_per_send": round(statistics.median(p[0] for p in rows), 1),
                "cpu_us_per_send": round(statistics.median(p[1] for p in rows), 1),
            }
            for mode, rows in passes.items()
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--databases", default="postgresql")
    parser.add_argument("--sends", type=int, default=2000)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
    out = []
    with tempfile.TemporaryDirectory() as folder:
        for name in args.databases.split(","):
            with fresh_database(DEFAULT_URLS[name], Path(folder), f"{name}.db") as url:
                out.append(one_database(name, url, args))
    for row in out:
        cells = row["cells"]
        base = cells["transaction"]
        print(f"== {row['database']} (one-statement path: {row['available']})")
        for mode, cell in cells.items():
            print(
                f"  {mode:14} {cell['wall_us_per_send']:8.1f} us wall "
                f"({cell['wall_us_per_send'] / base['wall_us_per_send']:.2f}), "
                f"{cell['cpu_us_per_send']:7.1f} us CPU "
                f"({cell['cpu_us_per_send'] / base['cpu_us_per_send']:.2f}) per send"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
