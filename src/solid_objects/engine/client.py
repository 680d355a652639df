"""The caller's side of the engine: enqueue, run a face's call, queries and snapshots.

Both faces (``Ref`` and ``AsyncRef``) call these plain synchronous methods;
the async face runs them in a thread pool. Its parts live beside it: who may do what
is :mod:`.access`, what a caller may learn about a sent message is :mod:`.messages`,
how a caller waits for an outcome (and what a timed-out call says) is :mod:`.waiting`.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, TypedDict

from sqlalchemy.exc import SQLAlchemyError

from .. import deadline as call_deadline
from .. import faults
from ..definition import ActorDefinition, Operation
from ..errors import (
    CallTimeout,
    DatabaseError,
    IdempotencyConflict,
    InvalidArguments,
    RuntimeClosed,
    RuntimeNotStarted,
)
from ..observability.events import IGNORE_ENQUEUE
from ..options import Options
from ..store import Enqueued, Store, Tx
from ..store.store import new_id
from . import calls, external
from .access import Access
from .enqueue_options import plain_enqueue, queue_fields
from .messages import InFlight, SentMessages
from .outcomes import Outcome, Waiters
from .reads import CommittedReads
from .transactions import OpenTransactions
from .waiting import Listening, Waiting
from .worker import WorkerPool

if TYPE_CHECKING:
    from ..ref import Call, CallOptions

log = logging.getLogger("solid_objects.client")


class _MessageFields(TypedDict):
    """The keyword arguments every store enqueue takes (see :meth:`Client._message_fields`)."""

    message_id: str
    actor_type: str
    actor_id: str
    operation: str
    arguments: str
    traceparent: str | None
    #: The runtime's ``max_mailbox_length`` (None: unbounded).
    max_length: int | None


class Client:
    """The engine's face to callers, composed of the parts each concern lives in:
    ``access`` (the policies), ``messages`` (reads of sent messages), ``waiting`` (a
    caller's wait for an outcome), ``reads`` (committed state: ``snapshot``,
    ``@query``); the enqueue paths are here."""

    def __init__(self, store: Store, pool: WorkerPool, waiters: Waiters, options: Options) -> None:
        self.store = store
        self.pool = pool
        self.waiters = waiters
        self.options = options
        self._schema_checked = False
        #: The runtime's lifecycle, for what a refused call says: new, running,
        #: stopped or closed.
        self.state = "new"
        self.in_flight = InFlight()
        #: Who holds SQLite's write lock through a connection the library can see.
        self.transactions = OpenTransactions()
        #: Set by the runtime once its wake-up listener exists.
        self.listening = Listening()
        self.access = Access(options)
        self.messages = SentMessages(store, options, self.access, self.in_flight)
        self.waiting = Waiting(
            store, pool, waiters, options, self.messages, self.in_flight, self.listening
        )
        self.reads = CommittedReads(store, options, self.access, self.ensure_schema)

    def ensure_schema(self) -> None:
        if not self._schema_checked:
            self.store.check_installed()
            self._schema_checked = True

    def schema_installed(self) -> None:
        """The runtime just installed the tables: no need to check them."""
        self._schema_checked = True

    # --- a face's call, run ------------------------------------------------------------

    def call(self, call: Call, reference: calls.Reference) -> Any:
        """Run a face's call and return its committed result (``engine.calls``)."""
        return calls.run(self, call, reference)

    async def call_async(
        self, call: Call, reference: calls.Reference, offload: calls.Offload
    ) -> Any:
        """:meth:`call` for the async face: blocking steps go through ``offload``."""
        return await calls.run_async(self, call, reference, offload)

    def send_call(self, call: Call) -> str:
        """Enqueue a face's send; the message id once committed (``engine.calls``)."""
        return self.send(*calls.send_arguments(calls.prepare_send(self, call)))

    async def send_call_async(self, call: Call, offload: calls.Offload) -> str:
        """:meth:`send_call` for the async face: the enqueue goes through ``offload``."""
        prepared = calls.prepare_send(self, call)  # on the caller's own thread
        return str(await offload(self.send, *calls.send_arguments(prepared)))

    # --- enqueue ----------------------------------------------------------------------

    def send(
        self,
        definition: ActorDefinition,
        actor_id: str,
        operation: Operation,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        options: CallOptions,
        *,
        register_waiter: bool = False,
    ) -> str:
        """Validate, then durably enqueue; return the message id once committed.

        With an idempotency key that was used before, the id is the earlier message's.
        """
        arguments = self.access.authorized_arguments(
            definition, actor_id, operation, args, kwargs, options
        )
        message_id = new_id()
        if options.connection is not None:
            return self._send_in(definition, actor_id, operation, options, message_id, arguments)
        if register_waiter:
            self.waiters.register(message_id, enqueueing=True)
        elif (connection := self.listening.connection()) is not None:
            self.waiters.sent(message_id, connection)  # its outcome's announcement is kept
        try:
            enqueued = self._keyed(
                lambda: self._enqueue(
                    definition, actor_id, operation, options, message_id, arguments
                ).result(),
                options,
            )
        except BaseException:
            self.waiters.forget(message_id)
            raise
        if enqueued.existing:
            self.waiters.forget(message_id)
            if register_waiter:
                self.waiters.register(enqueued.message.id)
        return enqueued.message.id

    def _keyed(self, enqueue: Callable[[], Enqueued], options: CallOptions) -> Enqueued:
        """Run ``enqueue``; a key that resolves to an earlier message shows it (its id,
        its outcome, its stored call in an :class:`IdempotencyConflict`) only to a
        caller who may read that message, as ``runtime.message(id)`` would ask."""
        try:
            enqueued = enqueue()
        except IdempotencyConflict as exc:
            existing, exc.existing = exc.existing, None
            if existing is None:
                raise
            conflict = exc
        else:
            if enqueued.existing:
                self.access.may_read(enqueued.message, options.authorization)
            return enqueued
        # Outside the except: a refusal must not carry the conflict as its context.
        self.access.may_read(existing, options.authorization)
        raise conflict

    def start_call(
        self,
        definition: ActorDefinition,
        actor_id: str,
        operation: Operation,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        options: CallOptions,
        deadline: float | None = None,
    ) -> str:
        """Enqueue for a caller that waits for the outcome, without waiting for the enqueue.

        The caller sleeps once, until the result arrives: the enqueue's commit routes
        the message to a local worker from the commit thread, and an enqueue error
        (or timeout) reaches the caller through the same future as the outcome.
        ``deadline`` (``time.monotonic()``, see :meth:`deadline_for`) bounds the lock
        waits of the transactions made here; one that gives up raises CallTimeout.
        """
        with call_deadline.bounded(deadline):
            try:
                return self._start_call(
                    definition, actor_id, operation, args, kwargs, options, deadline
                )
            except DatabaseError as exc:
                raise self._lock_timeout(exc) from exc

    def deadline_for(self, timeout: float | None) -> float:
        """When a call made now with ``timeout`` (default ``call_timeout``) must end."""
        return time.monotonic() + (self.options.call_timeout if timeout is None else timeout)

    def _lock_timeout(self, exc: DatabaseError) -> Exception:
        """A call's enqueue that gave up waiting for a lock is a CallTimeout: it wrote nothing."""
        if not self.store.dialect.is_lock_timeout(exc.orig):
            return exc
        return CallTimeout(
            "the call's enqueue waited for a lock held by another transaction until the "
            f"call's deadline and gave up: nothing was written ({exc})"
        )

    def _start_call(
        self,
        definition: ActorDefinition,
        actor_id: str,
        operation: Operation,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        options: CallOptions,
        deadline: float | None,
    ) -> str:
        if options.connection is not None:
            raise InvalidArguments(
                "a call with connection= cannot wait for its result: the message exists "
                "only once the application commits; use .send(...) and wait after the commit"
            )
        if options.idempotency_key is not None:  # may resolve to an earlier message
            return self.send(
                definition, actor_id, operation, args, kwargs, options, register_waiter=True
            )
        message_id = new_id()
        future = self.waiters.register(message_id, enqueueing=True)
        self.in_flight.start(message_id)
        try:
            arguments = self.access.authorized_arguments(
                definition, actor_id, operation, args, kwargs, options
            )
            observed = self.pool.instrument.enqueue(
                definition.actor_type, operation.name, message_id
            )
            if options.delay <= 0 and self._run_here(
                definition, actor_id, operation, arguments, message_id, future, observed, deadline
            ):
                return message_id  # committed, or its commit ends later (in_flight)
            enqueue = self._enqueue(
                definition, actor_id, operation, options, message_id, arguments, observed
            )
        except BaseException:
            self.in_flight.end(message_id)
            self.waiters.forget(message_id)
            raise

        def failed(done: Future[Enqueued]) -> None:
            self.in_flight.end(message_id)
            exc = done.exception()
            if exc is not None and not future.done():
                if isinstance(exc, DatabaseError):
                    exc = self._lock_timeout(exc)
                future.set_exception(exc)

        enqueue.add_done_callback(failed)
        return message_id

    def _send_in(
        self,
        definition: ActorDefinition,
        actor_id: str,
        operation: Operation,
        options: CallOptions,
        message_id: str,
        arguments: str,
    ) -> str:
        """Enqueue in the application's transaction; wake workers after its commit."""
        plain_enqueue(options)  # refuses what cannot be combined, before anything is written
        joined = external.resolve(options.connection)
        self.ensure_schema()
        observed = self.pool.instrument.enqueue(definition.actor_type, operation.name, message_id)
        done: Future[Enqueued] = Future()
        try:
            with joined.transaction() as (dbapi_connection, driver_connection):
                enqueued = self._keyed(
                    lambda: self.store.enqueue_on(
                        joined.dialect_name,
                        dbapi_connection,
                        driver_connection,
                        **self._message_fields(
                            definition, actor_id, operation, message_id, arguments
                        ),
                        **queue_fields(options),
                    ),
                    options,
                )
        except BaseException as exc:
            done.set_exception(exc)
            observed(done)
            raise
        done.set_result(enqueued)
        observed(done)
        joined.after_commit(self._committed_elsewhere)
        return enqueued.message.id

    def _message_fields(
        self,
        definition: ActorDefinition,
        actor_id: str,
        operation: Operation,
        message_id: str,
        arguments: str,
    ) -> _MessageFields:
        """The fields every enqueue writes, so each path names them the same way once."""
        return _MessageFields(
            message_id=message_id,
            actor_type=definition.actor_type,
            actor_id=actor_id,
            operation=operation.name,
            arguments=arguments,
            traceparent=self.pool.instrument.traceparent(message_id),
            max_length=self.options.max_mailbox_length,
        )

    def _committed_elsewhere(self) -> None:
        """An application transaction holding a message committed: tell the workers."""
        if self.store.publish is not None:
            self.store.publish("w")
        self.pool.poller.wake()

    def _enqueue(
        self,
        definition: ActorDefinition,
        actor_id: str,
        operation: Operation,
        options: CallOptions,
        message_id: str,
        arguments: str,
        observed: Callable[[Future[Any]], None] | None = None,
    ) -> Future[Enqueued]:
        """Enqueue arguments already encoded and authorized."""
        plain = plain_enqueue(options)
        self.ensure_schema()
        # A type with a turn limit is claimed by the poller alone, under its type lock.
        claim = (
            self.pool.running and self.options.workers > 0 and definition.max_active_turns is None
        )

        # An actor this process holds: no claim to consider (two statements).
        held = (
            plain
            and self.store.dialect.update_returning
            and self.pool.table.holds_identity(definition.actor_type, actor_id)
        )

        if observed is None:
            observed = self.pool.instrument.enqueue(
                definition.actor_type, operation.name, message_id
            )
        fields = self._message_fields(definition, actor_id, operation, message_id, arguments)

        def body(tx: Tx) -> Enqueued:
            if held:  # the warm path: no claim to consider, two statements
                message = self.store.mailbox.enqueue_to_held(
                    tx, **fields, priority=options.priority
                )
                if message is not None:
                    faults.point("enqueue.body")
                    return Enqueued(message, existing=False, claimed=None)
            enqueued = self.store.mailbox.enqueue(
                tx,
                **fields,
                **queue_fields(options),
                claim_for=self.pool.owner if claim else None,
                lease_ms=self.options.lease_ms,
            )
            faults.point("enqueue.body")
            return enqueued

        one_statement = None
        if self.store.dialect.writable_cte and plain:
            if options.delay <= 0:

                def one_statement(tx: Tx) -> Enqueued | None:
                    # Its own transaction: a crash just before it, as one inside a
                    # transaction after its writes, leaves nothing written.
                    faults.point("enqueue.body")
                    return self.store.mailbox.enqueue_in_one_statement(
                        tx,
                        **fields,
                        priority=options.priority,
                        held=held,
                        claim_for=self.pool.owner if claim else None,
                        lease_ms=self.options.lease_ms,
                    )

        # Every enqueue may share a transaction with others made meanwhile, to any actor
        # (the servers' group commit, ``EnqueueBatcher``): the key orders the batch. One
        # that runs alone is one autocommit statement where it can be (PostgreSQL).
        future = self._resolved(
            self.store.transact_future(
                body,
                isolated=False,
                key=(definition.actor_type, actor_id),
                one_statement=one_statement,
            ),
            message_id,
        )
        future.add_done_callback(observed)
        future.add_done_callback(
            functools.partial(self._route, carry=options.coalesce_key is None)
        )
        return future

    def _resolved(self, future: Future[Enqueued], message_id: str) -> Future[Enqueued]:
        """An enqueue whose COMMIT had an unknown outcome, resolved by reading its row.

        The message's id was chosen before the transaction, so finding the row proves
        the enqueue committed: the call goes on as if COMMIT had answered. Not finding
        it proves nothing (the COMMIT may still be landing), so the error stands, with
        ``commit_unknown``. Only the servers' enqueues finish before this returns; the
        SQLite writer's COMMIT has no unknown outcome (the database is local).
        """
        if not future.done():
            return future
        exc = future.exception()
        if not isinstance(exc, DatabaseError) or not exc.commit_unknown:
            return future
        try:
            with self.store.read() as tx:
                row = self.store.message(tx, message_id)
        except (DatabaseError, SQLAlchemyError):
            return future
        if row is None:
            return future
        log.warning("the enqueue of %s committed although its COMMIT failed (%r)", row.id, exc)
        found: Future[Enqueued] = Future()
        found.set_result(Enqueued(row, existing=False, claimed=None))
        return found

    def _run_here(
        self,
        definition: ActorDefinition,
        actor_id: str,
        operation: Operation,
        arguments: str,
        message_id: str,
        future: Future[Outcome],
        observed: Callable[[Future[Any]], None],
        deadline: float | None,
    ) -> bool:
        """A call to an actor this process holds idle: run it in this thread, one commit.

        True when the message was committed that way (its outcome, or its first
        retryable failure, is recorded); False when the caller must enqueue it.
        ``async def`` operations always go to a worker: this thread may be running
        an event loop of its own.
        """
        if not operation.is_async and self.pool.table.holds_identity(
            definition.actor_type, actor_id
        ):
            try:
                ran = self.pool.direct.run_here(
                    definition.actor_type,
                    actor_id,
                    message_id,
                    operation.name,
                    arguments,
                    self.pool.instrument.traceparent(message_id),
                    deadline,
                    self._direct_settled,
                )
            except BaseException as exc:
                if observed is not IGNORE_ENQUEUE:
                    failed: Future[Enqueued] = Future()
                    failed.set_exception(exc)
                    observed(failed)
                raise
            if ran is None:
                return False
            message, outcome = ran
            if outcome is None:  # its commit outlived the deadline: wait() says so
                self.in_flight.outlived(message_id)
                return True
            self.in_flight.end(message_id)
            if observed is not IGNORE_ENQUEUE:
                enqueued: Future[Enqueued] = Future()
                enqueued.set_result(Enqueued(message, existing=False, claimed=None))
                observed(enqueued)
            if outcome.kind == "retry":  # recorded as the actor's head, retried by a worker
                self.waiters.mark(message_id, local=False)
                self.pool.poller.wake()
            else:
                future.set_result(Outcome(outcome.kind, outcome.result, outcome.error))
            return True
        return False

    def _direct_settled(self, message_id: str) -> None:
        """A direct turn's commit that outlived the caller's deadline ended."""
        self.in_flight.end(message_id)

    def _route(self, done: Future[Enqueued], *, carry: bool = True) -> None:
        """After the enqueue committed: hand the message to a local worker if we hold it
        (without ``carry``, only a signal: a keyed message is read once it is the head,
        ``store.coalescing``)."""
        if done.exception() is not None:
            return
        faults.point("enqueue.committed")
        enqueued = done.result()
        message = enqueued.message
        if enqueued.claimed is not None:
            self.waiters.mark(message.id, local=True)
            self.pool.adopt(enqueued.claimed)
        elif message.status == "queued" and self.pool.table.signal(
            message.actor_pk, message if carry else None
        ):
            self.waiters.mark(message.id, local=True)
        else:
            self.waiters.mark(message.id, local=False)
            self.pool.poller.wake()

    def require_workers(self) -> None:
        """Refuse a call that would wait for workers this runtime does not run; say why."""
        if self.options.workers == 0 or self.pool.running:
            return
        if self.state == "closed":
            raise RuntimeClosed(
                "this runtime was closed (by close(), or at the end of its `with runtime:` "
                "block), so it runs no workers: start it again with runtime.start() or a "
                "new `with runtime:` block (`async with` for AsyncRuntime) before calling"
            )
        if self.state == "stopped":
            raise RuntimeNotStarted(
                "this runtime's workers were stopped (runtime.stop()): start them again "
                "with runtime.start() before calling"
            )
        raise RuntimeNotStarted(
            "this runtime runs no workers yet: use `with runtime:` (or runtime.start()) "
            "before calling, or create it with workers=0 if other processes run them"
        )

    def destroy(self, definition: ActorDefinition, actor_id: str, *, context: Any = None) -> bool:
        """Checked before the actor is looked up: denied, a missing and an existing
        actor look the same."""
        self.access.authorize("destroy", context, definition.actor_type, actor_id)
        self.ensure_schema()
        observed = definition.observables is not None
        destroyed = self.store.transact(
            lambda tx: self.store.destroy(tx, definition.actor_type, actor_id, observed=observed)
        )
        if destroyed and observed:
            self.pool.broadcasted(definition.actor_type, actor_id)
        return destroyed
