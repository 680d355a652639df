"""The application of the priority and coalescing tests across processes
(``tests/test_message_priority.py``, ``tests/test_message_coalescing.py``).

    python -m solid_objects worker tests.apps.queueing_app:runtime

``Job.work`` logs its start with the database's clock into the side table of
``tests.apps.turnlimit_app`` (``turn_log``), so a test reads the order turns started
in from the database's rows. ``Recompute.run`` sleeps ``ms`` and appends ``n`` to its
state: the numbers a coalescing test finds there are the arguments that ran.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from solid_objects import Actor, Runtime
from tests.apps.turnlimit_app import _log_engine, log_phase


class Job(Actor, auto_register=False):
    """A turn of ``ms`` milliseconds whose start is logged in the database."""

    def work(self, ms: int) -> str:
        log_phase(_log_engine(), self.actor_id, "start")
        time.sleep(ms / 1000)
        return self.actor_id


class Recompute(Actor, auto_register=False):
    """Each turn records the number it was sent; a replaced message never adds one."""

    ran: list[int] = []

    def run(self, n: int, ms: int = 0) -> int:
        time.sleep(ms / 1000)
        self.ran.append(n)
        return n


def __getattr__(name: str) -> Any:
    if name == "runtime":
        options = json.loads(os.environ.get("SOLID_TEST_OPTIONS", "{}"))
        built = Runtime(os.environ["SOLID_TEST_DB"], actors=[Job, Recompute], **options)
        globals()["runtime"] = built
        return built
    raise AttributeError(name)
