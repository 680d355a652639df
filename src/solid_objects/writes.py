"""What a turn asks its commit to write besides its state: plain records.

The model stages them (``staging``: ``emit``, ``schedule``, ``send_to``, commit
actions) and the store writes them (``store.turns``, ``store.outbox``); both import
them from here, so the store never imports the model. :class:`TurnWrites` is what the
store reads of a turn's staging.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

#: Messages one turn may stage: the staging index is the low part of a message's
#: ``send_order`` (``store.outbox``), so it must not reach the next turn's.
MAX_MESSAGES_PER_TURN = 1 << 20


@dataclass(frozen=True, slots=True)
class StagedEffect:
    id: str
    name: str
    arguments: str
    on_success: str | None
    on_failure: str | None


@dataclass(frozen=True, slots=True)
class StagedReminder:
    operation: str
    key: str
    arguments: str
    #: Absolute due time (epoch ms), or None to use ``delay_ms`` from the commit's clock.
    at_ms: int | None
    delay_ms: int
    every_ms: int | None
    missed: Literal["latest", "all"]
    #: A cron schedule instead of at/delay/every: the first due time is computed from
    #: the commit's database clock.
    cron: str | None = None
    timezone: str | None = None


@dataclass(frozen=True, slots=True)
class StagedMessage:
    actor_type: str
    actor_id: str
    operation: str
    arguments: str
    idempotency_key: str | None
    delay_ms: int
    #: A request's reply route (:func:`reply_route`): the outcome of this message goes
    #: back to the sender's ``reply_to`` operation.
    reply: str | None = None
    #: 0 (plain) to 9: the claim rank it gives its actor as the head (next to run).
    priority: int = 0


def reply_key(request_id: str) -> str:
    """The idempotency key, in the asker's mailbox, of a request's one outcome.

    The timeout and the answer share it: the timeout waits as a delayed message under
    it, the answer takes that message over while it is still delayed (it then carries
    the answer, due now) and is dropped once it has entered the mailbox."""
    return f"reply:{request_id}"


def reply_route(request_id: str, reply_to: str, context: Any) -> str:
    """The stored route of a request (in its message's ``sender``)."""
    return json.dumps(
        {"request_id": request_id, "operation": reply_to, "context": context},
        sort_keys=True,
        separators=(",", ":"),
    )


def reply_arguments(
    route: dict[str, Any],
    *,
    status: str,
    target_type: str,
    target_id: str,
    operation: str,
    result: str | None = None,
    error: str | None = None,
) -> str:
    """The arguments of the reply message: ``{"reply": <Reply as JSON>}``."""
    reply = {
        "request_id": route["request_id"],
        "status": status,
        "target_type": target_type,
        "target_id": target_id,
        "operation": operation,
        "result": None if result is None else json.loads(result),
        "error": None if error is None else json.loads(error),
        "context": route.get("context"),
    }
    return json.dumps({"reply": reply}, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class StagedAction:
    """A write to the application's own tables, run inside the turn's commit."""

    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class CancelledReminder:
    operation: str
    key: str


@dataclass(frozen=True, slots=True)
class ProjectionColumn:
    """One projection: its column name, kind (``int``, ``float``, ``str``, ``bool``,
    ``datetime``, ``decimal``) and whether it may be NULL."""

    name: str
    kind: str
    nullable: bool


@dataclass(frozen=True, slots=True)
class ProjectionSpec:
    """An actor type's projection table: ``table`` None means the default name
    (``{prefix}{type}_projection``); ``fingerprint`` changes with the definition, which
    makes the store compute every row again."""

    actor_type: str
    table: str | None
    columns: tuple[ProjectionColumn, ...]
    fingerprint: str


@dataclass(frozen=True, slots=True)
class StagedProjection:
    """The projection row of the actor whose turn commits: one value per column."""

    spec: ProjectionSpec
    values: tuple[object, ...]


class TurnWrites(Protocol):
    """What the store reads of one turn's staging (``staging.Staged`` is one)."""

    @property
    def effects(self) -> Sequence[StagedEffect]: ...

    @property
    def reminders(self) -> Sequence[StagedReminder | CancelledReminder]: ...

    #: Filled in by the store: what the commit did with each of ``reminders``.
    reminder_outcomes: list[str]

    @property
    def messages(self) -> Sequence[StagedMessage]: ...

    @property
    def broadcast(self) -> str | None: ...

    @property
    def projection(self) -> StagedProjection | None: ...

    @property
    def actions(self) -> Sequence[StagedAction]: ...


def nothing_but_projection(staged: TurnWrites | None) -> bool:
    """Whether a turn staged nothing, or nothing but its actor's projection row: such a
    turn commits in one statement where the database allows it (``store.turns``)."""
    if not staged:
        return True
    return (
        staged.projection is not None
        and not staged.effects
        and not staged.reminders
        and not staged.messages
        and not staged.broadcast
        and not staged.actions
    )
