#!/usr/bin/env python
"""What queryable state costs per call: a JSON state column and projections.

Per database, three actor classes with the same state (a dict of 20 items and a
counter) run the same sync call, one caller thread against one in-process worker
(``workers=1``), so the figure is the cost of one turn, not of concurrency:

- ``text``: the state column converted back to text (how schema 13 stored it);
- ``json``: the native JSON column (``jsonb`` on PostgreSQL, ``JSON`` on MariaDB);
- ``projected``: ``json`` plus two ``@projection`` columns written by each turn;
- ``journaled``: ``json`` plus the per-turn journal (``journaled = True``).

Passes alternate the three classes (``--passes``), each pass ``--calls`` calls to
``--actors`` warm identities; the table shows medians of calls/s and of the process's
CPU ms per call, the statements per call counted on the library's engine, and the
bytes on disk per actor row and per projection row (PostgreSQL: ``pg_total_relation_size``;
MariaDB: ``information_schema.TABLES``; SQLite: not measured). Examples::

    python benchmarks/bench_state_columns.py --calls 500 --passes 5
    python benchmarks/bench_state_columns.py --databases postgresql --json out.json
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

from solid_objects import Actor, Runtime, projection  # noqa: E402
from solid_objects.pytest_plugin import fresh_database  # noqa: E402
from solid_objects.store.dialect import Tx  # noqa: E402

#: Statements run through the library's ``Tx`` (its only way to run SQL), counted by
#: wrapping its methods: measurement only.
STATEMENTS = [0]


def _counting(method: Any) -> Any:
    def counted(self: Tx, *args: Any, **kwargs: Any) -> Any:
        STATEMENTS[0] += 1
        return method(self, *args, **kwargs)

    return counted


for _name in ("run", "row", "rows"):
    setattr(Tx, _name, _counting(getattr(Tx, _name)))

DEFAULT_URLS = {
    "sqlite": None,
    "postgresql": os.environ.get(
        "SOLID_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
    ),
    "mariadb": os.environ.get("SOLID_TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/test"),
}
ITEMS = {f"sku-{n:03d}": n for n in range(20)}


class TextCart(Actor, auto_register=False):
    items: dict[str, int] = ITEMS
    count: int = 0

    def bump(self) -> int:
        self.count += 1
        return self.count


class JsonCart(Actor, auto_register=False):
    items: dict[str, int] = ITEMS
    count: int = 0

    def bump(self) -> int:
        self.count += 1
        return self.count


class ProjectedCart(Actor, auto_register=False):
    items: dict[str, int] = ITEMS
    count: int = 0

    def bump(self) -> int:
        self.count += 1
        return self.count

    @projection
    def bumps(self) -> int:
        return self.count

    @projection
    def units(self) -> int:
        return sum(self.items.values())


class JournaledCart(Actor, auto_register=False):
    journaled = True
    items: dict[str, int] = ITEMS
    count: int = 0

    def bump(self) -> int:
        self.count += 1
        return self.count


CLASSES = {
    "text": TextCart,
    "json": JsonCart,
    "projected": ProjectedCart,
    "journaled": JournaledCart,
}


def run_pass(rt: Runtime, cls: type[Actor], calls: int, actors: int) -> Any:
    refs = [rt.ref(cls, f"a{n}") for n in range(actors)]
    for ref in refs:
        ref.bump()  # warm: activated, state cached
    counter = STATEMENTS
    counter[0] = 0
    cpu, start = time.process_time(), time.perf_counter()
    for n in range(calls):
        refs[n % actors].bump()
    wall = time.perf_counter() - start
    return calls / wall, (time.process_time() - cpu) * 1000 / calls, counter[0] / calls


def sizes(rt: Runtime, name: str) -> dict[str, float | None]:
    family = rt.store.dialect.family
    if family == "sqlite":
        return {"actor_row_bytes": None, "projection_row_bytes": None, "journal_row_bytes": None}
    with rt.store.read() as tx:
        actors = tx.scalar("SELECT COUNT(*) FROM solid_actors")
        projected = tx.scalar("SELECT COUNT(*) FROM solid_projectedcart_projection")
        if family == "postgresql":
            tx.run("ANALYZE solid_actors")
            a = tx.scalar("SELECT pg_total_relation_size('solid_actors')")
            p = tx.scalar("SELECT pg_total_relation_size('solid_projectedcart_projection')")
        else:
            tx.run("ANALYZE TABLE solid_actors")
            a, p = (
                tx.scalar(
                    "SELECT DATA_LENGTH + INDEX_LENGTH FROM information_schema.TABLES "
                    "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = :t",
                    {"t": t},
                )
                for t in ("solid_actors", "solid_projectedcart_projection")
            )
        entries = tx.scalar("SELECT COUNT(*) FROM solid_journal")
        if family == "postgresql":
            tx.run("ANALYZE solid_journal")
            j = tx.scalar("SELECT pg_total_relation_size('solid_journal')")
        else:
            tx.run("ANALYZE TABLE solid_journal")
            j = tx.scalar(
                "SELECT DATA_LENGTH + INDEX_LENGTH FROM information_schema.TABLES "
                "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'solid_journal'"
            )
    return {
        "actor_row_bytes": round(int(a) / max(int(actors), 1), 1),
        "projection_row_bytes": round(int(p) / max(int(projected), 1), 1),
        "journal_row_bytes": round(int(j) / max(int(entries), 1), 1),
    }


def one_database(name: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    rt = Runtime(url, workers=1, actors=list(CLASSES.values()))
    rt.install()
    results: dict[str, list[tuple[float, float, float]]] = {k: [] for k in CLASSES}
    with rt.engine.begin() as conn:  # this database's column as schema 13 made it
        if rt.store.dialect.family == "postgresql":
            conn.exec_driver_sql("ALTER TABLE solid_actors ALTER COLUMN state TYPE text")
        elif rt.store.dialect.family == "mysql":
            conn.exec_driver_sql("ALTER TABLE solid_actors MODIFY state LONGTEXT NULL")
    # The text cell runs here; the others on a second database with the native column.
    native_url = args.second_url(name)
    native = Runtime(native_url, workers=1, actors=list(CLASSES.values()))
    native.install()
    with rt, native:
        for _ in range(args.passes):
            for kind, cls in CLASSES.items():
                target = rt if kind == "text" else native
                results[kind].append(run_pass(target, cls, args.calls, args.actors))
        for n in range(args.size_actors):  # rows enough for bytes per row to mean something
            native.ref(ProjectedCart, f"size-{n}").bump()
            native.ref(JsonCart, f"size-{n}").bump()
            native.ref(JournaledCart, f"size-{n}").bump()
        disk = sizes(native, name)
    rt.close()
    native.close()
    table = {
        kind: {
            "calls_per_s": round(statistics.median(r[0] for r in rows)),
            "cpu_ms_per_call": round(statistics.median(r[1] for r in rows), 3),
            "statements_per_call": round(statistics.median(r[2] for r in rows), 2),
        }
        for kind, rows in results.items()
    }
    return {"database": name, "cells": table, **disk}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--databases", default="sqlite,postgresql,mariadb")
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--actors", type=int, default=20)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--size-actors", type=int, default=2000)
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
    out = []
    with tempfile.TemporaryDirectory() as folder:
        for name in args.databases.split(","):
            server = DEFAULT_URLS[name]
            with (
                fresh_database(server, Path(folder), f"{name}-text.db") as url,
                fresh_database(server, Path(folder), f"{name}-json.db") as second,
            ):
                args.second_url = lambda _name, second=second: second
                out.append(one_database(name, url, args))
    for row in out:
        print(
            f"== {row['database']}  (actor row {row['actor_row_bytes']} B, "
            f"projection row {row['projection_row_bytes']} B, "
            f"journal row {row['journal_row_bytes']} B)"
        )
        base = row["cells"]["text"]
        for kind, cell in row["cells"].items():
            ratio = cell["calls_per_s"] / base["calls_per_s"]
            print(
                f"  {kind:10} {cell['calls_per_s']:6} calls/s ({ratio:.2f} of text)  "
                f"{cell['cpu_ms_per_call']:.3f} CPU ms/call  "
                f"{cell['statements_per_call']:.2f} statements/call"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
