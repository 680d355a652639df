"""An actor reads its own reminders: committed ones, with its turn's changes applied.

All run on SQLite, PostgreSQL and MariaDB.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from solid_objects import Actor, NotInTurn, Runtime, query

from .conftest import db_now


def listed(actor: Actor) -> list[tuple[str, str | None, Any]]:
    return [(r.operation, r.key, r.arguments) for r in actor.reminders()]


class Planner(Actor, auto_register=False):
    fired: int = 0

    def plan(self) -> list[Any]:
        seen = [listed(self)]
        self.schedule(delay=timedelta(hours=1), key="a").ping(note="a")
        self.schedule(delay=timedelta(hours=2)).ping(note="unkeyed")
        seen.append(listed(self))
        self.schedule(delay=timedelta(hours=3), key="a").ping(note="a moved")
        self.cancel_schedule(Planner.ping)
        seen.append(listed(self))
        return seen

    def ping(self, note: str) -> None:
        self.fired += 1

    def look(self) -> list[Any]:
        return listed(self)

    def daily(self) -> dict[str, Any]:
        self.schedule(cron="0 9 * * *", timezone="Europe/Paris", key="d").ping(note="daily")
        found = self.reminder("ping", key="d")
        assert found is not None
        return {
            "cron": found.cron,
            "timezone": found.timezone,
            "hour_utc": found.due_at.astimezone(UTC).hour,
            "missing": self.reminder(Planner.ping, key="nope"),
        }

    def drop_all(self) -> list[Any]:
        for reminder in self.reminders():
            self.cancel_schedule(reminder.operation, reminder.key)
        return listed(self)

    @query
    def peek(self) -> Any:
        return self.reminders()


def test_a_turn_reads_its_reminders_with_its_own_changes_applied(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0, actors=[Planner])
    planned = rt.ref(Planner, "p").plan.send()
    rt.testing.drain()
    assert planned.result() == [
        [],
        [["ping", "a", {"note": "a"}], ["ping", None, {"note": "unkeyed"}]],
        [["ping", "a", {"note": "a moved"}]],
    ]
    looked = rt.ref(Planner, "p").look.send()  # a later turn reads the committed rows
    rt.testing.drain()
    assert looked.result() == [["ping", "a", {"note": "a moved"}]]


def test_a_fired_one_shot_is_no_longer_listed_and_a_cron_one_shows_its_schedule(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0, actors=[Planner])
    ref = rt.ref(Planner, "p")
    ref.plan.send()
    daily = ref.daily.send()
    rt.testing.drain()
    assert daily.result() == {
        "cron": "0 9 * * *",
        "timezone": "Europe/Paris",
        "hour_utc": 8 if datetime.now(UTC).month in (11, 12, 1, 2, 3) else 7,
        "missing": None,
    }
    later = datetime.fromtimestamp(db_now(rt) / 1000, UTC) + timedelta(hours=4)
    rt.testing.run_due_reminders(later)  # the one-shot "a" fires; the cron one recurs
    looked = ref.look.send()
    rt.testing.drain()
    assert looked.result() == [["ping", "d", {"note": "daily"}]]
    assert ref.snapshot()["fired"] >= 1
    dropped = ref.drop_all.send()
    rt.testing.drain()
    assert dropped.result() == []
    with rt.store.read() as tx:
        assert tx.scalar("SELECT COUNT(*) FROM solid_reminders") == 0


def test_reading_reminders_outside_an_operation_is_refused(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0, actors=[Planner])
    rt.ref(Planner, "p").look.send()
    rt.testing.drain()
    with pytest.raises(NotInTurn):
        rt.ref(Planner, "p").peek()
