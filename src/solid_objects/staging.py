"""Work a turn stages to commit with its state: effects, reminders, messages.

Actor code calls ``self.emit``, ``self.schedule``, ``self.cancel_schedule`` and
``self.send_to``; each validates its input at once (a bad call fails the turn
deterministically) and appends to the current turn's :class:`Staged`. The
worker writes everything in the same fenced transaction as the state, or
nothing at all: an effect exists if and only if the turn that staged it
committed.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from .codec import MAX_DELAY_SECONDS, check_identifier, check_priority, encode_json
from .errors import (
    CallInsideTurn,
    InvalidArguments,
    NotInTurn,
    PayloadTooLarge,
    UnknownOperation,
)
from .reminders import CommittedReminder, Reminder, current_reminders
from .writes import (
    MAX_MESSAGES_PER_TURN,
    CancelledReminder,
    StagedAction,
    StagedEffect,
    StagedMessage,
    StagedProjection,
    StagedReminder,
    reply_arguments,
    reply_key,
    reply_route,
)

__all__ = [
    "MAX_MESSAGES_PER_TURN",
    "CallInsideTurn",
    "CancelledReminder",
    "NotInTurn",
    "StagedAction",
    "StagedEffect",
    "StagedMessage",
    "StagedReminder",
]

if TYPE_CHECKING:
    from .definition import ActorDefinition
    from .message import MessageInfo

#: Keyword arguments an ``on_success`` / ``on_failure`` operation may declare.
SUCCESS_ARGUMENTS = frozenset({"effect_id", "arguments", "result"})
FAILURE_ARGUMENTS = frozenset({"effect_id", "arguments", "error"})


def callback_key(effect_id: str, outcome: str) -> str:
    """The idempotency key of an effect's ``on_success``/``on_failure`` message."""
    return f"effect:{effect_id}:{outcome}"


def is_callback(idempotency_key: str | None) -> bool:
    """Whether a message is an effect's callback: its arguments are an *offer*.

    The runner offers every callback argument when it cannot see the operation's
    signature (its process does not register the actor type); the turn keeps only
    the ones the operation declares.
    """
    return idempotency_key is not None and idempotency_key.startswith("effect:")


_LIMIT = 1 << 20


@dataclass
class Staged:
    """Everything one turn asked to commit besides its state and result."""

    definition: ActorDefinition
    new_id: Callable[[], str]
    #: Commit actions registered in this process (a turn may stage only these).
    action_names: tuple[str, ...] = ()
    effects: list[StagedEffect] = field(default_factory=list)
    actions: list[StagedAction] = field(default_factory=list)
    #: Schedules and cancellations, in the order the turn made them.
    reminders: list[StagedReminder | CancelledReminder] = field(default_factory=list)
    #: What the commit did with each of ``reminders``, filled in by the store:
    #: ``scheduled`` (new), ``replaced`` (moved an existing one), ``unchanged`` (an
    #: existing one scheduled again exactly as it stood: not written), ``cancelled``,
    #: or ``absent`` (a cancellation of nothing). For the instrumentation.
    reminder_outcomes: list[str] = field(default_factory=list)
    messages: list[StagedMessage] = field(default_factory=list)
    #: The running message (``self.current_message``); set by the turn runner, or
    #: built by ``describe`` the first time the turn asks (most turns never do).
    message: MessageInfo | None = None
    describe: Callable[[], MessageInfo] | None = None
    #: What subscribers may see changed (``Observables.changes``), for the broadcast
    #: outbox; only ever set for an actor class that declares observables.
    broadcast: str | None = None
    #: The actor's projection row, set by the turn runner when the state changed; only
    #: ever set for an actor class that declares projections.
    projection: StagedProjection | None = None
    #: Reads the actor's committed reminders (set by the worker); read once, on the
    #: turn's first ``self.reminders()``.
    read_reminders: Callable[[], list[CommittedReminder]] | None = None
    committed_reminders: list[CommittedReminder] | None = None

    def __bool__(self) -> bool:
        return bool(
            self.effects
            or self.reminders
            or self.messages
            or self.actions
            or self.broadcast
            or self.projection
        )


_current = threading.local()


def current() -> Staged:
    staged: Staged | None = getattr(_current, "staged", None)
    if staged is None:
        raise NotInTurn(
            "emit(), schedule(), cancel_schedule() and send_to() can only be called while an "
            "operation runs (not in a query, not outside the runtime)"
        )
    return staged


def current_message() -> MessageInfo:
    """The message the current turn runs (``Actor.current_message``)."""
    staged: Staged | None = getattr(_current, "staged", None)
    message = None if staged is None else staged.message
    if message is None and staged is not None and staged.describe is not None:
        message = staged.message = staged.describe()
    if message is None:
        raise NotInTurn(
            "current_message is only available while an operation runs (not in a query, "
            "not in on_activate, not outside the runtime)"
        )
    return message


