"""SQL of promotion: entering due ``scheduled`` messages into their actors' mailboxes.

:class:`PromotionStatements` is a part of :class:`~solid_objects.store.Store`. A
delayed call, a reminder firing and a ``send_to`` wait as ``scheduled``
(:meth:`PromotionStatements.enqueue_later`) until a promoter (the worker after the sending
commit, the poller) locks the target's row and enters all its due messages in the
mailbox's order rule; a row another transaction holds is passed over, and the next
promoter enters them.
"""

from __future__ import annotations

import itertools

from .dialect import Tx
from .part import StorePart
from .rows import MessageRow, scheduled_message

#: The send order of messages this process sends as ``scheduled`` outside a turn (delayed
#: calls, reminder firings): one counter for the whole process, so sends from one thread
#: that become due in the same millisecond enter the mailbox in the order they were made.
_process_sends = itertools.count(1)


def next_send_order() -> int:
    """This process's next send order (see ``_process_sends``)."""
    return next(_process_sends)


def incarnation_lock_key(pk: int) -> int:
    """The advisory lock key of an actor incarnation (a 31-bit fold of its pk: two pks
    that share one only make an expiry pass a candidate over until the next round)."""
    return pk % 2147483647


class PromotionStatements(StorePart):
    """``store.promotion``: messages that enter their mailboxes later, inserted as
    ``scheduled`` and entered when due (a destroyed target's requests answered through
    ``store.replies``)."""

    def enqueue_later(
        self,
        tx: Tx,
        *,
        message_id: str,
        actor_type: str,
        actor_id: str,
        operation: str,
        arguments: str,
        idempotency_key: str | None,
        delay_ms: int,
        traceparent: str | None = None,
        send_order: int | None = None,
        sender: str | None = None,
        priority: int = 0,
    ) -> MessageRow:
        """Insert a message that enters its mailbox when :meth:`promote` moves it there.

        Used inside another actor's commit (``send_to``) and when a reminder fires:
        it takes no lock that a writer of the target actor's row waits for, or waits
        for one: taking one could deadlock with the target's own commit, which holds
        that row and may be sending back, and would hold this commit for as long as
        an application transaction that enqueued to the target stays open.
        ``promote`` then runs as its own short transaction. ``send_order`` places it
        among messages due at the same time (see :meth:`promote`); by default, this
        process's next send.

        An expiry (``IdleStatements.expire``) must not delete the row under the send:
        on MySQL/MariaDB the expiry's scan of the actor's pending messages waits for
        this uncommitted insert, or this insert waits for the expiry to commit and the
        row is read again after it (:meth:`_follow_incarnation`). On PostgreSQL this
        holds the incarnation's advisory lock shared until its commit (the expiry
        tries it exclusive and passes over what it cannot get), then reads the row
        again (docs/design-decisions.md, "Lock waits around application transactions
        and expiry").
        """
        pk, now = self._target_row(tx, actor_type, actor_id)
        share = self.dialect.incarnation_share_sql
        if share is not None:
            # Held until this commit: an expiry passes this incarnation over meanwhile.
            # If one held it first, this waited for its commit: read the row again.
            tx.scalar(share, {"lock_key": incarnation_lock_key(pk)})
            pk, now = self._target_row(tx, actor_type, actor_id)
        existing = self.store.mailbox.keyed_message(tx, pk, idempotency_key)
        if existing is not None:
            return existing
        message = scheduled_message(
            message_id,
            pk,
            actor_type,
            actor_id,
            operation,
            arguments,
            idempotency_key,
            now + max(delay_ms, 0),
            traceparent,
            sender,
        )
        order = next_send_order() if send_order is None else send_order
        self.store.mailbox.insert_message(tx, message, now, order, priority=priority)
        if self.dialect.expiry_isolation_sql is not None:
            self._follow_incarnation(tx, message)
        return message

    def _target_row(self, tx: Tx, actor_type: str, actor_id: str) -> tuple[int, int]:
        """``(pk, now)`` of the target's row, inserted if missing (see :meth:`enqueue_later`)."""
        select = "SELECT pk, {now} FROM {actors} WHERE actor_type = :t AND actor_id = :i"
        params = {"t": actor_type, "i": actor_id}
        row = tx.row(select, params)
        if row is None:
            tx.run(self.store.mailbox.insert_actor_sql(), params)
            row = tx.row(select, params)
        return int(row[0]), int(row[1])

    def _follow_incarnation(self, tx: Tx, message: MessageRow) -> None:
        """After the insert of a ``send_to``'s message (MySQL/MariaDB): if an expiry
        deleted the target's row since it was read (the insert then waited for that
        expiry to commit), the message goes to the incarnation there is now, made if
        none: it was sent after the delete."""
        pk, _ = self._target_row(tx, message.actor_type, message.actor_id)
        if pk != message.actor_pk:
            tx.run(
                "UPDATE {messages} SET actor_pk = :pk WHERE id = :id", {"pk": pk, "id": message.id}
            )
            message.actor_pk = pk

    def due_scheduled(
        self, tx: Tx, *, now: int | None = None, limit: int = 100
    ) -> list[tuple[str, int]]:
        """Delayed messages whose time has come (``now`` overrides the database clock).

        Which actors have due messages, soonest first: :meth:`promote` then enters
        each actor's due messages in their own order.
        """
        rows = tx.rows(
            "SELECT id, actor_pk FROM {messages} WHERE status = 'scheduled' "
            "AND available_at <= COALESCE(:now, {now}) ORDER BY available_at LIMIT :limit",
            {"now": now, "limit": limit},
        )
        return [(r[0], int(r[1])) for r in rows]

    #: Due messages one :meth:`promote` enters into one actor's mailbox at most.
    PROMOTE_LIMIT = 500

    def promote(
        self,
        tx: Tx,
        due: list[tuple[str, int]],
        *,
        now: int | None = None,
        skipped: list[int] | None = None,
    ) -> int:
        """Move the due scheduled messages of the actors in ``due`` into their mailboxes.

        ``due`` names messages known to be due; each one's actor has *all* its due
        messages entered, in the order rule of the mailbox: by ``available_at``, then
        ``send_order`` (the sending turn's seq and staging index, or the sending
        process's counter), then id. The actor row is locked first, so concurrent
        promoters of one actor take turns, and whichever comes first enters every
        message due before the one it was asked for: a message never overtakes an
        earlier one of its sender, whoever delivers it (the worker after the commit,
        the poller, another process after a crash). The rows are locked in the order
        of :meth:`_lock_order`. ``now`` overrides the clock.

        Where the database can skip a locked row, an actor whose row another
        transaction holds is passed over and its pk added to ``skipped``: its messages
        stay due for the next promoter. Every library transaction holds an actor row
        briefly, but an application transaction that enqueued to the actor holds it
        until it ends, and no promoter (a worker after its commit, the poller) may wait
        for that.
        """
        moved = 0
        for pk in self._lock_order(tx, {pk for _, pk in due}):
            moved += self._promote_actor(tx, pk, now, skipped)
        if moved:
            self.notify(tx, "w")
        return moved

    def _lock_order(self, tx: Tx, pks: set[int]) -> list[int]:
        """``pks`` in the one order every writer locks several actor rows in: by
        ``(actor_type, actor_id)``, compared as Python compares strings (the order of a
        batch of enqueues, ``writer.EnqueueBatcher``), so they cannot deadlock."""
        if len(pks) < 2:
            return list(pks)
        names = ", ".join(f":p{i}" for i in range(len(pks)))
        rows = tx.rows(
            f"SELECT pk, actor_type, actor_id FROM {{actors}} WHERE pk IN ({names})",
            {f"p{i}": pk for i, pk in enumerate(pks)},
        )
        found = {int(r[0]): (r[1], r[2]) for r in rows}
        # a pk with no row (being destroyed) locks nothing: its place does not matter
        return sorted(pks, key=lambda pk: (pk in found, found.get(pk, ("", "")), pk))

    def _promote_actor(self, tx: Tx, pk: int, now: int | None, skipped: list[int] | None) -> int:
        skip = self.dialect.supports_skip_locked
        seq = tx.scalar(
            "SELECT next_seq FROM {actors} WHERE pk = :pk{for_update}"
            + (" SKIP LOCKED" if skip else ""),
            {"pk": pk},
        )
        held = (
            seq is None
            and skip
            and tx.scalar("SELECT pk FROM {actors} WHERE pk = :pk", {"pk": pk}) is not None
        )
        if held:  # another transaction holds the row: the next promoter enters them
            if skipped is not None:
                skipped.append(pk)
            return 0
        due = [
            r[0]
            for r in tx.rows(
                "SELECT id FROM {messages} WHERE actor_pk = :pk AND seq IS NULL "
                "AND status = 'scheduled' AND available_at <= COALESCE(:now, {now}) "
                "ORDER BY available_at, send_order, id LIMIT :limit",
                {"pk": pk, "now": now, "limit": self.PROMOTE_LIMIT},
            )
        ]
        if seq is None:  # sent while the incarnation was being destroyed
            self.store.replies.reply_destroyed(tx, pk, due)
            for message_id in due:
                tx.run(
                    "UPDATE {messages} SET status = 'destroyed' WHERE id = :id", {"id": message_id}
                )
            return 0
        first = next_seq = int(seq)
        for message_id in due:
            next_seq += tx.run(
                "UPDATE {messages} SET status = 'queued', seq = :seq "
                "WHERE id = :id AND status = 'scheduled'",
                {"seq": next_seq, "id": message_id},
            )
        if next_seq > first:
            tx.run(
                "UPDATE {actors} SET next_seq = :next, "
                "ready_at = COALESCE(ready_at, {now}) WHERE pk = :pk",
                {"next": next_seq, "pk": pk},
            )
        return next_seq - first
