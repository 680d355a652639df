"""A program that ends without ``runtime.close()``: ``python -m tests.apps.exits MODE``.

It starts a runtime on ``SOLID_TEST_DB`` (a long lease, so only a release can
free the actor soon), calls ``Tally("t").add`` once so this process holds the
actor's lease, prints ``ready``, and then, by ``MODE``:

- ``return``: reads a line from stdin (so the caller can look at the lease
  first), then returns from ``main`` (the runtime was started with ``start()``);
- ``wait``: waits forever after ``start()``, until a signal ends the process;
- ``with``: waits forever inside ``with runtime:``, until a signal ends it.
"""

from __future__ import annotations

import sys
import threading

from tests.apps.procapp import Tally, build_runtime


def main(mode: str) -> int:
    runtime = build_runtime(workers=1, lease_duration=120.0, idle_timeout=600.0)
    if mode == "with":
        with runtime:
            runtime.ref(Tally, "t").add(n=1)
            print("ready", flush=True)
            threading.Event().wait()
    runtime.start()
    runtime.ref(Tally, "t").add(n=1)
    print("ready", flush=True)
    if mode == "wait":
        threading.Event().wait()
    sys.stdin.readline()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
