"""What the administration API returns: frozen dataclasses, plain data for JSON."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from ..store.admin_activity import ActorMessageRow
from ..store.admin_rows import (
    AuditRow,
    DeadLetterRow,
    EffectAdminRow,
    MailboxRow,
    ReminderAdminRow,
    TypeCounts,
)

T = TypeVar("T")


def datetime_of(ms: int | None) -> datetime | None:
    """A stored epoch-milliseconds time as an aware UTC datetime (None stays None)."""
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC)


def iso_of(ms: int) -> str:
    """Epoch milliseconds as the ISO 8601 UTC text `to_jsonable` gives a datetime."""
    return (
        datetime.fromtimestamp(ms / 1000, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def stored_json(text: str | None) -> Any:
    """A stored JSON column as data; text that does not parse is shown as it is."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def to_jsonable(value: Any) -> Any:
    """Plain JSON data for any value this module returns (datetimes as ISO 8601 UTC)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, datetime):
        return value.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    return value


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing; pass ``next_cursor`` back to get the next (None: the end)."""

    items: list[T]
    next_cursor: str | None
    #: The database clock when the page was read (for "3 s ago").
    now: datetime | None = None
    #: Read from the replica (``replica_url``), at most this many ms behind the
    #: primary; None: read from the primary.
    replica_lag_ms: float | None = None


@dataclass(frozen=True)
class DeadLetter:
    """A message that failed for good, with its stored error and whether an operator
    retried or discarded it.
    """
    id: str
    actor_type: str
    actor_id: str
    operation: str
    arguments: Any
    attempts: int
    #: The stored error document: ``{"type": ..., "message": ...}``.
    error: Any
    seq: int | None
    idempotency_key: str | None
    created_at: datetime | None
    died_at: datetime | None
    #: None while open; ``retried`` or ``discarded`` once an operator handled it.
    resolution: str | None
    retry_message_id: str | None
    resolved_by: str | None
    resolved_at: datetime | None
    reason: str | None
    #: Where it failed: the last attempt's formatted traceback (bounded, redacted).
    traceback: str | None = None

    @classmethod
    def of(cls, row: DeadLetterRow) -> DeadLetter:
        """The view of a store row."""
        return cls(
            id=row.id,
            actor_type=row.actor_type,
            actor_id=row.actor_id,
            operation=row.operation,
            arguments=stored_json(row.arguments),
            attempts=row.attempts,
            error=stored_json(row.error),
            seq=row.seq,
            idempotency_key=row.idempotency_key,
            created_at=datetime_of(row.created_at),
            died_at=datetime_of(row.completed_at),
            resolution=row.resolution,
            retry_message_id=row.retry_message_id,
            resolved_by=row.resolved_by,
            resolved_at=datetime_of(row.resolved_at),
            reason=row.reason,
            traceback=row.traceback,
        )


@dataclass(frozen=True)
class LeaseInfo:
    """Who holds an actor's activation lease, and until when (database clock)."""
    #: The worker process holding the lease (``<pid>-<token>``).
    owner: str
    generation: int
    expires_at: datetime | None
    expired: bool


@dataclass(frozen=True)
class ActorSummary:
    """One actor in a listing: its mailbox length, retry state, pause and lease."""
    actor_type: str
    actor_id: str
    #: Messages in the mailbox, the one running (if any) included.
    queued: int
    #: How many times the head message has been started (0: nothing started).
    attempt: int
    #: When a failing head message is retried (None: not backing off).
    retry_at: datetime | None
    paused: bool
    lease: LeaseInfo | None
    updated_at: datetime | None


@dataclass(frozen=True)
class MailboxMessage:
    """A message in an actor's mailbox (queued, running, or scheduled for later)."""
    id: str
    seq: int | None
    operation: str
    arguments: Any
    status: str
    #: Failed attempts recorded so far (the head's current attempt is on the actor).
    attempts: int
    #: The last error of a message being retried.
    error: Any
    idempotency_key: str | None
    #: For a delayed (``scheduled``) message, when it enters the mailbox.
    available_at: datetime | None
    created_at: datetime | None
    #: The last failed attempt's formatted traceback (bounded, redacted).
    traceback: str | None = None
    #: 0 (plain) to 9: the claim rank it gives its actor as the head (next to run).
    priority: int = 0
    #: Its coalesce key, and for a ``replaced`` one the message that replaced it.
    coalesce_key: str | None = None
    replaced_by: str | None = None

    @classmethod
    def of(cls, row: MailboxRow) -> MailboxMessage:
        """The view of a store row."""
        return cls(
            id=row.id,
            seq=row.seq,
            operation=row.operation,
            arguments=stored_json(row.arguments),
            status=row.status,
            attempts=row.attempts,
            error=stored_json(row.error),
            idempotency_key=row.idempotency_key,
            available_at=datetime_of(row.available_at),
            created_at=datetime_of(row.created_at),
            traceback=row.traceback,
            priority=row.priority,
            coalesce_key=row.coalesce_key,
            replaced_by=row.replaced_by,
        )


