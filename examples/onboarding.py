"""The onboarding email from "A lease with a timeout is not a lock", in Python.

Deciding to send and recording that we decided are one commit; the follow-up
"in three days, unless they logged in first" is a reminder row that commits
with that same state. No lock key, no sent flag, no TTL, no heartbeat, no
sweeper. Run it: ``python -m examples.onboarding``.
"""

from __future__ import annotations

import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from solid_objects import Actor, EffectContext, Runtime

FOLLOW_UP_AFTER = timedelta(days=3)


class Onboarding(Actor):
    """One per email address (the actor id)."""

    status: str = "unsent"

    def send_email(self) -> str:
        # One transaction: the status, the staged email and the reminder commit together.
        if self.status != "unsent":
            return self.status
        self.status = "sent"
        self.emit("deliver_email", email=self.actor_id, template="welcome")
        self.schedule(delay=FOLLOW_UP_AFTER).follow_up()
        return self.status

    def follow_up(self) -> str:
        if self.status != "sent":  # logging in already moved it
            return self.status
        self.status = "followed-up"
        self.emit("deliver_email", email=self.actor_id, template="follow-up")
        return self.status

    def logged_in(self) -> str:
        self.status = "done"
        return self.status


class Outbox:
    """Stands in for the mail provider: it refuses a second copy with the same key."""

    def __init__(self) -> None:
        self.delivered: dict[str, tuple[str, str]] = {}
        self.attempts = 0

    def send(self, email: str, template: str, idempotency_key: str) -> None:
        self.attempts += 1
        self.delivered.setdefault(idempotency_key, (email, template))


def build(url: str, mailer: Outbox, **options: Any) -> Runtime:
    runtime = Runtime(url, **options)
    runtime.register(Onboarding)

    @runtime.effect("deliver_email")
    def deliver_email(ctx: EffectContext, email: str, template: str) -> None:
        # ctx.id is stable across retries: the receiver makes the send exactly once.
        mailer.send(email, template, idempotency_key=ctx.id)

    return runtime


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="solid-onboarding-") as folder:
        mailer = Outbox()
        runtime = build(f"sqlite:///{Path(folder) / 'onboarding.db'}", mailer, workers=0)
        try:
            delivered = _demo(runtime, mailer)
        finally:
            runtime.close()  # before the folder goes: the database files are closed
    sys.exit(0 if delivered == 3 else 1)


def _demo(runtime: Runtime, mailer: Outbox) -> int:
    runtime.install()
    alice, bob = runtime.ref(Onboarding, "alice@example.com"), runtime.ref(Onboarding, "bob@x.io")
    for ref in (alice, bob, alice):  # two jobs race for alice: one decision
        ref.send_email.send()
    runtime.testing.drain()
    bob.logged_in.send()
    runtime.testing.drain()
    later = datetime.now(UTC) + FOLLOW_UP_AFTER + timedelta(minutes=1)
    runtime.testing.run_due_reminders(later)
    for email, template in sorted(mailer.delivered.values()):
        print(f"{template:>10} -> {email}")
    print(f"alice: {alice.snapshot()['status']}, bob: {bob.snapshot()['status']}")
    return len(mailer.delivered)

if __name__ == "__main__":
    main()
