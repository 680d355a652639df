"""The administration API: ``runtime.admin``: status, dead letters, actors, effects, audit."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from ..codec import check_identifier
from ..errors import InvalidArguments, NotFound, OperationRefused
from ..store.admin_activity import LATENCY_SAMPLE
from ..store.admin_rows import RetryOutcome, TypeCounts
from ..store.store import new_id
from .base import (
    BATCH,
    AdminBase,
    check_filters,
    check_ids,
    check_limit,
    check_reason,
    cursor_pair,
    decode_cursor,
    log,
    page_of,
)
from .flow import FlowControl
from .history import ActorHistory
from .idle import IdleActors
from .maintenance import Maintenance
from .views import (
    Activity,
    ActivityBucket,
    ActorDetail,
    ActorMessage,
    ActorSummary,
    AuditEntry,
    DeadLetter,
    DiscardedDeadLetter,
    EffectInfo,
    LeaseInfo,
    MailboxMessage,
    Page,
    ReminderInfo,
    RetriedDeadLetter,
    RetriedEffect,
    RetryingMessage,
    Status,
    TypeStatus,
    datetime_of,
)

if TYPE_CHECKING:
    from ..store import Tx
    from ..store.admin_rows import ActorRow


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


class Administration(Maintenance, IdleActors, ActorHistory, FlowControl, AdminBase):
    """Inspect and repair a runtime's actors; ``runtime.admin``.

    ``runtime.admin`` carries the application's policy (``set_policy``) and no
    principal; ``runtime.admin.as_principal(name)`` returns a view that acts as
    ``name``. Views share the policy of the runtime, so changing it applies to
    every view at once.
    """

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
        with store.read() as tx:
            now, counts = store.admin.status_counts(tx, actors_up_to=actors_up_to)
        total = TypeCounts("*")
        for c in counts:
            for f in dataclasses.fields(TypeCounts):
                if f.name == "actors_capped":
                    total.actors_capped = total.actors_capped or c.actors_capped
                elif f.name != "actor_type":
                    setattr(total, f.name, getattr(total, f.name) + getattr(c, f.name))
        return Status(datetime_of(now), [TypeStatus.of(c) for c in counts], TypeStatus.of(total))

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
        with store.read() as tx:
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
            datetime_of(now), datetime_of(since), bucket_seconds, buckets, sampled, LATENCY_SAMPLE
        )

    # --- dead letters -------------------------------------------------------------------

    def list_dead_letters(
        self,
        *,
        actor_type: str | None = None,
        actor_id: str | None = None,
        operation: str | None = None,
        state: str = "open",
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[DeadLetter]:
        """Dead letters, the most recent death first.

        ``state``: ``open`` (the default: neither retried nor discarded),
        ``retried``, ``discarded`` or ``all``.
        """
        if state not in ("open", "retried", "discarded", "all"):
            raise InvalidArguments(f"state must be open, retried, discarded or all, not {state!r}")
        check_filters(actor_type=actor_type, actor_id=actor_id, operation=operation)
        check_limit(limit)
        after = decode_cursor(cursor, "dead_letters")
        self._authorize(
            "dead_letters.list",
            actor_type=actor_type,
            actor_id=actor_id,
            operation=operation,
            state=state,
        )
        store = self._runtime.store
        with store.read() as tx:
            now = store.now(tx)
            rows = store.admin.list_dead_letters(
                tx,
                actor_type=actor_type,
                actor_id=actor_id,
                operation=operation,
                state=state,
                after=None if after is None else cursor_pair(after),
                limit=limit + 1,
            )
        rows, next_cursor = page_of(
            rows, limit, "dead_letters", lambda last: [last.completed_at or 0, last.id]
        )
        return Page([DeadLetter.of(r) for r in rows], next_cursor, datetime_of(now))

    def get_dead_letter(self, message_id: str) -> DeadLetter:
        """One dead letter, with its resolution if an operator handled it."""
        check_identifier(message_id, what="message id")
        self._authorize("dead_letters.inspect", message_id=message_id)
        store = self._runtime.store
        with store.read() as tx:
            row, status = store.admin.dead_letter(tx, message_id)
        if row is None:
            raise NotFound(f"no message {message_id!r} (never sent, or pruned)")
        if status != "dead":
            raise NotFound(f"message {message_id} is {status}, not a dead letter")
        return DeadLetter.of(row)

    def retry_dead_letter(self, message_id: str, *, reason: str | None = None) -> RetriedDeadLetter:
        """Send a dead letter again; see :meth:`retry_dead_letters`."""
        return self.retry_dead_letters([message_id], reason=reason)[0]

    def retry_dead_letters(
        self, message_ids: Sequence[str], *, reason: str | None = None
    ) -> list[RetriedDeadLetter]:
        """Send each dead letter's operation and arguments again, to the tail of its mailbox.

        Idempotent: a dead letter is retried once, however often this is called
        (later calls return the first retry's message id with ``already=True``).
        Every id is checked first; if one is unknown, not dead, discarded, or its
        actor was destroyed since, :class:`NotFound` or :class:`OperationRefused`
        is raised and nothing is written. Writes commit ``BATCH`` ids at a time,
        each with its audit record.
        """
        ids = check_ids(message_ids, "message")
        reason = check_reason(reason)
        principal = self._authorize("dead_letters.retry", message_ids=tuple(ids))
        store = self._runtime.store
        with store.read() as tx:
            for message_id in ids:
                self._check_retryable(tx, message_id)
        results: list[RetriedDeadLetter] = []
        for start in range(0, len(ids), BATCH):
            batch = ids[start : start + BATCH]

            def body(tx: Tx, batch: list[str] = batch) -> list[RetryOutcome]:
                outcomes = [
                    store.admin.retry_dead_letter(
                        tx,
                        message_id,
                        retry_id=new_id(),
                        principal=principal,
                        reason=reason,
                        audit_id=new_id(),
                    )
                    for message_id in batch
                ]
                for outcome in outcomes:
                    self._refuse_retry(outcome)  # raising rolls the whole batch back
                return outcomes

            outcomes = store.transact(body)
            self._runtime.kernel.route([o.enqueued for o in outcomes if o.enqueued is not None])
            for o in outcomes:
                assert o.retry_message_id is not None
                results.append(
                    RetriedDeadLetter(o.message_id, o.retry_message_id, o.kind != "retried")
                )
                if o.kind == "retried":
                    log.info(
                        "%s retried dead letter %s as %s",
                        principal,
                        o.message_id,
                        o.retry_message_id,
                        extra={"solid_action": "dead_letter_retried", "principal": principal},
                    )
        return results

    def _check_retryable(self, tx: Tx, message_id: str) -> None:
        store = self._runtime.store
        row, status = store.admin.dead_letter(tx, message_id)
        if row is None:
            self._refuse_retry(RetryOutcome("missing", message_id))
        elif status != "dead":
            self._refuse_retry(RetryOutcome("not_dead", message_id, status=status))
        elif row.resolution == "discarded":
            self._refuse_retry(RetryOutcome("discarded", message_id))

    @staticmethod
    def _refuse_retry(outcome: RetryOutcome) -> None:
        mid = outcome.message_id
        if outcome.kind == "missing":
            raise NotFound(f"no message {mid!r} (never sent, or pruned)")
        if outcome.kind == "not_dead":
            raise OperationRefused(
                f"message {mid} is {outcome.status}, not a dead letter: only dead letters "
                "can be retried"
            )
        if outcome.kind == "discarded":
            raise OperationRefused(f"dead letter {mid} was discarded; it cannot be retried")
        if outcome.kind == "actor_gone":
            raise OperationRefused(
                f"the actor incarnation of dead letter {mid} was destroyed since; "
                "retrying it would send it to a new, empty actor"
            )

    def discard_dead_letter(
        self, message_id: str, *, reason: str | None = None
    ) -> DiscardedDeadLetter:
        """Discard one dead letter: :meth:`discard_dead_letters` for a single id."""
        return self.discard_dead_letters([message_id], reason=reason)[0]

    def discard_dead_letters(
        self, message_ids: Sequence[str], *, reason: str | None = None
    ) -> list[DiscardedDeadLetter]:
        """Mark dead letters discarded: they no longer list as open. Idempotent.

        The message rows stay as they are (``dead``), so a caller holding a
        reference still reads its failure. A dead letter that was already retried
        cannot be discarded (:class:`OperationRefused`); nothing is written then.
        """
        ids = check_ids(message_ids, "message")
        reason = check_reason(reason)
        principal = self._authorize("dead_letters.discard", message_ids=tuple(ids))
        store = self._runtime.store
        results: list[DiscardedDeadLetter] = []
        for start in range(0, len(ids), BATCH):
            batch = ids[start : start + BATCH]

            def body(tx: Tx, batch: list[str] = batch) -> list[DiscardedDeadLetter]:
                done = []
                for message_id in batch:
                    o = store.admin.discard_dead_letter(
                        tx, message_id, principal=principal, reason=reason, audit_id=new_id()
                    )
                    if o.kind == "missing":
                        raise NotFound(f"no message {message_id!r} (never sent, or pruned)")
                    if o.kind == "not_dead":
                        raise OperationRefused(
                            f"message {message_id} is {o.status}, not a dead letter"
                        )
                    if o.kind == "retried":
                        raise OperationRefused(
                            f"dead letter {message_id} was already retried as "
                            f"{o.retry_message_id}; it cannot be discarded"
                        )
                    done.append(DiscardedDeadLetter(message_id, o.kind != "discarded"))
                return done

            results.extend(store.transact(body))
        return results

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
        with store.read() as tx:
            now = store.now(tx)
            rows = store.admin.list_actors(
                tx,
                actor_type,
                id_prefix=id_prefix,
                after=None if after is None else str(after),
                limit=limit + 1,
            )
        rows, next_cursor = page_of(rows, limit, "actors", lambda last: last.actor_id)
        return Page([self._summary(r, now) for r in rows], next_cursor, datetime_of(now))

    @staticmethod
    def _lease(row: ActorRow, now: int) -> LeaseInfo | None:
        if row.lease_owner is None:
            return None
        expires = row.lease_expires_at
        return LeaseInfo(
            row.lease_owner,
            row.lease_generation,
            datetime_of(expires),
            expires is None or expires <= now,
        )

    @staticmethod
    def _retry_at(row: ActorRow, now: int) -> datetime | None:
        backing_off = row.ready_at is not None and row.ready_at > now
        return (
            datetime_of(row.ready_at) if backing_off and row.next_seq > row.done_seq + 1 else None
        )

    def _summary(self, row: ActorRow, now: int) -> ActorSummary:
        return ActorSummary(
            actor_type=row.actor_type,
            actor_id=row.actor_id,
            queued=row.next_seq - row.done_seq - 1,
            attempt=row.attempt,
            retry_at=self._retry_at(row, now),
            paused=row.paused,
            lease=self._lease(row, now),
            updated_at=datetime_of(row.updated_at),
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
        state, migrated = self._state_or_stored(actor_type, row.state, row.state_version)
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
            retry_at=self._retry_at(row, now),
            paused=row.paused,
            lease=self._lease(row, now),
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

    # --- effects ------------------------------------------------------------------------

    def list_effects(
        self,
        *,
        status: str = "dead",
        actor_type: str | None = None,
        name: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[EffectInfo]:
        """Effects of one status (``dead`` by default), newest first."""
        if status not in ("pending", "retrying", "running", "done", "dead"):
            raise InvalidArguments(
                f"status must be pending, retrying, running, done or dead, not {status!r}"
            )
        check_filters(actor_type=actor_type, effect_name=name)
        check_limit(limit)
        after = decode_cursor(cursor, "effects")
        self._authorize("effects.list", status=status, actor_type=actor_type, name=name)
        store = self._runtime.store
        with store.read() as tx:
            now = store.now(tx)
            rows = store.admin.list_effects(
                tx,
                status=status,
                actor_type=actor_type,
                name=name,
                after=None if after is None else cursor_pair(after),
                limit=limit + 1,
            )
        finished = status in ("dead", "done")
        rows, next_cursor = page_of(
            rows,
            limit,
            "effects",
            lambda last: [(last.completed_at if finished else last.created_at) or 0, last.id],
        )
        return Page([EffectInfo.of(r) for r in rows], next_cursor, datetime_of(now))

    def get_effect(self, effect_id: str) -> EffectInfo:
        """One effect by its id (``ctx.id``): status, attempts, last error, claim."""
        check_identifier(effect_id, what="effect id")
        self._authorize("effects.inspect", effect_id=effect_id)
        store = self._runtime.store
        with store.read() as tx:
            row = store.admin.effect(tx, effect_id)
        if row is None:
            raise NotFound(f"no effect {effect_id!r}")
        return EffectInfo.of(row)

    def retry_effect(self, effect_id: str, *, reason: str | None = None) -> RetriedEffect:
        """Retry one dead effect: :meth:`retry_effects` for a single id."""
        return self.retry_effects([effect_id], reason=reason)[0]

    def retry_effects(
        self, effect_ids: Sequence[str], *, reason: str | None = None
    ) -> list[RetriedEffect]:
        """Put dead effects back to pending with their attempts reset.

        The handler runs again with the same ``ctx.id``. Idempotent: an effect that
        is no longer dead (pending, running) is left alone (``already=True``); a
        ``done`` effect is refused, as is an unknown id, and nothing is written then.
        """
        ids = check_ids(effect_ids, "effect")
        reason = check_reason(reason)
        principal = self._authorize("effects.retry", effect_ids=tuple(ids))
        store = self._runtime.store
        results: list[RetriedEffect] = []
        for start in range(0, len(ids), BATCH):
            batch = ids[start : start + BATCH]

            def body(tx: Tx, batch: list[str] = batch) -> list[RetriedEffect]:
                done = []
                for effect_id in batch:
                    o = store.admin.retry_effect(
                        tx, effect_id, principal=principal, reason=reason, audit_id=new_id()
                    )
                    if o.kind == "missing":
                        raise NotFound(f"no effect {effect_id!r}")
                    if o.kind == "not_dead" and o.status == "done":
                        raise OperationRefused(
                            f"effect {effect_id} is done; only dead effects can be retried"
                        )
                    done.append(
                        RetriedEffect(effect_id, o.status or "pending", o.kind != "retried")
                    )
                return done

            results.extend(store.transact(body))
        self._runtime.kernel.wake_workers()
        return results

    # --- audit --------------------------------------------------------------------------

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
        with store.read() as tx:
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
        return Page([AuditEntry.of(r) for r in rows], next_cursor, datetime_of(now))
