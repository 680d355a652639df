"""The article's onboarding email: every failure it walks through, as a test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from examples.onboarding import FOLLOW_UP_AFTER, Onboarding, Outbox, build
from solid_objects import EffectContext, Runtime

from .conftest import FAST, count_rows, db_now


@pytest.fixture
def app(db_url: str) -> Iterator[Callable[..., tuple[Runtime, Outbox]]]:
    made: list[Runtime] = []

    def make(**options: Any) -> tuple[Runtime, Outbox]:
        mailer = Outbox()
        runtime = build(db_url, mailer, **{**FAST, "workers": 0, **options})
        runtime.install()
        made.append(runtime)
        return runtime, mailer

    yield make
    for runtime in made:
        runtime.close()


def days_later(rt: Runtime, delta: timedelta) -> datetime:
    return datetime.fromtimestamp(db_now(rt) / 1000, UTC) + delta


def test_two_jobs_race_and_one_decision_is_made(app: Callable[..., tuple[Runtime, Outbox]]) -> None:
    rt, mailer = app()
    user = rt.ref(Onboarding, "race@example.com")
    first, second = user.send_email.send(), user.send_email.send()
    rt.testing.drain()
    assert first.result() == "sent" and second.result() == "sent"
    assert list(mailer.delivered.values()) == [("race@example.com", "welcome")]
    assert count_rows(rt, "effects") == 1


def test_follow_up_fires_once_after_three_days(app: Callable[..., tuple[Runtime, Outbox]]) -> None:
    rt, mailer = app()
    user = rt.ref(Onboarding, "quiet@example.com")
    user.send_email.send()
    rt.testing.drain()
    rt.testing.run_due_reminders(days_later(rt, FOLLOW_UP_AFTER - timedelta(minutes=1)))
    assert user.snapshot()["status"] == "sent"
    rt.testing.run_due_reminders(days_later(rt, FOLLOW_UP_AFTER + timedelta(minutes=1)))
    rt.testing.run_due_reminders(days_later(rt, FOLLOW_UP_AFTER * 3))
    assert user.snapshot()["status"] == "followed-up"
    assert sorted(t for _, t in mailer.delivered.values()) == ["follow-up", "welcome"]


def test_logging_in_first_means_no_follow_up(app: Callable[..., tuple[Runtime, Outbox]]) -> None:
    rt, mailer = app()
    user = rt.ref(Onboarding, "active@example.com")
    user.send_email.send()
    rt.testing.drain()
    user.logged_in.send()
    rt.testing.drain()
    rt.testing.run_due_reminders(days_later(rt, FOLLOW_UP_AFTER + timedelta(hours=1)))
    assert user.snapshot()["status"] == "done"
    assert [t for _, t in mailer.delivered.values()] == ["welcome"]


def test_follow_up_fires_once_after_the_runtime_was_down_across_its_due_time(
    app: Callable[..., tuple[Runtime, Outbox]],
) -> None:
    first, mailer = app()
    user = first.ref(Onboarding, "away@example.com")
    user.send_email.send()
    first.testing.drain()
    first.close()  # down for a week
    second, mailer = app()
    week = days_later(second, timedelta(days=7))
    for _ in range(3):
        second.testing.run_due_reminders(week)
    assert second.ref(Onboarding, "away@example.com").snapshot()["status"] == "followed-up"
    assert [t for _, t in mailer.delivered.values()] == ["follow-up"]


def test_killed_after_the_send_the_retry_carries_the_same_id(
    app: Callable[..., tuple[Runtime, Outbox]],
) -> None:
    """The handler sent, then died before recording it: the provider refuses the copy."""
    rt, mailer = app(effect_max_attempts=3)
    seen: list[str] = []
    crashed = False

    @rt.effect("deliver_email_after_crash")
    def deliver(ctx: EffectContext, email: str, template: str) -> None:
        nonlocal crashed
        seen.append(ctx.id)
        mailer.send(email, template, idempotency_key=ctx.id)
        if not crashed:
            crashed = True
            raise ConnectionResetError("worker killed right after the provider accepted")

    from solid_objects import Actor

    class Crashy(Actor):
        actor_type = "Crashy"
        sent: bool = False

        def go(self) -> None:
            self.sent = True
            self.emit("deliver_email_after_crash", email=self.actor_id, template="welcome")

    rt.ref(Crashy, "c@example.com").go.send()
    for _ in range(4):
        rt.testing.drain()
        rt.store.transact(lambda tx: tx.run("UPDATE solid_effects SET available_at = 0"))
    assert len(seen) == 2 and seen[0] == seen[1]
    assert mailer.attempts == 2
    assert list(mailer.delivered.values()) == [("c@example.com", "welcome")]
