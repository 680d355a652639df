"""Soak: run the randomized fault workload of tests/test_stateful.py for a while.

    .venv/bin/python scripts/soak.py --minutes 30

Each round is one hypothesis run of the ``Interleavings`` state machine (random
sends, partial worker rounds, crashes at named points, stalls past the lease,
lease expiries, clock jumps) followed by recovery and the full contract check.
It prints the steps taken, the faults injected and the violations found, and
exits 1 if any violation was found (the falsifying sequence is printed).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from tests.test_stateful import STEPS, Interleavings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--examples-per-round", type=int, default=20)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    deadline = time.monotonic() + args.minutes * 60
    rounds = violations = 0
    while time.monotonic() < deadline:
        rounds += 1
        try:
            run_state_machine_as_test(
                Interleavings,
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
    faults = STEPS["crash"] + STEPS["stall_past_lease"] + STEPS["expire_leases"]
    print(
        f"soak: {rounds} rounds, {sum(STEPS.values())} steps "
        f"({STEPS['send']} sends), {faults} faults injected "
        f"({STEPS['crash']} crashes, {STEPS['stall_past_lease']} stalls, "
        f"{STEPS['expire_leases']} lease expiries), {violations} violations"
    )
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
