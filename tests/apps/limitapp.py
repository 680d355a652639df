"""A worker process whose one effect is flow-controlled (``tests/test_effect_limits.py``).

    SOLID_TEST_DB=... SOLID_TEST_LIMITS='{"rate": [10, 1.0], "max_concurrent": 2,
    "hold": 0.2}' python -m solid_objects worker tests.apps.limitapp:runtime

``LimitedOutbox.queue(n)`` emits ``n`` ``limited_send`` effects; the handler takes
``hold`` seconds. Each process declares the limits of ``SOLID_TEST_LIMITS``.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from solid_objects import Actor, EffectContext, Rate, Runtime


class LimitedOutbox(Actor):
    """Emits a batch of rate-limited sends in one turn."""

    queued: int = 0

    def queue(self, n: int) -> int:
        for i in range(n):
            self.emit("limited_send", i=i)
        self.queued += n
        return self.queued


def build_runtime() -> Runtime:
    limits = json.loads(os.environ.get("SOLID_TEST_LIMITS") or "{}")
    options = {"workers": 1, "effect_workers": 4, "actors": [LimitedOutbox]}
    options.update(json.loads(os.environ.get("SOLID_TEST_OPTIONS") or "{}"))
    runtime = Runtime(os.environ["SOLID_TEST_DB"], **options)
    hold = float(limits.get("hold", 0.0))

    def limited_send(ctx: EffectContext, i: int) -> int:
        time.sleep(hold)
        return i

    rate = limits.get("rate")
    runtime.effect(
        "limited_send",
        rate=None if rate is None else Rate(int(rate[0]), per=float(rate[1])),
        max_concurrent=limits.get("max_concurrent"),
    )(limited_send)
    return runtime


def __getattr__(name: str) -> Any:
    # ``runtime`` is built on first access (PEP 562), from the environment of that moment.
    if name != "runtime":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = build_runtime()
    globals()["runtime"] = value
    return value