@dataclass(frozen=True)
class EffectInfo:
    """A staged effect: its id (``ctx.id``), status, attempts, claim and last error."""
    id: str
    name: str
    actor_type: str
    actor_id: str
    #: pending | running | done | dead
    status: str
    attempts: int
    arguments: Any
    error: Any
    source_message_id: str
    claimed_by: str | None
    #: pending: when it may run; running: when the runner's claim expires.
    available_at: datetime | None
    created_at: datetime | None
    completed_at: datetime | None
    #: The last failed attempt's formatted traceback (bounded, redacted).
    traceback: str | None = None

    @classmethod
    def of(cls, row: EffectAdminRow) -> EffectInfo:
        """The view of a store row."""
        return cls(
            id=row.id,
            name=row.name,
            actor_type=row.actor_type,
            actor_id=row.actor_id,
            status=row.status,
            attempts=row.attempts,
            arguments=stored_json(row.arguments),
            error=stored_json(row.error),
            source_message_id=row.source_message_id,
            claimed_by=row.claimed_by,
            available_at=datetime_of(row.available_at),
            created_at=datetime_of(row.created_at),
            completed_at=datetime_of(row.completed_at),
            traceback=row.traceback,
        )


@dataclass(frozen=True)
class ReminderInfo:
    """A reminder of an actor: when it fires next, its recurrence and whether it is paused."""
    operation: str
    key: str
    arguments: Any
    due_at: datetime | None
    every_seconds: float | None
    missed: str
    version: int
    #: Paused by an operator: it keeps its schedule but does not fire.
    paused: bool
    actor_type: str
    actor_id: str

    @classmethod
    def of(cls, row: ReminderAdminRow) -> ReminderInfo:
        """The view of a store row."""
        return cls(
            operation=row.operation,
            key=row.key,
            arguments=stored_json(row.arguments),
            due_at=datetime_of(row.due_at),
            every_seconds=None if row.every_ms is None else row.every_ms / 1000,
            missed=row.missed,
            version=row.version,
            paused=row.paused,
            actor_type=row.actor_type,
            actor_id=row.actor_id,
        )


@dataclass(frozen=True)
class ActorDetail:
    """One actor in full (``inspect``): committed state, mailbox, lease, effects, reminders."""
    actor_type: str
    actor_id: str
    #: The incarnation (``pk``): a destroyed and re-created actor gets a new one.
    incarnation: int
    #: The committed state, migrated to the class's ``state_version`` as ``snapshot()``
    #: shows it (None: nothing committed yet); see ``state_migrated``.
    state: Any
    #: The version the stored state was written with.
    state_version: int
    created_at: datetime | None
    updated_at: datetime | None
    #: The last message that finished; the mailbox holds ``done_seq + 1 .. next_seq - 1``.
    done_seq: int
    next_seq: int
    attempt: int
    retry_at: datetime | None
    paused: bool
    lease: LeaseInfo | None
    #: Messages in the mailbox (total), and the first of them, head first.
    queued_total: int
    queued: list[MailboxMessage]
    #: Delayed messages that have not entered the mailbox yet.
    scheduled: list[MailboxMessage]
    #: Effects not done: pending, running or dead.
    effects: list[EffectInfo]
    reminders: list[ReminderInfo]
    #: Dead letters of this actor nobody has retried or discarded yet.
    open_dead_letters: int
    #: The database clock when this was read.
    now: datetime | None
    #: False when ``state`` is shown as stored, not migrated: the actor type is not
    #: registered in this process, or its migration fails (``snapshot()`` would raise).
    state_migrated: bool = True
    #: What no live process's code can run of its head message (``Cart.checkout``,
    #: ``state version 2 of Cart``): it waits for a process that can (rolling deploys).
    waiting_for: str | None = None


