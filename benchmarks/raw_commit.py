#!/usr/bin/env python
"""The raw commit limit: SQLite with the stdlib ``sqlite3``, servers with the library's driver.

The *minimal write transaction* (the same one as Part 3 of the performance
baseline)::

    BEGIN IMMEDIATE;
    INSERT INTO bench_event (k, payload) VALUES (?, ?);   -- 64-byte payload
    UPDATE bench_state SET n = n + 1 WHERE id = ?;
    COMMIT;

Each client thread has its own connection (WAL, ``synchronous`` as chosen,
``busy_timeout``) and runs these transactions back to back. Every thread
updates its own 50 rows ("disjoint"). The result is commits per second and the
latency of one transaction: the ceiling that no library issuing one
transaction per call can beat on this machine, and the denominator of the
"fraction of raw" that ``bench_calls.py`` reports.

On PostgreSQL and MariaDB (:func:`measure_url`) the same two statements run
through the DB-API driver of the URL (psycopg 3, PyMySQL: the ones the
library uses), one connection per thread, autocommit off, ``commit()`` after
the pair, on two tables with a random suffix that are dropped afterwards.

Usage::

    python benchmarks/raw_commit.py                          # 1, 16, 64 threads, 2 s each
    python benchmarks/raw_commit.py --concurrency 1,4 --seconds 3 --repeat 3 --json raw.json
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

PAYLOAD = "x" * 64
ROWS_PER_THREAD = 50


@dataclass(frozen=True)
class RawResult:
    """One measurement of the minimal transaction at one concurrency."""

    threads: int
    synchronous: str
    commits: int
    seconds: float
    commits_per_s: float
    p50_ms: float
    p99_ms: float
    cpu_s_per_commit: float


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list (``p`` in 0..100)."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def _cpu() -> float:
    return time.process_time()


def _connect(path: Path, synchronous: str, busy_timeout_ms: int) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
    return conn


def create_database(path: Path, rows: int) -> None:
    """Create the two tables of the minimal transaction, with ``rows`` counter rows."""
    conn = _connect(path, "NORMAL", 30_000)
    try:
        conn.execute("CREATE TABLE bench_state (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)")
        conn.execute(
            "CREATE TABLE bench_event (id INTEGER PRIMARY KEY AUTOINCREMENT, "
            "k INTEGER NOT NULL, payload TEXT NOT NULL)"
        )
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO bench_state (id, n) VALUES (?, 0)", ((i,) for i in range(rows))
        )
        conn.execute("COMMIT")
    finally:
        conn.close()


def measure(
    directory: Path,
    threads: int,
    *,
    seconds: float = 2.0,
    synchronous: str = "NORMAL",
    busy_timeout_ms: int = 30_000,
) -> RawResult:
    """Run the minimal transaction from ``threads`` threads for ``seconds`` on a fresh file."""
    path = Path(tempfile.mkdtemp(prefix="raw-", dir=directory)) / "raw.db"
    try:
        create_database(path, max(1000, threads * ROWS_PER_THREAD))
        connections = [_connect(path, synchronous, busy_timeout_ms) for _ in range(threads)]
        latencies: list[list[float]] = [[] for _ in range(threads)]
        errors: list[BaseException] = []
        start = threading.Barrier(threads + 1)
        stop = threading.Event()

        def client(index: int) -> None:
            conn = connections[index]
            mine = latencies[index]
            base = index * ROWS_PER_THREAD
            i = 0
            start.wait()
            try:
                while not stop.is_set():
                    t0 = time.perf_counter()
                    conn.execute("BEGIN IMMEDIATE")
                    conn.execute(
                        "INSERT INTO bench_event (k, payload) VALUES (?, ?)", (index, PAYLOAD)
                    )
                    conn.execute(
                        "UPDATE bench_state SET n = n + 1 WHERE id = ?",
                        (base + i % ROWS_PER_THREAD,),
                    )
                    conn.execute("COMMIT")
                    mine.append(time.perf_counter() - t0)
                    i += 1
            except BaseException as exc:  # reported after the run
                errors.append(exc)

        workers = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(threads)]
        for w in workers:
            w.start()
        start.wait()
        cpu0, t0 = _cpu(), time.perf_counter()
        time.sleep(seconds)
        stop.set()
        for w in workers:
            w.join()
        elapsed, cpu = time.perf_counter() - t0, _cpu() - cpu0
        for conn in connections:
            conn.close()
        if errors:
            raise RuntimeError(f"raw commit client failed: {errors[0]!r}") from errors[0]
        merged = sorted(x for per_thread in latencies for x in per_thread)
        commits = len(merged)
        return RawResult(
            threads=threads,
            synchronous=synchronous,
            commits=commits,
            seconds=elapsed,
            commits_per_s=commits / elapsed,
            p50_ms=percentile(merged, 50) * 1000,
            p99_ms=percentile(merged, 99) * 1000,
            cpu_s_per_commit=cpu / commits if commits else math.nan,
        )
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)


def measure_url(url: str, threads: int, *, seconds: float = 2.0) -> RawResult:
    """The minimal transaction on a server database, through the URL's own DB-API driver."""
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    engine = sqlalchemy.create_engine(url, poolclass=NullPool)
    suffix = uuid.uuid4().hex[:10]
    state, events = f"bench_raw_state_{suffix}", f"bench_raw_event_{suffix}"
    autoinc = (
        "BIGSERIAL PRIMARY KEY"
        if engine.dialect.name == "postgresql"
        else "BIGINT AUTO_INCREMENT PRIMARY KEY"
    )
    rows = max(1000, threads * ROWS_PER_THREAD)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE {state} (id INTEGER PRIMARY KEY, n BIGINT NOT NULL)")
        conn.exec_driver_sql(
            f"CREATE TABLE {events} (id {autoinc}, k INTEGER NOT NULL, "
            "payload VARCHAR(200) NOT NULL)"
        )
        conn.exec_driver_sql(
            f"INSERT INTO {state} (id, n) VALUES (%(id)s, 0)", [{"id": i} for i in range(rows)]
        )
    try:
        raws = [engine.raw_connection() for _ in range(threads)]
        latencies: list[list[float]] = [[] for _ in range(threads)]
        errors: list[BaseException] = []
        start = threading.Barrier(threads + 1)
        stop = threading.Event()
        insert = f"INSERT INTO {events} (k, payload) VALUES (%s, %s)"
        update = f"UPDATE {state} SET n = n + 1 WHERE id = %s"

        def client(index: int) -> None:
            raw = raws[index]
            cursor = raw.cursor()
            mine = latencies[index]
            base = index * ROWS_PER_THREAD
            i = 0
            start.wait()
            try:
                while not stop.is_set():
                    t0 = time.perf_counter()
                    cursor.execute(insert, (index, PAYLOAD))
                    cursor.execute(update, (base + i % ROWS_PER_THREAD,))
                    raw.commit()
                    mine.append(time.perf_counter() - t0)
                    i += 1
            except BaseException as exc:  # reported after the run
                errors.append(exc)
            finally:
                cursor.close()

        workers = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(threads)]
        for w in workers:
            w.start()
        start.wait()
        cpu0, t0 = _cpu(), time.perf_counter()
        time.sleep(seconds)
        stop.set()
        for w in workers:
            w.join()
        elapsed, cpu = time.perf_counter() - t0, _cpu() - cpu0
        for raw in raws:
            raw.close()
        if errors:
            raise RuntimeError(f"raw commit client failed: {errors[0]!r}") from errors[0]
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE {events}")
            conn.exec_driver_sql(f"DROP TABLE {state}")
        engine.dispose()
    merged = sorted(x for per_thread in latencies for x in per_thread)
    commits = len(merged)
    return RawResult(
        threads=threads,
        synchronous="server default",
        commits=commits,
        seconds=elapsed,
        commits_per_s=commits / elapsed,
        p50_ms=percentile(merged, 50) * 1000,
        p99_ms=percentile(merged, 99) * 1000,
        cpu_s_per_commit=cpu / commits if commits else math.nan,
    )


