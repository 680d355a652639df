"""An application whose operation and effect fail two calls deep, for the tests of
stored tracebacks (``tests/test_tracebacks.py``) and the CLI run against it:

    solid-objects dead-letters show tests.apps.failing_app:runtime MESSAGE_ID --json

``SOLID_FAILING_APP_DB`` is the database URL; ``runtime`` is built on first use.
"""

from __future__ import annotations

import os
from typing import Any

from solid_objects import Actor, EffectContext, Runtime
from solid_objects.admin import allow

#: Attempts of ``Acct.flaky`` so far, by actor id.
FLAKY: dict[str, int] = {}

#: In a URL the failing code holds: the stored traceback must not show the password.
DSN = "postgresql://ledger:hunter2-secret@db.internal/ledger"


def lookup(table: dict[str, int], key: str) -> int:
    return table[key]  # RAISING LINE


def balance_of(key: str, dsn: str) -> int:
    return lookup({}, key) if dsn else 0


class Acct(Actor):
    balance: int = 0

    def bump(self, key: str) -> int:
        self.balance += balance_of(key, DSN)
        return self.balance

    def leak(self, password: str) -> None:
        raise ValueError(f"cannot open {DSN} with password={password}")

    def flaky(self, failures: int) -> int:
        """Fails ``failures`` times (counted in this process), then succeeds."""
        FLAKY[self.actor_id] = FLAKY.get(self.actor_id, 0) + 1
        if FLAKY[self.actor_id] <= failures:
            balance_of("missing", DSN)
        return FLAKY[self.actor_id]

    def send_mail(self, to: str) -> None:
        self.emit("mail", to=to)


def mail(ctx: EffectContext, to: str) -> None:
    balance_of(to, DSN)


def raising_line() -> int:
    """The line number of ``# RAISING LINE`` in this file."""
    with open(__file__, encoding="utf-8") as f:
        return next(i for i, line in enumerate(f, 1) if line.rstrip().endswith("# RAISING LINE"))


def build_runtime(url: str | None = None, **options: Any) -> Runtime:
    runtime = Runtime(url or os.environ["SOLID_FAILING_APP_DB"], actors=[Acct], **options)
    runtime.effect("mail")(mail)
    runtime.admin.set_policy(allow({"cli:*": "*", "*": "*"}))
    return runtime


_runtime: Runtime | None = None


def __getattr__(name: str) -> Any:
    global _runtime
    if name == "runtime":
        if _runtime is None:
            _runtime = build_runtime(workers=0)
        return _runtime
    raise AttributeError(name)
