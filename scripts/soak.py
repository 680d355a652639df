"""Soak: run the randomized fault workload of tests/test_stateful.py for a while.

    .venv/bin/python scripts/soak.py --minutes 30 --database sqlite
    .venv/bin/python scripts/soak.py --minutes 10 --database postgresql
    .venv/bin/python scripts/soak.py --minutes 10 --database mysql

Each round is one hypothesis run of the ``Interleavings`` state machine (random
sends, partial worker rounds, crashes at named points, stalls past the lease,
lease expiries, clock jumps) followed by recovery and the full contract check,
each example on a fresh database. Server URLs come from ``SOLID_TEST_POSTGRES_URL``
and ``SOLID_TEST_MYSQL_URL`` (default: the local servers of ``scripts/services-up``).
It prints the steps taken, the faults injected and the violations found (a
failed contract check: ``AssertionError``) and errors (any other exception, e.g.
a database server restarted under the soak), each with its failing sequence, and
exits 1 if there was any. A failing round ends there and the soak goes on with a
new round; ``--stop`` stops at the first. Failing sequences are not shrunk unless
``--shrink`` is given (shrinking one can take hypothesis's full five minutes).
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import time
import traceback
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hypothesis import HealthCheck, Phase, settings
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
    if not head:
        return "not a git checkout"
    return f"{head}{' with uncommitted changes in src/' if dirty else ''}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--database", choices=sorted(MACHINES), default="sqlite")
    parser.add_argument("--examples-per-round", type=int, default=20)
    parser.add_argument("--stop", action="store_true", help="stop at the first failure")
    parser.add_argument("--shrink", action="store_true", help="shrink failing sequences")
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
    rounds = 0
    failures: Counter[str] = Counter()
    phases = [Phase.generate, Phase.shrink] if args.shrink else [Phase.generate]
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
                    phases=phases,
                    suppress_health_check=list(HealthCheck),
                ),
            )
        except Exception as exc:
            kind = "violation" if isinstance(exc, AssertionError) else "error"
            failures[kind] += 1
            print(f"round {rounds}: {kind} at {datetime.now(UTC):%H:%M:%S}", flush=True)
            traceback.print_exc()
            sys.stdout.flush()
            if args.stop:
                break
            if kind == "error":
                time.sleep(1)  # a database server restarting: do not burn rounds meanwhile
        print(f"round {rounds}: steps so far {dict(STEPS)}", flush=True)
    crashes = sum(n for kind, n in INJECTED.items() if kind.startswith("crash"))
    print(
        f"soak on {args.database}: {rounds} rounds in "
        f"{(datetime.now(UTC) - started).total_seconds() / 60:.1f} minutes, "
        f"{sum(STEPS.values())} steps ({STEPS['send']} sends, {STEPS['run_some']} worker "
        f"rounds, {STEPS['fire_reminders']} day-long clock jumps), "
        f"{sum(INJECTED.values())} faults injected ({crashes} crashes at named points "
        f"from {STEPS['crash']} crash steps, {INJECTED['stall past the lease']} stalls past "
        f"the lease, {INJECTED['lease expiry']} lease expiries), "
        f"{failures['violation']} violations, {failures['error']} errors"
    )
    print(f"faults by kind: {dict(sorted(INJECTED.items()))}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
