#!/usr/bin/env python
"""The side-by-side benchmark: every database, the raw limit and the DBOS peer in one run.

For each database (SQLite, PostgreSQL, MariaDB) this runs ``bench_calls.py``
on a fresh scratch database (a temporary file, a new PostgreSQL schema, a new
MariaDB database; each dropped afterwards): the matrix of shapes x modes x
concurrency in one process and, with ``--processes N``, against N worker
processes; the raw commit limit with the same driver and concurrency,
interleaved; idle cost; and, with a DBOS virtualenv, the DBOS peer on SQLite and
PostgreSQL. Then it prints one side-by-side table (Solid Objects, the raw limit,
the fraction, DBOS, the JS reference's published figures) and writes all the
reports as one JSON document.

Usage::

    .venv/bin/python benchmarks/run.py --quick
    .venv/bin/python benchmarks/run.py --processes 4 --duration 5 \\
        --dbos-python .venv-bench/bin/python --json benchmarks/results/full.json
    .venv/bin/python benchmarks/run.py --databases mariadb --processes 4 \\
        --shapes warm --modes call --concurrency 16 --wakeup default,redis,peer

``--wakeup`` runs the whole matrix once per wake-up path (each on its own scratch
database) and prints their topology cells side by side.

Server URLs come from ``--postgres-url``/``--mysql-url``, else from
``SOLID_TEST_POSTGRES_URL``/``SOLID_TEST_MYSQL_URL``, else the local defaults.
Every other option is passed to ``bench_calls.py`` unchanged (see its ``--help``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import bench_calls
import sqlalchemy
from sqlalchemy.engine import make_url

DEFAULT_URLS = {
    "postgresql": os.environ.get("SOLID_TEST_POSTGRES_URL")
    or "postgresql+psycopg://postgres@127.0.0.1:5432/test",
    "mariadb": os.environ.get("SOLID_TEST_MYSQL_URL") or "mysql+pymysql://root@127.0.0.1:3306/test",
}
DATABASES = ("sqlite", "postgresql", "mariadb")
#: ``--wakeup`` paths: the database's own (NOTIFY on PostgreSQL, polling elsewhere),
#: Redis Pub/Sub, and datagrams between the processes.
WAKEUPS = ("default", "redis", "peer")


@contextmanager
def scratch_database(kind: str, server_url: str | None) -> Iterator[str | None]:
    """A fresh, empty database for one run; None means bench_calls' own temporary file."""
    if kind == "sqlite":
        yield None
        return
    assert server_url is not None
    base = make_url(server_url)
    name = f"solid_bench_{uuid.uuid4().hex[:10]}"
    admin = sqlalchemy.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        if kind == "postgresql":
            conn.exec_driver_sql(f"CREATE SCHEMA {name}")
            url = base.update_query_dict({"options": f"-csearch_path={name}"})
        else:
            conn.exec_driver_sql(f"CREATE DATABASE {name}")
            url = base.set(database=name)
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            if kind == "postgresql":
                conn.exec_driver_sql(f"DROP SCHEMA {name} CASCADE")
            else:
                conn.exec_driver_sql(f"DROP DATABASE {name}")
        admin.dispose()


def find(
    cells: list[dict[str, Any]], shape: str, mode: str, conc: int, processes: int = 0
) -> dict[str, Any] | None:
    for c in cells:
        if (c["shape"], c["mode"], c["concurrency"], c["processes"]) == (
            shape,
            mode,
            conc,
            processes,
        ):
            return c
    return None


def fmt(value: float | None, spec: str) -> str:
    """Like ``bench_calls.fmt``, but a missing value keeps the column's width."""
    text = bench_calls.fmt(value, spec)
    width = re.match(r"[<>^]?(\d*)", spec)
    return text if text != "-" or width is None else text.rjust(int(width.group(1) or 0))


