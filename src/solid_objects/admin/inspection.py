"""The administration API's reads: status and activity counts, actors, their messages,
retrying heads and the audit log.

A part of :class:`~solid_objects.admin.Administration`; nothing here writes.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ..codec import check_identifier
from ..errors import InvalidArguments, NotFound
from ..store.admin_activity import LATENCY_SAMPLE
from ..store.admin_rows import TypeCounts
from .base import (
    Caller,
    Listings,
    check_filters,
    check_limit,
    decode_cursor,
    lease_of,
    page_of,
    retry_at_of,
    state_or_stored,
    summary_of,
)
from .views import (
    Activity,
    ActivityBucket,
    ActorDetail,
    ActorMessage,
    ActorSummary,
    AuditEntry,
    EffectInfo,
    MailboxMessage,
    Page,
    ReminderInfo,
    RetryingMessage,
    Status,
    TypeStatus,
    datetime_of,
)

if TYPE_CHECKING:
    from ..runtime import Runtime

#: Counting further than this is what ``actors_up_to`` avoids.
MAX_ACTORS_UP_TO = 1_000_000_000
#: ``activity`` looks back at most a week, in at most this many buckets.
MAX_ACTIVITY_MINUTES = 7 * 24 * 60
MAX_ACTIVITY_BUCKETS = 1000


def _check_int(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidArguments(f"{name} must be an int from {low} to {high}, not {value!r}")
    return value


def _percentile(values: list[int], fraction: float) -> float:
    """Nearest-rank percentile of sorted ``values`` (not empty)."""
    rank = max(1, -(-len(values) * fraction // 1))
    return float(values[int(rank) - 1])


class Inspection:
    """The reads of ``runtime.admin``: what an operator looks at before acting."""

    def __init__(self, runtime: Runtime, caller: Caller, listings: Listings) -> None:
        self._runtime = runtime
        self._authorize = caller.authorize
        self._listings = listings

    # --- status -------------------------------------------------------------------------

    def status(self, *, actors_up_to: int | None = None) -> Status:
        """Counts per actor type: messages, retries, dead letters, effects, reminders, leases.

        ``actors_up_to``: count the actors of each type only up to this many (then
        ``actors_capped`` is True), so a page refreshed every few seconds does not count
        a million rows; None (the default) counts them all. Every other count is exact.
        """
        if actors_up_to is not None and (
            isinstance(actors_up_to, bool)
            or not isinstance(actors_up_to, int)
            or not 1 <= actors_up_to <= MAX_ACTORS_UP_TO
        ):
            raise InvalidArguments(
                f"actors_up_to must be None or an int from 1 to {MAX_ACTORS_UP_TO}, "
                f"not {actors_up_to!r}"
            )
        self._authorize("status")
        store = self._runtime.store
        with self._listings.read() as (tx, lag_ms):
            now, counts = store.admin.status_counts(tx, actors_up_to=actors_up_to)
        total = TypeCounts("*")
        for c in counts:
            for f in dataclasses.fields(TypeCounts):
                if f.name == "actors_capped":
                    total.actors_capped = total.actors_capped or c.actors_capped
                elif f.name != "actor_type":
                    setattr(total, f.name, getattr(total, f.name) + getattr(c, f.name))
        return Status(
            datetime_of(now),
            [TypeStatus.of(c) for c in counts],
            TypeStatus.of(total),
            replica_lag_ms=lag_ms,
        )

    def activity(self, *, since_minutes: int = 60, bucket_seconds: int = 60) -> Activity:
        """Finished messages over the last ``since_minutes``, per ``bucket_seconds`` bucket.

        Per bucket: completed, rejected, dead-lettered, retried (finished after more
        than one attempt), and latency of completed messages (``completed_at -
        created_at``, from send to finish): mean and max exactly, p50/p99 from a sample of at most
        ``LATENCY_SAMPLE`` completed messages (``latency_sampled`` says when the window
        held more). Authorized as ``status``: aggregate counts, no actor data. Counts
        only what retention kept.
        """
        _check_int("since_minutes", since_minutes, 1, MAX_ACTIVITY_MINUTES)
        _check_int("bucket_seconds", bucket_seconds, 1, since_minutes * 60)
        if since_minutes * 60 // bucket_seconds > MAX_ACTIVITY_BUCKETS:
            raise InvalidArguments(
                f"{since_minutes} minutes in {bucket_seconds} s buckets is more than "
                f"{MAX_ACTIVITY_BUCKETS} buckets"
            )
        self._authorize("status", since_minutes=since_minutes, bucket_seconds=bucket_seconds)
        bucket_ms = bucket_seconds * 1000
        store = self._runtime.store
        with self._listings.read() as (tx, lag_ms):
            now = store.now(tx)
            # Whole buckets, the last one holding now: the chart's x axis is stable.
            end = now - now % bucket_ms + bucket_ms
            since = max(0, end - -(-since_minutes * 60_000 // bucket_ms) * bucket_ms)
            rows = store.activity.activity_counts(tx, since=since, bucket_ms=bucket_ms)
            sample = store.activity.latency_sample(tx, since=since, limit=LATENCY_SAMPLE + 1)
        counts = {c.start: c for c in rows}
        sampled = len(sample) > LATENCY_SAMPLE
        latencies: dict[int, list[int]] = {}
        for completed_at, latency in sample[:LATENCY_SAMPLE]:
            start = completed_at - (completed_at - since) % bucket_ms
            latencies.setdefault(start, []).append(latency)
        buckets = []
        for start in range(since, end, bucket_ms):
            c = counts.get(start)
            lat = sorted(latencies.get(start, []))
            buckets.append(
                ActivityBucket(
                    start=datetime_of(start),
                    completed=c.completed if c else 0,
                    rejected=c.rejected if c else 0,
                    dead=c.dead if c else 0,
                    retried=c.retried if c else 0,
                    latency_mean_ms=c.latency_sum_ms / c.completed if c and c.completed else None,
                    latency_max_ms=c.latency_max_ms if c and c.completed else None,
                    latency_p50_ms=_percentile(lat, 0.5) if lat else None,
                    latency_p99_ms=_percentile(lat, 0.99) if lat else None,
                )
            )
        return Activity(
            datetime_of(now),
            datetime_of(since),
            bucket_seconds,
            buckets,
            sampled,
            LATENCY_SAMPLE,
            replica_lag_ms=lag_ms,
        )

    # --- actors -------------------------------------------------------------------------

    def list_actors(
        self,
        actor_type: str,
        *,
        id_prefix: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[ActorSummary]:
        """Actors of one type, by id; ``id_prefix`` keeps those whose id starts with it
        (checked like an id: ``%`` and ``_`` are plain characters)."""
        check_identifier(actor_type, what="actor type")
        check_filters(id_prefix=id_prefix)
        check_limit(limit)
        after = decode_cursor(cursor, "actors")
        self._authorize("actors.list", actor_type=actor_type)
        store = self._runtime.store
        with self._listings.read() as (tx, lag_ms):
            now = store.now(tx)
            rows = store.admin.list_actors(
                tx,
                actor_type,
                id_prefix=id_prefix,
                after=None if after is None else str(after),
                limit=limit + 1,
            )
        rows, next_cursor = page_of(rows, limit, "actors", lambda last: last.actor_id)
        return Page(
            [summary_of(r, now) for r in rows],
            next_cursor,
            datetime_of(now),
            replica_lag_ms=lag_ms,
        )

    def inspect_actor(self, actor_type: str, actor_id: str, *, limit: int = 50) -> ActorDetail:
        """Committed state, mailbox, lease, unfinished effects and reminders of one actor.

        ``limit`` bounds each list (queued and scheduled messages, effects, reminders).
        """
        check_identifier(actor_type, what="actor type")
        check_identifier(actor_id, what="actor id")
        check_limit(limit)
        self._authorize("actors.inspect", actor_type=actor_type, actor_id=actor_id)
        store = self._runtime.store
        with store.read() as tx:
            now = store.now(tx)
            row = store.admin.actor_row(tx, actor_type, actor_id)
            if row is None:
                raise NotFound(f"no actor {actor_type} {actor_id!r} (never called, or destroyed)")
            queued = store.admin.mailbox_rows(tx, row, limit)
            scheduled = store.admin.scheduled_of(tx, row.pk, limit)
            effects = store.admin.unfinished_effects_of(tx, row.pk, limit)
            reminders = store.admin.reminders_of(tx, row.pk, limit)
            dead = store.admin.open_dead_letters_of(tx, actor_type, actor_id)
            head = queued[0] if queued and queued[0].seq == row.done_seq + 1 else None
            waiting_for = (
                store.processes.missing_capability(
                    tx, row.actor_type, head.operation, row.state_version, unserved=""
                )
                if head is not None and head.status == "queued"
                else None
            )
        state, migrated = state_or_stored(
            self._runtime.registry, actor_type, row.state, row.state_version
        )
        return ActorDetail(
            actor_type=row.actor_type,
            actor_id=row.actor_id,
            incarnation=row.pk,
            state=state,
            state_version=row.state_version,
            state_migrated=migrated,
            created_at=datetime_of(row.created_at),
            updated_at=datetime_of(row.updated_at),
            done_seq=row.done_seq,
            next_seq=row.next_seq,
            attempt=row.attempt,
            retry_at=retry_at_of(row, now),
            paused=row.paused,
            lease=lease_of(row, now),
            queued_total=row.next_seq - row.done_seq - 1,
            queued=[MailboxMessage.of(m) for m in queued],
            scheduled=[MailboxMessage.of(m) for m in scheduled],
            effects=[EffectInfo.of(e) for e in effects],
            reminders=[ReminderInfo.of(r) for r in reminders],
            open_dead_letters=dead,
            now=datetime_of(now),
            waiting_for=waiting_for or None,
        )

    def actor_messages(
        self, actor_type: str, actor_id: str, *, limit: int = 50, cursor: str | None = None
    ) -> Page[ActorMessage]:
        """Messages of an actor's current incarnation, newest first: queued, running, finished.

        Keyset-paged by mailbox seq. Finished messages pruned by retention are gone;
        delayed messages not yet in the mailbox are in ``inspect_actor().scheduled``.
        Authorized as ``actors.inspect``: the same data the actor's detail shows.
        """
        check_identifier(actor_type, what="actor type")
        check_identifier(actor_id, what="actor id")
        check_limit(limit)
        after = decode_cursor(cursor, "actor_messages")
        if after is not None and (isinstance(after, bool) or not isinstance(after, int)):
            raise InvalidArguments("not a valid cursor")
        self._authorize("actors.inspect", actor_type=actor_type, actor_id=actor_id)
        store = self._runtime.store
        with store.read() as tx:
            now = store.now(tx)
            row = store.admin.actor_row(tx, actor_type, actor_id)
            if row is None:
                raise NotFound(f"no actor {actor_type} {actor_id!r} (never called, or destroyed)")
            rows = store.activity.actor_messages(tx, row.pk, before=after, limit=limit + 1)
        rows, next_cursor = page_of(rows, limit, "actor_messages", lambda last: last.seq)
        return Page([ActorMessage.of(r) for r in rows], next_cursor, datetime_of(now))

    # --- retrying and audit ---------------------------------------------------------------

    def retrying_messages(self, *, limit: int = 50) -> list[RetryingMessage]:
        """Actors whose head message failed and waits for its next attempt (the first
        ``limit``, soonest first): its attempt, when it runs again and its last error."""
        check_limit(limit)
        self._authorize("actors.pending", actor_type=None)
        store = self._runtime.store
        with store.read() as tx:
            rows = store.admin.retrying_heads(tx, limit)
        return [
            RetryingMessage(t, i, attempt, datetime_of(at), MailboxMessage.of(row))
            for t, i, attempt, at, row in rows
        ]

    def audit_log(
        self,
        *,
        target_id: str | None = None,
        principal: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        actor_type: str | None = None,
        actor_id: str | None = None,
    ) -> Page[AuditEntry]:
        """Audit records of changes made through this API, newest first.

        ``actor_type`` with ``actor_id`` keeps the changes that touched that actor,
        whatever their target: a pause, a retried or discarded dead letter of it.
        """
        check_filters(target_id=target_id, principal=principal)
        if (actor_type is None) != (actor_id is None):
            raise InvalidArguments("actor_type and actor_id go together")
        if actor_type is not None and actor_id is not None:
            check_identifier(actor_type, what="actor type")
            check_identifier(actor_id, what="actor id")
        check_limit(limit)
        after = decode_cursor(cursor, "audit")
        self._authorize("audit.list", target_id=target_id, principal=principal)
        store = self._runtime.store
        with self._listings.read() as (tx, lag_ms):
            now = store.now(tx)
            rows = store.admin.list_audit(
                tx,
                target_id=target_id,
                principal=principal,
                after=None if after is None else str(after),
                limit=limit + 1,
                actor=None if actor_type is None or actor_id is None else (actor_type, actor_id),
            )
        rows, next_cursor = page_of(rows, limit, "audit", lambda last: last.id)
        return Page(
            [AuditEntry.of(r) for r in rows],
            next_cursor,
            datetime_of(now),
            replica_lag_ms=lag_ms,
        )
