"""The second version of ``Cart`` (see ``deploy_v1``): a new operation, ``checkout``,
and state version 2, migrated from version 1 (``checkouts`` starts at 0)."""

from __future__ import annotations

from typing import Any

from solid_objects import Actor
from tests.apps.deploy_v1 import build_runtime


class Cart(Actor):
    actor_type = "Cart"
    state_version = 2
    migrations = {1: lambda state: {**state, "checkouts": 0}}
    items: list[str] = []
    checkouts: int = 0

    def add(self, sku: str) -> int:
        self.items.append(sku)
        return len(self.items)

    def checkout(self) -> int:
        self.checkouts += 1
        return self.checkouts


def __getattr__(name: str) -> Any:
    if name == "runtime":
        value = build_runtime(Cart)
        globals()["runtime"] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
