#!/usr/bin/env python
"""A request/reply round trip between actors against two plain sends.

``--askers`` Asker actors each run ``--rounds`` round trips to their own Echo actor,
one after the other, inside one runtime with ``--workers`` in-process workers:

- ``request``: the asker stages ``self.request(Echo, ..., reply_to=self.on_reply,
  timeout=60 s).echo(n=...)``; the echo's answer comes back to ``on_reply``, which asks
  again (a request also stages its timeout, a delayed message the answer takes over);
- ``sends``: the hand-built equivalent, ``send_to(Echo).echo_to(...)`` and the echo's
  ``send_to(Asker).on_plain(...)`` back, no correlation, no timeout.

Per shape: round trips per second (all askers), wall time per round trip per asker,
and statements per round trip counted on the library's ``Tx``. Medians of
``--passes`` alternating passes. Examples::

    python benchmarks/bench_requests.py
    python benchmarks/bench_requests.py --databases postgresql --askers 8 --rounds 50
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from solid_objects import Actor, Reply, Runtime  # noqa: E402
from solid_objects.pytest_plugin import fresh_database  # noqa: E402
from solid_objects.store.dialect import Tx  # noqa: E402

DEFAULT_URLS = {
    "sqlite": None,
    "postgresql": os.environ.get(
        "SOLID_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
    ),
    "mariadb": os.environ.get("SOLID_TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/test"),
}
STATEMENTS = [0]
#: Round trips answered so far in this process: wakes the driver without polling the
#: database (a retried turn may count twice; the driver checks the committed state).
ANSWERED = [0]
ANSWERED_LOCK = threading.Lock()


def _counting(method: Any) -> Any:
    def counted(self: Tx, *args: Any, **kwargs: Any) -> Any:
        STATEMENTS[0] += 1
        return method(self, *args, **kwargs)

    return counted


for _name in ("run", "row", "rows"):
    setattr(Tx, _name, _counting(getattr(Tx, _name)))


class Echo(Actor, auto_register=False):
    seen: int = 0

    def echo(self, n: int) -> int:
        self.seen += 1
        return n

    def echo_to(self, asker: str, n: int) -> None:
        self.seen += 1
        self.send_to(Asker, asker).on_plain(n=n)


class Asker(Actor, auto_register=False):
    left: int = 0
    done: int = 0

    def start(self, rounds: int, plain: bool) -> None:
        self.left, self.done = rounds, 0
        self._next(plain)

    def _next(self, plain: bool) -> None:
        if self.left == 0:
            return
        self.left -= 1
        if plain:
            self.send_to(Echo, f"echo-{self.actor_id}").echo_to(asker=self.actor_id, n=self.left)
        else:
            self.request(
                Echo, f"echo-{self.actor_id}", reply_to=self.on_reply, timeout=timedelta(seconds=60)
            ).echo(n=self.left)

    def on_reply(self, reply: Reply) -> None:
        reply.value()
        self.done += 1
        self._next(plain=False)
        _answered()

    def on_plain(self, n: int) -> None:
        self.done += 1
        self._next(plain=True)
        _answered()


def _answered() -> None:
    with ANSWERED_LOCK:
        ANSWERED[0] += 1


def run_pass(rt: Runtime, shape: str, askers: int, rounds: int, tag: str) -> tuple[float, float]:
    ids = [f"{tag}-{n}" for n in range(askers)]
    ANSWERED[0] = STATEMENTS[0] = 0
    start = time.perf_counter()
    for asker in ids:
        rt.ref(Asker, asker).start.send(rounds=rounds, plain=shape == "sends")
    deadline = time.monotonic() + 300
    while ANSWERED[0] < askers * rounds:
        if time.monotonic() > deadline:
            raise SystemExit(f"{shape}: round trips did not finish in 300 s")
        time.sleep(0.005)
    wall = time.perf_counter() - start
    statements = STATEMENTS[0]
    while any(rt.ref(Asker, a).snapshot()["done"] < rounds for a in ids):  # committed
        time.sleep(0.01)
    return askers * rounds / wall, statements / (askers * rounds)


def one_database(name: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    rt = Runtime(url, workers=args.workers, actors=[Asker, Echo])
    rt.install()
    results: dict[str, list[tuple[float, float]]] = {"request": [], "sends": []}
    with rt:
        for p in range(args.passes):
            for shape in ("request", "sends"):
                results[shape].append(run_pass(rt, shape, args.askers, args.rounds, f"{shape}{p}"))
    rt.close()
    cells = {
        shape: {
            "round_trips_per_s": round(statistics.median(r[0] for r in rows), 1),
            "statements_per_round_trip": round(statistics.median(r[1] for r in rows), 2),
        }
        for shape, rows in results.items()
    }
    return {"database": name, "cells": cells}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--databases", default="sqlite,postgresql,mariadb")
    parser.add_argument("--askers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
    out = []
    with tempfile.TemporaryDirectory() as folder:
        for name in args.databases.split(","):
            with fresh_database(DEFAULT_URLS[name], Path(folder), f"{name}.db") as url:
                out.append(one_database(name, url, args))
    for row in out:
        sends = row["cells"]["sends"]
        print(f"== {row['database']}")
        for shape, cell in row["cells"].items():
            ratio = cell["round_trips_per_s"] / sends["round_trips_per_s"]
            print(
                f"  {shape:8} {cell['round_trips_per_s']:8.1f} round trips/s "
                f"({ratio:.2f} of two sends)  "
                f"{cell['statements_per_round_trip']:.1f} statements per round trip"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
