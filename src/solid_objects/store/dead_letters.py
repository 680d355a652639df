"""SQL of dead letters for the administration API: listing them, and retrying or
discarding one, each with its resolution row in ``{prefix}resolutions``.

The dead message itself keeps ``status = 'dead'`` (its original caller may still read
that outcome); a resolution makes it no longer list as open. Every write first checks
the dead letter's state and returns a ``kind`` that says why nothing was done, before
writing anything.
"""

from __future__ import annotations

from typing import Any

from .admin_rows import (
    DEAD_COLS,
    DeadLetterRow,
    DiscardOutcome,
    RetryOutcome,
    read_dead_letter,
)
from .admin_tables import admin_sql, insert_ignore
from .dialect import Tx
from .part import StorePart


class DeadLetterStatements(StorePart):
    """``store.dead_letters``: list, read, retry and discard dead letters (a retry
    re-sends through ``store.mailbox``)."""

    def list_dead_letters(
        self,
        tx: Tx,
        *,
        actor_type: str | None,
        actor_id: str | None,
        operation: str | None,
        state: str,
        after: tuple[int, str] | None,
        limit: int,
    ) -> list[DeadLetterRow]:
        """Dead messages, newest death first, keyed by (completed_at, id) for paging.

        ``state``: ``open`` (no resolution), ``retried``, ``discarded`` or ``all``.
        """
        where = ["m.status = 'dead'"]
        params: dict[str, Any] = {"limit": limit}
        for column, value in (
            ("actor_type", actor_type),
            ("actor_id", actor_id),
            ("operation", operation),
        ):
            if value is not None:
                where.append(f"m.{column} = :{column}")
                params[column] = value
        if state == "open":
            where.append("r.message_id IS NULL")
        elif state != "all":
            where.append("r.resolution = :resolution")
            params["resolution"] = state
        if after is not None:
            where.append("(m.completed_at < :at OR (m.completed_at = :at AND m.id < :after_id))")
            params.update(at=after[0], after_id=after[1])
        rows = tx.rows(
            admin_sql(
                self.prefix,
                f"SELECT {DEAD_COLS} FROM {{messages}} m "
                "LEFT JOIN {resolutions} r ON r.message_id = m.id "
                f"WHERE {' AND '.join(where)} "
                "ORDER BY m.completed_at DESC, m.id DESC LIMIT :limit",
            ),
            params,
        )
        return [read_dead_letter(r) for r in rows]

    def dead_letter(self, tx: Tx, message_id: str) -> tuple[DeadLetterRow | None, str | None]:
        """The message with its resolution, and its status (None, None when missing)."""
        row = tx.row(
            admin_sql(
                self.prefix,
                f"SELECT {DEAD_COLS}, m.status FROM {{messages}} m "
                "LEFT JOIN {resolutions} r ON r.message_id = m.id WHERE m.id = :id",
            ),
            {"id": message_id},
        )
        if row is None:
            return None, None
        return read_dead_letter(row), str(row[18])

    def retry_dead_letter(
        self,
        tx: Tx,
        message_id: str,
        *,
        retry_id: str,
        principal: str,
        reason: str | None,
        audit_id: str,
    ) -> RetryOutcome:
        """Send a dead letter's operation and arguments again, to the tail of its mailbox.

        Idempotent: the new message carries the idempotency key
        ``dead-letter:<message id>`` and the resolution row is taken with an
        insert-if-absent, so concurrent or repeated retries enqueue one message.
        The actor row is locked first (as ``Store.enqueue`` does), which also
        keeps a concurrent ``destroy`` from slipping in between the check that
        the dead letter's incarnation still exists and the enqueue.
        """
        dead, status = self.dead_letter(tx, message_id)
        if dead is None:
            return RetryOutcome("missing", message_id)
        if status != "dead":
            return RetryOutcome("not_dead", message_id, status=status)
        if dead.resolution is not None:
            return self._resolved_retry(dead)
        pk = tx.scalar(
            "SELECT pk FROM {actors} WHERE actor_type = :t AND actor_id = :i{for_update}",
            {"t": dead.actor_type, "i": dead.actor_id},
        )
        if pk is None or int(pk) != dead.actor_pk:
            return RetryOutcome("actor_gone", message_id)
        taken = tx.run(
            insert_ignore(
                self.dialect.family,
                admin_sql(self.prefix, "{resolutions}"),
                "message_id, resolution, retry_message_id, principal, reason, resolved_at",
                ":id, 'retried', :retry, :principal, :reason, {now}",
                "message_id",
            ),
            {"id": message_id, "retry": retry_id, "principal": principal, "reason": reason},
        )
        if taken != 1:  # resolved meanwhile by a concurrent call
            again, _ = self.dead_letter(tx, message_id)
            assert again is not None
            return self._resolved_retry(again)
        enqueued = self.store.mailbox.enqueue(
            tx,
            message_id=retry_id,
            actor_type=dead.actor_type,
            actor_id=dead.actor_id,
            operation=dead.operation,
            arguments=dead.arguments,
            idempotency_key=f"dead-letter:{message_id}",
            delay_ms=0,
            claim_for=None,
            lease_ms=0,
        )
        if enqueued.existing:  # the key was used before (a pruned resolution)
            tx.run(
                admin_sql(
                    self.prefix,
                    "UPDATE {resolutions} SET retry_message_id = :retry WHERE message_id = :id",
                ),
                {"retry": enqueued.message.id, "id": message_id},
            )
        self.store.admin.write_audit(
            tx,
            audit_id=audit_id,
            principal=principal,
            action="dead_letters.retry",
            target_kind="message",
            target_id=message_id,
            actor_type=dead.actor_type,
            actor_id=dead.actor_id,
            detail={"retry_message_id": enqueued.message.id, "reason": reason},
        )
        return RetryOutcome(
            "retried", message_id, retry_message_id=enqueued.message.id, enqueued=enqueued
        )

    @staticmethod
    def _resolved_retry(dead: DeadLetterRow) -> RetryOutcome:
        if dead.resolution == "retried":
            return RetryOutcome("already_retried", dead.id, retry_message_id=dead.retry_message_id)
        return RetryOutcome("discarded", dead.id)

    def discard_dead_letter(
        self,
        tx: Tx,
        message_id: str,
        *,
        principal: str,
        reason: str | None,
        audit_id: str,
    ) -> DiscardOutcome:
        """Mark a dead letter discarded, so it no longer lists as open. Idempotent."""
        dead, status = self.dead_letter(tx, message_id)
        if dead is None:
            return DiscardOutcome("missing", message_id)
        if status != "dead":
            return DiscardOutcome("not_dead", message_id, status=status)
        if dead.resolution is None:
            taken = tx.run(
                insert_ignore(
                    self.dialect.family,
                    admin_sql(self.prefix, "{resolutions}"),
                    "message_id, resolution, retry_message_id, principal, reason, resolved_at",
                    ":id, 'discarded', NULL, :principal, :reason, {now}",
                    "message_id",
                ),
                {"id": message_id, "principal": principal, "reason": reason},
            )
            if taken == 1:
                self.store.admin.write_audit(
                    tx,
                    audit_id=audit_id,
                    principal=principal,
                    action="dead_letters.discard",
                    target_kind="message",
                    target_id=message_id,
                    actor_type=dead.actor_type,
                    actor_id=dead.actor_id,
                    detail={"reason": reason},
                )
                return DiscardOutcome("discarded", message_id)
            dead, _ = self.dead_letter(tx, message_id)
            assert dead is not None
        if dead.resolution == "retried":
            return DiscardOutcome("retried", message_id, retry_message_id=dead.retry_message_id)
        return DiscardOutcome("already_discarded", message_id)
