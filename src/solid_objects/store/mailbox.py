"""SQL of the mailbox: appending messages to an actor and promoting delayed ones.

:class:`MailboxStatements` is a part of :class:`~solid_objects.store.Store`.
A message enters an actor's ordered mailbox with the next sequence number
taken under the actor row's lock (or in one ``UPDATE ... RETURNING``), so
sequence numbers have no gaps and no duplicates; a delayed or cross-actor
message waits as ``scheduled`` (``store.promotion.enqueue_later``) until ``promote``
enters it, in
the mailbox's order rule, without overtaking its sender's earlier ones.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

from ..errors import IdempotencyConflict, MailboxFull
from . import coalescing
from .dialect import Tx
from .enqueue_statement import MESSAGE_COLUMNS, enqueue_statement
from .notices import held_hint, message_fields, message_hint
from .part import StorePart
from .promotion import next_send_order
from .rows import (
    MSG_COLS,
    Claimed,
    Enqueued,
    Lease,
    MessageRow,
    message_row,
    new_token,
    scheduled_message,
)


class MailboxStatements(StorePart):
    """``store.mailbox``: appending messages to actors' mailboxes, and cancelling them."""

    def _lock_actor(self, tx: Tx, actor_type: str, actor_id: str, pk: int | None = None) -> Any:
        """Lock the actor's row (inserted if missing); by primary key when ``pk`` is
        known: InnoDB at REPEATABLE READ (an application's transaction) locks the gap
        before the row too when it finds it through the identity index."""
        select = (
            "SELECT pk, next_seq, done_seq, lease_owner, lease_expires_at, paused, ready_at, "
            "lease_generation, {now} FROM {actors} "
            "WHERE actor_type = :t AND actor_id = :i"
        )
        params: dict[str, Any] = {"t": actor_type, "i": actor_id}
        if pk is not None:
            row = tx.row(select + " AND pk = :pk{for_update}", {**params, "pk": pk})
            if row is not None:
                return row
        select += "{for_update}"
        row = tx.row(select, params)
        if row is None:
            tx.run(self.insert_actor_sql(), params)
            row = tx.row(select, params)
        return row

    def enqueue_to_held(
        self,
        tx: Tx,
        *,
        message_id: str,
        actor_type: str,
        actor_id: str,
        operation: str,
        arguments: str,
        traceparent: str | None = None,
        max_length: int | None = None,
        priority: int = 0,
    ) -> MessageRow | None:
        """Append to the mailbox of an actor this process already holds: two statements,
        or one where the ``INSERT`` can read the ``UPDATE``'s ``RETURNING`` (PostgreSQL).

        No claim is needed, so the sequence number comes from one ``UPDATE ...
        RETURNING`` (where the database has it). None when the actor row does not
        exist, or its mailbox holds ``max_length`` messages (the length test is part
        of the ``WHERE``: no extra statement); the caller then uses :meth:`enqueue`,
        which raises :class:`MailboxFull`.
        """
        params: dict[str, Any] = {"t": actor_type, "i": actor_id}
        full = ""
        if max_length is not None:
            full, params["max"] = " AND next_seq - done_seq - 1 < :max", max_length
        update = (
            "UPDATE {actors} SET next_seq = next_seq + 1, ready_at = COALESCE(ready_at, {now}) "
            "WHERE actor_type = :t AND actor_id = :i" + full + " RETURNING pk, next_seq - 1"
        )
        if self.dialect.writable_cte:  # the INSERT reads the RETURNING: one statement
            params.update(
                id=message_id, op=operation, args=arguments, tp=traceparent, priority=priority
            )
            row = tx.row(
                "WITH u AS (" + update + " AS seq, {now} AS at_ms), "
                f"m AS (INSERT INTO {{messages}} ({MESSAGE_COLUMNS}) SELECT :id, pk, :t, :i, "
                "seq, :op, :args, NULL, 'queued', at_ms, 0, at_ms, :tp, NULL, NULL, :priority "
                "FROM u) "
                "SELECT pk, seq, at_ms FROM u",
                params,
            )
        else:
            row = tx.row(update + ", {now}", params)
        if row is None:
            return None
        pk, seq, now = int(row[0]), int(row[1]), int(row[2])
        message = scheduled_message(
            message_id, pk, actor_type, actor_id, operation, arguments, None, now, traceparent
        )
        message.seq, message.status = seq, "queued"
        if self.dialect.writable_cte:
            message.created_at = now
        else:
            self.insert_message(tx, message, now, priority=priority)
        return message

    def enqueue_in_one_statement(
        self,
        tx: Tx,
        *,
        held: bool,
        message_id: str,
        actor_type: str,
        actor_id: str,
        operation: str,
        arguments: str,
        claim_for: str | None,
        lease_ms: int,
        traceparent: str | None = None,
        max_length: int | None = None,
        priority: int = 0,
    ) -> Enqueued | None:
        """An unkeyed message due now, enqueued by one statement that may be its own
        transaction (``Dialect.writable_cte``: PostgreSQL), so a lone enqueue costs one
        round trip instead of ``BEGIN``, the statement and ``COMMIT``.

        ``held``: to an actor this process holds (:meth:`enqueue_to_held`'s statement),
        else :meth:`enqueue`'s one statement; a new actor's row is inserted before it,
        committed apart like :meth:`insert_actor`'s (a crash between the two leaves an
        actor row with no message, as an actor whose messages were pruned). None when
        it wrote nothing (a full mailbox, an actor no longer held): the caller then runs
        :meth:`enqueue` in a transaction. A claim it made commits with it; the claimed
        actor's head, when an earlier message is there, is read by a second statement,
        under the lease.
        """
        if held:
            message = self.enqueue_to_held(
                tx,
                message_id=message_id,
                actor_type=actor_type,
                actor_id=actor_id,
                operation=operation,
                arguments=arguments,
                traceparent=traceparent,
                max_length=max_length,
                priority=priority,
            )
            return None if message is None else Enqueued(message, existing=False, claimed=None)
        done = self._enqueue_creating(  # a new actor's row committed apart, first
            tx,
            message_id=message_id,
            actor_type=actor_type,
            actor_id=actor_id,
            operation=operation,
            arguments=arguments,
            claim_for=claim_for,
            lease_ms=lease_ms,
            traceparent=traceparent,
            max_length=max_length,
            sender=None,
            priority=priority,
        )
        return done if isinstance(done, Enqueued) else None

    def insert_actor(self, tx: Tx, actor_type: str, actor_id: str) -> None:
        """Insert the actor's row unless it exists (an application-transaction enqueue
        makes it apart first: ``store.application``)."""
        tx.run(self.insert_actor_sql(), {"t": actor_type, "i": actor_id})

    def actor_pk(self, tx: Tx, actor_type: str, actor_id: str) -> int | None:
        """The current incarnation of the actor, if it has a row (no lock)."""
        pk = tx.scalar(
            "SELECT pk FROM {actors} WHERE actor_type = :t AND actor_id = :i",
            {"t": actor_type, "i": actor_id},
        )
        return None if pk is None else int(pk)

    def keyed_message(self, tx: Tx, pk: int, key: str | None) -> MessageRow | None:
        """The message already sent to actor ``pk`` with idempotency key ``key``, if any."""
        if key is None:
            return None
        found = tx.row(
            f"SELECT {MSG_COLS} FROM {{messages}} WHERE actor_pk = :pk AND idempotency_key = :k",
            {"pk": pk, "k": key},
        )
        return None if found is None else message_row(found)

    def insert_actor_sql(self) -> str:
        """The ``INSERT`` of an actor's row that does nothing when it exists."""
        head = {"postgresql": "INSERT INTO", "mysql": "INSERT IGNORE INTO"}.get(
            self.dialect.family, "INSERT OR IGNORE INTO"
        )
        tail = (
            " ON CONFLICT (actor_type, actor_id) DO NOTHING"
            if (self.dialect.family == "postgresql")
            else ""
        )
        return (
            head + " {actors} (actor_type, actor_id, state, created_at, updated_at) "
            "VALUES (:t, :i, NULL, {now}, {now})" + tail
        )

    def enqueue(
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
        claim_for: str | None,
        lease_ms: int,
        traceparent: str | None = None,
        max_length: int | None = None,
        sender: str | None = None,
        actor_pk: int | None = None,
        priority: int = 0,
        coalesce_key: str | None = None,
    ) -> Enqueued:
        """Append a message to an actor's mailbox (creating the actor row if needed).

        ``priority`` (0 to 9) ranks its actor's claim (:mod:`.priority`); a message due
        now with ``coalesce_key`` replaces the queued ones of the actor with that key and
        operation, unless a lease on the actor is live (:mod:`.coalescing`).

        ``actor_pk``: the actor's row as the caller found it, locked by primary key
        (see :meth:`_lock_actor`; an application transaction's enqueue).

        A delayed message is stored as ``scheduled`` with no sequence number: it
        enters the ordered mailbox only when :meth:`promote` finds it due, so it
        never blocks messages that are due before it. With ``claim_for`` the same
        transaction also takes the actor's lease when it is free, so a call to a
        cold actor costs one write transaction here plus one commit.

        With ``max_length``, a message due now is refused with :class:`MailboxFull`
        (nothing written) when the actor already has that many queued or running
        messages (``next_seq - done_seq - 1``, read from the locked row: no extra
        statement); a duplicate of a keyed message is answered first, never refused.

        Where the database has data-modifying ``WITH`` (PostgreSQL), an unkeyed message
        due now is one statement (:func:`_enqueue_statement`; for a new actor, after the
        ``INSERT`` of its row); anything else, or a full mailbox (the statement wrote
        nothing), takes the path below.
        """
        if (
            self.dialect.writable_cte
            and idempotency_key is None
            and coalesce_key is None
            and delay_ms <= 0
        ):
            done = self._enqueue_creating(
                tx,
                message_id=message_id,
                actor_type=actor_type,
                actor_id=actor_id,
                operation=operation,
                arguments=arguments,
                claim_for=claim_for,
                lease_ms=lease_ms,
                traceparent=traceparent,
                max_length=max_length,
                sender=sender,
                priority=priority,
            )
            if isinstance(done, Enqueued):
                return done
        row = self._lock_actor(tx, actor_type, actor_id, actor_pk)
        pk, next_seq, done_seq, owner, expires, paused, ready_at, generation, now = row
        pk, now = int(pk), int(now)
        existing = self.keyed_message(tx, pk, idempotency_key)
        if existing is not None:
            if existing.operation != operation or existing.arguments != arguments:
                raise IdempotencyConflict(
                    f"idempotency key {idempotency_key!r} of {actor_type} {actor_id!r} was "
                    f"used for {existing.operation}({existing.arguments}); this call is "
                    f"{operation}({arguments})",
                    existing=existing,
                )
            return Enqueued(existing, existing=True, claimed=None)
        length = int(next_seq) - int(done_seq) - 1
        if delay_ms <= 0 and max_length is not None and length >= max_length:
            raise MailboxFull(
                f"the mailbox of {actor_type} {actor_id!r} holds {length} messages "
                f"(max_mailbox_length={max_length}): nothing was enqueued, try again later"
            )
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
        replaced = 0
        if coalesce_key is not None and delay_ms <= 0:
            live = owner is not None and int(expires) > now  # its worker may have the head
            replaced = coalescing.replace_queued(
                tx,
                actor_pk=pk,
                first_seq=int(done_seq) + (2 if live else 1),
                operation=operation,
                key=coalesce_key,
                by=message_id,
            )
        lease: Lease | None = None
        if delay_ms <= 0:
            message.seq = int(next_seq)
            message.status = "queued"
            params: dict[str, Any] = {"seq": next_seq, "now": now, "pk": pk}
            if (
                claim_for is not None
                and not paused
                and (owner is None or expires <= now)
                and (ready_at is None or ready_at <= now)
            ):
                lease = Lease(pk, claim_for, new_token(), int(generation) + 1)
                params.update(
                    owner=lease.owner,
                    token=lease.token,
                    gen=lease.generation,
                    lease_ms=lease_ms,
                    started=0 if owner == claim_for else 1,  # see claim()
                )
                tx.run(
                    "UPDATE {actors} SET next_seq = :seq + 1, ready_at = :now, "
                    "lease_owner = :owner, lease_token = :token, lease_generation = :gen, "
                    "lease_expires_at = :now + :lease_ms, attempt = attempt + :started, "
                    "updated_at = :now WHERE pk = :pk AND next_seq = :seq",
                    params,
                )
            else:
                tx.run(
                    "UPDATE {actors} SET next_seq = :seq + 1, "
                    "ready_at = COALESCE(ready_at, :now) WHERE pk = :pk AND next_seq = :seq",
                    params,
                )
        self.insert_message(
            tx,
            message,
            now,
            None if message.seq is not None else next_send_order(),
            priority=priority,
            coalesce_key=coalesce_key,
        )
        if lease is None and (claim_for is None or owner != claim_for):
            # A worker elsewhere holds it (tell that process alone), or will claim it.
            held = (
                owner is not None
                and int(expires) > now
                and not paused
                and (ready_at is None or int(ready_at) <= now)
                and message.seq is not None
            )
            if held and coalesce_key is not None:  # never carried: it may be replaced
                self.notify(tx, held_hint(message.actor_pk, str(owner)))
            else:
                self.notify(tx, self._held_payload(message, str(owner), now) if held else "w")
        claimed = None if lease is None else self.load_claimed(tx, lease)
        return Enqueued(message, existing=False, claimed=claimed, replaced=replaced)

    def _held_payload(self, message: MessageRow, owner: str, now: int) -> str:
        """``m:`` carrying ``message`` to the lease's ``owner`` when it fits, else ``h:``."""
        fields = message_fields(
            message.id,
            message.actor_type,
            message.actor_id,
            message.operation,
            message.arguments,
            message.idempotency_key,
            message.traceparent,
            message.sender,
        )
        assert message.seq is not None
        if fields is None:
            return held_hint(message.actor_pk, owner)
        return message_hint(self.notice_key, message.actor_pk, owner, message.seq, now, fields)

    def _enqueue_creating(self, tx: Tx, **fields: Any) -> Enqueued | Literal["missing", "full"]:
        """:meth:`_enqueue_in_one`; for a new actor, its row first, then the same statement."""
        done = self._enqueue_in_one(tx, **fields)
        if done == "missing":
            tx.run(self.insert_actor_sql(), {"t": fields["actor_type"], "i": fields["actor_id"]})
            done = self._enqueue_in_one(tx, **fields)
        return done

    def _enqueue_in_one(
        self,
        tx: Tx,
        *,
        message_id: str,
        actor_type: str,
        actor_id: str,
        operation: str,
        arguments: str,
        claim_for: str | None,
        lease_ms: int,
        traceparent: str | None,
        max_length: int | None,
        sender: str | None,
        priority: int = 0,
    ) -> Enqueued | Literal["missing", "full"]:
        """:meth:`enqueue` in one round trip, or what kept it from writing anything: no
        actor row, or a full mailbox (:meth:`enqueue`'s own path then raises).

        The payload is sent by the statement itself unless wake-ups go through a
        ``publish`` hook (Redis), which collects it here, like :meth:`notify`.
        """
        inline = self.publish is None and self.dialect.notify_sql is not None
        params: dict[str, Any] = {
            "t": actor_type,
            "i": actor_id,
            "id": message_id,
            "op": operation,
            "args": arguments,
            "tp": traceparent,
            "sender": sender,
            "priority": priority,
            "fields": message_fields(
                message_id, actor_type, actor_id, operation, arguments, None, traceparent, sender
            ),
            **self.notice_key.sql_params(),
        }
        if max_length is not None:
            params["max"] = max_length
        if claim_for is not None:
            params.update(owner=claim_for, token=new_token(), lease_ms=lease_ms)
        if inline:
            params["channel"] = self.channel
        statement = enqueue_statement(
            claim=claim_for is not None, limited=max_length is not None, notify=inline
        )
        row = tx.row(statement, params)
        if row is None:
            return "missing"
        if row[1] is None:
            return "full"
        pk, now, payload, generation = int(row[0]), int(row[2]), row[3], row[4]
        message = scheduled_message(
            message_id,
            pk,
            actor_type,
            actor_id,
            operation,
            arguments,
            None,
            now,
            traceparent,
            sender,
        )
        message.seq, message.status, message.created_at = int(row[1]), "queued", now
        if payload is not None and not inline:
            self.notify(tx, str(payload))
        claimed = None
        if generation is not None and claim_for is not None:
            lease = Lease(pk, claim_for, params["token"], int(generation))
            if int(row[7]) + 1 == message.seq:  # the mailbox was empty: ours is the head
                claimed = Claimed(
                    lease=lease,
                    actor_type=actor_type,
                    actor_id=actor_id,
                    state=row[5],
                    state_version=int(row[6]),
                    done_seq=int(row[7]),
                    attempt=int(row[8]),
                    head=copy.copy(message),
                )
            else:  # an earlier head: read it now (it may have changed while we waited)
                claimed = self.load_claimed(tx, lease)
        return Enqueued(message, existing=False, claimed=claimed)

    def insert_message(
        self,
        tx: Tx,
        m: MessageRow,
        now: int,
        send_order: int | None = None,
        *,
        priority: int = 0,
        coalesce_key: str | None = None,
    ) -> None:
        # A plain message leaves priority and coalesce_key to their defaults.
        extra = ", priority, coalesce_key" if priority or coalesce_key is not None else ""
        tx.run(
            "INSERT INTO {messages} (id, actor_pk, actor_type, actor_id, seq, operation, "
            "arguments, idempotency_key, status, available_at, attempts, created_at, traceparent, "
            f"send_order, sender{extra}) VALUES (:id, :pk, :t, :i, :seq, :op, :args, :key, "
            ":status, :avail, 0, :now, :tp, :ord, :sender"
            + (", :priority, :ckey)" if extra else ")"),
            {
                "priority": priority,
                "ckey": coalesce_key,
                "id": m.id,
                "pk": m.actor_pk,
                "t": m.actor_type,
                "i": m.actor_id,
                "seq": m.seq,
                "op": m.operation,
                "args": m.arguments,
                "key": m.idempotency_key,
                "status": m.status,
                "avail": m.available_at,
                "now": now,
                "tp": m.traceparent,
                "ord": send_order,
                "sender": m.sender,
            },
        )
        m.created_at = now

    def cancel(self, tx: Tx, message_id: str) -> tuple[MessageRow, bool] | None:
        """Cancel a message no worker may have in hand; None when no message has the id.

        True for a delayed (``scheduled``) message, or a ``queued`` one whose actor no
        live lease holds (idle, paused, or waiting out a retry); it ends as
        ``cancelled``. A queued message keeps its seq: the next claim reads it as the
        head and the worker finishes it as ``cancelled`` without running it, so the
        mailbox order is untouched. False while a lease is live (a worker may be
        running it, or have it in hand), and for a finished message. The actor row is
        locked first, so a claim or a promote cannot slip in between.
        """
        found = tx.row("SELECT actor_pk FROM {messages} WHERE id = :id", {"id": message_id})
        if found is None:
            return None
        actor = tx.row(
            "SELECT lease_owner, lease_expires_at, {now} FROM {actors} WHERE pk = :pk{for_update}",
            {"pk": int(found[0])},
        )
        row = tx.row(f"SELECT {MSG_COLS} FROM {{messages}} WHERE id = :id", {"id": message_id})
        if row is None:
            return None
        message = message_row(row)
        if message.status == "cancelled":
            return message, True
        held = actor is not None and actor[0] is not None and int(actor[1]) > int(actor[2])
        if message.status == "scheduled" or (message.status == "queued" and not held):
            # A queued one gets its completed_at when the worker passes it: retention
            # must not prune a row the mailbox still counts.
            done = "{now}" if message.status == "scheduled" else "NULL"
            tx.run(
                "UPDATE {messages} SET status = 'cancelled', completed_at = " + done + " "
                "WHERE id = :id AND status = :status",
                {"id": message_id, "status": message.status},
            )
            message.status = "cancelled"
            return message, True
        return message, False
