#!/usr/bin/env python
"""The DBOS peer: the keyed-counter workload as DBOS durable workflows.

Runs in its own virtualenv (``benchmarks/requirements-peer.txt``: DBOS is a
dependency of the benchmark, never of the library); ``bench_calls.py
--dbos-python PATH`` starts it as a subprocess and reads one JSON document
from its stdout. It imports nothing from ``solid_objects``.

The workload is the closest analogue of one actor call: one durable workflow
per call, started with a fresh workflow id (``SetWorkflowID``) and run inline,
whose single step is a DBOS datasource transaction (``SQLAlchemyDatasource``,
DBOS's default isolation SERIALIZABLE) that increments a counter row keyed by
the identity with an UPSERT; the step's checkpoint commits in the same
transaction. The application table lives in the same database as DBOS's system
tables. Shapes, concurrency and latency are measured as in ``bench_calls.py``
(closed loop, nearest-rank percentiles, latency from the call to the
committed result).

Counting: every SQLAlchemy engine of the process is counted by a class-level
``commit`` event listener (all commits, including DBOS's read-only ones) and
CPU is ``time.process_time()`` of this process. The system database pool is
sized at twice the highest concurrency (at least DBOS's default, 20).

SQLite: DBOS sets no ``journal_mode`` or ``synchronous`` pragma; like the
baseline's ``sqlite-wal`` variant the file is switched to WAL before launch
(``synchronous`` stays at SQLite's default, FULL). PostgreSQL: a fresh
database is created for the run and dropped afterwards.

Usage::

    .venv-bench/bin/python benchmarks/bench_dbos.py --url sqlite --concurrency 1,16
    .venv-bench/bin/python benchmarks/bench_dbos.py \\
        --url postgresql://postgres@127.0.0.1:5432/test --shapes warm --concurrency 16
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import math
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import make_url

SHAPES = ("hot", "warm", "new")


class Commits:
    """Counts SQLAlchemy commits of every engine in the process."""

    def __init__(self) -> None:
        self.n = 0
        self._lock = threading.Lock()
        event.listen(sa.engine.Engine, "commit", self._on_commit)

    def _on_commit(self, _conn: Any) -> None:
        with self._lock:
            self.n += 1


def percentile(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def identity_plan(shape: str, namespace: str, identities: int) -> Callable[[int], str]:
    if shape == "hot":
        return lambda k: f"{namespace}-hot"
    if shape == "warm":
        return lambda k: f"{namespace}-w{k % identities}"
    return lambda k: f"{namespace}-n{k}"


def run_phase(
    call: Callable[[str], Any],
    ids: Callable[[int], str],
    threads: int,
    *,
    calls: int | None,
    duration: float | None,
    before: Callable[[], None] = lambda: None,
) -> tuple[list[float], int, float]:
    counter = itertools.count()
    per_thread: list[list[float]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads + 1)
    deadline = math.inf

    def client(index: int) -> None:
        mine = per_thread[index]
        barrier.wait()
        while True:
            k = next(counter)
            if (calls is not None and k >= calls) or time.perf_counter() >= deadline:
                return
            t0 = time.perf_counter()
            try:
                call(ids(k))
            except Exception as exc:
                errors.append(exc)
                if len(errors) > 10:
                    return
                continue
            mine.append(time.perf_counter() - t0)

    workers = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(threads)]
    for w in workers:
        w.start()
    before()
    start = time.perf_counter()
    deadline = start + (math.inf if duration is None else duration)
    barrier.wait()
    for w in workers:
        w.join()
    if errors:
        print(f"dbos: {len(errors)} failed call(s), first: {errors[0]!r}", file=sys.stderr)
    return (sorted(x for xs in per_thread for x in xs), len(errors), time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--url",
        default="sqlite",
        help="'sqlite' (a temporary file) or a PostgreSQL URL whose server is used",
    )
    p.add_argument("--shapes", default="hot,warm,new")
    p.add_argument("--concurrency", default="1,16,64")
    p.add_argument("--calls", type=int, default=1000)
    p.add_argument("--duration", type=float, default=None)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--identities", type=int, default=100)
    p.add_argument(
        "--json",
        type=Path,
        default=None,
        help="write the report here, rewritten after every cell (a run killed "
        "mid-way leaves the cells it finished)",
    )
    p.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="directory for the SQLite file (default: a new temporary directory)",
    )
    p.add_argument(
        "--db-name",
        default=None,
        help="name of the PostgreSQL database to create (and drop afterwards)",
    )
    args = p.parse_args(argv)
    shapes = [s for s in args.shapes.split(",") if s]
    concurrency = [int(c) for c in args.concurrency.split(",") if c]

    logging.getLogger("dbos").setLevel(logging.WARNING)
    from dbos import DBOS, SetWorkflowID, SQLAlchemyDatasource  # the peer's venv only

    temp_dir: Path | None = None
    admin: sa.Engine | None = None
    db_name = args.db_name or f"bench_dbos_{uuid.uuid4().hex[:10]}"
    if args.url == "sqlite":
        temp_dir = Path(tempfile.mkdtemp(prefix="bench-dbos-", dir=args.workdir))
        path = temp_dir / "dbos.sqlite"
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA journal_mode=WAL")
        url = f"sqlite:///{path}"
        database = "sqlite-wal (synchronous=FULL, DBOS default)"
    else:
        base = make_url(args.url)
        admin = sa.create_engine(
            base.set(drivername="postgresql+psycopg"), isolation_level="AUTOCOMMIT"
        )
        with admin.connect() as c:
            c.exec_driver_sql(f"CREATE DATABASE {db_name}")
        url = base.set(drivername="postgresql", database=db_name).render_as_string(
            hide_password=False
        )
        database = "postgresql"

    commits = Commits()
    results: list[dict[str, Any]] = []
    report = {
        "peer": "dbos",
        "dbos": version("dbos"),
        "database": database,
        "sqlite_library": sqlite3.sqlite_version,
        "sqlalchemy": sa.__version__,
        "workload": "one workflow per call (SetWorkflowID, inline), one datasource "
        "transaction step: UPSERT counter keyed by identity, SERIALIZABLE",
        "identities": args.identities,
        "cells": results,
    }

    def save() -> str:
        text = json.dumps(report, indent=2)
        if args.json is not None:
            args.json.write_text(text + "\n")
        return text

    try:
        # The default pool (20) runs dry at concurrency 64 (DBOS logs "pool exhausted"
        # and retries); size it like the callers, as DBOS's message advises.
        DBOS(
            config={
                "name": "bench-dbos",
                "system_database_url": url,
                "log_level": "WARNING",
                "sys_db_pool_size": max(20, 2 * max(concurrency)),
            }
        )
        ds = SQLAlchemyDatasource.create(url)
        with ds.engine.begin() as c:
            c.exec_driver_sql(
                "CREATE TABLE IF NOT EXISTS bench_dbos_counter "
                "(k VARCHAR(200) PRIMARY KEY, n BIGINT NOT NULL)"
            )

        @ds.transaction()
        def increment(key: str) -> int:
            return int(
                ds.sql_session()
                .execute(
                    sa.text(
                        "INSERT INTO bench_dbos_counter (k, n) VALUES (:k, 1) "
                        "ON CONFLICT (k) DO UPDATE SET n = bench_dbos_counter.n + 1 "
                        "RETURNING n"
                    ),
                    {"k": key},
                )
                .scalar_one()
            )

        @DBOS.workflow()
        def add(key: str) -> int:
            return increment(key)

        DBOS.launch()

        def call(key: str) -> int:
            with SetWorkflowID(uuid.uuid4().hex):
                return add(key)

        for conc in concurrency:
            for shape in shapes:
                ns = f"{shape}-c{conc}-{uuid.uuid4().hex[:6]}"
                ids = identity_plan(shape, ns, args.identities)
                prime = {"hot": 1, "warm": args.identities, "new": 0}[shape]
                if prime:
                    run_phase(call, ids, min(conc, prime), calls=prime, duration=None)
                warm_ids = identity_plan("new", ns + "-wu", 1) if shape == "new" else ids
                run_phase(call, warm_ids, conc, calls=args.warmup, duration=None)
                marks: list[tuple[int, float]] = []

                def mark(marks: list[tuple[int, float]] = marks) -> None:
                    marks.append((commits.n, time.process_time()))

                lat, errors, seconds = run_phase(
                    call,
                    ids,
                    conc,
                    calls=None if args.duration else args.calls,
                    duration=args.duration,
                    before=mark,
                )
                n = len(lat)
                cell = {
                    "shape": shape,
                    "concurrency": conc,
                    "calls": n,
                    "errors": errors,
                    "seconds": seconds,
                    "ops_per_s": n / seconds,
                    "p50_ms": percentile(lat, 50) * 1000,
                    "p95_ms": percentile(lat, 95) * 1000,
                    "p99_ms": percentile(lat, 99) * 1000,
                    "commits_per_call": (commits.n - marks[0][0]) / n if n else math.nan,
                    "cpu_s_per_call": (time.process_time() - marks[0][1]) / n if n else math.nan,
                }
                results.append(cell)
                save()
                print(
                    f"dbos {database} {shape}/c{conc}: {cell['ops_per_s']:.0f} ops/s, "
                    f"p50 {cell['p50_ms']:.1f} ms, p99 {cell['p99_ms']:.1f} ms",
                    file=sys.stderr,
                )
    finally:
        DBOS.destroy(destroy_registry=True)
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)
        if admin is not None:
            with admin.connect() as c:
                c.exec_driver_sql(f"DROP DATABASE IF EXISTS {db_name} WITH (FORCE)")
            admin.dispose()

    print(save())
    return 1 if any(c["errors"] for c in results) else 0


if __name__ == "__main__":
    sys.exit(main())
