"""How a caller waits for its message's outcome, and what it says when it times out.

:class:`Waiting` is a part of :class:`~solid_objects.engine.client.Client`: the wait
loops of both faces (one blocking, one awaiting) and the diagnosis a
:class:`~solid_objects.errors.CallTimeout` carries. A caller whose message runs in this
process is woken by the worker through :class:`Waiters` as soon as the turn commits;
otherwise it reads the message row as :class:`_Poll` decides.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import SQLAlchemyError

from ..errors import CallTimeout, DatabaseError
from ..options import Options
from ..store import Store
from ..store.store import TERMINAL
from .messages import InFlight, SentMessages, settle
from .outcomes import NUDGE, Outcome, Waiters
from .presence import SERVE_ADVICE
from .worker import WorkerPool

if TYPE_CHECKING:
    from ..ref import MessageReference

_FIRST_POLL = 0.002
_MAX_POLL = 0.05
#: When a worker of this process runs the message its future is resolved directly;
#: the database is read only as a safety net (the lease may be lost meanwhile).
_LOCAL_POLL = 0.25


class _Poll:
    """When a waiting caller reads the message row, and how long it sleeps between.

    A message a local worker runs is resolved through its future; the row is read
    only every ``_LOCAL_POLL`` as a safety net (the lease may be lost meanwhile).
    So is a message another process runs while this runtime listens for wake-ups
    (``notified``: NOTIFY on PostgreSQL, or Redis): that worker announces the
    finished message (``d:<id>``), which makes the waiter read the row at once.
    Otherwise the row is read with a backoff from 2 ms to 50 ms.
    """

    def __init__(
        self,
        waiters: Waiters,
        message_id: str,
        *,
        read_first: bool = False,
        notified: Callable[[], bool] = lambda: False,
    ) -> None:
        self._waiters = waiters
        self._id = message_id
        self._notified = notified
        self.delay = _FIRST_POLL
        # A wait that starts after the enqueue (``send().wait()``) may find the turn
        # already committed, its outcome handed to nobody: read the row at once.
        self._last_read = -_LOCAL_POLL if read_first else time.monotonic()

    def should_read(self) -> bool:
        where = self._waiters.where(self._id)
        now = time.monotonic()
        if where == "enqueueing":
            self.delay = min(self.delay * 2, _MAX_POLL)
            return False
        if where == "local" or self._notified():
            self.delay = _LOCAL_POLL
            if now - self._last_read < _LOCAL_POLL:
                return False
        else:
            self.delay = min(self.delay * 2, _MAX_POLL)
        self._last_read = now
        return True


@dataclass
class Listening:
    """What the runtime's wake-up listener tells waiters, set once it is connected.

    ``notified``: whether finished messages are announced to this process right now (the
    listener is connected), so waiters need not poll. ``connection``: which connection of
    the listener is up (it counts them), None while none is; a send remembers it, so a
    later wait knows no announcement was missed.
    """

    notified: Callable[[], bool] = lambda: False
    connection: Callable[[], int | None] = lambda: None


class Waiting:
    """A caller's wait for the outcome of a message, on either face.

    ``notified`` and ``listen_connection`` are asked each time: the runtime connects its
    wake-up listener after the client is built.
    """

    def __init__(
        self,
        store: Store,
        pool: WorkerPool,
        waiters: Waiters,
        options: Options,
        messages: SentMessages,
        in_flight: InFlight,
        listening: Listening,
    ) -> None:
        self.store = store
        self.pool = pool
        self.waiters = waiters
        self.options = options
        self.messages = messages
        self.in_flight = in_flight
        self.listening = listening

    def wait(
        self, message: MessageReference[Any], timeout: float | None, deadline: float | None = None
    ) -> Any:
        """Wait for the outcome until ``deadline`` (default: ``timeout`` from now)."""
        if not message.verified:
            self.messages.checked(message)
        limit, deadline, future, poll = self._begin(message, timeout, deadline)
        try:
            while True:
                remaining = deadline - time.monotonic()
                nudged = False
                try:
                    outcome = future.result(max(0.0, min(poll.delay, remaining)))
                    if outcome is not NUDGE:
                        return settle(message, outcome)
                    nudged = True
                    future = self.waiters.register(message.id)
                except FutureTimeout:
                    failed = future.exception() if future.done() else None
                    if failed is not None:  # a CallTimeout is a TimeoutError too
                        raise failed from failed.__cause__

                if nudged or poll.should_read():
                    stored = self.messages.poll_outcome(message.id)
                    if stored is not None:
                        return settle(message, stored)
                if remaining <= 0:
                    raise CallTimeout(self.diagnose(message.id, limit), message)
        finally:
            self.waiters.forget(message.id)

    async def wait_async(
        self,
        message: MessageReference[Any],
        timeout: float | None,
        run: Any,
        deadline: float | None = None,
    ) -> Any:
        """The asyncio wait: the same loop, awaiting instead of blocking."""
        if not message.verified:
            await run(self.messages.checked, message)
        limit, deadline, registered, poll = self._begin(message, timeout, deadline)
        future = asyncio.wrap_future(registered)
        try:
            while True:
                remaining = deadline - time.monotonic()
                done, _ = await asyncio.wait({future}, timeout=max(0.0, min(poll.delay, remaining)))
                nudged = False
                if done:
                    if future.result() is not NUDGE:
                        return settle(message, future.result())
                    nudged = True  # another process finished it: read the row now
                    future = asyncio.wrap_future(self.waiters.register(message.id))
                if nudged or poll.should_read():
                    outcome = await run(self.messages.poll_outcome, message.id)
                    if outcome is not None:
                        return settle(message, outcome)
                if remaining <= 0:
                    raise CallTimeout(await run(self.diagnose, message.id, limit), message)
        finally:
            self.waiters.forget(message.id)

    def _begin(
        self, message: MessageReference[Any], timeout: float | None, deadline: float | None
    ) -> tuple[float, float, Future[Outcome], _Poll]:
        """What both faces' waits start from: the limit, the deadline, the future the
        outcome arrives on (one registered before the enqueue is adopted), and when to
        read the row."""
        limit = self.options.call_timeout if timeout is None else timeout
        deadline = time.monotonic() + limit if deadline is None else deadline
        adopted = self.waiters.adopt(message.id, self.listening.connection())
        late = adopted is None  # not registered before its enqueue, nor remembered
        future = adopted or self.waiters.register(message.id)
        self._mark_if_local(message)
        poll = _Poll(
            self.waiters,
            message.id,
            read_first=self._may_be_done(message, late),
            notified=self.listening.notified,
        )
        return limit, deadline, future, poll

    def _may_be_done(self, message: MessageReference[Any], late: bool) -> bool:
        """Whether a waiter registered only now must read the row at once.

        A message sent earlier may have finished before anyone waited, its outcome
        handed to nobody. Unless a local worker still has it to run (the waiter is
        registered, so the worker will hand the outcome over): then no read is needed.
        """
        return late and not self.pool.table.pending_here(
            message.actor_type, message.actor_id, message.id
        )

    def _mark_if_local(self, message: MessageReference[Any]) -> None:
        """A message sent earlier to an actor this process runs: wait on the future."""
        if self.waiters.where(message.id) == "remote" and self.pool.table.holds_identity(
            message.actor_type, message.actor_id
        ):
            self.waiters.mark(message.id, local=True)

    def diagnose(self, message_id: str, waited: float) -> str:
        """Say what a timed-out call is waiting on, for the CallTimeout message.

        Never raises: a database that cannot answer is itself the answer.
        """
        head = f"message {message_id} did not finish within {waited:g}s"
        # Said of a transaction still open at the deadline, which may commit a moment
        # later (before the caller reads this): never "has not committed".
        if self.in_flight.committing_direct(message_id):
            return (
                f"{head}: its turn ran in the caller's thread (a direct turn) past the "
                "deadline, and the transaction that stores the message with its outcome "
                "had not committed when the deadline passed; it may have committed since: "
                f"status() of message {message_id} says ('enqueueing' while that "
                "transaction is open, then the outcome; MessageNotFound if it never "
                "committed)"
            )
        if self.in_flight.enqueueing(message_id):
            return (
                f"{head}: the transaction that enqueues it had not committed when the "
                "deadline passed (the database is busy, or another transaction holds a "
                "lock it needs); it may still commit, or have committed since, and the "
                f"message then runs once: status() of message {message_id} is 'enqueueing' "
                "while that transaction is open, and raises MessageNotFound if it never "
                "committed"
            )
        try:
            return self._diagnose(head, message_id)
        except (DatabaseError, SQLAlchemyError) as exc:
            return f"{head}; its state could not be read: {exc}"

    def _diagnose(self, head: str, message_id: str) -> str:
        with self.store.read() as tx:
            row = self.store.message(tx, message_id)
            if row is None:
                return f"{head}: the message does not exist (it was pruned, or never committed)"
            actor = self.store.actor_status(tx, row.actor_pk)
            gap = None
            if actor is not None and row.status == "queued" and row.seq == actor.done_seq + 1:
                gap = self.store.processes.missing_capability(
                    tx, row.actor_type, row.operation, actor.state_version, unserved=""
                )
        who = f"{row.actor_type} {row.actor_id!r}"
        if row.status in TERMINAL:
            return f"{head}: it finished as {row.status} just now"
        if actor is None:
            return f"{head}: {who} was destroyed"
        if row.status == "scheduled":
            return (
                f"{head}: it is delayed and enters the mailbox in "
                f"{(row.available_at - actor.now) / 1000:.1f}s"
            )
        ahead = (row.seq or 0) - actor.done_seq - 1
        parts = [f"{ahead} message(s) ahead of it in {who}'s mailbox"]
        if actor.paused:
            parts.append("the actor is paused")
        if actor.ready_at is not None and actor.ready_at > actor.now:
            parts.append(
                f"the head message failed {actor.attempt} time(s) and is retried in "
                f"{(actor.ready_at - actor.now) / 1000:.1f}s"
            )
        if gap:  # live processes serve the type, but none of them can run this message
            parts.append(
                f"waiting for a process that runs {gap} (a rolling deploy's old workers "
                "leave it for new ones; with none live it is a dead letter after "
                "incapable_timeout)"
            )
        elif actor.lease_owner is None:
            parts.append(self._unclaimed(row.actor_type))
        elif actor.lease_expires_at is not None and actor.lease_expires_at <= actor.now:
            parts.append(
                f"the lease of worker {actor.lease_owner} expired "
                f"{(actor.now - actor.lease_expires_at) / 1000:.1f}s ago; "
                "waiting for a worker to take over"
            )
        else:
            mine = " (this process)" if actor.lease_owner == self.pool.owner else ""
            parts.append(f"worker {actor.lease_owner}{mine} is running it")
        return f"{head}: " + "; ".join(parts)

    def _unclaimed(self, actor_type: str) -> str:
        """Why no worker holds an actor with queued work: none runs, none serves its type,
        or they are busy."""
        with self.store.read() as tx:
            served = self.store.processes.served_types(tx)
        if not served:
            return (
                "no worker holds the actor and no process running workers is alive: start "
                "`solid-objects worker module:runtime` (or a runtime with workers here)"
            )
        if not any(actor_type in types for types in served.values()):
            serving = sorted({t for types in served.values() for t in types})
            return (
                f"no live process serves actor type {actor_type!r} ({len(served)} live "
                f"worker process(es) serve {serving}): {SERVE_ADVICE}"
            )
        return "no worker has claimed the actor yet (workers are busy)"
