"""A worker process that handles effects and serves no actor type (the
unhandled-effect tests, ``tests/test_unhandled_effects.py``).

    SOLID_TEST_DB=... python -m solid_objects worker tests.apps.effectapp:runtime

It handles ``hold`` (waits while the ``gate`` file exists, at most a minute) and
``send_mail``. With ``effect_workers=1`` a held ``hold`` keeps ``send_mail`` pending
while this process, alive, says in the process registry that it handles it.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from solid_objects import EffectContext, Runtime

#: Longest ``hold`` waits on its gate, so a forgotten gate never hangs a worker forever.
GATE_LIMIT = 60.0


def hold(ctx: EffectContext, gate: str) -> None:
    deadline = time.monotonic() + GATE_LIMIT
    while os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)


def send_mail(ctx: EffectContext, to: str) -> str:
    return f"sent to {to}"


def __getattr__(name: str) -> Any:
    # ``runtime`` is built on first access (PEP 562), from the environment of that moment.
    if name != "runtime":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    options = {"workers": 1, "effect_workers": 1, "actors": []}
    options.update(json.loads(os.environ.get("SOLID_TEST_OPTIONS") or "{}"))
    value = Runtime(os.environ["SOLID_TEST_DB"], **options)
    value.effect("hold")(hold)
    value.effect("send_mail")(send_mail)
    globals()["runtime"] = value
    return value
