"""SQL of the administration API: actors, effects, status, audit (dead letters are
``dead_letters.py``, the two admin tables ``admin_tables.py``).

:class:`AdminStatements` is a part of :class:`~solid_objects.store.Store`.
Reads run on ``Store.read()`` connections; every write runs inside one
``Store.transact()`` body together with its audit record, so a change and the
record of who made it commit together or not at all.

Every write here first checks the target's state and returns a ``kind`` that
says why nothing was done, before writing anything; the caller decides whether
that is an error (and raises inside the transaction body to roll back a batch).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .admin_rows import (
    ACTOR_COLS,
    AUDIT_COLS,
    EFFECT_COLS,
    MAILBOX_COLS,
    REMINDER_COLS,
    ActorRow,
    AuditRecord,
    AuditRow,
    EffectAdminRow,
    EffectRetryOutcome,
    MailboxRow,
    ReminderAdminRow,
    TypeCounts,
    read_actor,
    read_audit,
    read_effect,
    read_mailbox,
    read_reminder,
)
from .admin_tables import admin_sql
from .dialect import Tx
from .part import StorePart

if TYPE_CHECKING:
    pass


def prefix_upper_bound(prefix: str) -> str | None:
    """The least string above every string that starts with ``prefix`` (code point
    order), or None when there is none (the prefix is all U+10FFFF).

    The last code point that can grow is incremented and what follows it dropped;
    surrogates are skipped, they cannot be stored as UTF-8.
    """
    chars = list(prefix)
    while chars:
        last = ord(chars.pop())
        if last < 0x10FFFF:
            nxt = last + 1
            if 0xD800 <= nxt <= 0xDFFF:
                nxt = 0xE000
            return "".join(chars) + chr(nxt)
    return None


class AdminStatements(StorePart):
    """``store.admin``: the administration API's reads and repairs (re-sent dead letters go
    through ``store.mailbox``)."""

    # --- actors ---------------------------------------------------------------------

    def list_actors(
        self,
        tx: Tx,
        actor_type: str,
        *,
        id_prefix: str | None = None,
        after: str | None,
        limit: int,
    ) -> list[ActorRow]:
        """Actors of one type by id (the identity index), ``after`` the cursor id.

        ``id_prefix`` is a range over the identity index, ``p <= actor_id < upper``, not
        ``LIKE`` (no escaping of ``%``/``_``). It holds because ids compare by code point:
        BINARY on SQLite, ``utf8mb4_bin`` on MySQL/MariaDB; on PostgreSQL the bounds are
        compared ``COLLATE "C"`` so a linguistic database collation cannot drop matches.
        """
        where = "actor_type = :t"
        params: dict[str, Any] = {"t": actor_type, "after": after, "limit": limit}
        if id_prefix is not None:
            column = 'actor_id COLLATE "C"' if self.dialect.family == "postgresql" else "actor_id"
            where += f" AND {column} >= :p"
            params["p"] = id_prefix
            upper = prefix_upper_bound(id_prefix)
            if upper is not None:
                where += f" AND {column} < :p_upper"
                params["p_upper"] = upper
        if after is not None:
            where += " AND actor_id > :after"
        return [
            read_actor(r)
            for r in tx.rows(
                f"SELECT {ACTOR_COLS} FROM {{actors}} WHERE {where} ORDER BY actor_id LIMIT :limit",
                params,
            )
        ]

    def actor_row(self, tx: Tx, actor_type: str, actor_id: str) -> ActorRow | None:
        row = tx.row(
            f"SELECT {ACTOR_COLS} FROM {{actors}} WHERE actor_type = :t AND actor_id = :i",
            {"t": actor_type, "i": actor_id},
        )
        return None if row is None else read_actor(row)

    def mailbox_rows(self, tx: Tx, actor: ActorRow, limit: int) -> list[MailboxRow]:
        """The queued messages (head first), up to ``limit``."""
        return [
            read_mailbox(r)
            for r in tx.rows(
                f"SELECT {MAILBOX_COLS} FROM {{messages}} WHERE actor_pk = :pk "
                "AND seq > :done AND seq < :next ORDER BY seq LIMIT :limit",
                {"pk": actor.pk, "done": actor.done_seq, "next": actor.next_seq, "limit": limit},
            )
        ]

    def scheduled_of(self, tx: Tx, actor_pk: int, limit: int) -> list[MailboxRow]:
        """Delayed messages not yet in the ordered mailbox, in the order they will enter it."""
        return [
            read_mailbox(r)
            for r in tx.rows(
                f"SELECT {MAILBOX_COLS} FROM {{messages}} WHERE status = 'scheduled' "
                "AND actor_pk = :pk ORDER BY available_at, send_order, id LIMIT :limit",
                {"pk": actor_pk, "limit": limit},
            )
        ]

    def unfinished_effects_of(self, tx: Tx, actor_pk: int, limit: int) -> list[EffectAdminRow]:
        """Pending, running and dead effects of one incarnation, oldest first."""
        return [
            read_effect(r)
            for r in tx.rows(
                f"SELECT {EFFECT_COLS} FROM {{effects}} "
                "WHERE status IN ('pending', 'running', 'dead') AND actor_pk = :pk "
                "ORDER BY id LIMIT :limit",
                {"pk": actor_pk, "limit": limit},
            )
        ]

    def reminders_of(self, tx: Tx, actor_pk: int, limit: int) -> list[ReminderAdminRow]:
        return [
            read_reminder(r)
            for r in tx.rows(
                f"SELECT {REMINDER_COLS} FROM {{reminders}} WHERE actor_pk = :pk "
                "ORDER BY due_at LIMIT :limit",
                {"pk": actor_pk, "limit": limit},
            )
        ]

    def open_dead_letters_of(self, tx: Tx, actor_type: str, actor_id: str) -> int:
        return int(
            tx.scalar(
                admin_sql(
                    self.prefix,
                    "SELECT COUNT(*) FROM {messages} m WHERE m.status = 'dead' "
                    "AND m.actor_type = :t AND m.actor_id = :i AND NOT EXISTS "
                    "(SELECT 1 FROM {resolutions} r WHERE r.message_id = m.id)",
                ),
                {"t": actor_type, "i": actor_id},
            )
        )

    # --- effects --------------------------------------------------------------------

    def list_effects(
        self,
        tx: Tx,
        *,
        status: str,
        actor_type: str | None,
        name: str | None,
        after: tuple[int, str] | None,
        limit: int,
    ) -> list[EffectAdminRow]:
        """Effects of one status, newest first: dead by when they died, others by creation."""
        order = "completed_at" if status in ("dead", "done") else "created_at"
        # retrying: pending effects whose handler already failed (they wait for their
        # next attempt, ``available_at``).
        where = [
            "status = 'pending' AND attempts > 0" if status == "retrying" else "status = :status"
        ]
        params: dict[str, Any] = {"status": status, "limit": limit}
        if actor_type is not None:
            where.append("actor_type = :t")
            params["t"] = actor_type
        if name is not None:
            where.append("name = :name")
            params["name"] = name
        if after is not None:
            where.append(f"({order} < :at OR ({order} = :at AND id < :after_id))")
            params.update(at=after[0], after_id=after[1])
        return [
            read_effect(r)
            for r in tx.rows(
                f"SELECT {EFFECT_COLS} FROM {{effects}} WHERE {' AND '.join(where)} "
                f"ORDER BY {order} DESC, id DESC LIMIT :limit",
                params,
            )
        ]

    def effect(self, tx: Tx, effect_id: str) -> EffectAdminRow | None:
        row = tx.row(f"SELECT {EFFECT_COLS} FROM {{effects}} WHERE id = :id", {"id": effect_id})
        return None if row is None else read_effect(row)

    def retry_effect(
        self, tx: Tx, effect_id: str, *, principal: str, reason: str | None, audit_id: str
    ) -> EffectRetryOutcome:
        """Put a dead effect back to pending with its attempts reset (runs at least once more).

        Conditional on ``status = 'dead'``, so a repeated retry changes nothing.
        The effect keeps its id, so its handler still sees the same ``ctx.id``.
        """
        found = self.effect(tx, effect_id)
        if found is None:
            return EffectRetryOutcome("missing", effect_id)
        changed = tx.run(
            "UPDATE {effects} SET status = 'pending', attempts = 0, claimed_by = NULL, "
            "available_at = {now}, completed_at = NULL WHERE id = :id AND status = 'dead'",
            {"id": effect_id},
        )
        if changed != 1:
            return EffectRetryOutcome("not_dead", effect_id, status=found.status)
        # The dead effect's on_failure message was sent with the idempotency key
        # ``effect:<id>:failure``. Move that key aside, so the outcome of this new
        # round reaches the actor too: otherwise a second death, with a different error,
        # would conflict with the first message's key, and the runner could never
        # record it (the effect would run again after every claim timeout, forever).
        tx.run(
            "UPDATE {messages} SET idempotency_key = :moved WHERE idempotency_key = :key "
            "AND actor_pk = (SELECT pk FROM {actors} WHERE actor_type = :t AND actor_id = :i)",
            {
                "key": f"effect:{effect_id}:failure",
                "moved": f"effect:{effect_id}:failure:before:{audit_id}",
                "t": found.actor_type,
                "i": found.actor_id,
            },
        )
        self.write_audit(
            tx,
            audit_id=audit_id,
            principal=principal,
            action="effects.retry",
            target_kind="effect",
            target_id=effect_id,
            actor_type=found.actor_type,
            actor_id=found.actor_id,
            detail={"name": found.name, "previous_attempts": found.attempts, "reason": reason},
        )
        self.notify(tx, "w")
        return EffectRetryOutcome("retried", effect_id, status="pending")

    # --- status ---------------------------------------------------------------------

    def status_counts(
        self, tx: Tx, *, actors_up_to: int | None = None
    ) -> tuple[int, list[TypeCounts]]:
        """Per actor type: actors, queued and scheduled messages, leases, dead letters,
        effects and reminders.

        No aggregate over every actor row: queued and retrying actors are found through
        the ``ready_at`` index (an actor has queued messages only while ``ready_at`` is
        set: the claim query depends on the same invariant), leases through the
        ``lease_owner`` index, the actors of a type counted on the identity index, or
        only up to ``actors_up_to`` (then ``actors_capped``). ``paused`` has no index and
        is the one whole-table read left, a plain scan.
        """
        now = int(tx.scalar("SELECT {now}"))
        counts: dict[str, TypeCounts] = {}

        def of(actor_type: str) -> TypeCounts:
            found = counts.get(actor_type)
            if found is None:
                found = counts[actor_type] = TypeCounts(actor_type)
            return found

        if actors_up_to is None:
            for r in tx.rows("SELECT actor_type, COUNT(*) FROM {actors} GROUP BY actor_type"):
                of(r[0]).actors = int(r[1])
        else:
            for actor_type in self._actor_types(tx):
                c = of(actor_type)
                c.actors = int(
                    tx.scalar(
                        "SELECT COUNT(*) FROM (SELECT 1 FROM {actors} WHERE actor_type = :t "
                        "LIMIT :over) capped",
                        {"t": actor_type, "over": actors_up_to + 1},
                    )
                )
                if c.actors > actors_up_to:
                    c.actors, c.actors_capped = actors_up_to, True
        for actor_type, queued, ready_at in tx.rows(
            "SELECT actor_type, next_seq - done_seq - 1, ready_at FROM {actors} "
            "WHERE pk IN (SELECT pk FROM {actors} WHERE ready_at IS NOT NULL)"
        ):
            c = of(actor_type)
            c.queued += int(queued)
            c.retrying += int(ready_at > now and queued > 0)
        for actor_type, expires in tx.rows(
            "SELECT actor_type, lease_expires_at FROM {actors} "
            "WHERE pk IN (SELECT pk FROM {actors} WHERE lease_owner IS NOT NULL)"
        ):
            if expires is not None:
                c = of(actor_type)
                c.leases_held += int(expires > now)
                c.leases_expired += int(expires <= now)
        for (actor_type,) in tx.rows("SELECT actor_type FROM {actors} WHERE paused = 1"):
            of(actor_type).paused += 1
        for r in tx.rows(
            "SELECT actor_type, COUNT(*) FROM {messages} WHERE status = 'scheduled' "
            "GROUP BY actor_type"
        ):
            of(r[0]).scheduled = int(r[1])
        for r in tx.rows(
            admin_sql(
                self.prefix,
                "SELECT m.actor_type, COUNT(*) FROM {messages} m WHERE m.status = 'dead' "
                "AND NOT EXISTS (SELECT 1 FROM {resolutions} r WHERE r.message_id = m.id) "
                "GROUP BY m.actor_type",
            )
        ):
            of(r[0]).dead_letters = int(r[1])
        for r in tx.rows(
            "SELECT actor_type, status, COUNT(*) FROM {effects} "
            "WHERE status IN ('pending', 'running', 'dead') GROUP BY actor_type, status"
        ):
            setattr(of(r[0]), f"effects_{r[1]}", int(r[2]))
        for r in tx.rows("SELECT actor_type, COUNT(*) FROM {reminders} GROUP BY actor_type"):
            of(r[0]).reminders = int(r[1])
        return now, [counts[t] for t in sorted(counts)]

    def _actor_types(self, tx: Tx) -> list[str]:
        """The distinct actor types, one index seek each (a loose scan of the identity
        index) instead of reading every row."""
        types: list[str] = []
        while True:
            found = tx.scalar(
                "SELECT MIN(actor_type) FROM {actors}"
                + ("" if not types else " WHERE actor_type > :after"),
                {"after": types[-1] if types else None},
            )
            if found is None:
                return types
            types.append(str(found))

    # --- audit ----------------------------------------------------------------------

    def write_audit(
        self,
        tx: Tx,
        *,
        audit_id: str,
        principal: str,
        action: str,
        target_kind: str,
        target_id: str,
        actor_type: str | None,
        actor_id: str | None,
        detail: dict[str, Any] | None,
    ) -> None:
        record = AuditRecord(
            audit_id, principal, action, target_kind, target_id, actor_type, actor_id, detail
        )
        self.write_audits(tx, [record])

    def write_audits(self, tx: Tx, records: Sequence[AuditRecord]) -> None:
        """Insert audit records in one statement (an expiry writes one per actor)."""
        from ..codec import canonical_json

        if not records:
            return
        values = ", ".join(
            f"(:id{n}, {{now}}, :principal{n}, :action{n}, :kind{n}, :target{n}, :t{n}, :i{n}, "
            f":detail{n})"
            for n in range(len(records))
        )
        params: dict[str, Any] = {}
        for n, r in enumerate(records):
            params.update(
                {
                    f"id{n}": r.audit_id,
                    f"principal{n}": r.principal,
                    f"action{n}": r.action,
                    f"kind{n}": r.target_kind,
                    f"target{n}": r.target_id,
                    f"t{n}": r.actor_type,
                    f"i{n}": r.actor_id,
                    f"detail{n}": None if r.detail is None else canonical_json(r.detail),
                }
            )
        tx.run(
            admin_sql(
                self.prefix,
                "INSERT INTO {audit} (id, at, principal, action, target_kind, target_id, "
                f"actor_type, actor_id, detail) VALUES {values}"
            ),
            params,
        )

    def list_audit(
        self,
        tx: Tx,
        *,
        target_id: str | None,
        principal: str | None,
        after: str | None,
        limit: int,
        actor: tuple[str, str] | None = None,
    ) -> list[AuditRow]:
        """Audit records, newest first (ids are time-ordered); ``actor`` keeps those that
        touched that actor, whatever their target (a pause, a retried dead letter)."""
        where = ["1 = 1"]
        if target_id is not None:
            where.append("target_id = :target")
        if actor is not None:
            where.append("actor_type = :actor_type AND actor_id = :actor_id")
        if principal is not None:
            where.append("principal = :principal")
        if after is not None:
            where.append("id < :after")
        return [
            read_audit(r)
            for r in tx.rows(
                admin_sql(
                    self.prefix,
                    f"SELECT {AUDIT_COLS} FROM {{audit}} WHERE {' AND '.join(where)} "
                    "ORDER BY id DESC LIMIT :limit",
                ),
                {
                    "target": target_id,
                    "principal": principal,
                    "after": after,
                    "limit": limit,
                    "actor_type": None if actor is None else actor[0],
                    "actor_id": None if actor is None else actor[1],
                },
            )
        ]

    def retrying_heads(
        self, tx: Tx, limit: int
    ) -> list[tuple[str, str, int, int | None, MailboxRow]]:
        """Actors whose head message failed and waits for its next attempt, soonest
        first: (type, id, attempt, next attempt at, the head message)."""
        cols = ", ".join(f"m.{c.strip()}" for c in MAILBOX_COLS.split(","))
        return [
            (
                str(r[0]),
                str(r[1]),
                int(r[2]),
                None if r[3] is None else int(r[3]),
                read_mailbox(r[4:]),
            )
            for r in tx.rows(
                "SELECT a.actor_type, a.actor_id, a.attempt, a.ready_at, " + cols + " "
                "FROM {actors} a JOIN {messages} m ON m.actor_pk = a.pk AND m.seq = a.done_seq + 1 "
                "WHERE a.attempt > 0 AND a.ready_at IS NOT NULL AND m.status = 'queued' "
                "AND m.attempts > 0 ORDER BY a.ready_at LIMIT :limit",
                {"limit": limit},
            )
        ]
