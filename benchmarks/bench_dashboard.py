#!/usr/bin/env python
"""How fast the operator dashboard's pages load with many actor rows.

Seeds N actors of one type (default 1,000,000) into a temporary SQLite file: a
few hundred through the runtime (state, a dead letter, a reminder), the rest
cloned from one of them with a single ``INSERT ... SELECT`` over a recursive
sequence. The cloning is the benchmark's own set-up shortcut (creating a
million actors by calls takes far longer than the measurement); the dashboard
is then measured only through HTTP, reading through ``runtime.admin`` as it
always does.

Each page is loaded ``--loads`` times in-process (Starlette's TestClient: the
ASGI app, the admin API and the database, no network) and the median and the
slowest are printed. Not a test: the machine is shared and noisy.

Usage::

    .venv/bin/python benchmarks/bench_dashboard.py                 # 1,000,000 actors
    .venv/bin/python benchmarks/bench_dashboard.py --actors 100000 --loads 10
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import sqlalchemy as sa

from solid_objects import Actor, Runtime
from solid_objects.admin import allow
from solid_objects.errors import InvalidArguments
from solid_objects.web import dashboard

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient


class Meter(Actor):
    readings: list[int] = []

    def read(self, value: int) -> None:
        if value < 0:
            raise InvalidArguments("a negative reading")
        self.readings.append(value)


def seed(runtime: Runtime, actors: int) -> None:
    for i in range(200):
        runtime.ref(Meter, f"live-{i:03}").read.send(value=i)
    runtime.ref(Meter, "live-000").read.send(value=-1)  # one dead letter
    runtime.testing.drain()
    table = next(t for t in sa.inspect(runtime.engine).get_table_names() if t.endswith("actors"))
    columns = [c["name"] for c in sa.inspect(runtime.engine).get_columns(table)]
    copied = [c for c in columns if c not in ("pk", "actor_id")]
    clones = actors - 200
    with runtime.engine.begin() as conn:
        conn.execute(
            sa.text(
                f"WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq "
                f"WHERE n < :clones) "
                f"INSERT INTO {table} (actor_id, {', '.join(copied)}) "
                f"SELECT printf('m%07d', n), {', '.join(copied)} FROM seq, {table} "
                f"WHERE actor_id = 'live-001'"
            ),
            {"clones": clones},
        )


def measure(client: TestClient, path: str, loads: int) -> tuple[float, float]:
    times = []
    for _ in range(loads):
        started = time.perf_counter()
        response = client.get(path, headers={"x-user": "ops:bench"})
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, (path, response.status_code)
    return statistics.median(times), max(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--actors", type=int, default=1_000_000)
    parser.add_argument("--loads", type=int, default=20)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-dashboard-"))
    runtime = Runtime(f"sqlite:///{folder / 'bench.db'}", workers=0, retry_base_delay=0.01)
    runtime.register(Meter)
    runtime.install()
    runtime.admin.set_policy(allow({"ops:*": "*"}))
    started = time.perf_counter()
    seed(runtime, args.actors)
    print(f"seeded {args.actors:,} actors in {time.perf_counter() - started:.1f} s")
    app = dashboard(runtime, principal=lambda request: request.headers.get("x-user"))
    with TestClient(app) as client:
        first = client.get("/actors?type=Meter", headers={"x-user": "ops:bench"}).text
        cursor = first.split("cursor=")[1].split('"')[0].replace("&amp;", "&")
        clones = args.actors - 200
        middle, deep = f"m{max(1, clones // 2):07d}", f"m{max(1, clones * 9 // 10):07d}"
        pages = [
            ("overview (status, actors counted up to 10,000)", "/"),
            ("actors of a type, first page", "/actors?type=Meter"),
            ("actors of a type, next page (cursor)", f"/actors?type=Meter&cursor={cursor}"),
            (
                "actors deep in the id range (cursor)",
                "/actors?type=Meter&cursor=" + _cursor_after(first, deep),
            ),
            ("actors by id prefix (m05, 100,000 match)", "/actors?type=Meter&prefix=m05"),
            ("actors by id prefix, no match", "/actors?type=Meter&prefix=zz"),
            ("one actor", f"/actors/Meter/{middle}"),
            ("one actor with a dead letter", "/actors/Meter/live-000"),
            ("dead letters", "/dead-letters"),
            ("reminders", "/reminders"),
            ("audit log", "/audit"),
        ]
        print(f"{'page':<50} {'median ms':>10} {'max ms':>10}")
        for name, path in pages:
            median, slowest = measure(client, path, args.loads)
            print(f"{name:<50} {median:>10.1f} {slowest:>10.1f}")
        ops = runtime.admin.as_principal("ops:bench")
        times = []
        for _ in range(args.loads):
            started = time.perf_counter()
            ops.status()
            times.append((time.perf_counter() - started) * 1000)
        name = "admin.status(), every actor counted (the CLI)"
        print(f"{name:<50} {statistics.median(times):>10.1f} {max(times):>10.1f}")
    runtime.close()


def _cursor_after(page_html: str, actor_id: str) -> str:
    """A cursor that continues after ``actor_id``: the next-page link's, re-aimed.

    The cursor format is the admin API's business; the benchmark only swaps the id
    in the one it was given (base64 of ``["actors", id]``).
    """
    import base64
    import json

    cursor = page_html.split("cursor=")[1].split('"')[0]
    kind, _ = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    raw = json.dumps([kind, actor_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


if __name__ == "__main__":
    main()
