"""SQL of a turn's commit: the fenced write of its outcome, and its retries.

:class:`TurnStatements` is a part of :class:`~solid_objects.store.Store`.
A turn's writes are fenced by the activation lease *inside* the writing
``UPDATE`` (owner, token, generation and expiry compared with the database
clock, and the mailbox position), and the caller checks that exactly one row
changed: a worker whose lease was taken over can never commit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import LeaseLost
from ..writes import StagedProjection, TurnWrites, nothing_but_projection
from .dialect import Tx
from .notices import done_hint, outcome_notice
from .part import StorePart
from .rows import MSG_COLS, Committed, Lease, MessageRow, message_row, new_id, reply_route_of

if TYPE_CHECKING:
    pass


class TurnStatements(StorePart):
    """``store.turns``: a turn's fenced commit (its staged work through ``store.outbox``,
    a request's answer through ``store.replies``)."""


    #: The owner is compared in a form no planner serves from the ``actors_owner``
    #: index: with most actors idle (``lease_owner`` NULL) PostgreSQL's statistics make
    #: that index look cheaper than the primary key, and the fence then read every actor
    #: the process holds instead of one row. Owners are never empty.
    _FENCE = (
        "pk = :pk AND COALESCE(lease_owner, '') = :owner AND lease_token = :token "
        "AND lease_generation = :gen AND lease_expires_at > {now} AND done_seq = :seq - 1"
    )

    @staticmethod
    def _fence_params(lease: Lease, seq: int, **extra: Any) -> dict[str, Any]:
        params = {
            "pk": lease.pk,
            "owner": lease.owner,
            "token": lease.token,
            "gen": lease.generation,
            "seq": seq,
            **extra,
        }
        if "sv" in extra:  # a second name: PostgreSQL types each use of one apart
            params["sv_at_most"] = extra["sv"]
        return params

    def finish_turn(
        self,
        tx: Tx,
        lease: Lease,
        message: MessageRow,
        *,
        status: str,
        state: str | None,
        state_version: int,
        result: str | None,
        error: str | None,
        attempt: int,
        lease_ms: int,
        read_next: bool = True,
        staged: TurnWrites | None = None,
        notify_done: bool = False,
        traceparent: str | None = None,
        direct: bool = False,
    ) -> Committed:
        """Commit the head message's outcome, fenced; return the next head, if any.

        ``status`` is completed, rejected or dead; ``state`` is None when the state
        must not change. The fence is the WHERE clause of the first UPDATE: if the
        lease was lost, zero rows change and :class:`LeaseLost` rolls everything back.
        The same statement renews the lease, so a busy actor needs no separate renewal.
        ``read_next=False`` skips reading the next head when the caller already has it.
        ``staged`` (effects, reminders, messages) is written in the same transaction.
        ``notify_done`` tells a caller waiting in another process (PostgreSQL).

        ``direct`` commits a message that was never enqueued (see
        ``DirectTurns.run_here``): the same statement also appends it to the mailbox,
        fenced on the mailbox being empty, and the message row is inserted finished.
        """
        assert message.seq is not None
        if not direct and self.finishes_in_one(message, staged):
            return self._finish_in_one(
                tx,
                lease,
                message,
                status=status,
                state=state,
                state_version=state_version,
                result=result,
                error=error,
                attempt=attempt,
                lease_ms=lease_ms,
                read_next=read_next,
                notify_done=notify_done,
                projection=None if staged is None else staged.projection,
            )
        # MySQL/MariaDB: the row's next_seq comes back as the fence's insert id instead.
        next_seq_back = (
            read_next
            and not direct
            and not self.dialect.update_returning
            and self.dialect.family == "mysql"
        )
        sql = self._finish_update(
            write_state=state is not None, direct=direct, next_seq_back=next_seq_back
        )
        params = self._fence_params(
            lease, message.seq, state=state, sv=state_version, lease_ms=lease_ms
        )
        if not direct:
            params["id"] = message.id
        more = True  # whether the mailbox holds a message after this one
        if read_next and self.dialect.update_returning:
            # The locked row says whether anything follows: an empty mailbox (the usual
            # case for a message sent from another process) needs no read of the next head.
            row = tx.row(sql + " RETURNING next_seq", params)
            changed = 0 if row is None else 1
            more = row is not None and int(row[0]) > message.seq + 1
        elif next_seq_back:
            # The same answer without RETURNING (0 when no row matched: LeaseLost below).
            changed, next_seq = tx.run_last_id(sql, params)
            more = next_seq > message.seq + 1
        else:
            changed = tx.run(sql, params)
        if changed != 1:
            raise LeaseLost(
                f"lease on {message.actor_type} {message.actor_id!r} was lost before the commit "
                f"of message {message.id}" + (" (or its mailbox was not empty)" if direct else "")
            )
        if direct:
            self._insert_direct(tx, message, status, attempt, result, error)
        elif (
            tx.run(
                "UPDATE {messages} SET status = :status, result = :result, error = :error, "
                "attempts = :attempt, completed_at = {now} WHERE " + self._THE_MESSAGE,
                {
                    "status": status,
                    "result": result,
                    "error": error,
                    "attempt": attempt,
                    "id": message.id,
                    "pk": lease.pk,
                    "seq": message.seq,
                },
            )
            != 1
        ):
            # The fence's own check read the same row under the actor's lock (a queued
            # message of a held actor changes only under that lock): unreachable.
            raise LeaseLost(f"message {message.id} changed during the commit of its turn")
        outbound = (
            self.store.outbox.write_staged(
                tx,
                actor_pk=lease.pk,
                actor_type=message.actor_type,
                actor_id=message.actor_id,
                source_message_id=message.id,
                source_seq=message.seq,
                staged=staged,
                new_id=new_id,
                traceparent=traceparent,
            )
            if staged
            else []
        )
        if notify_done:
            self.notify(tx, self._done_notice(message.id, status, result, error))
        head = self.head_message(tx, lease.pk, message.seq + 1) if read_next and more else None
        due_now = [
            (m.id, m.actor_pk)
            for m, sent in zip(outbound, staged.messages if staged else [], strict=True)
            if m.status == "scheduled" and sent.delay_ms <= 0
        ]
        reply = (
            self.store.replies.send_reply(tx, message, status=status, result=result, error=error)
            if reply_route_of(message.sender) is not None
            else None
        )
        if reply is not None:
            outbound.append(reply)
            due_now.append((reply.id, reply.actor_pk))
        return Committed(head, outbound, due_now)

    def finishes_in_one(
        self, message: MessageRow, staged: TurnWrites | None, *, direct: bool = False
    ) -> bool:
        """Whether this turn's commit is one statement: it staged nothing but its
        projection row, and the database has data-modifying ``WITH``; a direct turn's is
        :meth:`finish_direct`, another's :meth:`finish_turn` when it answers no request."""
        return (
            self.dialect.writable_cte
            and nothing_but_projection(staged)
            and (direct or reply_route_of(message.sender) is None)
        )

    def _finish_in_one(
        self,
        tx: Tx,
        lease: Lease,
        message: MessageRow,
        *,
        status: str,
        state: str | None,
        state_version: int,
        result: str | None,
        error: str | None,
        attempt: int,
        lease_ms: int,
        read_next: bool,
        notify_done: bool,
        projection: StagedProjection | None = None,
    ) -> Committed:
        """``finish_turn`` of a turn that staged nothing but its projection row, as one
        statement
        (``Dialect.writable_cte``): the fenced ``UPDATE``, the message's ``UPDATE``, its
        NOTIFY and the read of the next head cost one round trip instead of four.

        The message is written only ``WHERE EXISTS`` a row of the fence's
        ``RETURNING``, and the NOTIFY is selected per returned row: a refused fence
        writes and announces nothing, and :class:`LeaseLost` is raised. All parts of a
        statement read one snapshot, taken before the fence ``UPDATE`` may have waited
        for the actor row's lock: when the returned ``next_seq`` counts a message that
        the snapshot does not show (enqueued meanwhile), the head is read apart.
        """
        assert message.seq is not None
        call = self.dialect.notify_call if notify_done and self.publish is None else None
        statement = self._one_statement(
            write_state=state is not None,
            read_next=read_next,
            notify_call=call,
            projection=None if projection is None else self.projections.after_fence(projection),
        )
        params = self._fence_params(
            lease,
            message.seq,
            state=state,
            sv=state_version,
            lease_ms=lease_ms,
            id=message.id,
            status=status,
            result=result,
            error=error,
            attempt=attempt,
        )
        if call is not None:
            params.update(
                channel=self.channel, payload=self._done_notice(message.id, status, result, error)
            )
        if projection is not None:
            params.update(self.projections.parameters(message.actor_id, projection))
        row = tx.row(statement, params)
        if row is None:
            raise LeaseLost(
                f"lease on {message.actor_type} {message.actor_id!r} was lost before the commit "
                f"of message {message.id}"
            )
        if notify_done and call is None:  # Redis collects it; without NOTIFY, a no-op
            self.notify(tx, self._done_notice(message.id, status, result, error))
        head = None
        if read_next and int(row[0]) > message.seq + 1:
            head = (
                message_row(row, 1)
                if row[1] is not None
                else self.head_message(tx, lease.pk, message.seq + 1)
            )
        return Committed(head, [], [])

    def _one_statement(
        self,
        *,
        write_state: bool,
        read_next: bool,
        notify_call: str | None,
        projection: str | None = None,
    ) -> str:
        """The data-modifying ``WITH`` of :meth:`_finish_in_one`: one row if the fence
        held (``next_seq``, then the next head's columns, NULL when none or not asked
        for), none otherwise. ``projection`` is the upsert of the projection row, run
        only when the fence held (``ProjectionStatements.after_fence``)."""
        head = ", ".join(f"h.{c.strip()}" for c in MSG_COLS.split(","))
        return (
            "WITH a AS ("
            + self._finish_update(write_state=write_state, direct=False)
            + " RETURNING next_seq), m AS (UPDATE {messages} SET status = :status, "
            "result = :result, error = :error, attempts = :attempt, completed_at = {now} "
            "WHERE "
            + self._THE_MESSAGE
            + " AND EXISTS (SELECT 1 FROM a))"
            + ("" if projection is None else f", p AS ({projection})")
            + " SELECT a.next_seq"
            + (f", {head}" if read_next else "")
            + (f", {notify_call}" if notify_call is not None else "")
            + " FROM a"
            + (
                # A keyed message is read apart, after the lock: the snapshot may
                # predate its replacement (store/coalescing.py).
                " LEFT JOIN {messages} h ON a.next_seq > :seq + 1 "
                "AND h.actor_pk = :pk AND h.seq = :seq + 1 AND h.coalesce_key IS NULL"
                if read_next
                else ""
            )
        )

    def _done_notice(
        self, message_id: str, status: str, result: str | None, error: str | None
    ) -> str:
        """What a finished message announces: through a broker outside the database
        (Redis) only the id travels; through NOTIFY, or datagrams that never leave
        this host (``publish_outcomes``), the signed outcome, when it fits."""
        if self.publish is not None and not self.publish_outcomes:
            return done_hint(message_id)
        return outcome_notice(self.notice_key, message_id, status, result, error)

    def finish_direct(
        self,
        lease: Lease,
        message: MessageRow,
        *,
        status: str,
        state: str | None,
        state_version: int,
        result: str | None,
        error: str | None,
        lease_ms: int,
        projection: StagedProjection | None = None,
    ) -> None:
        """``finish_turn(..., direct=True)`` of a turn that staged nothing but its
        projection row, as one statement that is its own transaction
        (``Dialect.writable_cte``).

        One round trip instead of BEGIN, UPDATE, INSERT and COMMIT: the ``INSERT``
        reads the fenced ``UPDATE``'s ``RETURNING``, so a refused fence writes nothing
        and :class:`LeaseLost` is raised.
        """
        assert message.seq is not None
        params = self._fence_params(
            lease,
            message.seq,
            state=state,
            sv=state_version,
            lease_ms=lease_ms,
            id=message.id,
            t=message.actor_type,
            i=message.actor_id,
            op=message.operation,
            args=message.arguments,
            status=status,
            result=result,
            error=error,
            tp=message.traceparent,
            attempt=1,
        )
        upsert = ""
        if projection is not None:
            params.update(self.projections.parameters(message.actor_id, projection))
            upsert = f", p AS ({self.projections.after_fence(projection, fence='turn')})"
        statement = (
            "WITH turn AS ("
            + self._finish_update(write_state=state is not None, direct=True)
            + " RETURNING pk)"
            + upsert
            + " INSERT INTO {messages} ("
            + self._FINISHED_COLUMNS
            + ") SELECT "
            + self._finished_values(actor_pk="pk", completed="{now}")
            + " FROM turn"
        )
        changed = self.store.run_statement(lambda tx: tx.run(statement, params))
        if changed != 1:
            raise LeaseLost(
                f"lease on {message.actor_type} {message.actor_id!r} was lost, or its "
                f"mailbox was not empty, before the commit of message {message.id}"
            )

    def retry_later(
        self,
        tx: Tx,
        lease: Lease,
        message: MessageRow,
        *,
        error: str,
        attempt: int,
        delay_ms: int,
        direct: bool = False,
    ) -> None:
        """Record a retryable failure: release the lease and hold the mailbox until later.

        The message stays at the head, so nothing behind it runs before it
        succeeds or becomes a dead letter (strict per-identity order). ``direct``:
        as in :meth:`finish_turn`, the message is appended here, as the head.
        """
        assert message.seq is not None
        changed = self._hold_back(tx, lease, message, attempt, delay_ms, direct, self._FENCE)
        if changed != 1:
            raise LeaseLost(f"lease lost before recording the failure of message {message.id}")
        if direct:
            self._insert_direct(tx, message, "queued", attempt, None, error)
            return
        self._record_attempt(tx, message, attempt, error)

    def record_overrun(
        self, tx: Tx, lease: Lease, message: MessageRow, *, error: str, attempt: int, delay_ms: int
    ) -> bool:
        """After a turn's commit was refused: if the lease merely *expired* (nobody
        claimed the actor since), count the turn as a failed attempt and back off, as
        :meth:`retry_later` does. A turn that outlasts its lease every time thus ends as
        a dead letter instead of running forever. False when another holder took over
        (its claim counted the start)."""
        assert message.seq is not None
        if self._hold_back(tx, lease, message, attempt, delay_ms, False, self._EXPIRED) != 1:
            return False
        self._record_attempt(tx, message, attempt, error)
        return True

    #: The fence of a lease that is still ours but has expired: no one claimed it since.
    _EXPIRED = _FENCE.replace("lease_expires_at > {now}", "lease_expires_at <= {now}")

    def _hold_back(
        self,
        tx: Tx,
        lease: Lease,
        message: MessageRow,
        attempt: int,
        delay_ms: int,
        direct: bool,
        fence: str,
    ) -> int:
        """Give the lease up and keep the head message back for ``delay_ms``."""
        assert message.seq is not None
        return tx.run(
            "UPDATE {actors} SET lease_owner = NULL, lease_token = NULL, "
            "lease_expires_at = NULL, ready_at = {now} + :delay_ms, updated_at = {now}, "
            # the starts so far: a claim adds the next one (a warm start was not counted)
            "attempt = :attempt"
            + (self._DIRECT_SET if direct else "")
            + " WHERE "
            + fence
            + (self._DIRECT_FENCE if direct else ""),
            self._fence_params(lease, message.seq, delay_ms=delay_ms, attempt=attempt),
        )

    def _record_attempt(self, tx: Tx, message: MessageRow, attempt: int, error: str) -> None:
        tx.run(
            "UPDATE {messages} SET attempts = :attempt, error = :error WHERE id = :id",
            {"attempt": attempt, "error": error, "id": message.id},
        )

    def _finish_update(
        self, *, write_state: bool, direct: bool, next_seq_back: bool = False
    ) -> str:
        """The fenced UPDATE that commits a turn and renews the lease (``finish_turn``)."""
        return (
            "UPDATE {actors} SET "
            + ("state = :state, state_version = :sv, " if write_state else "")
            + "done_seq = :seq, "
            "attempt = CASE WHEN next_seq > :seq + 1 THEN 1 ELSE 0 END, "
            "ready_at = CASE WHEN next_seq > :seq + 1 THEN {now} ELSE NULL END, "
            "lease_expires_at = {now} + :lease_ms, updated_at = {now}"
            + (self._DIRECT_SET if direct else "")
            + (self._NEXT_SEQ_BACK if next_seq_back else "")
            + " WHERE "
            + self._FENCE
            + (self._DIRECT_FENCE if direct else self._QUEUED_FENCE)
            + (self._NO_DOWNGRADE if write_state else "")
        )

    #: Code never writes an actor's state back at an older version than stored (a
    #: rolling deploy's old worker leaves such an actor before running it; this is the
    #: backstop: its commit writes nothing).
    _NO_DOWNGRADE = " AND state_version <= :sv_at_most"

    #: The message a turn finishes, as the worker holds it: its id at this seq of this
    #: mailbox, not finished yet (a ``cancelled`` or ``replaced`` head is finished
    #: without running).
    #: A message that does not exist here (one that only a forged wake-up carried) is
    #: never finished, and its turn's commit writes nothing.
    _THE_MESSAGE = (
        "id = :id AND actor_pk = :pk AND seq = :seq "
        "AND status IN ('queued', 'cancelled', 'replaced')"
    )
    #: A queued turn commits only a seq that was handed out (``next_seq`` is past it) and
    #: whose message row is there: otherwise the actor would move past a seq that a later
    #: enqueue is given, and that message would never run.
    _QUEUED_FENCE = (
        " AND next_seq > :seq AND EXISTS (SELECT 1 FROM {messages} WHERE " + _THE_MESSAGE + ")"
    )

    #: MySQL/MariaDB: the fenced UPDATE also reports the row's ``next_seq`` (unchanged)
    #: as its insert id, read by ``Tx.run_last_id``. Appended to the SET list.
    _NEXT_SEQ_BACK = ", next_seq = LAST_INSERT_ID(next_seq)"

    #: The columns of a message row written by the turn that ran it.
    _FINISHED_COLUMNS = (
        "id, actor_pk, actor_type, actor_id, seq, operation, arguments, status, "
        "available_at, attempts, result, error, created_at, completed_at, traceparent"
    )

    @staticmethod
    def _finished_values(*, actor_pk: str, completed: str) -> str:
        return (
            f":id, {actor_pk}, :t, :i, :seq, :op, :args, :status, {{now}}, :attempt, "
            f":result, :error, {{now}}, {completed}, :tp"
        )

    #: A direct commit appends its message to the mailbox in the fenced UPDATE itself
    #: (last in SET: MySQL evaluates assignments left to right)...
    _DIRECT_SET = ", next_seq = :seq + 1"
    #: ... and only if the mailbox was empty, so no queued message is overtaken.
    _DIRECT_FENCE = " AND next_seq = :seq"

    def _insert_direct(
        self,
        tx: Tx,
        message: MessageRow,
        status: str,
        attempt: int,
        result: str | None,
        error: str | None,
    ) -> None:
        """The row of a message committed by the turn that ran it (see ``finish_turn``)."""
        tx.run(
            "INSERT INTO {messages} ("
            + self._FINISHED_COLUMNS
            + ") VALUES ("
            + self._finished_values(
                actor_pk=":pk", completed="NULL" if status == "queued" else "{now}"
            )
            + ")",
            {
                "id": message.id,
                "pk": message.actor_pk,
                "t": message.actor_type,
                "i": message.actor_id,
                "seq": message.seq,
                "op": message.operation,
                "args": message.arguments,
                "status": status,
                "attempt": attempt,
                "result": result,
                "error": error,
                "tp": message.traceparent,
            },
        )

