"""The typed form of staged messages and reminders: ``.call(Cls.operation, ...)``.

``self.send_to(Cls, id).call(Cls.op, ...)`` and ``self.schedule(...).call(Cls.op, ...)``
stage exactly what the attribute form stages, and are checked by mypy and pyright
alike (``tests/typing/check_refs.py``; the attribute form only by mypy with the
plugin, ``docs/typing.md``). At run time the method must be an operation of that
class: a same-named method of another class, or a query, fails the turn with
UnknownOperation (deterministic: one attempt, nothing staged).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from solid_objects import Actor, Runtime, query
from solid_objects.errors import MessageFailed

from .conftest import count_rows, db_now


class TypedStagingInbox(Actor):
    items: list[str] = []

    def take(self, item: str, copies: int = 1) -> None:
        self.items.extend([item] * copies)

    @query
    def size(self) -> int:
        return len(self.items)


class TypedStagingImpostor(Actor):
    """Has an operation named like the inbox's: only the class check tells them apart."""

    taken: int = 0

    def take(self, item: str, copies: int = 1) -> None:
        self.taken += copies


class TypedStagingSender(Actor):
    notes: list[str] = []

    def go(self) -> str:
        self.send_to(TypedStagingInbox, "in").call(TypedStagingInbox.take, "a", copies=2)
        self.schedule(delay=timedelta(hours=1), key="k").call(
            TypedStagingSender.remember, note="later"
        )
        return "staged"

    def remember(self, note: str) -> None:
        self.notes.append(note)

    def send_a_foreign_method(self) -> None:
        self.notes.append("must not commit")
        self.send_to(TypedStagingInbox, "in").call(TypedStagingImpostor.take, "x")

    def send_a_query(self) -> None:
        self.send_to(TypedStagingInbox, "in").call(TypedStagingInbox.size)

    def schedule_a_foreign_method(self) -> None:
        self.schedule(delay=60).call(TypedStagingImpostor.take, "x")


def _later(rt: Runtime) -> datetime:
    return datetime.fromtimestamp(db_now(rt) / 1000, UTC) + timedelta(hours=2)


def test_the_call_form_stages_the_message_and_the_reminder(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0)
    message = rt.ref(TypedStagingSender, "s").go.send()
    rt.testing.drain()
    assert message.result() == "staged"
    assert rt.ref(TypedStagingInbox, "in").snapshot()["items"] == ["a", "a"]
    assert rt.ref(TypedStagingSender, "s").snapshot()["notes"] == []
    assert rt.testing.run_due_reminders(_later(rt)) == 1
    rt.testing.drain()
    assert rt.ref(TypedStagingSender, "s").snapshot()["notes"] == ["later"]


@pytest.mark.parametrize(
    "operation", ["send_a_foreign_method", "send_a_query", "schedule_a_foreign_method"]
)
def test_a_method_that_is_not_the_targets_operation_fails_the_turn(
    make_runtime: Callable[..., Runtime], operation: str
) -> None:
    rt = make_runtime(workers=0)
    message = getattr(rt.ref(TypedStagingSender, "s"), operation).send()
    rt.testing.drain()
    with pytest.raises(MessageFailed) as info:
        message.result()
    assert info.value.error["type"] == "UnknownOperation"
    # Deterministic (one attempt) and nothing of the turn committed: no state, no send.
    assert count_rows(rt, "messages", "status = 'dead' AND attempts = 1") == 1
    assert rt.ref(TypedStagingSender, "s").snapshot()["notes"] == []
    assert rt.ref(TypedStagingInbox, "in").snapshot()["items"] == []
    assert rt.ref(TypedStagingImpostor, "in").snapshot()["taken"] == 0
