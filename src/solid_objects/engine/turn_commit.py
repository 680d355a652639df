"""How one turn's outcome is written inside a commit transaction.

A worker commits the turns of several actors in one transaction (``worker``), a
direct turn commits in the caller's thread (``direct``), a failed batch commits its
turns one by one (``batch_commit``); each writes every turn the same way, here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from .. import faults
from ..observability.events import log_fields
from ..options import Options
from ..registry import NamedHandlers
from ..store import Committed, MessageRow, Store, Tx
from ..store.rows import reply_route_of
from .actions import run_actions
from .activation import Activation
from .turn import TurnOutcome, failure

log = logging.getLogger("solid_objects.worker")


class TurnCommit:
    """Writes turns' outcomes; one per worker pool."""

    def __init__(
        self,
        store: Store,
        options: Options,
        actions: NamedHandlers,
        awaited: Callable[[str], bool],
        traceparent: Callable[[str], str | None],
    ) -> None:
        self.store = store
        self.options = options
        self.actions = actions
        #: Whether a caller in this process waits for a message (then no outcome notice).
        self.awaited = awaited
        #: The trace context the turn's staged work carries (the current instrumentation).
        self.traceparent = traceparent

    def is_one_statement(
        self, act: Activation, message: MessageRow, outcome: TurnOutcome, *, direct: bool = False
    ) -> bool:
        """Whether this turn's commit is one writing statement (then it may be its own
        transaction): finished with nothing staged but its projection row, no traceback
        to keep or clear, no journal entry (``Store.finishes_in_one``). A ``direct``
        turn's is ``Store.finish_direct``."""
        if outcome.kind == "retry" or outcome.traceback is not None:
            return False
        if act.head_attempt > 1 and outcome.kind in ("completed", "rejected"):
            return False  # an earlier attempt's traceback is cleared: a second statement
        if act.definition is not None and act.definition.journaled:
            return False
        staged = outcome.staged if direct or outcome.kind == "completed" else None
        return self.store.turns.finishes_in_one(message, staged, direct=direct)

    def write(
        self,
        tx: Tx,
        act: Activation,
        message: MessageRow,
        outcome: TurnOutcome,
        read: bool,
        direct: bool = False,
    ) -> Committed:
        """Write ``outcome`` of ``message`` in ``tx``, fenced by ``act``'s lease (raises
        ``LeaseLost`` when the fence refuses): a retry's backoff, or the finished turn
        with its staged writes and commit actions; a failing action undoes the turn's
        writes (a savepoint) and records the failure instead."""
        if outcome.kind == "retry":
            delay = self.options.retry_delay(act.head_attempt)
            self.store.turns.retry_later(
                tx,
                act.lease,
                message,
                error=outcome.error or "{}",
                attempt=act.head_attempt,
                delay_ms=int(delay * 1000),
                direct=direct,
            )
            self._record_traceback(tx, act, message, outcome)
            return Committed(None, [], [])
        completed = outcome.kind == "completed"
        # A head passed over keeps its status (cancelled, or replaced: coalescing).
        status = message.status if outcome.kind == "cancelled" else outcome.kind
        staged = outcome.staged if completed else None
        savepoint = tx.savepoint() if staged is not None and staged.actions else None
        committed = self.store.turns.finish_turn(
            tx,
            act.lease,
            message,
            status=status,
            state=outcome.state if completed else None,
            state_version=act.definition.state_version if act.definition else 1,
            result=outcome.result,
            error=outcome.error,
            attempt=act.head_attempt,
            lease_ms=self.options.lease_ms,
            read_next=read,
            staged=staged,
            notify_done=not self.awaited(message.id),
            traceparent=None
            if staged is None
            else self.traceparent(f"turn:{message.id}"),
            direct=direct,
        )
        self._record_traceback(tx, act, message, outcome)
        if reply_route_of(message.sender) is not None:
            faults.point("reply.body")
        if act.definition is not None and act.definition.journaled:
            assert message.seq is not None
            self.store.journal.write(
                tx,
                message_id=message.id,
                actor_pk=act.lease.pk,
                seq=message.seq,
                status=status,
                state_before=outcome.ran_against,
                state_after=outcome.state if completed else None,
                state_version=act.definition.state_version,
            )
        if savepoint is None or staged is None:
            return committed
        try:
            run_actions(self.store.engine, self.actions, tx, message, staged.actions)
        except Exception as exc:
            orig = getattr(exc, "orig", exc)
            if self.store.dialect.rolled_back(orig):
                raise orig from exc  # the server ended the transaction: the commit runs again
            # Undo the turn's writes, then record the failure like any failed turn.
            savepoint.rollback()
            log.warning(
                "commit action of %s %r failed: %r",
                act.actor_type,
                act.actor_id,
                exc,
                exc_info=exc,
                extra={
                    "solid_action": "commit_action_failed",
                    **log_fields(message, act.head_attempt),
                },
            )
            failed = failure(exc, deterministic=False)
            if act.head_attempt >= self.options.max_attempts:
                failed.kind = "dead"
            outcome.kind, outcome.error, outcome.staged = failed.kind, failed.error, None
            outcome.traceback = failed.traceback
            return self.write(tx, act, message, outcome, read, direct)
        savepoint.release()
        return committed

    def _record_traceback(
        self, tx: Tx, act: Activation, message: MessageRow, outcome: TurnOutcome
    ) -> None:
        """Store a failed attempt's traceback with its message; clear an earlier
        attempt's when a retry succeeds (a first attempt has none to clear)."""
        if outcome.traceback is not None:
            self.store.tracebacks.record_traceback(tx, "messages", message.id, outcome.traceback)
        elif act.head_attempt > 1 and outcome.kind in ("completed", "rejected"):
            self.store.tracebacks.record_traceback(tx, "messages", message.id, None)

