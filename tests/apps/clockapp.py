"""The application of the clock-skew tests (``tests/test_clock_skew.py``).

The actors of ``tests.apps.procapp`` plus ``Alarm``, which schedules reminders,
sends delayed messages and fails on purpose, so a worker whose clock is wrong
(``tests.apps.skewed``) can be caught using its own clock for a due time, a
retry backoff or a lease. The database URL and options come from the same
environment variables as ``procapp`` (``SOLID_TEST_DB``, ``SOLID_TEST_OPTIONS``).
"""

from __future__ import annotations

import os
import time
from typing import Any

from solid_objects import Actor, Runtime
from tests.apps import procapp


class Alarm(Actor):
    """``rung`` lists the labels of the reminders and delayed messages that arrived."""

    rung: list[str] = []

    def arm(self, delay: float, label: str) -> None:
        self.schedule(delay=delay, key=label).ring(label=label)

    def relay(self, delay: float, label: str) -> None:
        self.send_to(Alarm, self.actor_id, delay=delay).ring(label=label)

    def ring(self, label: str) -> int:
        self.rung.append(label)
        return len(self.rung)

    def flaky(self, attempts_file: str, failures: int) -> int:
        """Fail (retryably) ``failures`` times, then succeed; each attempt is one line
        of ``attempts_file``: the pid and this process's ``time.monotonic()``."""
        with open(attempts_file, "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()} {time.monotonic()}\n")
        with open(attempts_file, encoding="utf-8") as f:
            made = len(f.readlines())
        if made <= failures:
            raise ConnectionError(f"attempt {made} fails on purpose")
        return made


def build_runtime(**overrides: Any) -> Runtime:
    runtime = procapp.build_runtime(**overrides)
    runtime.register(Alarm)
    return runtime


def __getattr__(name: str) -> Any:
    if name == "runtime":
        value = build_runtime()
        globals()["runtime"] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