def print_side_by_side(reports: dict[str, dict[str, Any]]) -> None:
    """The headline table: warm/call per concurrency, per database, with the references."""
    print()
    print("=" * 100)
    print("Side by side: 100 warm identities, sync calls, one process (ops/s; p50/p99 ms)")
    print(
        f"{'database':<10} {'conc':>4} {'Solid Objects':>14} {'p50':>6} {'p99':>7} "
        f"{'raw/s':>7} {'of raw':>6} {'DBOS':>6} {'DBOS p99':>8} {'x DBOS':>6} "
        f"{'JS':>5} {'x JS':>6}"
    )
    for kind, report in reports.items():
        raw = {r["threads"]: r for r in report["raw"]}
        dbos = report.get("dbos") or {"cells": []}
        for conc in report["settings"]["concurrency"]:
            cell = find(report["cells"], "warm", "call", conc)
            if cell is None:
                continue
            peer = next(
                (
                    c
                    for c in dbos["cells"]
                    if (c["shape"], c["concurrency"]) == ("warm", conc) and not c.get("stalled")
                ),
                None,
            )
            js = bench_calls.JS_ANCHOR.get(report["database"]) if conc == 16 else None
            r = raw.get(conc)
            ops = cell["ops_per_s"]
            print(
                f"{kind:<10} {conc:>4} {ops:>14,.0f} {cell['p50_ms']:>6.2f} "
                f"{cell['p99_ms']:>7.2f} "
                f"{fmt(None if r is None else r['commits_per_s'], '>7,.0f')} "
                f"{fmt(cell['fraction_of_raw'], '>6.3f')} "
                f"{fmt(None if peer is None else peer['ops_per_s'], '>6,.0f')} "
                f"{fmt(None if peer is None else peer['p99_ms'], '>8.1f')} "
                f"{fmt(None if peer is None else ops / peer['ops_per_s'], '>6.1f')} "
                f"{fmt(js, '>5.0f')} "
                f"{fmt(None if js is None else cell['ops_per_s'] / js, '>6.1f')}"
            )
    print()
    print("Every cell, ops/s per database (in-process = 0 worker processes):")
    kinds = list(reports)
    print(
        f"{'shape':<5} {'mode':<4} {'conc':>4} {'proc':>4} "
        + " ".join(f"{k:>11}" for k in kinds)
        + "  "
        + " ".join(f"{k[:6] + ' p99':>11}" for k in kinds)
    )
    keys = sorted(
        {
            (c["shape"], c["mode"], c["concurrency"], c["processes"])
            for r in reports.values()
            for c in r["cells"]
        },
        key=lambda k: (k[3], k[2], bench_calls.SHAPES.index(k[0]), k[1]),
    )
    for shape, mode, conc, procs in keys:
        found = [find(reports[k]["cells"], shape, mode, conc, procs) for k in kinds]
        print(
            f"{shape:<5} {mode:<4} {conc:>4} {procs:>4} "
            + " ".join(fmt(None if c is None else c["ops_per_s"], ">11,.0f") for c in found)
            + "  "
            + " ".join(fmt(None if c is None else c["p99_ms"], ">11.1f") for c in found)
        )
    print()
    print("Targets (warm/call/c16, one process):")
    for kind, report in reports.items():
        verdicts = ", ".join(
            f"{t['target']}: {fmt(t['measured'], '.3g')} "
            f"[{ {True: 'met', False: 'MISSED', None: 'n/a'}[t['met']] }]"
            for t in report["targets"]
        )
        print(f"  {kind}: {verdicts}")


def report_key(kind: str, wakeup: str, first: str) -> str:
    """The key of one run's report: the database, and the wake-up path unless first."""
    return kind if wakeup == first else f"{kind}+{wakeup}"


