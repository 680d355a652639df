"""What a turn asks its commit to write besides its state: plain records.

The model stages them (``staging``: ``emit``, ``schedule``, ``send_to``, commit
actions) and the store writes them (``store.turns``, ``store.outbox``); both import
them from here, so the store never imports the model. :class:`TurnWrites` is what the
store reads of a turn's staging.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

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