def reminders() -> list[Reminder]:
    """The actor's reminders as the turn leaves them so far (``Actor.reminders``)."""
    staged = current()
    if staged.committed_reminders is None:
        read = staged.read_reminders
        staged.committed_reminders = [] if read is None else read()
    return current_reminders(staged.committed_reminders, staged.reminders)


def inside_turn() -> bool:
    return getattr(_current, "staged", None) is not None


def refuse_inside_turn(what: str) -> None:
    """Actor code must not call actors directly: it could wait on itself forever."""
    if inside_turn():
        raise CallInsideTurn(
            f"{what} from inside an actor operation could deadlock (the actor would wait "
            "for a mailbox that cannot move): stage the message with "
            "self.send_to(OtherActor, actor_id).operation(...) instead; it is enqueued "
            "in the same commit as this turn"
        )


def refuse_destroy_inside_turn(what: str) -> None:
    """A destroy from actor code would commit on its own, apart from the turn's commit."""
    if inside_turn():
        raise CallInsideTurn(
            f"{what} from inside an actor operation would commit on its own, outside "
            "this turn's commit (it would stay done if the turn fails): destroy it from "
            "outside actor code, e.g. after the call that decided it returned"
        )


class turn_scope:
    """Context manager that makes ``staged`` the current turn's staging area."""

    def __init__(self, staged: Staged | None) -> None:
        self._staged = staged

    def __enter__(self) -> Staged | None:
        self._previous = getattr(_current, "staged", None)
        _current.staged = self._staged
        return self._staged

    def __exit__(self, *exc: object) -> None:
        _current.staged = self._previous


def _milliseconds(value: timedelta | float | int, what: str) -> int:
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise InvalidArguments(f"{what} must be a timedelta or a number of seconds")
    if seconds != seconds or seconds < 0:
        raise InvalidArguments(f"{what} must not be negative")
    if seconds > MAX_DELAY_SECONDS:
        raise InvalidArguments(f"{what} must be at most {MAX_DELAY_SECONDS} seconds")
    return int(seconds * 1000)


def _callback(definition: ActorDefinition, name: str | None, allowed: frozenset[str]) -> None:
    if name is None:
        return
    operation = definition.operation(name)
    if operation is None or operation.is_query:
        raise UnknownOperation(f"{definition.actor_type} has no operation {name!r} to call back")
    extra = set(operation.names) - allowed
    if extra:
        raise InvalidArguments(
            f"callback {name}() may only take {sorted(allowed)}; it also takes {sorted(extra)}"
        )


def emit(name: str, on_success: str | None, on_failure: str | None, arguments: Any) -> str:
    staged = current()
    check_identifier(name, what="effect name")
    _callback(staged.definition, on_success, SUCCESS_ARGUMENTS)
    _callback(staged.definition, on_failure, FAILURE_ARGUMENTS)
    text = encode_json(arguments, what=f"arguments of effect {name!r}", limit=_LIMIT)
    effect_id = staged.new_id()
    staged.effects.append(StagedEffect(effect_id, name, text, on_success, on_failure))
    return effect_id


def commit_action(name: str, arguments: Any) -> None:
    staged = current()
    if name not in staged.action_names:
        raise UnknownOperation(
            f"no commit action {name!r} is registered in this process "
            f"(register it with @runtime.commit_action({name!r}))"
        )
    text = encode_json(arguments, what=f"arguments of commit action {name!r}", limit=_LIMIT)
    staged.actions.append(StagedAction(name, text))