def print_wakeups(reports: dict[str, dict[str, Any]], wakeups: list[str]) -> None:
    """The topology cells of each wake-up path, side by side per database."""
    print()
    print("Wake-up paths: warm/call, worker processes + a caller-only process")
    print(
        f"{'database':<10} {'wake-up':<8} {'conc':>4} {'proc':>4} {'ops/s':>8} {'p50':>7} "
        f"{'p99':>7} {'of in-process':>13} {'of raw':>6}"
    )
    for key, report in reports.items():
        kind, _, wakeup = key.partition("+")
        wakeup = wakeup or wakeups[0]
        for cell in report["cells"]:
            if cell["processes"] == 0 or (cell["shape"], cell["mode"]) != ("warm", "call"):
                continue
            local = find(report["cells"], "warm", "call", cell["concurrency"])
            ratio = None if local is None else cell["ops_per_s"] / local["ops_per_s"]
            print(
                f"{kind:<10} {wakeup:<8} {cell['concurrency']:>4} {cell['processes']:>4} "
                f"{cell['ops_per_s']:>8,.0f} {cell['p50_ms']:>7.1f} {cell['p99_ms']:>7.1f} "
                f"{fmt(ratio, '>13.3f')} {fmt(cell['fraction_of_raw'], '>6.3f')}"
            )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="Run bench_calls.py on SQLite, PostgreSQL and MariaDB (each on a fresh "
        "scratch database) with the raw limit and the DBOS peer; print them side "
        "by side.",
        epilog="Other options go to bench_calls.py.",
    )
    p.add_argument(
        "--databases",
        default=",".join(DATABASES),
        help="comma-separated: sqlite,postgresql,mariadb (default all)",
    )
    p.add_argument("--postgres-url", default=DEFAULT_URLS["postgresql"])
    p.add_argument("--mysql-url", default=DEFAULT_URLS["mariadb"])
    p.add_argument(
        "--dbos-python",
        default=None,
        help="python of the DBOS virtualenv (default: .venv-bench/bin/python if "
        "it exists; 'none' skips DBOS)",
    )
    p.add_argument(
        "--wakeup",
        default="default",
        help="comma-separated wake-up paths, each a run of its own on a fresh database: "
        "default (NOTIFY on PostgreSQL, polling elsewhere), redis (--redis-url), peer "
        "(wakeup_url='peer://'); reports after the first are keyed database+path",
    )
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    p.add_argument("--json", type=Path, default=None, help="write all reports here")
    args, passthrough = p.parse_known_args(argv)
    wakeups = [w.strip() for w in args.wakeup.split(",") if w.strip()]
    if not wakeups or any(w not in WAKEUPS for w in wakeups):
        p.error(f"--wakeup: choose from {','.join(WAKEUPS)}")
    wakeup_urls = {"default": None, "redis": args.redis_url, "peer": "peer://"}
    kinds = [k.strip() for k in args.databases.split(",") if k.strip()]
    bad = [k for k in kinds if k not in DATABASES]
    if bad or not kinds:
        p.error(f"--databases: choose from {','.join(DATABASES)}")
    dbos_python = args.dbos_python
    if dbos_python is None:
        default = Path(__file__).resolve().parents[1] / ".venv-bench" / "bin" / "python"
        dbos_python = str(default) if default.exists() else None
    elif dbos_python == "none":
        dbos_python = None

    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    reports: dict[str, dict[str, Any]] = {}
    status = 0
    with tempfile.TemporaryDirectory(prefix="solid-bench-run-") as scratch:
        for kind, wakeup in [(k, w) for k in kinds for w in wakeups]:
            server = {"postgresql": args.postgres_url, "mariadb": args.mysql_url}.get(kind)
            key = report_key(kind, wakeup, wakeups[0])
            out = Path(scratch) / f"{key}.json"
            print(f"\n##### {key}", file=sys.stderr)
            try:
                with scratch_database(kind, server) as url:
                    bench_argv = [*passthrough, "--json", str(out)]
                    if url is not None:
                        bench_argv += ["--url", url]
                    if wakeup_urls[wakeup] is not None:
                        bench_argv += ["--wakeup-url", str(wakeup_urls[wakeup])]
                    if dbos_python is not None:
                        bench_argv += ["--dbos-python", dbos_python]
                    status = max(status, bench_calls.main(bench_argv))
            except Exception as exc:  # the other databases still run
                print(f"{key}: the run failed: {exc!r}", file=sys.stderr)
                status = 1
                continue
            report = json.loads(out.read_text())
            report["settings"]["url"] = (
                kind if url is None else make_url(url).render_as_string(hide_password=True)
            )
            report["settings"]["wakeup"] = wakeup
            reports[key] = report
    print_side_by_side(reports)
    if len(wakeups) > 1:
        print_wakeups(reports, wakeups)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "benchmark": "solid-objects side by side",
                    "started": started,
                    "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "databases": reports,
                },
                indent=2,
                default=str,
            )
            + "\n"
        )
        print(f"\nwrote {args.json}")
    return status


if __name__ == "__main__":
    sys.exit(main())
