"""What an actor sees of its own reminders: ``self.reminders()``, ``self.reminder(...)``.

A turn reads its actor's committed reminders once, on first use, and applies what the
turn itself staged so far, in order: a ``schedule`` adds or replaces one, a
``cancel_schedule`` removes it. A one-shot reminder that fired is gone from the table,
so it is not listed. The due time of a reminder staged with ``delay=`` or ``cron=`` is
computed here from this process's clock; the commit computes it again from the
database's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from .cron import next_after
from .writes import CancelledReminder, StagedReminder


@dataclass(frozen=True)
class Reminder:
    """One of the actor's reminders, as ``self.reminders()`` shows it."""

    operation: str
    #: The key given to ``schedule``; None for the unkeyed reminder of the operation.
    key: str | None
    #: When it fires next (aware, UTC).
    due_at: datetime
    #: The period of a recurring reminder (``every=``), else None.
    every: timedelta | None
    #: The cron expression and its time zone of a ``cron=`` reminder, else None.
    cron: str | None
    timezone: str | None
    arguments: dict[str, Any]


#: What a turn reads of its actor's committed reminders: (operation, key, due_at ms,
#: every ms, cron, timezone, arguments JSON).
CommittedReminder = tuple[str, str, int, int | None, str | None, str | None, str]


def _view(
    operation: str,
    key: str,
    due_ms: int,
    every_ms: int | None,
    cron: str | None,
    timezone: str | None,
    arguments: str,
) -> Reminder:
    return Reminder(
        operation=operation,
        key=key or None,
        due_at=datetime.fromtimestamp(due_ms / 1000, UTC),
        every=None if every_ms is None else timedelta(milliseconds=every_ms),
        cron=cron,
        timezone=timezone if cron is not None else None,
        arguments=json.loads(arguments),
    )


def current_reminders(
    committed: Sequence[CommittedReminder],
    staged: Sequence[StagedReminder | CancelledReminder],
    *,
    now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
) -> list[Reminder]:
    """The reminders after the turn's staged changes, soonest first."""
    current: dict[tuple[str, str], Reminder] = {
        (r[0], r[1]): _view(*r) for r in committed
    }
    for change in staged:
        slot = (change.operation, change.key)
        if isinstance(change, CancelledReminder):
            current.pop(slot, None)
            continue
        due = change.at_ms
        if change.cron is not None:
            due = next_after(change.cron, change.timezone or "UTC", now_ms())
        elif due is None:
            due = now_ms() + change.delay_ms
        current[slot] = _view(
            change.operation,
            change.key,
            due,
            change.every_ms,
            change.cron,
            change.timezone,
            change.arguments,
        )
    return sorted(current.values(), key=lambda r: (r.due_at, r.operation, r.key or ""))
