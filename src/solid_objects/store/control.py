"""SQL of the operator's controls (hold a mailbox, steer reminders) and reconciliation reads.

:class:`ControlStatements` is a part of :class:`~solid_objects.store.Store`.

Pausing an actor sets ``actors.paused`` and takes its lease away in the same
statement. Every claim requires ``paused = 0``, and every fenced commit
requires the lease, so the pause takes effect at once everywhere: a turn in
flight in any process is refused at its commit (nothing it did is kept; it runs
again after the resume, like any turn whose worker died) and no worker can
claim the actor until it is resumed. Calls keep being enqueued: the mailbox
holds them.

Every reminder change bumps ``reminders.version``, so a firing that read the
old row (:meth:`~solid_objects.store.outbox.OutboxStatements.fire_reminder`)
is dropped rather than undoing the change.
"""

from __future__ import annotations

from typing import Any, Literal

from .admin_rows import (
    ACTOR_COLS,
    REMINDER_COLS,
    ActorRow,
    ReminderAdminRow,
    read_actor,
    read_reminder,
)
from .dialect import Tx
from .part import StorePart

ReminderChange = Literal["pause", "resume", "cancel", "run_now"]


class ControlStatements(StorePart):
    """``store.control``: plain statements over ``{actors}`` and ``{reminders}``."""

    # --- actors ---------------------------------------------------------------------

    def set_paused(self, tx: Tx, actor_type: str, actor_id: str, paused: bool) -> bool | None:
        """Pause or resume one actor; None if it does not exist, else whether it changed."""
        pk = tx.scalar(
            "SELECT pk FROM {actors} WHERE actor_type = :t AND actor_id = :i{for_update}",
            {"t": actor_type, "i": actor_id},
        )
        if pk is None:
            return None
        if paused:
            changed = tx.run(
                "UPDATE {actors} SET paused = 1, lease_owner = NULL, lease_token = NULL, "
                "lease_expires_at = NULL, updated_at = {now} WHERE pk = :pk AND paused = 0",
                {"pk": pk},
            )
        else:
            changed = tx.run(
                "UPDATE {actors} SET paused = 0, updated_at = {now}, "
                "ready_at = CASE WHEN next_seq > done_seq + 1 "
                "THEN COALESCE(ready_at, {now}) ELSE NULL END WHERE pk = :pk AND paused = 1",
                {"pk": pk},
            )
        return changed == 1

    # --- reminders ------------------------------------------------------------------

    def list_reminders(
        self,
        tx: Tx,
        *,
        actor_type: str | None,
        actor_id: str | None,
        after: tuple[int, int, str, str] | None,
        limit: int,
    ) -> list[ReminderAdminRow]:
        """Reminders soonest first; ``after`` is the (due_at, pk, operation, key) cursor."""
        where = ["1 = 1"]
        params: dict[str, Any] = {"t": actor_type, "i": actor_id, "limit": limit}
        if actor_type is not None:
            where.append("actor_type = :t")
        if actor_id is not None:
            where.append("actor_id = :i")
        if after is not None:
            where.append(
                "(due_at > :a_due OR (due_at = :a_due AND (actor_pk > :a_pk OR (actor_pk = :a_pk "
                "AND (operation > :a_op OR (operation = :a_op AND rkey > :a_key))))))"
            )
            params.update(a_due=after[0], a_pk=after[1], a_op=after[2], a_key=after[3])
        return [
            read_reminder(r)
            for r in tx.rows(
                f"SELECT {REMINDER_COLS} FROM {{reminders}} WHERE {' AND '.join(where)} "
                "ORDER BY due_at, actor_pk, operation, rkey LIMIT :limit",
                params,
            )
        ]

    def reminder(
        self, tx: Tx, actor_type: str, actor_id: str, operation: str, key: str
    ) -> ReminderAdminRow | None:
        row = tx.row(
            f"SELECT {REMINDER_COLS} FROM {{reminders}} WHERE actor_type = :t AND actor_id = :i "
            "AND operation = :op AND rkey = :key{for_update}",
            {"t": actor_type, "i": actor_id, "op": operation, "key": key},
        )
        return None if row is None else read_reminder(row)

    def change_reminder(self, tx: Tx, row: ReminderAdminRow, change: ReminderChange) -> bool:
        """Apply one operator change to the reminder as read; False if it moved meanwhile."""
        where = " WHERE actor_pk = :pk AND operation = :op AND rkey = :key AND version = :v"
        params = {"pk": row.actor_pk, "op": row.operation, "key": row.key, "v": row.version}
        if change == "cancel":
            return tx.run("DELETE FROM {reminders}" + where, params) == 1
        assignment = {
            "pause": "paused = 1",
            "resume": "paused = 0",
            "run_now": "due_at = {now}",
        }[change]
        return (
            tx.run(
                f"UPDATE {{reminders}} SET {assignment}, version = version + 1, "
                "updated_at = {now}" + where,
                params,
            )
            == 1
        )

    # --- reconciliation reads -------------------------------------------------------

    def actors_with_pending_work(
        self, tx: Tx, *, actor_type: str | None, after: tuple[str, str] | None, limit: int
    ) -> list[ActorRow]:
        """Actors whose mailbox is not empty, by (type, id)."""
        where = ["next_seq > done_seq + 1"]
        params: dict[str, Any] = {"t": actor_type, "limit": limit}
        if actor_type is not None:
            where.append("actor_type = :t")
        if after is not None:
            where.append("(actor_type > :a_t OR (actor_type = :a_t AND actor_id > :a_i))")
            params.update(a_t=after[0], a_i=after[1])
        return [
            read_actor(r)
            for r in tx.rows(
                f"SELECT {ACTOR_COLS} FROM {{actors}} WHERE {' AND '.join(where)} "
                "ORDER BY actor_type, actor_id LIMIT :limit",
                params,
            )
        ]

    def actors_by_ids(self, tx: Tx, actor_type: str, actor_ids: list[str]) -> list[ActorRow]:
        placeholders = ", ".join(f":i{n}" for n in range(len(actor_ids)))
        params: dict[str, Any] = {f"i{n}": i for n, i in enumerate(actor_ids)}
        params["t"] = actor_type
        return [
            read_actor(r)
            for r in tx.rows(
                f"SELECT {ACTOR_COLS} FROM {{actors}} WHERE actor_type = :t "
                f"AND actor_id IN ({placeholders})",
                params,
            )
        ]

    def orphan_counts(self, tx: Tx) -> tuple[int, int, int]:
        """(messages, reminders, effects) not finished whose actor incarnation is gone."""
        row = tx.row(
            "SELECT (SELECT COUNT(*) FROM {messages} m WHERE m.status IN ('queued', "
            "'scheduled') AND NOT EXISTS (SELECT 1 FROM {actors} a WHERE a.pk = m.actor_pk)), "
            "(SELECT COUNT(*) FROM {reminders} r WHERE NOT EXISTS "
            "(SELECT 1 FROM {actors} a WHERE a.pk = r.actor_pk)), "
            "(SELECT COUNT(*) FROM {effects} e WHERE e.status IN ('pending', 'running') "
            "AND NOT EXISTS (SELECT 1 FROM {actors} a WHERE a.pk = e.actor_pk))"
        )
        return int(row[0]), int(row[1]), int(row[2])