def int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        message = f"expected comma-separated integers, got {text!r}"
        raise argparse.ArgumentTypeError(message) from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError("values must be >= 1")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--concurrency",
        type=int_list,
        default=[1, 16, 64],
        help="client threads, comma-separated (default 1,16,64)",
    )
    parser.add_argument("--seconds", type=float, default=2.0, help="per measurement")
    parser.add_argument("--repeat", type=int, default=1, help="passes; the table shows medians")
    parser.add_argument("--synchronous", choices=["NORMAL", "FULL"], default="NORMAL")
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="directory for the temporary database files (default: system temp)",
    )
    parser.add_argument(
        "--url", default=None, help="a PostgreSQL or MariaDB URL (default: SQLite files in --dir)"
    )
    parser.add_argument("--json", type=Path, default=None, help="write all runs as JSON here")
    args = parser.parse_args(argv)

    directory = args.dir or Path(tempfile.gettempdir())
    runs: list[RawResult] = []
    for _ in range(args.repeat):
        for threads in args.concurrency:
            runs.append(
                measure_url(args.url, threads, seconds=args.seconds)
                if args.url
                else measure(directory, threads, seconds=args.seconds, synchronous=args.synchronous)
            )
    where = (
        args.url
        if args.url
        else f"SQLite {sqlite3.sqlite_version}, WAL, synchronous={args.synchronous}"
    )
    print(f"{where}, {args.seconds:g} s per run, {args.repeat} pass(es); medians")
    print(f"{'threads':>7} {'commits/s':>11} {'min':>9} {'max':>9} {'p50 ms':>8} {'p99 ms':>8}")
    for threads in args.concurrency:
        mine = [r for r in runs if r.threads == threads]
        rates = [r.commits_per_s for r in mine]
        print(
            f"{threads:>7} {statistics.median(rates):>11,.0f} {min(rates):>9,.0f} "
            f"{max(rates):>9,.0f} {statistics.median(r.p50_ms for r in mine):>8.3f} "
            f"{statistics.median(r.p99_ms for r in mine):>8.3f}"
        )
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {"sqlite_version": sqlite3.sqlite_version, "runs": [asdict(r) for r in runs]},
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
