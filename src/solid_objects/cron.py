"""Cron schedules for reminders: ``self.schedule(cron="0 9 * * MON", timezone="Europe/Paris")``.

Parsing and evaluation are cronsim's (a small, well-kept parser with explicit DST
rules); the time zone comes from the system's zoneinfo database. Occurrences are
computed in the reminder's time zone, so "09:00 every Monday" stays 09:00 local
across a DST change; a wall-clock time skipped by spring-forward runs at the first
valid minute after it, one repeated by fall-back runs once (cronsim's rules, the
same as Vixie cron's).
"""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from .errors import InvalidArguments

#: Longest stored expression (``reminders.cron``) and zone name (``reminders.timezone``).
MAX_CRON_LENGTH = 255
MAX_TIMEZONE_LENGTH = 64


def zone(name: str) -> ZoneInfo:
    if not isinstance(name, str) or not name or len(name) > MAX_TIMEZONE_LENGTH:
        raise InvalidArguments(f"timezone must be an IANA zone name, got {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidArguments(f"unknown timezone {name!r}: {exc}") from None


def check(expression: str, timezone: str) -> None:
    """Refuse a bad expression or zone with InvalidArguments (at staging time)."""
    if not isinstance(expression, str) or len(expression) > MAX_CRON_LENGTH:
        raise InvalidArguments(f"cron must be a string of at most {MAX_CRON_LENGTH} characters")
    tz = zone(timezone)
    try:
        next(CronSim(expression, datetime.now(tz)))
    except (CronSimError, StopIteration) as exc:
        raise InvalidArguments(f"invalid cron expression {expression!r}: {exc}") from None


def next_after(expression: str, timezone: str, after_ms: int) -> int:
    """The first occurrence strictly after ``after_ms`` (epoch ms), in epoch ms."""
    start = datetime.fromtimestamp(after_ms / 1000, UTC).astimezone(zone(timezone))
    return int(next(CronSim(expression, start)).timestamp() * 1000)
