"""The application of the mailbox-order tests (``tests/test_send_order.py``).

Worker processes run it with::

    python -m solid_objects worker tests.apps.orderapp:runtime

``SOLID_TEST_DB`` and ``SOLID_TEST_OPTIONS`` are read as in ``tests.apps.procapp``.
One extra key of ``SOLID_TEST_OPTIONS`` is not a runtime option: ``kill_at`` names
a crash point (``solid_objects.faults``) at which the process sends itself SIGKILL
the first time it passes it, e.g. ``commit.committed``: right after a turn's
COMMIT, before anything else the worker would do after it.

``Source`` stages messages to ``Sink`` (same actor id); ``Sink.seen`` is the order
in which they were applied.
"""

from __future__ import annotations

import json
import os
import signal
from contextlib import ExitStack
from typing import Any

from solid_objects import Actor, Runtime, faults


class Sink(Actor):
    """Its state is the list of values applied, in mailbox order."""

    seen: list[int] = []

    def put(self, i: int) -> int:
        self.seen.append(i)
        return len(self.seen)


class Source(Actor):
    """Sends to the ``Sink`` of the same id: a batch from one turn, or one per turn."""

    turns: int = 0

    def stage(self, count: int, delay: float | None = None) -> int:
        """One turn stages ``count`` messages ``put(i=0..count-1)``, all with ``delay``."""
        for i in range(count):
            self.send_to(Sink, self.actor_id, delay=delay).put(i=i)
        return count

    def tick(self) -> int:
        """Each turn sends its own turn number (1, 2, ...)."""
        self.turns += 1
        self.send_to(Sink, self.actor_id).put(i=self.turns)
        return self.turns


_hooks = ExitStack()


def _kill_at(point: str) -> None:
    """SIGKILL this process the first time it passes ``point``."""

    def hook(name: str) -> None:
        if name == point:
            os.kill(os.getpid(), signal.SIGKILL)

    _hooks.enter_context(faults.inject(hook))


def build_runtime() -> Runtime:
    url = os.environ.get("SOLID_TEST_DB")
    if not url:
        raise RuntimeError("set SOLID_TEST_DB to the database URL of the test")
    options: dict[str, Any] = {
        "workers": 2,
        **json.loads(os.environ.get("SOLID_TEST_OPTIONS") or "{}"),
    }
    kill_at = options.pop("kill_at", None)
    if kill_at is not None:
        _kill_at(str(kill_at))
    runtime = Runtime(url, **options)
    runtime.register(Source)
    runtime.register(Sink)
    return runtime


def __getattr__(name: str) -> Any:
    # ``runtime`` is built on first access (PEP 562), from the environment of that moment.
    if name == "runtime":
        value = build_runtime()
        globals()["runtime"] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
