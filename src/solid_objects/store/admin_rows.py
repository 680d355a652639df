"""The rows the administration statements return, and how each is read.

The column lists (``ACTOR_COLS``...) and their readers (``read_actor``...) are one
place each, shared by every admin statement module (:mod:`.admin`, :mod:`.control`,
:mod:`.idle`), so a column's position is written down once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from .rows import Enqueued


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One audit record to write (``AdminStatements.write_audits``)."""

    audit_id: str
    principal: str
    action: str
    target_kind: str
    target_id: str
    actor_type: str | None
    actor_id: str | None
    detail: dict[str, Any] | None


@dataclass(slots=True)
class DeadLetterRow:
    id: str
    actor_pk: int
    actor_type: str
    actor_id: str
    seq: int | None
    operation: str
    arguments: str
    idempotency_key: str | None
    attempts: int
    error: str | None
    created_at: int
    completed_at: int | None
    resolution: str | None
    retry_message_id: str | None
    resolved_by: str | None
    resolved_at: int | None
    reason: str | None
    traceback: str | None = None


@dataclass(slots=True)
class ActorRow:
    pk: int
    actor_type: str
    actor_id: str
    state: str | None
    state_version: int
    next_seq: int
    done_seq: int
    attempt: int
    ready_at: int | None
    lease_owner: str | None
    lease_generation: int
    lease_expires_at: int | None
    paused: bool
    created_at: int
    updated_at: int


@dataclass(slots=True)
class MailboxRow:
    id: str
    seq: int | None
    operation: str
    arguments: str
    idempotency_key: str | None
    status: str
    attempts: int
    error: str | None
    available_at: int
    created_at: int
    traceback: str | None = None
    priority: int = 0
    coalesce_key: str | None = None
    replaced_by: str | None = None


@dataclass(slots=True)
class EffectAdminRow:
    id: str
    actor_pk: int
    actor_type: str
    actor_id: str
    source_message_id: str
    name: str
    arguments: str
    status: str
    attempts: int
    available_at: int
    claimed_by: str | None
    error: str | None
    created_at: int
    completed_at: int | None
    traceback: str | None = None


@dataclass(slots=True)
class ReminderAdminRow:
    operation: str
    key: str
    arguments: str
    due_at: int
    every_ms: int | None
    missed: str
    version: int
    paused: bool
    actor_pk: int
    actor_type: str
    actor_id: str


@dataclass(slots=True)
class TypeCounts:
    actor_type: str
    actors: int = 0
    queued: int = 0
    scheduled: int = 0
    retrying: int = 0
    paused: int = 0
    leases_held: int = 0
    leases_expired: int = 0
    dead_letters: int = 0
    effects_pending: int = 0
    effects_running: int = 0
    effects_dead: int = 0
    reminders: int = 0
    #: True when there are more actors of the type than ``actors`` (a capped count).
    actors_capped: bool = False


@dataclass(slots=True)
class AuditRow:
    id: str
    at: int
    principal: str
    action: str
    target_kind: str
    target_id: str
    actor_type: str | None
    actor_id: str | None
    detail: str | None


RetryKind = Literal["retried", "already_retried", "missing", "not_dead", "discarded", "actor_gone"]
DiscardKind = Literal["discarded", "already_discarded", "missing", "not_dead", "retried"]
EffectRetryKind = Literal["retried", "not_dead", "missing"]


@dataclass(slots=True)
class RetryOutcome:
    kind: RetryKind
    message_id: str
    retry_message_id: str | None = None
    status: str | None = None
    enqueued: Enqueued | None = None


@dataclass(slots=True)
class DiscardOutcome:
    kind: DiscardKind
    message_id: str
    retry_message_id: str | None = None
    status: str | None = None


@dataclass(slots=True)
class EffectRetryOutcome:
    kind: EffectRetryKind
    effect_id: str
    status: str | None = None


