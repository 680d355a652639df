"""The first version of a shop's ``Cart``, for the rolling-deploy tests
(``tests/test_rolling_deploys.py``); ``deploy_v2`` is the code deployed after it.

Worker processes run ``python -m solid_objects worker tests.apps.deploy_v1:runtime``
with ``SOLID_TEST_DB`` and ``SOLID_TEST_OPTIONS`` set, as for ``procapp``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from solid_objects import Actor, Runtime


class Cart(Actor):
    actor_type = "Cart"
    items: list[str] = []

    def add(self, sku: str) -> int:
        self.items.append(sku)
        return len(self.items)


def build_runtime(cls: type[Actor]) -> Runtime:
    url = os.environ["SOLID_TEST_DB"]
    options = {"workers": 2, **json.loads(os.environ.get("SOLID_TEST_OPTIONS") or "{}")}
    return Runtime(url, actors=[cls], **options)


def __getattr__(name: str) -> Any:
    if name == "runtime":
        value = build_runtime(Cart)
        globals()["runtime"] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