@dataclass(frozen=True)
class TypeStatus:
    """Counts for one actor type (or the total): actors, queued, retrying, dead letters, effects."""
    actor_type: str
    actors: int
    queued: int
    scheduled: int
    #: Actors whose head message failed and waits for its retry.
    retrying: int
    paused: int
    leases_held: int
    #: Leases whose owner stopped renewing them (a crashed or stopped process).
    leases_expired: int
    dead_letters: int
    effects_pending: int
    effects_running: int
    effects_dead: int
    reminders: int
    #: True when ``status(actors_up_to=N)`` stopped counting: there are more than
    #: ``actors`` (N) actors of the type.
    actors_capped: bool = False

    @classmethod
    def of(cls, counts: TypeCounts) -> TypeStatus:
        """The view of the store's counts."""
        return cls(**{f.name: getattr(counts, f.name) for f in dataclasses.fields(cls)})


@dataclass(frozen=True)
class Status:
    """``admin.status()``: counts per actor type and in total, at the database's clock."""
    now: datetime | None
    types: list[TypeStatus]
    total: TypeStatus
    #: Counted on the replica, at most this many ms behind; None: on the primary.
    replica_lag_ms: float | None = None


@dataclass(frozen=True)
class RetriedDeadLetter:
    """The outcome of retrying a dead letter: the new message at the mailbox's tail."""
    message_id: str
    #: The new message, at the tail of the actor's mailbox.
    retry_message_id: str
    #: True when an earlier retry had already sent it: nothing new was enqueued.
    already: bool


@dataclass(frozen=True)
class DiscardedDeadLetter:
    """The outcome of discarding a dead letter."""
    message_id: str
    already: bool


@dataclass(frozen=True)
class RetriedEffect:
    """The outcome of retrying a dead effect."""
    effect_id: str
    #: The effect's status now.
    status: str
    #: True when it was not dead (already retried, running, or pending): nothing changed.
    already: bool


@dataclass(frozen=True)
class AuditEntry:
    """One row of the audit log: who changed what, when, through the administration API."""
    id: str
    at: datetime | None
    principal: str
    action: str
    target_kind: str
    target_id: str
    actor_type: str | None
    actor_id: str | None
    detail: Any

    @classmethod
    def of(cls, row: AuditRow) -> AuditEntry:
        """The view of a store row."""
        return cls(
            id=row.id,
            at=datetime_of(row.at),
            principal=row.principal,
            action=row.action,
            target_kind=row.target_kind,
            target_id=row.target_id,
            actor_type=row.actor_type,
            actor_id=row.actor_id,
            detail=stored_json(row.detail),
        )


@dataclass(frozen=True)
class RetryingMessage:
    """An actor whose head message failed and waits for its next attempt."""

    actor_type: str
    actor_id: str
    #: The attempt the head message is on (failed ones so far, plus the next).
    attempt: int
    #: When the next attempt may start (database clock).
    next_attempt_at: datetime | None
    #: The head message, with its last error and traceback.
    message: MailboxMessage


@dataclass(frozen=True)
class MessageCancellation:
    """The outcome of cancelling a message: cancelled, or why it was not."""

    message_id: str
    cancelled: bool
    #: The message's status now (``cancelled`` when it was cancelled).
    status: str
    #: Why it was not: ``finished`` (its status says how) or ``held`` (a worker holds
    #: its actor's lease and may be running it: pause the actor first). None when
    #: it was cancelled.
    refused: str | None


@dataclass(frozen=True)
class ActorPause:
    """The outcome of pausing or resuming an actor."""
    actor_type: str
    actor_id: str
    paused: bool
    #: True when it already was in that state: nothing changed.
    already: bool


@dataclass(frozen=True)
class ReminderChange:
    """The outcome of steering a reminder (pause, resume, cancel, run now)."""
    actor_type: str
    actor_id: str
    operation: str
    key: str
    #: pause | resume | cancel | run_now
    change: str
    #: True when it already was in that state: nothing changed.
    already: bool


