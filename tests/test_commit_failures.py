"""Commits that fail: names that cannot be stored, a commit the database always
refuses, and a turn that outlasts its lease.

A definition whose names do not fit their columns is refused when the class is
defined. A turn whose commit the database refuses (a trigger, a constraint) uses up
its attempts with backoff and becomes a dead letter; it never blocks or fails other
callers' work that shared its batch. A turn that keeps losing its lease backs off and
becomes a dead letter that says to raise ``lease_duration``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from solid_objects import Actor, EffectContext, Runtime
from solid_objects.actor import definition_of
from solid_objects.codec import MAX_ID_LENGTH, MAX_OPERATION_LENGTH, MAX_TYPE_LENGTH
from solid_objects.errors import InvalidActorDefinition
from solid_objects.store.schema import build_metadata

from .conftest import count_rows

LONG = "o" * MAX_OPERATION_LENGTH


# --- 12.10: names that cannot be stored are refused at definition -----------------------


def test_an_operation_name_longer_than_its_column_is_refused_when_the_class_is_defined() -> None:
    with pytest.raises(InvalidActorDefinition, match=r"141 characters.*at most 128"):
        type("TooLong", (Actor,), {"p" + "x" * 140: lambda self: None})
    fits = type("FitsExactly", (Actor,), {LONG: lambda self: None})
    assert LONG in definition_of(fits).operations


#: Every column that stores a name taken from a definition or a registration, with the
#: limit the library checks before anything is written.
IDENTIFIER_COLUMNS = {
    ("actors", "actor_type"): MAX_TYPE_LENGTH,
    ("actors", "actor_id"): MAX_ID_LENGTH,
    ("messages", "actor_type"): MAX_TYPE_LENGTH,
    ("messages", "actor_id"): MAX_ID_LENGTH,
    ("messages", "operation"): MAX_OPERATION_LENGTH,
    ("messages", "idempotency_key"): MAX_ID_LENGTH,
    ("effects", "actor_type"): MAX_TYPE_LENGTH,
    ("effects", "actor_id"): MAX_ID_LENGTH,
    ("effects", "name"): MAX_ID_LENGTH,
    ("effects", "on_success"): MAX_OPERATION_LENGTH,
    ("effects", "on_failure"): MAX_OPERATION_LENGTH,
    ("reminders", "operation"): MAX_OPERATION_LENGTH,
    ("reminders", "rkey"): MAX_ID_LENGTH,
    ("reminders", "actor_type"): MAX_TYPE_LENGTH,
    ("reminders", "actor_id"): MAX_ID_LENGTH,
}


def test_every_stored_identifier_column_is_as_wide_as_the_check_that_guards_it() -> None:
    md = build_metadata("solid_")
    for (table, column), limit in IDENTIFIER_COLUMNS.items():
        width = md.tables[f"solid_{table}"].c[column].type.length
        assert width == limit, (table, column, width, limit)


def _start(self: Any) -> None:
    getattr(self.schedule(delay=0), LONG)()
    self.emit("ping", on_success=LONG)
    getattr(self.send_to(Longest, "other"), LONG)()


def _longest(self: Any, effect_id: str = "") -> int:
    self.seen.append("effect" if effect_id else "call")
    return len(self.seen)


#: An actor whose operation name is as long as the column allows.
Longest: Any = type(
    "Longest",
    (Actor,),
    {"__annotations__": {"seen": list[str]}, "seen": [], "start": _start, LONG: _longest},
)


def test_the_longest_operation_name_that_is_accepted_is_stored_everywhere(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0)

    @rt.effect("ping")
    def ping(ctx: EffectContext) -> None:
        pass

    a = rt.ref(Longest, "a")
    a.start.send()
    getattr(a, LONG).send()
    rt.testing.drain()
    rt.testing.drain()
    assert sorted(a.snapshot()["seen"]) == ["call", "call", "effect"]
    assert rt.ref(Longest, "other").snapshot()["seen"] == ["call"]
    assert count_rows(rt, "messages", "status = 'completed'") == 5
