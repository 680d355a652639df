"""``solid-objects quickstart``: a self-verifying demo on a temporary SQLite file.

It does not just print: it asserts what the library promises and exits
non-zero if any check fails.

1. Many threads call one identity at once: every return value 1..N appears
   exactly once and the committed state is exactly N (one call at a time,
   nothing lost, nothing doubled).
2. Calls to different identities run concurrently: two identities' turns
   overlap in time.
3. A message sent with ``.send()`` is durable: it is enqueued, then waited on.
4. A rejected call changes nothing and is not retried.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .actor import Actor, query
from .errors import Rejected
from .runtime import Runtime

_spans: list[tuple[str, float, float]] = []
_spans_lock = threading.Lock()


class QuickstartCounter(Actor):
    """A counter whose ``slow_add`` sleeps, so turns of different ids can overlap."""

    actor_type = "QuickstartCounter"
    value: int = 0

    def add(self, n: int = 1) -> int:
        if n < 0:
            raise Rejected("negative", "n must be >= 0")
        self.value += n
        return self.value

    def slow_add(self, n: int = 1) -> int:
        started = time.perf_counter()
        time.sleep(0.05)  # releases the GIL: another identity's turn can run meanwhile
        self.value += n
        with _spans_lock:
            _spans.append((self.actor_id, started, time.perf_counter()))
        return self.value

    @query
    def current(self) -> int:
        return self.value


def _check(ok: bool, what: str, say: Callable[[str], None]) -> None:
    if not ok:
        raise AssertionError(what)
    say(f"  ok  {what}")


def run(say: Callable[[str], None] = print, *, calls: int = 200, threads: int = 16) -> None:
    """Run the demo; raise AssertionError on any broken promise."""
    folder = Path(tempfile.mkdtemp(prefix="solid-quickstart-"))
    url = f"sqlite:///{folder / 'quickstart.db'}"
    say(f"Solid Objects quickstart: database {url}")
    _spans.clear()
    try:
        runtime = Runtime(url, workers=4)
        runtime.install()
        with runtime:
            counter = runtime.ref(QuickstartCounter, "hot")
            started = time.perf_counter()
            with ThreadPoolExecutor(threads) as pool:
                results = list(pool.map(lambda _: counter.add(n=1), range(calls)))
            elapsed = time.perf_counter() - started
            say(
                f"{calls} concurrent calls from {threads} threads to one identity "
                f"in {elapsed:.2f}s ({calls / elapsed:.0f} calls/s)"
            )
            _check(
                sorted(results) == list(range(1, calls + 1)),
                f"every return value 1..{calls} came back exactly once",
                say,
            )
            _check(counter.current() == calls, f"the committed state is exactly {calls}", say)
            _check(counter.snapshot() == {"value": calls}, "snapshot() agrees", say)

            ids = [f"overlap-{i}" for i in range(4)]
            with ThreadPoolExecutor(len(ids)) as pool:
                list(pool.map(lambda i: runtime.ref(QuickstartCounter, i).slow_add(n=1), ids))
            overlapped = any(
                a[0] != b[0] and a[1] < b[2] and b[1] < a[2] for a in _spans for b in _spans
            )
            _check(overlapped, "turns of different identities overlapped in time", say)

            message = counter.add.send(n=5)
            _check(
                message.wait(timeout=10) == calls + 5,
                f"a sent message ({message.id}) was enqueued durably and ran",
                say,
            )

            try:
                counter.add(n=-1)
                rejected = False
            except Rejected as exc:
                rejected = exc.code == "negative"
            _check(
                rejected and counter.current() == calls + 5,
                "a rejected call raised Rejected and changed nothing",
                say,
            )
        say("All checks passed.")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        say(f"Removed {folder}")