@dataclass(frozen=True)
class ProcessInfo:
    """A process of the registry: what it runs, its heartbeat and its state."""
    #: The lease owner its leases and effect claims carry (``<pid>-<token>``).
    owner: str
    host: str
    pid: int
    version: str
    actor_types: list[str]
    #: live | draining (``stop()`` finishes its turns, takes no new work) | stale (no
    #: heartbeat before ``expires_at``) | stopped
    state: str
    #: Why a stopped process stopped: drained (a clean stop) | stale (found with no
    #: heartbeat) | gone (a peer proved its session ended, or its pid) | released (by
    #: an operator, or the reason the operator gave)
    stop_reason: str | None
    #: Leases it holds now (live and stale processes).
    leases: int
    started_at: datetime | None
    heartbeat_at: datetime | None
    expires_at: datetime | None
    stopped_at: datetime | None
    #: The effect names it runs handlers for (an effect none handles dies after
    #: ``unhandled_effect_timeout``).
    effect_names: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RecoveredProcess:
    """The outcome of recovering a dead process: the leases and claims it released."""
    owner: str
    leases_released: int
    claims_released: int
    #: True when it had already stopped or been recovered: nothing changed.
    already: bool


@dataclass(frozen=True)
class PruneReport:
    """What ``prune`` deleted (or, in a dry run, would delete), per kind of row."""
    #: Rows finished before this were candidates.
    cutoff: datetime | None
    dry_run: bool
    #: Rows per kind: counted (dry run) or deleted.
    rows: dict[str, int]
    #: Actor types whose messages had a cutoff of their own (``retention_by_type``).
    cutoffs: dict[str, datetime | None] = field(default_factory=dict)


@dataclass(frozen=True)
class ExpiryReport:
    """What ``expire_actors`` deleted (or, in a dry run, would delete), per actor type."""

    #: The database clock when it ran.
    now: datetime | None
    dry_run: bool
    #: Actors per type: counted (dry run) or deleted.
    actors: dict[str, int]
    #: Per type, actors untouched since before this were candidates (``now - state_ttl``).
    cutoffs: dict[str, datetime | None]


@dataclass(frozen=True)
class Orphans:
    """Rows that point at an actor incarnation that no longer exists."""

    #: Queued or scheduled messages whose actor row is gone.
    messages: int
    reminders: int
    #: Pending or running effects (they still run; listed for awareness).
    effects: int


@dataclass(frozen=True)
class ActorMessage:
    """A message of an actor's history (``actor_messages``): queued, running or finished."""

    id: str
    seq: int | None
    operation: str
    arguments: Any
    #: queued | running | completed | rejected | dead | destroyed
    status: str
    attempts: int
    error: Any
    created_at: datetime | None
    completed_at: datetime | None
    #: The last failed attempt's formatted traceback (bounded, redacted).
    traceback: str | None = None

    @classmethod
    def of(cls, row: ActorMessageRow) -> ActorMessage:
        """The view of a store row."""
        return cls(
            id=row.id,
            seq=row.seq,
            operation=row.operation,
            arguments=stored_json(row.arguments),
            status=row.status,
            attempts=row.attempts,
            error=stored_json(row.error),
            created_at=datetime_of(row.created_at),
            completed_at=datetime_of(row.completed_at),
            traceback=row.traceback,
        )


@dataclass(frozen=True)
class ActivityBucket:
    """Messages that finished in ``[start, start + bucket_seconds)``."""

    start: datetime | None
    completed: int
    #: Answered with ``Rejected`` (a business refusal, not a failure).
    rejected: int
    dead: int
    #: Finished (any outcome) after more than one attempt.
    retried: int
    #: Exact, over every completed message of the bucket (None: none completed).
    latency_mean_ms: float | None
    latency_max_ms: int | None
    #: From the bounded sample (see ``Activity.latency_sampled``); None: not in it.
    latency_p50_ms: float | None
    latency_p99_ms: float | None


@dataclass(frozen=True)
class Activity:
    """Finished messages over time (``activity``), oldest bucket first, every bucket listed.

    Counts only what retention kept: pruned messages no longer count.
    """

    now: datetime | None
    since: datetime | None
    bucket_seconds: int
    buckets: list[ActivityBucket]
    #: True when more messages completed than the percentile sample holds
    #: (``sample_size``): p50/p99 then describe the sample the database returned.
    latency_sampled: bool
    sample_size: int
    #: Counted on the replica, at most this many ms behind; None: on the primary.
    replica_lag_ms: float | None = None
