"""The application of the enqueue-batching topology test (``tests/test_enqueue_batching.py``).

Worker processes run it with::

    python -m solid_objects worker tests.apps.batchapp:runtime

``runtime`` is built from ``SOLID_TEST_DB`` and ``SOLID_TEST_OPTIONS`` (a JSON object
of ``Runtime`` options) the first time it is read, so the test process can import
the actor class without a database.
"""

from __future__ import annotations

import json
import os
from typing import Any

from solid_objects import Actor, Runtime


class BatchTopologyLog(Actor):
    """Its state is every item applied, in order: a repeated, lost or reordered turn shows."""

    items: list[int] = []

    def add(self, item: int) -> int:
        self.items = [*self.items, item]
        return len(self.items)


def build_runtime(**overrides: Any) -> Runtime:
    """A runtime for ``SOLID_TEST_DB`` with ``SOLID_TEST_OPTIONS`` and ``overrides``."""
    url = os.environ.get("SOLID_TEST_DB")
    if not url:
        raise RuntimeError("set SOLID_TEST_DB to the database URL of the test")
    options = {"workers": 2, **json.loads(os.environ.get("SOLID_TEST_OPTIONS") or "{}")}
    options.update(overrides)
    runtime = Runtime(url, **options)
    runtime.register(BatchTopologyLog)
    return runtime


def __getattr__(name: str) -> Any:
    # ``runtime`` is built on first access (PEP 562), from the environment of that moment.
    if name == "runtime":
        value = build_runtime()
        globals()["runtime"] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
