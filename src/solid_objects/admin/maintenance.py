"""Administration: pausing actors, steering reminders, processes, retention, reconciliation.

A part of :class:`~solid_objects.admin.Administration`. Every change is
authorized first, validated before anything is written, and committed with
its audit record in one transaction.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, get_args, overload

from ..codec import check_identifier
from ..errors import InvalidArguments, NotFound, OperationRefused, UnknownActorType
from ..store.control import ReminderChange as ChangeKind
from ..store.processes import DRAINING
from ..store.retention import PruneKind
from .base import (
    MAX_LIMIT,
    Caller,
    Listings,
    audit,
    check_limit,
    check_reason,
    decode_cursor,
    page_of,
    state_as_seen,
    summary_of,
)
from .views import (
    ActorPause,
    ActorSummary,
    MessageCancellation,
    Orphans,
    Page,
    ProcessInfo,
    PruneReport,
    RecoveredProcess,
    ReminderChange,
    ReminderInfo,
    datetime_of,
    iso_of,
)

if TYPE_CHECKING:
    from ..runtime import Runtime
    from ..store import Tx
    from ..store.processes import ProcessRow
    from .idle import IdleActors

PRUNE_KINDS: tuple[PruneKind, ...] = get_args(PruneKind)


def _identity(actor_type: str, actor_id: str) -> None:
    check_identifier(actor_type, what="actor type")
    check_identifier(actor_id, what="actor id")


class Maintenance:
    """The administration API's changes: pausing actors, steering reminders, processes,
    retention and reconciliation; each writes an audit row in its own transaction.
    """
    def __init__(
        self, runtime: Runtime, caller: Caller, idle: IdleActors, listings: Listings
    ) -> None:
        self._runtime = runtime
        self._authorize = caller.authorize
        self._idle = idle
        self._listings = listings

    def _audit(
        self,
        tx: Tx,
        principal: str,
        action: str,
        kind: str,
        target: str,
        *,
        actor: tuple[str, str] | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        audit(self._runtime.store, tx, principal, action, kind, target, actor=actor, detail=detail)

    # --- actors -------------------------------------------------------------------------

    def pause_actor(
        self, actor_type: str, actor_id: str, *, reason: str | None = None
    ) -> ActorPause:
        """Hold an actor's mailbox: calls are still accepted, none runs until resumed.

        Takes effect at once in every process: a turn running now is refused at
        its commit (it runs again after the resume), and no worker claims the actor.
        """
        return self._set_paused(actor_type, actor_id, True, reason)

    def resume_actor(
        self, actor_type: str, actor_id: str, *, reason: str | None = None
    ) -> ActorPause:
        """Let a paused actor's mailbox run again, in order, from where it stopped."""
        return self._set_paused(actor_type, actor_id, False, reason)

    def _set_paused(
        self, actor_type: str, actor_id: str, paused: bool, reason: str | None
    ) -> ActorPause:
        _identity(actor_type, actor_id)
        reason = check_reason(reason)
        action = "actors.pause" if paused else "actors.resume"
        principal = self._authorize(action, actor_type=actor_type, actor_id=actor_id)
        store = self._runtime.store

        def body(tx: Tx) -> bool:
            changed = store.control.set_paused(tx, actor_type, actor_id, paused)
            if changed is None:
                raise NotFound(f"no actor {actor_type} {actor_id!r} (never called, or destroyed)")
            if changed:
                self._audit(
                    tx,
                    principal,
                    action,
                    "actor",
                    f"{actor_type}/{actor_id}",
                    actor=(actor_type, actor_id),
                    detail={"reason": reason},
                )
            return changed

        changed = store.transact(body)
        if changed and not paused:
            self._runtime.kernel.wake_workers()
        return ActorPause(actor_type, actor_id, paused, already=not changed)

    def destroy_actor(self, actor_type: str, actor_id: str, *, reason: str | None = None) -> bool:
        """End the actor's incarnation, as ``runtime.destroy`` does; False if there was none."""
        _identity(actor_type, actor_id)
        reason = check_reason(reason)
        principal = self._authorize("actors.destroy", actor_type=actor_type, actor_id=actor_id)
        store = self._runtime.store
        observed = _observed(self._runtime, actor_type)

        def body(tx: Tx) -> bool:
            destroyed = store.destroy(tx, actor_type, actor_id, observed=observed)
            if destroyed:
                self._audit(
                    tx,
                    principal,
                    "actors.destroy",
                    "actor",
                    f"{actor_type}/{actor_id}",
                    actor=(actor_type, actor_id),
                    detail={"reason": reason},
                )
            return destroyed

        destroyed: bool = store.transact(body)
        if destroyed and observed:
            self._runtime.kernel.broadcasted(actor_type, actor_id)
        return destroyed

    def cancel_message(self, message_id: str, *, reason: str | None = None) -> bool:
        """Cancel a message that has not started, as ``MessageReference.cancel()`` does.

        True when it ends ``cancelled`` (audited); False when it finished or a worker
        holds its actor's lease (pause the actor first). :meth:`try_cancel_message`
        says which.
        """
        return self.try_cancel_message(message_id, reason=reason).cancelled

    def try_cancel_message(
        self, message_id: str, *, reason: str | None = None
    ) -> MessageCancellation:
        """Cancel a message that has not started, and say why not when it could not be.

        A message that finished keeps its status (``refused="finished"``); a queued one
        whose actor a worker holds may be running now (``refused="held"``): pause the
        actor, then cancel. Audited when cancelled.
        """
        check_identifier(message_id, what="message id")
        reason = check_reason(reason)
        principal = self._authorize("messages.cancel", message_id=message_id)
        store = self._runtime.store

        def body(tx: Tx) -> MessageCancellation:
            done = store.mailbox.cancel(tx, message_id)
            if done is None:
                raise NotFound(f"no message {message_id}")
            message, cancelled = done
            if cancelled:
                self._audit(
                    tx,
                    principal,
                    "messages.cancel",
                    "message",
                    message_id,
                    actor=(message.actor_type, message.actor_id),
                    detail={"reason": reason},
                )
                return MessageCancellation(message_id, True, message.status, None)
            refused = "held" if message.status in ("queued", "scheduled") else "finished"
            return MessageCancellation(message_id, False, message.status, refused)

        return store.transact(body)

    def actors_with_pending_work(
        self, *, actor_type: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> Page[ActorSummary]:
        """Actors whose mailbox is not empty, by type and id (reconciliation)."""
        if actor_type is not None:
            check_identifier(actor_type, what="actor type")
        check_limit(limit)
        after = decode_cursor(cursor, "pending")
        self._authorize("actors.pending", actor_type=actor_type)
        store = self._runtime.store
        with store.read() as tx:
            now = store.now(tx)
            rows = store.control.actors_with_pending_work(
                tx,
                actor_type=actor_type,
                after=None if after is None else (str(after[0]), str(after[1])),
                limit=limit + 1,
            )
        rows, next_cursor = page_of(
            rows, limit, "pending", lambda last: [last.actor_type, last.actor_id]
        )
        return Page([summary_of(r, now) for r in rows], next_cursor, datetime_of(now))

    def actor_states(self, actor_type: str, actor_ids: Sequence[str]) -> dict[str, Any]:
        """Committed state of each listed actor that exists (reconciliation with your data).

        The state is migrated to the class's ``state_version``, as ``snapshot()`` shows it:
        the type must be registered in this process (UnknownActorType otherwise).
        """
        check_identifier(actor_type, what="actor type")
        ids = [actor_ids] if isinstance(actor_ids, str) else list(dict.fromkeys(actor_ids))
        if not 1 <= len(ids) <= MAX_LIMIT:
            raise InvalidArguments(f"give 1 to {MAX_LIMIT} actor ids, not {len(ids)}")
        for actor_id in ids:
            check_identifier(actor_id, what="actor id")
        self._authorize("actors.states", actor_type=actor_type, actor_ids=tuple(ids))
        self._runtime.registry.get(actor_type)  # before anything is read
        store = self._runtime.store
        with store.read() as tx:
            rows = store.control.actors_by_ids(tx, actor_type, ids)
        registry = self._runtime.registry
        return {
            r.actor_id: state_as_seen(registry, actor_type, r.state, r.state_version) for r in rows
        }

    @overload
    def orphans(self) -> Orphans: ...

    @overload
    def orphans(
        self,
        actor_type: str,
        owner_ids: Iterable[str],
        *,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[ActorSummary]: ...

    def orphans(
        self,
        actor_type: str | None = None,
        owner_ids: Iterable[str] | None = None,
        *,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Orphans | Page[ActorSummary]:
        """Without arguments: unfinished rows whose actor incarnation no longer exists
        (should all be 0).

        ``orphans(actor_type, owner_ids)``: the actors of that type whose id is not in
        ``owner_ids``, the ids of the application's own records (customers, carts), by
        id and keyset-paged: actors left behind by data the application deleted. The
        ids are compared exactly (case- and accent-sensitive, as actor ids are).
        """
        if actor_type is not None or owner_ids is not None:
            if actor_type is None or owner_ids is None:
                raise InvalidArguments("orphans(actor_type, owner_ids) takes both, or neither")
            return self._idle.orphans_of(actor_type, owner_ids, limit, cursor)
        self._authorize("orphans.list")
        store = self._runtime.store
        with store.read() as tx:
            return Orphans(*store.control.orphan_counts(tx))

    # --- reminders ----------------------------------------------------------------------

    def list_reminders(
        self,
        *,
        actor_type: str | None = None,
        actor_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[ReminderInfo]:
        """Reminders, soonest first, optionally of one type or one actor."""
        if actor_type is not None:
            check_identifier(actor_type, what="actor type")
        if actor_id is not None:
            check_identifier(actor_id, what="actor id")
        check_limit(limit)
        after = decode_cursor(cursor, "reminders")
        if after is not None and not (isinstance(after, list) and len(after) == 4):
            raise InvalidArguments("not a valid cursor")
        self._authorize("reminders.list", actor_type=actor_type, actor_id=actor_id)
        store = self._runtime.store
        with self._listings.read() as (tx, lag_ms):
            now = store.now(tx)
            rows = store.control.list_reminders(
                tx,
                actor_type=actor_type,
                actor_id=actor_id,
                after=None
                if after is None
                else (int(after[0]), int(after[1]), str(after[2]), str(after[3])),
                limit=limit + 1,
            )
        rows, next_cursor = page_of(
            rows,
            limit,
            "reminders",
            lambda last: [last.due_at, last.actor_pk, last.operation, last.key],
        )
        return Page(
            [ReminderInfo.of(r) for r in rows],
            next_cursor,
            datetime_of(now),
            replica_lag_ms=lag_ms,
        )

    def pause_reminder(
        self, actor_type: str, actor_id: str, operation: str, key: str = "", **kw: Any
    ) -> ReminderChange:
        """Keep a reminder's schedule but stop it firing until resumed."""
        return self._change_reminder("pause", actor_type, actor_id, operation, key, **kw)

    def resume_reminder(
        self, actor_type: str, actor_id: str, operation: str, key: str = "", **kw: Any
    ) -> ReminderChange:
        """Let a paused reminder fire again (at once if it came due while paused)."""
        return self._change_reminder("resume", actor_type, actor_id, operation, key, **kw)

    def cancel_reminder(
        self, actor_type: str, actor_id: str, operation: str, key: str = "", **kw: Any
    ) -> ReminderChange:
        """Delete a reminder, as ``self.cancel_schedule`` in the actor would."""
        return self._change_reminder("cancel", actor_type, actor_id, operation, key, **kw)

    def run_reminder_now(
        self, actor_type: str, actor_id: str, operation: str, key: str = "", **kw: Any
    ) -> ReminderChange:
        """Make a reminder due now; a recurring one then continues on its schedule."""
        return self._change_reminder("run_now", actor_type, actor_id, operation, key, **kw)

    def _change_reminder(
        self,
        change: ChangeKind,
        actor_type: str,
        actor_id: str,
        operation: str,
        key: str,
        *,
        reason: str | None = None,
    ) -> ReminderChange:
        _identity(actor_type, actor_id)
        check_identifier(operation, what="operation")
        if not isinstance(key, str) or len(key) > 255:
            raise InvalidArguments("a reminder key is a str of at most 255 characters")
        reason = check_reason(reason)
        action = f"reminders.{change}"
        principal = self._authorize(
            action, actor_type=actor_type, actor_id=actor_id, operation=operation, key=key
        )
        store = self._runtime.store

        def body(tx: Tx) -> bool:
            row = store.control.reminder(tx, actor_type, actor_id, operation, key)
            if row is None:
                raise NotFound(
                    f"no reminder {operation!r} (key {key!r}) on {actor_type} {actor_id!r}"
                )
            if change == "run_now" and row.paused:
                raise OperationRefused("the reminder is paused: resume it first")
            if (change == "pause" and row.paused) or (change == "resume" and not row.paused):
                return False
            if not store.control.change_reminder(tx, row, change):
                raise OperationRefused("the reminder changed meanwhile (it fired): try again")
            self._audit(
                tx,
                principal,
                action,
                "reminder",
                f"{actor_type}/{actor_id}/{operation}/{key}",
                actor=(actor_type, actor_id),
                detail={"reason": reason},
            )
            return True

        changed = store.transact(body)
        if changed and change in ("resume", "run_now"):
            self._runtime.kernel.wake_workers()
        return ReminderChange(actor_type, actor_id, operation, key, change, already=not changed)

    # --- processes ----------------------------------------------------------------------

    def list_processes(
        self, *, include_stopped: bool = False, limit: int = 100, cursor: str | None = None
    ) -> Page[ProcessInfo]:
        """Processes running workers: live, stale (stopped sending heartbeats), stopped."""
        check_limit(limit)
        after = decode_cursor(cursor, "processes")
        self._authorize("processes.list", include_stopped=include_stopped)
        store = self._runtime.store
        with self._listings.read() as (tx, lag_ms):
            now = store.now(tx)
            rows = store.processes.list_processes(
                tx,
                include_stopped=include_stopped,
                after=None if after is None else str(after),
                limit=limit + 1,
            )
        rows, next_cursor = page_of(rows, limit, "processes", lambda last: last.owner)
        return Page(
            [_process_info(r, now) for r in rows],
            next_cursor,
            datetime_of(now),
            replica_lag_ms=lag_ms,
        )

    def recover_process(self, owner: str, *, reason: str | None = None) -> RecoveredProcess:
        """Declare a process dead: its leases and effect claims go back to the pool now.

        Safe even if the process is only paused: whatever it commits later is
        refused by the lease fence. A live process that comes back registers again.
        """
        check_identifier(owner, what="process")
        reason = check_reason(reason)
        principal = self._authorize("processes.recover", owner=owner)
        store = self._runtime.store

        def body(tx: Tx) -> RecoveredProcess:
            row = store.processes.process(tx, owner)
            if row is None:
                raise NotFound(f"no process {owner!r}")
            if row.stopped_at is not None:
                return RecoveredProcess(owner, 0, 0, already=True)
            leases, claims = store.processes.recover_process(tx, owner, "released")
            self._audit(
                tx,
                principal,
                "processes.recover",
                "process",
                owner,
                detail={"reason": reason, "leases": leases, "claims": claims},
            )
            return RecoveredProcess(owner, leases, claims, already=False)

        recovered = store.transact(body)
        self._runtime.kernel.wake_workers()
        return recovered

    # --- retention ----------------------------------------------------------------------

    def prune(
        self,
        older_than: timedelta,
        *,
        kinds: Sequence[str] = ("messages", "effects", "processes"),
        dry_run: bool = False,
        progress: Callable[[str, int], None] | None = None,
    ) -> PruneReport:
        """Delete finished rows older than ``older_than``; ``dry_run`` only counts them.

        Kinds: ``messages`` (completed, rejected, destroyed, and dead letters already
        retried or discarded), ``effects`` (done), ``processes`` (stopped) and
        ``audit`` (only when named). Messages of a type in ``retention_by_type`` are
        kept for that type's retention when it is longer than ``older_than``
        (``cutoffs`` of the report). Never touches live work: queued or scheduled
        messages, open dead letters, pending, running or dead effects. Deletes in
        batches of 500, one short transaction each; ``progress(kind, deleted)``
        is called after each. A message's idempotency key is forgotten with it: the
        retention window is also the window in which a retried call is deduplicated.
        """
        if not isinstance(older_than, timedelta) or older_than < timedelta(0):
            raise InvalidArguments("older_than must be a non-negative datetime.timedelta")
        chosen = list(dict.fromkeys(kinds))
        unknown = [k for k in chosen if k not in PRUNE_KINDS]
        if unknown or not chosen:
            raise InvalidArguments(f"kinds must be some of {list(PRUNE_KINDS)}, not {unknown}")
        action = "retention.preview" if dry_run else "retention.prune"
        principal = self._authorize(
            action, older_than_s=older_than.total_seconds(), kinds=tuple(chosen)
        )
        store = self._runtime.store
        with store.read() as tx:
            now = store.now(tx)
        cutoff = now - int(older_than.total_seconds() * 1000)
        # A type's own retention only ever keeps its messages longer than asked here.
        by_type = {
            actor_type: min(cutoff, now - int(seconds * 1000))
            for actor_type, seconds in (self._runtime.options.retention_by_type or {}).items()
        }
        rows: dict[str, int] = {}
        for kind in chosen:
            typed: PruneKind = kind  # type: ignore[assignment]
            if dry_run:
                with store.read() as tx:
                    rows[kind] = store.retention.count_prunable(tx, typed, cutoff, by_type=by_type)
                continue

            def record(tx: Tx, keys: list[str], deleted: int, kind: str = kind) -> None:
                # Times in an audit record read as ISO 8601 UTC, like the record's own.
                detail: dict[str, Any] = {"deleted": deleted, "cutoff": iso_of(cutoff)}
                if kind == "messages" and by_type:
                    detail["cutoff_by_type"] = {t: iso_of(c) for t, c in by_type.items()}
                self._audit(
                    tx,
                    principal,
                    "retention.prune",
                    kind,
                    f"{keys[0]}..{keys[-1]}",
                    detail=detail,
                )

            rows[kind] = store.retention.prune_older(
                typed, cutoff, record=record, progress=progress, by_type=by_type
            )
        cutoffs = {t: datetime_of(c) for t, c in by_type.items()} if "messages" in chosen else {}
        return PruneReport(datetime_of(cutoff), dry_run, rows, cutoffs)


def _process_info(row: ProcessRow, now: int) -> ProcessInfo:
    if row.stopped_at is not None:
        state = "stopped"
    elif row.expires_at <= now:
        state = "stale"
    else:
        state = "draining" if row.stop_reason == DRAINING else "live"
    try:
        types = [str(t) for t in json.loads(row.actor_types)]
    except (ValueError, TypeError):
        types = []
    try:
        effects = [str(n) for n in json.loads(row.effect_names or "[]")]
    except (ValueError, TypeError):
        effects = []
    return ProcessInfo(
        owner=row.owner,
        host=row.host,
        pid=row.pid,
        version=row.version,
        actor_types=types,
        state=state,
        stop_reason=row.stop_reason,
        leases=row.leases,
        started_at=datetime_of(row.started_at),
        heartbeat_at=datetime_of(row.heartbeat_at),
        expires_at=datetime_of(row.expires_at),
        stopped_at=datetime_of(row.stopped_at),
        effect_names=effects,
    )


def _observed(runtime: Runtime, actor_type: str) -> bool:
    """Whether realtime subscribers of ``actor_type`` must hear of a destroy: yes when
    its class declares observables, and when this process does not know the class."""
    try:
        definition = runtime.registry.get(actor_type)
    except UnknownActorType:
        return True
    return definition.observables is not None