def schedule(
    operation: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    at: datetime | None,
    delay: timedelta | float | None,
    key: str | None,
    every: timedelta | float | None,
    missed: str,
    cron: str | None = None,
    timezone: str | None = None,
) -> None:
    staged = current()
    target = staged.definition.operation(operation)
    if target is None or target.is_query:
        raise UnknownOperation(f"{staged.definition.actor_type} has no operation {operation!r}")
    if cron is not None:
        if at is not None or delay is not None or every is not None:
            raise InvalidArguments("schedule(cron=...) takes no at=, delay= or every=")
        from . import cron as crontab

        timezone = "UTC" if timezone is None else timezone
        crontab.check(cron, timezone)
    elif timezone is not None:
        raise InvalidArguments("schedule(timezone=...) is only for cron= schedules")
    elif (at is None) == (delay is None):
        raise InvalidArguments("schedule() takes exactly one of at=, delay= and cron=")
    if missed not in ("latest", "all"):
        raise InvalidArguments("missed must be 'latest' or 'all'")
    at_ms = None
    if at is not None:
        if not isinstance(at, datetime):
            raise InvalidArguments("at= must be a datetime")
        at_ms = int((at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp() * 1000)
    every_ms = None if every is None else _milliseconds(every, "every")
    if every_ms is not None and every_ms < 1:
        raise InvalidArguments("every must be at least one millisecond")
    staged.reminders.append(
        StagedReminder(
            operation=operation,
            key="" if key is None else check_identifier(key, what="reminder key"),
            arguments=target.encode_arguments(args, kwargs, limit=_LIMIT),
            at_ms=at_ms,
            delay_ms=0 if delay is None else _milliseconds(delay, "delay"),
            every_ms=every_ms,
            missed=missed,  # type: ignore[arg-type]
            cron=cron,
            timezone=timezone,
        )
    )


def cancel_schedule(operation: str, key: str | None) -> None:
    staged = current()
    if staged.definition.operation(operation) is None:
        raise UnknownOperation(f"{staged.definition.actor_type} has no operation {operation!r}")
    key = "" if key is None else check_identifier(key, what="reminder key")
    staged.reminders.append(CancelledReminder(operation, key))


def send_to(
    target: ActorDefinition,
    actor_id: str,
    operation: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    delay: timedelta | float | None,
    idempotency_key: str | None,
    priority: int = 0,
) -> None:
    staged = current()
    check_priority(priority)
    check_identifier(actor_id)
    op = target.operation(operation)
    if op is None or op.is_query:
        raise UnknownOperation(f"{target.actor_type} has no operation {operation!r}")
    if len(staged.messages) >= MAX_MESSAGES_PER_TURN:
        raise PayloadTooLarge(
            f"a turn may send at most {MAX_MESSAGES_PER_TURN} messages; split the work "
            "over several turns (e.g. send the rest to this actor itself)"
        )
    staged.messages.append(
        StagedMessage(
            actor_type=target.actor_type,
            actor_id=actor_id,
            operation=operation,
            arguments=op.encode_arguments(args, kwargs, limit=_LIMIT),
            idempotency_key=None
            if idempotency_key is None
            else check_identifier(idempotency_key, what="idempotency key"),
            delay_ms=0 if delay is None else _milliseconds(delay, "delay"),
            priority=priority,
        )
    )


def request(
    target: ActorDefinition,
    actor_id: str,
    operation: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    asker_id: str,
    reply_to: str,
    timeout: timedelta | float | None,
    context: Any,
) -> str:
    """Stage a message whose outcome comes back to ``reply_to``; return the request id.

    With a ``timeout``, a delayed ``timed_out`` reply to this actor is staged too, under
    the request's reply key (:func:`~solid_objects.writes.reply_key`): whichever of the
    answer and the timeout reaches the mailbox first is the one outcome delivered.
    """
    staged = current()
    check_identifier(actor_id)
    answer = staged.definition.operation(reply_to)
    if answer is None or answer.is_query:
        raise UnknownOperation(
            f"{staged.definition.actor_type} has no operation {reply_to!r} to reply to"
        )
    if "reply" not in answer.names or answer.names - {"reply"}:
        raise InvalidArguments(
            f"reply_to operation {reply_to}() must take exactly one argument, reply: Reply"
        )
    op = target.operation(operation)
    if op is None or op.is_query:
        raise UnknownOperation(f"{target.actor_type} has no operation {operation!r}")
    timeout_ms = None if timeout is None else _milliseconds(timeout, "timeout")
    if timeout_ms is not None and timeout_ms < 1:
        raise InvalidArguments("timeout must be positive (at least one millisecond)")
    context_text = encode_json(context, what="request context", limit=_LIMIT)
    arguments = op.encode_arguments(args, kwargs, limit=_LIMIT)
    if len(staged.messages) + 2 > MAX_MESSAGES_PER_TURN:
        raise PayloadTooLarge(f"a turn may send at most {MAX_MESSAGES_PER_TURN} messages")
    request_id = staged.new_id()
    route = reply_route(request_id, reply_to, _decoded(context_text))
    staged.messages.append(
        StagedMessage(
            actor_type=target.actor_type,
            actor_id=actor_id,
            operation=operation,
            arguments=arguments,
            idempotency_key=None,
            delay_ms=0,
            reply=route,
        )
    )
    if timeout_ms is not None:
        staged.messages.append(
            StagedMessage(
                actor_type=staged.definition.actor_type,
                actor_id=asker_id,
                operation=reply_to,
                arguments=reply_arguments(
                    {"request_id": request_id, "context": _decoded(context_text)},
                    status="timed_out",
                    target_type=target.actor_type,
                    target_id=actor_id,
                    operation=operation,
                    error=encode_json(
                        {"type": "RequestTimedOut", "message": f"no answer in {timeout_ms} ms"},
                        what="timeout",
                        limit=_LIMIT,
                    ),
                ),
                idempotency_key=reply_key(request_id),
                delay_ms=timeout_ms,
            )
        )
    return request_id


def _decoded(text: str) -> Any:
    return json.loads(text)
