"""SQL of the transactional outbox: staged effects, reminders, actor-to-actor messages.

:class:`OutboxStatements` is a part of :class:`~solid_objects.store.Store`.
``write_staged`` runs inside a turn's fenced commit, after the fence UPDATE
succeeded, so everything a turn staged commits with its state or not at all.
Effects and reminders are then claimed and completed with conditional
UPDATEs (on the claim owner and attempt, on the reminder's version), so a
late or duplicate runner can never complete someone else's claim.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..cron import next_after
from ..writes import MAX_MESSAGES_PER_TURN, CancelledReminder, TurnWrites
from .dialect import Tx
from .part import StorePart
from .rows import encode_sender, request_sender

if TYPE_CHECKING:
    from .store import MessageRow


@dataclass(slots=True)
class EffectRow:
    id: str
    actor_pk: int
    actor_type: str
    actor_id: str
    source_message_id: str
    name: str
    arguments: str
    on_success: str | None
    on_failure: str | None
    attempts: int
    #: W3C trace context of the turn that emitted it (tracing carried across processes).
    traceparent: str | None = None


@dataclass(slots=True)
class ReminderRow:
    actor_pk: int
    actor_type: str
    actor_id: str
    operation: str
    key: str
    arguments: str
    due_at: int
    every_ms: int | None
    missed: str
    version: int
    #: A cron schedule (schema 8) instead of ``every_ms``: expression and IANA zone.
    cron: str | None = None
    timezone: str | None = None


_EFFECT_COLS = (
    "id, actor_pk, actor_type, actor_id, source_message_id, name, arguments, on_success, "
    "on_failure, attempts, traceparent"
)
_REMINDER_COLS = (
    "actor_pk, actor_type, actor_id, operation, rkey, arguments, due_at, every_ms, missed, "
    "version, cron, cron_tz"
)


def _reminder_row(r: Sequence[Any]) -> ReminderRow:
    return ReminderRow(
        int(r[0]),
        r[1],
        r[2],
        r[3],
        r[4],
        r[5],
        int(r[6]),
        None if r[7] is None else int(r[7]),
        r[8],
        int(r[9]),
        r[10],
        r[11],
    )


def _in(names: Sequence[str], prefix: str) -> tuple[str, dict[str, Any]]:
    placeholders = ", ".join(f":{prefix}{i}" for i in range(len(names)))
    return placeholders, {f"{prefix}{i}": n for i, n in enumerate(names)}


class OutboxStatements(StorePart):
    """``store.outbox``: a turn's staged effects, reminders and messages (the messages
    through ``store.mailbox``, the broadcast row through ``store.broadcasts``)."""


    # --- writing what a turn staged -------------------------------------------------

    def write_staged(
        self,
        tx: Tx,
        *,
        actor_pk: int,
        actor_type: str,
        actor_id: str,
        source_message_id: str,
        source_seq: int,
        staged: TurnWrites,
        new_id: Callable[[], str],
        traceparent: str | None = None,
    ) -> list[MessageRow]:
        """Insert effects, apply reminder changes in order, enqueue outbound messages.

        Outbound messages go in as ``scheduled`` (``enqueue_later``): this commit holds
        the sender's row lock and must not wait for the target's. Each one's
        ``send_order`` is the sending message's seq (``source_seq``), then its staging
        index: the sender's turns commit in seq order, so this orders its messages by
        turn, then by staging, whichever process ran the turn. ``traceparent`` (the
        turn's trace context) goes with each effect and message.
        """
        for effect in staged.effects:
            tx.run(
                "INSERT INTO {effects} (id, actor_pk, actor_type, actor_id, source_message_id, "
                "name, arguments, on_success, on_failure, status, attempts, available_at, "
                "created_at, traceparent) VALUES (:id, :pk, :t, :i, :src, :name, :args, :ok, "
                ":ko, 'pending', 0, {now}, {now}, :tp)",
                {
                    "id": effect.id,
                    "pk": actor_pk,
                    "t": actor_type,
                    "i": actor_id,
                    "src": source_message_id,
                    "name": effect.name,
                    "args": effect.arguments,
                    "ok": effect.on_success,
                    "ko": effect.on_failure,
                    "tp": traceparent,
                },
            )
        if staged.projection is not None:
            self.projections.write(tx, actor_id, staged.projection)
        outcomes = staged.reminder_outcomes
        outcomes.clear()  # a commit run again (after a failed one) reports afresh
        for change in staged.reminders:
            where = {"pk": actor_pk, "op": change.operation, "key": change.key}
            if isinstance(change, CancelledReminder):
                deleted = tx.run(
                    "DELETE FROM {reminders} WHERE actor_pk = :pk AND operation = :op "
                    "AND rkey = :key",
                    where,
                )
                outcomes.append("cancelled" if deleted else "absent")
                continue
            at_ms = change.at_ms
            if change.cron is not None:  # the first occurrence after the database's now
                at_ms = next_after(change.cron, change.timezone or "UTC", self.now(tx))
            values = {
                **where,
                "t": actor_type,
                "i": actor_id,
                "args": change.arguments,
                "at": at_ms,
                "cron": change.cron,
                "tz": change.timezone if change.cron is not None else None,
                "delay": change.delay_ms,
                "every": change.every_ms,
                "missed": change.missed,
            }
            if at_ms is not None and self._unchanged_reminder(tx, values):
                outcomes.append("unchanged")  # no write: a firing in progress stands
                continue
            moved = tx.run(
                "UPDATE {reminders} SET arguments = :args, "
                "due_at = COALESCE(:at, {now} + :delay), every_ms = :every, missed = :missed, "
                "cron = :cron, cron_tz = :tz, version = version + 1, updated_at = {now} "
                "WHERE actor_pk = :pk AND operation = :op AND rkey = :key",
                values,
            )
            outcomes.append("replaced" if moved else "scheduled")
            if moved == 0:
                tx.run(
                    "INSERT INTO {reminders} (actor_pk, operation, rkey, actor_type, actor_id, "
                    "arguments, due_at, every_ms, missed, cron, cron_tz, version, created_at, "
                    "updated_at) VALUES (:pk, :op, :key, :t, :i, :args, "
                    "COALESCE(:at, {now} + :delay), :every, :missed, :cron, :tz, 1, {now}, {now})",
                    values,
                )
        if staged.broadcast is not None:
            self.store.broadcasts.write_broadcast(
                tx,
                actor_pk=actor_pk,
                actor_type=actor_type,
                actor_id=actor_id,
                revision=source_seq,
                changes=staged.broadcast,
            )
        sender = encode_sender("actor", actor_type=actor_type, actor_id=actor_id)
        return [
            self.store.promotion.enqueue_later(
                tx,
                message_id=new_id(),
                actor_type=m.actor_type,
                actor_id=m.actor_id,
                operation=m.operation,
                arguments=m.arguments,
                idempotency_key=m.idempotency_key,
                delay_ms=m.delay_ms,
                traceparent=traceparent,
                send_order=source_seq * MAX_MESSAGES_PER_TURN + index,
                sender=sender if m.reply is None else request_sender(sender, m.reply),
                priority=m.priority,
            )
            for index, m in enumerate(staged.messages)
        ]

    def _unchanged_reminder(self, tx: Tx, values: dict[str, Any]) -> bool:
        """Whether the reminder exists exactly as ``values`` would schedule it (same due
        time, arguments, period and policy). Rewriting it would bump its version, which
        drops a firing in progress, for a change that moves nothing."""
        row = tx.row(
            "SELECT arguments, due_at, every_ms, missed, cron, cron_tz FROM {reminders} "
            "WHERE actor_pk = :pk AND operation = :op AND rkey = :key",
            values,
        )
        if row is None:
            return False
        every = None if row[2] is None else int(row[2])
        stored = (row[0], int(row[1]), every, row[3], row[4], row[5])
        wanted = (
            values["args"],
            values["at"],
            values["every"],
            values["missed"],
            values["cron"],
            values["tz"],
        )
        return stored == wanted

    # --- effects --------------------------------------------------------------------

    def due_effects(self, tx: Tx, names: Sequence[str], limit: int) -> list[EffectRow]:
        """Effects this process can run that are pending, or whose runner's claim expired."""
        if not names:
            return []
        placeholders, params = _in(names, "n")
        rows = tx.rows(
            f"SELECT {_EFFECT_COLS} FROM {{effects}} WHERE status IN ('pending', 'running') "
            f"AND available_at <= {{now}} AND name IN ({placeholders}) "
            "ORDER BY available_at LIMIT :limit",
            {**params, "limit": limit},
        )
        return [
            EffectRow(r[0], int(r[1]), r[2], r[3], r[4], r[5], r[6], r[7], r[8], int(r[9]), r[10])
            for r in rows
        ]

    def unhandled_effects(
        self, tx: Tx, handled: Sequence[str], *, due_for_ms: int, limit: int
    ) -> list[EffectRow]:
        """Effects due for ``due_for_ms`` or longer whose name is not in ``handled``."""
        where = ""
        params: dict[str, Any] = {"age": due_for_ms, "limit": limit}
        if handled:
            placeholders, names = _in(handled, "n")
            where = f"AND name NOT IN ({placeholders}) "
            params.update(names)
        rows = tx.rows(
            f"SELECT {_EFFECT_COLS} FROM {{effects}} WHERE status IN ('pending', 'running') "
            f"AND available_at <= {{now}} - :age {where}ORDER BY available_at LIMIT :limit",
            params,
        )
        return [
            EffectRow(r[0], int(r[1]), r[2], r[3], r[4], r[5], r[6], r[7], r[8], int(r[9]), r[10])
            for r in rows
        ]

    def claim_effect(self, tx: Tx, effect: EffectRow, owner: str, timeout_ms: int) -> bool:
        """Take an effect for ``timeout_ms``; after that another runner may take it over."""
        return (
            tx.run(
                "UPDATE {effects} SET status = 'running', claimed_by = :owner, "
                "attempts = attempts + 1, available_at = {now} + :timeout, started_at = {now} "
                "WHERE id = :id AND attempts = :attempts AND status IN ('pending', 'running') "
                "AND available_at <= {now}",
                {
                    "owner": owner,
                    "timeout": timeout_ms,
                    "id": effect.id,
                    "attempts": effect.attempts,
                },
            )
            == 1
        )

    def renew_effect_claim(
        self, tx: Tx, effect_id: str, owner: str, attempts: int, timeout_ms: int
    ) -> bool:
        """Push a running effect's claim deadline to ``timeout_ms`` from now, fenced on
        the claim (owner and attempt): False when it was taken over or recorded."""
        return (
            tx.run(
                "UPDATE {effects} SET available_at = {now} + :timeout "
                "WHERE id = :id AND claimed_by = :owner AND attempts = :attempts "
                "AND status = 'running'",
                {"timeout": timeout_ms, "id": effect_id, "owner": owner, "attempts": attempts},
            )
            == 1
        )

    def finish_effect(
        self,
        tx: Tx,
        effect: EffectRow,
        owner: str,
        *,
        status: str,
        result: str | None,
        error: str | None,
        retry_in_ms: int | None,
    ) -> bool:
        """Record an attempt's outcome if our claim still holds (owner and attempt match).

        ``retry_in_ms`` puts the effect back to pending for another attempt.
        """
        if retry_in_ms is not None:
            return (
                tx.run(
                    "UPDATE {effects} SET status = 'pending', claimed_by = NULL, error = :error, "
                    "available_at = {now} + :delay WHERE id = :id AND claimed_by = :owner "
                    "AND attempts = :attempts AND status = 'running'",
                    {
                        "error": error,
                        "delay": retry_in_ms,
                        "id": effect.id,
                        "owner": owner,
                        "attempts": effect.attempts,
                    },
                )
                == 1
            )
        return (
            tx.run(
                "UPDATE {effects} SET status = :status, result = :result, error = :error, "
                "completed_at = {now} WHERE id = :id AND claimed_by = :owner "
                "AND attempts = :attempts AND status = 'running'",
                {
                    "status": status,
                    "result": result,
                    "error": error,
                    "id": effect.id,
                    "owner": owner,
                    "attempts": effect.attempts,
                },
            )
            == 1
        )

    # --- reminders ------------------------------------------------------------------

    def due_reminders(
        self, tx: Tx, types: Sequence[str], *, now: int | None, limit: int
    ) -> list[ReminderRow]:
        if not types:
            return []
        placeholders, params = _in(types, "t")
        rows = tx.rows(
            f"SELECT {_REMINDER_COLS} FROM {{reminders}} "
            f"WHERE due_at <= COALESCE(:now, {{now}}) AND actor_type IN ({placeholders}) "
            "AND paused = 0 ORDER BY due_at LIMIT :limit",
            {**params, "now": now, "limit": limit},
        )
        return [_reminder_row(r) for r in rows]

    def reminders_for(self, tx: Tx, actor_pk: int, limit: int) -> list[ReminderRow]:
        """One incarnation's reminders, soonest first (an actor reading its own)."""
        rows = tx.rows(
            f"SELECT {_REMINDER_COLS} FROM {{reminders}} WHERE actor_pk = :pk "
            "ORDER BY due_at, operation, rkey LIMIT :limit",
            {"pk": actor_pk, "limit": limit},
        )
        return [_reminder_row(r) for r in rows]

    def fire_reminder(
        self, tx: Tx, reminder: ReminderRow, *, now: int, message_id: str
    ) -> MessageRow | None:
        """Move the reminder to its next occurrence (or remove it) and send its message.

        Conditional on the version read: if the actor rescheduled or cancelled it
        meanwhile, this firing is dropped and the new schedule stands. The message
        goes in as ``scheduled`` and due (the reminder row is locked first here, the
        actor row first in a turn's commit: taking both here could deadlock).
        """
        key = {
            "pk": reminder.actor_pk,
            "op": reminder.operation,
            "key": reminder.key,
            "v": reminder.version,
        }
        where = "WHERE actor_pk = :pk AND operation = :op AND rkey = :key AND version = :v"
        if reminder.cron is not None:
            tz = reminder.timezone or "UTC"
            # "all": the next occurrence after this one; "latest": the first after now,
            # so the missed ones collapse into this firing.
            after = reminder.due_at if reminder.missed == "all" else max(now, reminder.due_at)
            changed = tx.run(
                "UPDATE {reminders} SET due_at = :next, version = version + 1, "
                "updated_at = {now} " + where,
                {**key, "next": next_after(reminder.cron, tz, after)},
            )
        elif reminder.every_ms is None:
            changed = tx.run("DELETE FROM {reminders} " + where, key)
        else:
            every = reminder.every_ms
            if reminder.missed == "all":
                next_due = reminder.due_at + every
            else:  # the first occurrence after now: missed ones collapse into this firing
                next_due = reminder.due_at + every * ((now - reminder.due_at) // every + 1)
            changed = tx.run(
                "UPDATE {reminders} SET due_at = :next, version = version + 1, "
                "updated_at = {now} " + where,
                {**key, "next": next_due},
            )
        if changed != 1:
            return None
        return self.store.promotion.enqueue_later(
            tx,
            message_id=message_id,
            actor_type=reminder.actor_type,
            actor_id=reminder.actor_id,
            operation=reminder.operation,
            arguments=reminder.arguments,
            idempotency_key=None,
            delay_ms=0,
            sender=encode_sender("reminder", key=reminder.key or None),
        )

    def delete_reminders_of(self, tx: Tx, actor_pk: int) -> None:
        tx.run("DELETE FROM {reminders} WHERE actor_pk = :pk", {"pk": actor_pk})
