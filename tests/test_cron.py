"""Cron reminders: ``self.schedule(cron=..., timezone=...)``, evaluated in the
zone (DST included), with the ``missed`` policy of ``every=``; bad input is
``InvalidArguments`` at staging time and writes nothing. On every database."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from solid_objects import Actor, MessageFailed, Runtime

from .conftest import count_rows, db_now

PARIS = ZoneInfo("Europe/Paris")


class Report(Actor):
    fired: int = 0

    def start(self, cron: str, timezone: str | None = None, missed: str = "latest") -> None:
        self.schedule(
            cron=cron,
            timezone=timezone,
            missed=missed,  # type: ignore[arg-type]
        ).weekly_report()

    def start_with(self, options: dict[str, Any]) -> None:
        self.schedule(**options).weekly_report()

    def weekly_report(self) -> None:
        self.fired += 1


def due_at(rt: Runtime) -> datetime:
    with rt.store.read() as tx:
        ms = tx.scalar("SELECT due_at FROM solid_reminders WHERE operation = 'weekly_report'")
    return datetime.fromtimestamp(int(ms) / 1000, UTC)


def paris(*args: int) -> datetime:
    return datetime(*args, tzinfo=PARIS)  # type: ignore[misc]


def test_a_daily_cron_stays_at_nine_paris_time_across_the_spring_change(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0)
    ref = rt.ref(Report, "r")
    ref.start.send(cron="0 9 * * *", timezone="Europe/Paris")
    rt.testing.drain()
    now = datetime.fromtimestamp(db_now(rt) / 1000, UTC)
    first = due_at(rt)
    assert first.astimezone(PARIS).hour == 9 and first.astimezone(PARIS).minute == 0
    assert now < first <= now + timedelta(days=1)
    # Down until the day before the change (CET, UTC+1): "latest" fires once.
    assert rt.testing.run_due_reminders(paris(2027, 3, 27, 9, 30)) == 1
    assert due_at(rt) == datetime(2027, 3, 28, 7, 0, tzinfo=UTC)  # 09:00 CEST (UTC+2)
    assert rt.testing.run_due_reminders(paris(2027, 3, 28, 8, 59)) == 0
    assert rt.testing.run_due_reminders(paris(2027, 3, 28, 9, 0)) == 1
    assert due_at(rt) == datetime(2027, 3, 29, 7, 0, tzinfo=UTC)
    assert ref.snapshot()["fired"] == 2


def test_missed_all_fires_every_missed_occurrence_in_order(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0)
    ref = rt.ref(Report, "r")
    ref.start.send(cron="0 9 * * MON", timezone="Europe/Paris", missed="all")
    rt.testing.drain()
    first = due_at(rt)
    assert first.astimezone(PARIS).weekday() == 0
    # Down for three weeks and an hour past the first Monday: four occurrences missed.
    assert rt.testing.run_due_reminders(first + timedelta(weeks=3, hours=1)) == 4
    assert due_at(rt).astimezone(PARIS) == (first + timedelta(weeks=4)).astimezone(PARIS)
    assert ref.snapshot()["fired"] == 4


def test_latest_collapses_missed_occurrences_into_one(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(workers=0)
    ref = rt.ref(Report, "r")
    ref.start.send(cron="0 9 * * MON", timezone="Europe/Paris")
    rt.testing.drain()
    first = due_at(rt)
    assert rt.testing.run_due_reminders(first + timedelta(weeks=3, hours=1)) == 1
    assert due_at(rt) == first + timedelta(weeks=4)  # no DST change in these weeks
    assert ref.snapshot()["fired"] == 1


def test_utc_is_the_default_zone(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(workers=0)
    rt.ref(Report, "r").start.send(cron="30 6 * * *")
    rt.testing.drain()
    first = due_at(rt)
    assert (first.hour, first.minute) == (6, 30)


@pytest.mark.parametrize(
    "options",
    [
        {"cron": "61 * * * *"},
        {"cron": "0 9 * *"},
        {"cron": "0 9 * * MON", "timezone": "Europe/Nowhere"},
        {"cron": "0 9 * * MON", "timezone": "../../etc/passwd"},
        {"cron": "0 9 * * MON", "every": 60},
        {"cron": "0 9 * * MON", "delay": 60},
        {"delay": 60, "timezone": "Europe/Paris"},
    ],
)
def test_a_bad_cron_or_zone_is_invalid_arguments_and_writes_nothing(
    make_runtime: Callable[..., Runtime], options: dict[str, Any]
) -> None:
    rt = make_runtime(workers=0, max_attempts=1)
    sent = rt.ref(Report, "r").start_with.send(options=options)
    rt.testing.drain()
    with pytest.raises(MessageFailed) as info:
        sent.result()
    assert info.value.error["type"] == "InvalidArguments"
    assert sent.status() == "dead"
    assert count_rows(rt, "reminders") == 0


def test_a_schema_7_database_upgrades_and_its_recurring_reminders_still_fire(
    make_runtime: Callable[..., Runtime],
) -> None:
    from solid_objects.store.schema import SCHEMA_VERSION

    rt = make_runtime(workers=0)
    ref = rt.ref(Report, "r")
    ref.start_with.send(options={"delay": 60, "every": 3600})
    rt.testing.drain()
    with rt.store.engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE solid_reminders DROP COLUMN cron")
        conn.exec_driver_sql("ALTER TABLE solid_reminders DROP COLUMN cron_tz")
        conn.exec_driver_sql("UPDATE solid_schema SET version = 7")
    upgraded = make_runtime(workers=0)
    with upgraded.store.read() as tx:
        assert tx.scalar("SELECT version FROM solid_schema") == SCHEMA_VERSION >= 8
    now = datetime.fromtimestamp(db_now(upgraded) / 1000, UTC)
    assert upgraded.testing.run_due_reminders(now + timedelta(minutes=2)) == 1
    assert upgraded.ref(Report, "r").snapshot()["fired"] == 1
