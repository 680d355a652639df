"""The application the operations tests (``tests/test_cli.py``) and docs run the CLI against.

    solid-objects status tests.apps.admin_app:runtime

``runtime`` is built from the environment the first time it is read, so a test
can import the actor class without a database:

- ``SOLID_ADMIN_APP_DB``: the database URL (required for ``runtime``);
- ``SOLID_ADMIN_APP_RATES``: a JSON file of exchange rates, ``{"EUR": 1, ...}``
  (default: only EUR). A deposit in a currency the file does not list fails
  with a retryable ``KeyError``: a poisoned message until an operator adds
  the rate;
- ``SOLID_ADMIN_APP_OUTAGE``: a path; while that file exists the ``receipt``
  effect handler fails (the mail server is down);
- ``SOLID_ADMIN_APP_OPTIONS``: a JSON object of extra ``Runtime`` options;
- ``SOLID_ADMIN_APP_POLICY``: ``all`` (default: ``cli:*`` may do everything),
  ``read`` (``cli:*`` may only read) or ``none`` (no policy: everything denied).
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from typing import Any

from solid_objects import Actor, EffectContext, Runtime
from solid_objects.admin import allow

#: Not a runtime: the CLI must refuse it clearly.
VERSION = "1.0"

#: Receipts the ``receipt`` handler delivered in this process (tests read it).
RECEIPTS: list[str] = []


def rates() -> dict[str, int]:
    path = os.environ.get("SOLID_ADMIN_APP_RATES")
    if not path or not os.path.exists(path):
        return {"EUR": 1}
    with open(path, encoding="utf-8") as f:
        loaded: dict[str, int] = json.load(f)
    return loaded


class Account(Actor):
    """A ledger in cents of EUR; ``entries`` shows the order deposits were applied in."""

    balance: int = 0
    entries: list[str] = []

    def deposit(self, amount: int, currency: str = "EUR") -> int:
        rate = rates()[currency]  # KeyError for an unknown currency: retried, then dead
        self.balance += amount * rate
        self.entries.append(f"{amount} {currency}")
        self.emit("receipt", account=self.actor_id, amount=amount, currency=currency)
        return self.balance

    def close(self) -> None:
        self.entries.append("closed")

    def subscribe(self) -> None:
        """Monthly statements: a recurring reminder for the reminders commands to act on."""
        month = timedelta(days=30)
        self.schedule(delay=month, every=month, key="monthly").statement()

    def statement(self) -> None:
        self.entries.append("statement")


def receipt(ctx: EffectContext, account: str, amount: int, currency: str) -> None:
    outage = os.environ.get("SOLID_ADMIN_APP_OUTAGE")
    if outage and os.path.exists(outage):
        raise ConnectionError("mail server unreachable")
    RECEIPTS.append(ctx.id)


def build_runtime(url: str | None = None, **options: Any) -> Runtime:
    url = url or os.environ["SOLID_ADMIN_APP_DB"]
    options = {**json.loads(os.environ.get("SOLID_ADMIN_APP_OPTIONS") or "{}"), **options}
    options.setdefault("max_attempts", 3)
    options.setdefault("retry_base_delay", 0.02)
    options.setdefault("retry_max_delay", 0.05)
    options.setdefault("effect_max_attempts", 2)
    runtime = Runtime(url, actors=[Account], **options)  # this app's type only, not the tests'
    runtime.effect("receipt")(receipt)
    policy = os.environ.get("SOLID_ADMIN_APP_POLICY", "all")
    if policy == "all":
        runtime.admin.set_policy(allow({"cli:*": "*"}))
    elif policy == "read":
        runtime.admin.set_policy(allow({"cli:*": "read"}))
    return runtime


_runtime: Runtime | None = None


def __getattr__(name: str) -> Any:
    global _runtime
    if name == "runtime":
        if _runtime is None:
            _runtime = build_runtime()
        return _runtime
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
