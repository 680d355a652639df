"""Running one message against one hydrated actor, outside any transaction.

:func:`execute` never touches the database. It turns the user's method call
into a :class:`TurnOutcome`: the state and result to commit, a rejection, a
deterministic failure (dead letter at once), or a retryable failure.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from ..codec import canonical_json
from ..definition import ActorDefinition
from ..errors import DETERMINISTIC, InvalidState, Rejected, UnknownOperation, error_document
from ..message import MessageInfo, decode_sender
from ..observability.events import log_fields
from ..reminders import CommittedReminder
from ..staging import Staged, is_callback, turn_scope
from ..store import MessageRow
from ..store.store import new_id
from ..tracebacks import format_traceback
from ..writes import StagedProjection

log = logging.getLogger("solid_objects.turn")

Kind = Literal["completed", "rejected", "dead", "retry", "cancelled"]


def _utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def message_info(message: MessageRow, attempt: int, now_ms: int) -> MessageInfo:
    """Describe the stored ``message`` to the operation running it (``current_message``);
    ``now_ms`` stands in for times a direct turn has not written yet.

    A direct turn runs before its row exists (the row is written with the commit), so
    its enqueued and due times are this process's clock at the call.
    """
    enqueued = message.created_at if message.created_at is not None else now_ms
    due = message.available_at if message.available_at > 0 else enqueued
    return MessageInfo(
        id=message.id,
        operation=message.operation,
        attempt=max(attempt, 1),
        enqueued_at=_utc(enqueued),
        due_at=_utc(due),
        idempotency_key=message.idempotency_key,
        sender=decode_sender(message.sender),
    )


@dataclass(slots=True)
class TurnOutcome:
    kind: Kind
    result: str | None = None
    #: New state JSON, or None when the state did not change.
    state: str | None = None
    error: str | None = None
    exception: BaseException | None = None
    #: The failure's formatted traceback (bounded, redacted), stored with the message.
    traceback: str | None = None
    #: Effects, reminders and messages to commit with the state (completed turns only).
    staged: Staged | None = None
    #: The committed state the turn ran against (set by the worker; the journal keeps it).
    ran_against: str | None = None


@dataclass(frozen=True, slots=True)
class Limits:
    result_bytes: int
    state_bytes: int


_loops = threading.local()
#: Results that are never awaitable: no need to ask ``inspect.isawaitable``.
_PLAIN = frozenset({int, str, float, bool, type(None), dict, list, tuple})


def run_coroutine(coro: Any) -> Any:
    """Run an ``async def`` operation on this worker thread's own event loop."""
    loop = getattr(_loops, "loop", None)
    if loop is None or loop.is_closed():
        loop = asyncio.new_event_loop()
        _loops.loop = loop
    return loop.run_until_complete(coro)


def failure(exc: BaseException, *, deterministic: bool) -> TurnOutcome:
    doc = canonical_json(error_document(exc))
    if isinstance(exc, Rejected):
        return TurnOutcome("rejected", error=doc, exception=exc)
    kind: Kind = "dead" if deterministic else "retry"
    return TurnOutcome(kind, error=doc, exception=exc, traceback=format_traceback(exc))


def execute(
    definition: ActorDefinition,
    instance: Any,
    committed_state: str | None,
    message: MessageRow,
    limits: Limits,
    action_names: tuple[str, ...] = (),
    attempt: int = 1,
    read_reminders: Callable[[], list[CommittedReminder]] | None = None,
) -> TurnOutcome:
    """Run ``message`` on ``instance`` and describe what to commit.

    ``instance`` may be mutated even when the outcome is a failure; the caller
    rebuilds it from ``committed_state`` in that case.
    """
    if message.status in ("cancelled", "replaced"):  # while queued: finished, never run
        return TurnOutcome("cancelled")
    operation = definition.operation(message.operation)
    if operation is None:
        return failure(
            UnknownOperation(
                f"{definition.actor_type} has no operation {message.operation!r} "
                "(it may have been renamed or removed since the message was sent)"
            ),
            deterministic=True,
        )
    staged = Staged(definition, new_id, action_names)
    staged.read_reminders = read_reminders
    staged.describe = functools.partial(message_info, message, attempt, int(time.time() * 1000))
    try:
        arguments = operation.decode_arguments(
            message.arguments, offer=is_callback(message.idempotency_key)
        )
        with turn_scope(staged):
            value = operation.function(instance, **arguments)
            if type(value) not in _PLAIN and inspect.isawaitable(value):
                value = run_coroutine(value)
        result = operation.encode_result(value, limit=limits.result_bytes)
        state = definition.dump_state(definition.capture_state(instance), limit=limits.state_bytes)
        definition.reload_into(instance, state)
    except Rejected as exc:
        return failure(exc, deterministic=True)
    except DETERMINISTIC as exc:
        return failure(exc, deterministic=True)
    except BaseException as exc:  # CancelledError, SystemExit...: never kill the worker
        log.warning(
            "turn failed: %s %s.%s: %r",
            message.actor_type,
            message.actor_id,
            message.operation,
            exc,
            exc_info=exc,
            extra={"solid_action": "turn_failed", **log_fields(message)},
        )
        return failure(exc, deterministic=False)
    if state == committed_state:
        changed = None
    else:
        changed = state
        if definition.observables is not None:
            staged.broadcast = definition.observables.changes(committed_state, state)
        if definition.projections is not None:
            try:
                values = definition.projections.row(instance)
            except InvalidState as exc:
                return failure(exc, deterministic=True)
            staged.projection = StagedProjection(definition.projections.spec, values)
    return TurnOutcome(
        "completed",
        result=result,
        state=changed,
        staged=staged if staged else None,
    )


def replay(
    definition: ActorDefinition,
    actor_id: str,
    state: str | None,
    state_version: int,
    operation_name: str,
    arguments: str,
) -> Any:
    """Run a recorded message again with today's code against the state it ran on, and
    return its result or raise what it raises. Nothing is committed: what it stages is
    dropped with the instance."""
    operation = definition.operation(operation_name)
    if operation is None:
        raise UnknownOperation(
            f"{definition.actor_type} has no operation {operation_name!r} (any more)"
        )
    instance = definition.instantiate(actor_id, definition.load_state(state, state_version))
    decoded = operation.decode_arguments(arguments)
    with turn_scope(Staged(definition, new_id, ())):
        value = operation.function(instance, **decoded)
        if inspect.isawaitable(value):
            value = run_coroutine(value)
    return value
