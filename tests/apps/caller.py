"""A caller-only process: many threads call one ``Tally`` identity at once.

``python -m tests.apps.caller ACTOR_ID THREADS CALLS_PER_THREAD`` runs with
``workers=0`` against ``SOLID_TEST_DB`` (other processes run the turns), and
prints the list of every result it got as JSON on stdout. It exits 1 if any
call failed.
"""

from __future__ import annotations

import json
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor

from tests.apps.procapp import Tally, build_runtime


def main(argv: list[str]) -> int:
    actor_id, threads, calls = argv[0], int(argv[1]), int(argv[2])
    runtime = build_runtime(workers=0, call_timeout=60.0)
    try:
        tally = runtime.ref(Tally, actor_id)

        def work(_: int) -> list[int]:
            return [tally.add(n=1) for _ in range(calls)]

        with ThreadPoolExecutor(threads) as pool:
            results = [r for chunk in pool.map(work, range(threads)) for r in chunk]
    except Exception:
        traceback.print_exc()
        return 1
    finally:
        runtime.close()
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
