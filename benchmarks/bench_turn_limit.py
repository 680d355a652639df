#!/usr/bin/env python
"""What a type's turn limit (``max_active_turns``) costs: turns per second of a
backlog drained by one process with four worker threads.

Per database, the same class three ways: ``unlimited``; ``limit 4`` (a limit the four
threads never exceed, so the figure is the cost of the mechanism: a lease per turn,
a type lock and a count per claim, no cached activation); ``limit 1`` (the limit
binding). ``--actors`` identities get ``--messages`` sends each, then the clock runs
until all are answered; medians over ``--passes``. Examples::

    python benchmarks/bench_turn_limit.py --actors 40 --messages 5 --passes 3
    python benchmarks/bench_turn_limit.py --databases postgresql
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from solid_objects import Actor, Runtime  # noqa: E402
from solid_objects.pytest_plugin import fresh_database  # noqa: E402


class BenchUnlimitedTurn(Actor, auto_register=False):
    n: int = 0

    def bump(self) -> int:
        self.n += 1
        return self.n


class BenchLimit4Turn(BenchUnlimitedTurn, auto_register=False):
    max_active_turns = 4


class BenchLimit1Turn(BenchUnlimitedTurn, auto_register=False):
    max_active_turns = 1


CASES = {"unlimited": BenchUnlimitedTurn, "limit 4": BenchLimit4Turn, "limit 1": BenchLimit1Turn}
SERVERS = {
    "postgresql": "SOLID_TEST_POSTGRES_URL",
    "mysql": "SOLID_TEST_MYSQL_URL",
}


def drain(url: str, cls: type[Actor], actors: int, messages: int) -> float:
    """Turns per second: every send made first, then timed until all are answered."""
    caller = Runtime(url, actors=[cls], workers=0)
    caller.install()
    with caller:
        sent = [
            caller.ref(cls, f"b{i}").bump.send() for i in range(actors) for _ in range(messages)
        ]
        start = time.perf_counter()
        with Runtime(url, actors=[cls], workers=4, poll_interval=0.02):
            for s in sent:
                s.wait(timeout=300)
            return len(sent) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--actors", type=int, default=40)
    parser.add_argument("--messages", type=int, default=5)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--databases", default="sqlite,postgresql,mysql")
    args = parser.parse_args()
    print("| database | case | turns/s (median) |")
    print("|---|---|---|")
    for db in args.databases.split(","):
        server = None if db == "sqlite" else os.environ.get(SERVERS[db])
        if db != "sqlite" and server is None:
            continue
        for case, cls in CASES.items():
            rates = []
            for _ in range(args.passes):
                with tempfile.TemporaryDirectory() as folder:
                    with fresh_database(server, Path(folder), "bench.db") as url:
                        rates.append(drain(url, cls, args.actors, args.messages))
            print(f"| {db} | {case} | {statistics.median(rates):,.0f} |", flush=True)


if __name__ == "__main__":
    main()
