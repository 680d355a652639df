"""Soak: run the randomized fault workload of tests/test_stateful.py for a while.

    .venv/bin/python scripts/soak.py --minutes 30 --database sqlite
    .venv/bin/python scripts/soak.py --minutes 10 --database postgresql
    .venv/bin/python scripts/soak.py --minutes 10 --database mysql

Each round is one hypothesis run of the ``Interleavings`` state machine (random
sends, partial worker rounds, crashes at named points, stalls past the lease,
lease expiries, clock jumps) followed by recovery and the full contract check,
each example on a fresh database. Server URLs come from ``SOLID_TEST_POSTGRES_URL``
and ``SOLID_TEST_MYSQL_URL`` (default: the local servers of ``scripts/services-up``).
It prints the steps taken, the faults injected and the violations found, and
exits 1 if any violation was found (the falsifying sequence is printed).
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from tests.conftest import SERVER_VARIABLES
from tests.test_stateful import INJECTED, MACHINES, STEPS

LOCAL_SERVERS = {
    "postgresql": "postgresql+psycopg://postgres@127.0.0.1:5432/test",
    "mysql": "mysql+pymysql://root@127.0.0.1:3306/test",
}


def revision() -> str:
    """The commit soaked, and whether the library's source differed from it."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "src"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return "unknown revision"
    return f"{head}{' with uncommitted changes in src/' if dirty else ''}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--database", choices=sorted(MACHINES), default="sqlite")
    parser.add_argument("--examples-per-round", type=int, default=20)
    args = parser.parse_args()
    for name, variable in SERVER_VARIABLES.items():
        os.environ.setdefault(variable, LOCAL_SERVERS[name])
    logging.basicConfig(level=logging.ERROR)
    started = datetime.now(UTC)
    print(
        f"soak on {args.database} for {args.minutes} minutes from "
        f"{started:%Y-%m-%d %H:%M} UTC, {revision()}"
    )
    deadline = time.monotonic() + args.minutes * 60
    rounds = violations = 0
    while time.monotonic() < deadline:
        rounds += 1
        try:
            run_state_machine_as_test(
                MACHINES[args.database],
                settings=settings(
                    max_examples=args.examples_per_round,
                    stateful_step_count=40,
                    deadline=None,
                    database=None,
                    suppress_health_check=list(HealthCheck),
                ),
            )
        except Exception:
            violations += 1
            traceback.print_exc()
            break
        print(f"round {rounds}: steps so far {dict(STEPS)}", flush=True)
    crashes = sum(n for kind, n in INJECTED.items() if kind.startswith("crash"))
    print(
        f"soak on {args.database}: {rounds} rounds in "
        f"{(datetime.now(UTC) - started).total_seconds() / 60:.1f} minutes, "
        f"{sum(STEPS.values())} steps ({STEPS['send']} sends, {STEPS['run_some']} worker "
        f"rounds, {STEPS['fire_reminders']} day-long clock jumps), "
        f"{sum(INJECTED.values())} faults injected ({crashes} crashes at named points "
        f"from {STEPS['crash']} crash steps, {INJECTED['stall past the lease']} stalls past "
        f"the lease, {INJECTED['lease expiry']} lease expiries), {violations} violations"
    )
    print(f"faults by kind: {dict(sorted(INJECTED.items()))}")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
