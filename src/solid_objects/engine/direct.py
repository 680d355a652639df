"""Direct turns: a warm sync call runs its turn in the caller's own thread (a part the
``WorkerPool`` holds as ``pool.direct``).

The message is appended to the mailbox by its own turn's commit: one transaction,
fenced by the lease and by the mailbox being empty (docs/design-decisions.md, "Direct
turns"). The caller's deadline bounds it: a turn runs here only
when its operation's recent turns were short next to the time left, and a commit
still waiting for the database at the deadline settles in the background.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING

from .. import faults
from ..errors import DatabaseError, LeaseLost
from ..store import Committed, MessageRow, Tx
from ..store.rows import scheduled_message
from .activation import Activation
from .batch_commit import DB_ERRORS, refused
from .turn import TurnOutcome

if TYPE_CHECKING:
    from .worker import WorkerPool

log = logging.getLogger("solid_objects.worker")


class DirectTurns:
    """``run_here`` and what settles its commit, on the pool's activations."""

    def __init__(self, pool: WorkerPool) -> None:
        self.pool = pool
        self.store = pool.store
        self.options = pool.options

    def run_here(
        self,
        actor_type: str,
        actor_id: str,
        message_id: str,
        operation: str,
        arguments: str,
        traceparent: str | None,
        deadline: float | None = None,
        settled: Callable[[str], None] | None = None,
    ) -> tuple[MessageRow, TurnOutcome | None] | None:
        """Run a caller's message in the caller's own thread, if this process holds
        the actor and it has nothing else to do.

        The message is appended to the mailbox by its own turn's commit: one
        transaction, fenced by the lease and by the mailbox being empty, instead of an
        enqueue, two thread hand-offs and a turn commit. None when the actor is not
        held idle here, or when the fence refused (another message got in first, or
        the lease was lost): nothing was written, and the caller enqueues as usual.
        A commit that fails raises, as a failed enqueue would.

        The turn cannot be interrupted, so it runs here only when that operation's
        recent turns were short next to the time the call has left (``deadline``);
        otherwise a worker runs it while the caller waits no longer than its timeout.
        A commit still waiting for the database at the deadline finishes in the
        background: the outcome is then None (the caller raises ``CallTimeout``), and
        ``settled(message_id)`` is called once that commit ended.
        """
        pool = self.pool
        if not pool.runner.fits(actor_type, operation, deadline):
            return None
        act = pool.table.start_idle(
            actor_type,
            actor_id,
            # A limited type's turn runs only under a claim counted against its
            # limit (``store.limits``); its actors are never held idle anyway.
            lambda act: (
                (act.definition is None or act.definition.max_active_turns is None)
                and pool.running
                and not pool.stopping
            ),
        )
        if act is None:
            return None
        message = scheduled_message(
            message_id, act.pk, actor_type, actor_id, operation, arguments, None, 0, traceparent
        )
        message.seq, message.status = act.done_seq + 1, "queued"  # its commit appends it
        act.head_attempt = 1
        pool.instrument.turn_started(message, 1)
        outcome = pool.runner.run(act, message)
        pool.instrument.turn_executed(message, 1, outcome)
        faults.point("turn.executed")
        if outcome.kind == "retry" and self.options.max_attempts <= 1:
            outcome.kind = "dead"
        turn = [(act, message, outcome)]

        def body(tx: Tx) -> Committed:
            committed = pool.turn_commit.write(tx, act, message, outcome, False, direct=True)
            faults.point("commit.body")
            return committed

        started = time.perf_counter()
        if pool.turn_commit.is_one_statement(act, message, outcome, direct=True):

            def finish() -> Committed:
                self.store.turns.finish_direct(
                    act.lease,
                    message,
                    status=outcome.kind,
                    state=outcome.state if outcome.kind == "completed" else None,
                    state_version=act.definition.state_version if act.definition else 1,
                    result=outcome.result,
                    error=outcome.error,
                    lease_ms=self.options.lease_ms,
                    projection=None if outcome.staged is None else outcome.staged.projection,
                )
                return Committed(None, [], [])

            commit = _ran(finish)
        elif self.store.dialect.group_commit:  # the writer thread: wait no longer than due
            commit = self.store.transact_future(body, isolated=False)
        else:  # in this thread, its lock waits bounded by the call's deadline
            commit = _ran(lambda: self.store.transact(body, isolated=False))
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            commit.result(left)
        except FutureTimeout:
            # SQLite's writer waits for a lock another process holds: the caller stops
            # waiting at its deadline; the commit is settled when it ends, here.

            def settle_later() -> None:
                try:
                    self._settle_direct(act, message, outcome, turn, started, commit, False, body)
                finally:
                    if settled is not None:
                        settled(message.id)

            threading.Thread(target=settle_later, name="solid-direct-commit", daemon=True).start()
            return message, None
        except BaseException:
            pass
        if not self._settle_direct(act, message, outcome, turn, started, commit, body=body):
            return None
        return message, outcome

    def _settle_direct(
        self,
        act: Activation,
        message: MessageRow,
        outcome: TurnOutcome,
        turn: list[tuple[Activation, MessageRow, TurnOutcome]],
        started: float,
        commit: Future[Committed],
        waiting: bool = True,
        body: Callable[[Tx], Committed] | None = None,
    ) -> bool:
        """After a direct turn's commit ended: move the activation on, as a worker would.

        False when the fence refused (nothing was written); a failed commit raises,
        unless the caller has stopped ``waiting`` (then it is logged). A commit the
        database refused for what the turn wrote is recorded with ``body`` as the
        turn's failed attempt instead: the message becomes the actor's head, retried
        with backoff, and the caller waits for it like for any failure."""
        pool = self.pool
        try:
            committed = commit.result()
        except LeaseLost:
            # Nothing was written; the turn ran on the cached instance: rebuild it, and
            # read the mailbox before the next turn (another process may have sent).
            pool.instrument.committed(turn, [None], started)
            act.instance = None
            act.check_mailbox = True
            pool.table.finish(act, requeue=False)
            return False
        except BaseException as exc:
            if (
                body is not None
                and isinstance(exc, DB_ERRORS)
                and not self.store.unavailable(exc)
                and not getattr(exc, "commit_unknown", False)  # recording could run it twice
            ):
                refused(self.options, act, outcome, exc)
                recorded = _ran(lambda: self.store.transact(body, isolated=False))
                return self._settle_direct(act, message, outcome, turn, started, recorded, waiting)
            pool.instrument.committed(turn, None, started)
            if isinstance(exc, DatabaseError) and self.store.dialect.is_lock_timeout(exc.orig):
                # It gave up waiting for a lock at the call's deadline and wrote nothing:
                # the lease is still ours (releasing it would wait on the same lock).
                act.instance = None
                act.check_mailbox = True
                pool.table.finish(act, requeue=False)
            else:
                pool.drop(act, release=True)
            if waiting:
                raise
            log.warning("the commit of direct turn %s failed: %r", message.id, exc)
            return False
        faults.point("commit.committed")
        pool.instrument.committed(turn, [committed], started)
        if pool.settle(act, message, outcome, committed):
            pool.table.finish(act, requeue=False)
        pool.deliver(committed.due_now)
        return True


def _ran(commit: Callable[[], Committed]) -> Future[Committed]:
    """A commit made in this thread, as a completed future."""
    done: Future[Committed] = Future()
    try:
        done.set_result(commit())
    except BaseException as exc:
        done.set_exception(exc)
    return done
