#!/usr/bin/env python
"""Calls per second directly against PostgreSQL and through PgBouncer (transaction mode).

Starts a private ``pgbouncer`` (``pool_mode = transaction``, ``default_pool_size``
``--pool``) on a free port in front of the server of ``SOLID_TEST_POSTGRES_URL``,
on a fresh database. For each path, one runtime (``--workers``) takes
``--threads`` threads of sync calls to ``--identities`` warm identities for
``--seconds``; the pooled runtime has ``pooler="transaction"`` and a direct
``listen_url``; a third run goes direct with ``pooler="transaction"`` (what the
option's per-transaction settings and unprepared statements cost, without the
pooler's hop). The paths alternate, ``--repeat`` times. Prints calls/s and the
latency median and p95 per path, as JSON.
Results: ``docs/deployment.md``, "Behind PgBouncer". Example::

    python benchmarks/bench_pgbouncer.py --seconds 10 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import psycopg  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from solid_objects import Actor, Runtime  # noqa: E402

SERVER = make_url(
    os.environ.get("SOLID_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
)


class Counter(Actor):
    value: int = 0

    def add(self, n: int = 1) -> int:
        self.value += n
        return self.value


def libpq(database: str) -> str:
    return f"host={SERVER.host} port={SERVER.port or 5432} user={SERVER.username} dbname={database}"


def start_pgbouncer(folder: Path, pool: int) -> tuple[subprocess.Popen[bytes], int]:
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    (folder / "users.txt").write_text(f'"{SERVER.username}" ""\n')
    (folder / "pgbouncer.ini").write_text(
        f"[databases]\n* = host={SERVER.host} port={SERVER.port or 5432}\n[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {folder / 'users.txt'}\npool_mode = transaction\n"
        f"default_pool_size = {pool}\nmax_client_conn = 1000\n"
    )
    user = "postgres" if os.geteuid() == 0 else None  # pgbouncer refuses to run as root
    if user is not None:
        folder.chmod(0o755)
        for path in (folder, *folder.iterdir()):
            os.chown(path, pwd.getpwnam(user).pw_uid, -1)
    proc = subprocess.Popen(
        [binary, *(["-u", user] if user else []), str(folder / "pgbouncer.ini")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("pgbouncer did not start")


def measure(url: str, args: argparse.Namespace, **options: Any) -> dict[str, float]:
    rt = Runtime(url, actors=[Counter], workers=args.workers, **options)
    rt.install()
    latencies: list[float] = []
    lock = threading.Lock()
    with rt:
        refs = [rt.ref(Counter, f"c{i}") for i in range(args.identities)]
        for ref in refs:
            ref.add(n=0)
        stop = time.monotonic() + args.seconds

        def run(k: int) -> None:
            mine = []
            i = k
            while time.monotonic() < stop:
                started = time.perf_counter()
                refs[i % len(refs)].add(n=1)
                mine.append(time.perf_counter() - started)
                i += 1
            with lock:
                latencies.extend(mine)

        threads = [threading.Thread(target=run, args=(k,)) for k in range(args.threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    rt.close()
    ordered = sorted(latencies)
    return {
        "calls_per_s": round(len(latencies) / args.seconds, 1),
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p95_ms": round(ordered[int(len(ordered) * 0.95)] * 1000, 2),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--identities", type=int, default=8)
    p.add_argument("--pool", type=int, default=20, help="pgbouncer default_pool_size")
    args = p.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="solid-bench-pgbouncer-"))
    database = f"solid_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(libpq(str(SERVER.database)), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{database}"')
    proc, port = start_pgbouncer(folder, args.pool)
    direct = SERVER.set(drivername="postgresql+psycopg", database=database)
    direct_url = direct.render_as_string(hide_password=False)
    pooled_url = f"postgresql+psycopg://{SERVER.username}@127.0.0.1:{port}/{database}"
    results: dict[str, list[dict[str, float]]] = {
        "direct": [],
        "direct_with_pooler_option": [],
        "pgbouncer_transaction": [],
    }
    try:
        for _ in range(args.repeat):
            results["direct"].append(measure(direct_url, args))
            results["direct_with_pooler_option"].append(
                measure(direct_url, args, pooler="transaction", listen_url=direct_url)
            )
            results["pgbouncer_transaction"].append(
                measure(pooled_url, args, pooler="transaction", listen_url=direct_url)
            )
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(folder, ignore_errors=True)
        with psycopg.connect(libpq(str(SERVER.database)), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    settings = {k: v for k, v in vars(args).items()}
    print(json.dumps({"settings": settings, "results": results}, indent=2))


if __name__ == "__main__":
    main()