DEAD_COLS = (
    "m.id, m.actor_pk, m.actor_type, m.actor_id, m.seq, m.operation, m.arguments, "
    "m.idempotency_key, m.attempts, m.error, m.created_at, m.completed_at, "
    "r.resolution, r.retry_message_id, r.principal, r.resolved_at, r.reason, m.traceback"
)
ACTOR_COLS = (
    "pk, actor_type, actor_id, state, state_version, next_seq, done_seq, attempt, ready_at, "
    "lease_owner, lease_generation, lease_expires_at, paused, created_at, updated_at"
)
MAILBOX_COLS = (
    "id, seq, operation, arguments, idempotency_key, status, attempts, error, available_at, "
    "created_at, traceback, priority, coalesce_key, replaced_by"
)
EFFECT_COLS = (
    "id, actor_pk, actor_type, actor_id, source_message_id, name, arguments, status, attempts, "
    "available_at, claimed_by, error, created_at, completed_at, traceback"
)
REMINDER_COLS = (
    "operation, rkey, arguments, due_at, every_ms, missed, version, paused, actor_pk, "
    "actor_type, actor_id"
)
AUDIT_COLS = "id, at, principal, action, target_kind, target_id, actor_type, actor_id, detail"


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def read_reminder(r: Sequence[Any]) -> ReminderAdminRow:
    return ReminderAdminRow(
        r[0], r[1], r[2], int(r[3]), _int(r[4]), r[5], int(r[6]), bool(r[7]), int(r[8]), r[9], r[10]
    )


def read_dead_letter(r: Sequence[Any]) -> DeadLetterRow:
    return DeadLetterRow(
        id=r[0],
        actor_pk=int(r[1]),
        actor_type=r[2],
        actor_id=r[3],
        seq=_int(r[4]),
        operation=r[5],
        arguments=r[6],
        idempotency_key=r[7],
        attempts=int(r[8]),
        error=r[9],
        created_at=int(r[10]),
        completed_at=_int(r[11]),
        resolution=r[12],
        retry_message_id=r[13],
        resolved_by=r[14],
        resolved_at=_int(r[15]),
        reason=r[16],
        traceback=r[17],
    )


def read_actor(r: Sequence[Any]) -> ActorRow:
    return ActorRow(
        pk=int(r[0]),
        actor_type=r[1],
        actor_id=r[2],
        state=r[3],
        state_version=int(r[4]),
        next_seq=int(r[5]),
        done_seq=int(r[6]),
        attempt=int(r[7]),
        ready_at=_int(r[8]),
        lease_owner=r[9],
        lease_generation=int(r[10]),
        lease_expires_at=_int(r[11]),
        paused=bool(r[12]),
        created_at=int(r[13]),
        updated_at=int(r[14]),
    )


def read_mailbox(r: Sequence[Any]) -> MailboxRow:
    return MailboxRow(
        id=r[0],
        seq=_int(r[1]),
        operation=r[2],
        arguments=r[3],
        idempotency_key=r[4],
        status=r[5],
        attempts=int(r[6]),
        error=r[7],
        available_at=int(r[8]),
        created_at=int(r[9]),
        traceback=r[10],
        priority=int(r[11]),
        coalesce_key=r[12],
        replaced_by=r[13],
    )


def read_effect(r: Sequence[Any]) -> EffectAdminRow:
    return EffectAdminRow(
        id=r[0],
        actor_pk=int(r[1]),
        actor_type=r[2],
        actor_id=r[3],
        source_message_id=r[4],
        name=r[5],
        arguments=r[6],
        status=r[7],
        attempts=int(r[8]),
        available_at=int(r[9]),
        claimed_by=r[10],
        error=r[11],
        created_at=int(r[12]),
        completed_at=_int(r[13]),
        traceback=r[14],
    )


def read_audit(r: Sequence[Any]) -> AuditRow:
    return AuditRow(
        id=r[0],
        at=int(r[1]),
        principal=r[2],
        action=r[3],
        target_kind=r[4],
        target_id=r[5],
        actor_type=r[6],
        actor_id=r[7],
        detail=r[8],
    )
