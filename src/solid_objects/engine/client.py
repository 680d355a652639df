"""The caller's side of the engine: authorize, enqueue, read outcomes, queries.

Both faces (``Ref`` and ``AsyncRef``) call these plain synchronous methods;
the async face runs them in a thread pool. How a caller waits for an outcome
(and what a timed-out call says) is :mod:`.waiting`, mixed into :class:`Client`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NoReturn, TypedDict

from sqlalchemy.exc import SQLAlchemyError

from .. import deadline as call_deadline
from .. import faults
from ..authorization import (
    TRUSTED_BY_DEFAULT,
    AuthorizationRequest,
    Kind,
    answer,
    option_name,
    unwrap,
)
from ..codec import decode_json
from ..definition import ActorDefinition, Operation
from ..errors import (
    ActorDestroyed,
    CallTimeout,
    ConfigurationError,
    DatabaseError,
    IdempotencyConflict,
    InvalidArguments,
    InvalidState,
    MessageCancelled,
    MessageNotFound,
    MessagePending,
    QueryMutatedState,
    RuntimeClosed,
    RuntimeNotStarted,
    Unauthorized,
    error_from_document,
)
from ..observability.events import IGNORE_ENQUEUE
from ..options import Options
from ..store import Enqueued, Store, Tx
from ..store.store import TERMINAL, MessageRow, new_id
from . import calls, external
from .outcomes import Outcome, Waiters
from .snapshots import check_include, derived_values
from .transactions import OpenTransactions
from .waiting import Waiting
from .worker import WorkerPool

if TYPE_CHECKING:
    from ..ref import Call, CallOptions, MessageReference

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


class _QueueFields(TypedDict):
    """What a caller's options add to an enqueue that may wait or be deduplicated."""

    idempotency_key: str | None
    delay_ms: int


def _queue_fields(options: CallOptions) -> _QueueFields:
    """The options' part of an enqueue, converted the one way the store takes it."""
    return _QueueFields(idempotency_key=options.idempotency_key, delay_ms=int(options.delay * 1000))


class Client(Waiting):
    def __init__(self, store: Store, pool: WorkerPool, waiters: Waiters, options: Options) -> None:
        self.store = store
        self.pool = pool
        self.waiters = waiters
        self.options = options
        self._schema_checked = False
        #: The runtime's lifecycle, for what a refused call says: new, running,
        #: stopped or closed.
        self.state = "new"
        #: Messages whose enqueue (or direct turn's commit) this process started and that
        #: has not ended yet: not in the database yet, but not lost either.
        self._enqueueing: set[str] = set()
        #: Those of them whose direct turn ran and whose commit outlived the deadline.
        self._committing_direct: set[str] = set()
        self._direct_lock = threading.Lock()
        #: Who holds SQLite's write lock through a connection the library can see.
        self.transactions = OpenTransactions()
        #: Whether finished messages are announced to this process right now (the
        #: runtime's wake-up listener is connected): waiters then need not poll.
        self.notified: Callable[[], bool] = lambda: False
        #: Which connection of the wake-up listener is up (it counts them), None while
        #: none is: a send remembers it, so a later wait knows no announcement was missed.
        self.listen_connection: Callable[[], int | None] = lambda: None

    def ensure_schema(self) -> None:
        if not self._schema_checked:
            self.store.check_installed()
            self._schema_checked = True

    # --- authorization ----------------------------------------------------------------

    def authorize(
        self,
        kind: Kind,
        context: Any,
        actor_type: str,
        actor_id: str,
        operation: str | None = None,
        arguments: str | None = None,
        *,
        message_id: str | None = None,
        shown: str | None = None,
    ) -> None:
        """The one check every call passes, before it touches the database.

        Raises Unauthorized unless the ``authorize_<kind>`` policy answers True (or
        none is configured and the kind is trusted by default). ``arguments`` is the
        call's encoded JSON, so the policy sees exactly what would be stored.
        ``shown`` names the target in the error instead of the request (a read of a
        stored message must not reveal whose it is).
        """
        policy = getattr(self.options, option_name(kind))
        context, untrusted = unwrap(context)
        if policy is None:
            if kind in TRUSTED_BY_DEFAULT and not untrusted:
                return
            reason = f"no {option_name(kind)} policy is configured, and the default denies"
            if untrusted:
                reason = (
                    f"no {option_name(kind)} policy is configured, and a ref built from "
                    f"request data is denied by default: configure Runtime({option_name(kind)}"
                    "=...) (docs/security.md), or opt in to allowing every caller with the "
                    "integration's allow_all_callers=True (Django: SOLID_OBJECTS"
                    "['ALLOW_ALL_CALLERS'])"
                )
        else:
            decoded = decode_json(arguments) if arguments is not None else None
            request = AuthorizationRequest(
                kind,
                context,
                actor_type,
                actor_id,
                operation,
                MappingProxyType(decoded if isinstance(decoded, dict) else {}),
                message_id,
            )
            try:
                verdict = answer(policy, request)
            except ConfigurationError:
                raise
            except Exception as exc:  # a policy that fails denies
                log.warning("the %s policy raised %r; denying", option_name(kind), exc)
                verdict = exc
            if verdict is True:
                return
            reason = f"the {option_name(kind)} policy does not allow it"
        target = shown or f"{actor_type}({actor_id!r})" + (f".{operation}" if operation else "")
        self._deny(kind, target, reason, actor_type)

    def _authorized_arguments(
        self,
        definition: ActorDefinition,
        actor_id: str,
        operation: Operation,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        options: CallOptions,
    ) -> str:
        """A message's arguments, encoded as they will be stored, once its policy allowed them."""
        arguments = operation.encode_arguments(args, kwargs, limit=self.options.max_payload_bytes)
        self.authorize(
            "message",
            options.authorization,
            definition.actor_type,
            actor_id,
            operation.name,
            arguments,
        )
        return arguments

    def _deny(self, kind: Kind, target: str, reason: str, actor_type: str) -> NoReturn:
        log.info(
            "denied %s %s",
            kind,
            target,
            extra={"solid_action": "call_denied", "actor_type": actor_type},
        )
        raise Unauthorized(f"{kind} {target} is not allowed: {reason}")

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
        arguments = self._authorized_arguments(
            definition, actor_id, operation, args, kwargs, options
        )
        message_id = new_id()
        if options.connection is not None:
            return self._send_in(definition, actor_id, operation, options, message_id, arguments)
        if register_waiter:
            self.waiters.register(message_id, enqueueing=True)
        elif (connection := self.listen_connection()) is not None:
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
                self._may_read(enqueued.message, options.authorization)
            return enqueued
        # Outside the except: a refusal must not carry the conflict as its context.
        self._may_read(existing, options.authorization)
        raise conflict

    def _may_read(self, row: MessageRow, context: Any, shown: str | None = None) -> None:
        """Refuse, revealing nothing, a caller the policy does not let read ``row``: it is
        asked with the *stored* request, so holding an id or a key is never enough."""
        self.authorize(
            "message",
            context,
            row.actor_type,
            row.actor_id,
            row.operation,
            row.arguments,
            message_id=row.id,
            shown=shown or f"the {row.actor_type} message under this idempotency key",
        )

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
        self._enqueueing.add(message_id)
        try:
            arguments = self._authorized_arguments(
                definition, actor_id, operation, args, kwargs, options
            )
            observed = self.pool.instrument.enqueue(
                definition.actor_type, operation.name, message_id
            )
            if options.delay <= 0 and self._run_here(
                definition, actor_id, operation, arguments, message_id, future, observed, deadline
            ):
                return message_id  # committed, or its commit ends later (_enqueueing)
            enqueue = self._enqueue(
                definition, actor_id, operation, options, message_id, arguments, observed
            )
        except BaseException:
            self._enqueueing.discard(message_id)
            self.waiters.forget(message_id)
            raise

        def failed(done: Future[Enqueued]) -> None:
            self._enqueueing.discard(message_id)
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
                        **_queue_fields(options),
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
        self.ensure_schema()
        claim = self.pool.running and self.options.workers > 0

        # An actor this process holds: no claim to consider (two statements).
        held = (
            options.idempotency_key is None
            and options.delay <= 0
            and self.store.dialect.update_returning
            and self.pool.holds_identity(definition.actor_type, actor_id)
        )

        if observed is None:
            observed = self.pool.instrument.enqueue(
                definition.actor_type, operation.name, message_id
            )
        fields = self._message_fields(definition, actor_id, operation, message_id, arguments)

        def body(tx: Tx) -> Enqueued:
            if held:  # the warm path: no claim to consider, two statements
                message = self.store.enqueue_to_held(tx, **fields)
                if message is not None:
                    faults.point("enqueue.body")
                    return Enqueued(message, existing=False, claimed=None)
            enqueued = self.store.enqueue(
                tx,
                **fields,
                **_queue_fields(options),
                claim_for=self.pool.owner if claim else None,
                lease_ms=self.options.lease_ms,
            )
            faults.point("enqueue.body")
            return enqueued

        # Every enqueue may share a transaction with others made meanwhile, to any actor
        # (the servers' group commit, ``EnqueueBatcher``): the key orders the batch.
        future = self._resolved(
            self.store.transact_future(body, isolated=False, key=(definition.actor_type, actor_id)),
            message_id,
        )
        future.add_done_callback(observed)
        future.add_done_callback(self._route)
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
        if not operation.is_async and self.pool.holds_identity(definition.actor_type, actor_id):
            try:
                ran = self.pool.run_here(
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
                with self._direct_lock:
                    if message_id in self._enqueueing:
                        self._committing_direct.add(message_id)
                return True
            self._enqueueing.discard(message_id)
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
        with self._direct_lock:
            self._enqueueing.discard(message_id)
            self._committing_direct.discard(message_id)

    def _route(self, done: Future[Enqueued]) -> None:
        """After the enqueue committed: hand the message to a local worker if we hold it."""
        if done.exception() is not None:
            return
        faults.point("enqueue.committed")
        enqueued = done.result()
        message = enqueued.message
        if enqueued.claimed is not None:
            self.waiters.mark(message.id, local=True)
            self.pool.adopt(enqueued.claimed)
        elif message.status == "queued" and self.pool.signal(message.actor_pk, message):
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

    # --- outcomes ---------------------------------------------------------------------

    def outcome(self, message_id: str) -> Outcome | None:
        """The stored terminal outcome, or None while the message is pending."""
        with self.store.read() as tx:
            row = self.store.message(tx, message_id)
        if row is None:
            if message_id in self._enqueueing:
                return None
            raise MessageNotFound(f"no message {message_id!r} (never sent, or pruned)")
        if row.status not in TERMINAL:
            return None
        return Outcome(row.status, row.result, row.error)

    def poll_outcome(self, message_id: str) -> Outcome | None:
        """:meth:`outcome` for a waiting caller: a failed read is retried, not raised.

        The message is durable; a dropped connection or a restarting server must not
        turn a call that will complete into an error. The deadline still applies.
        """
        try:
            return self.outcome(message_id)
        except (DatabaseError, SQLAlchemyError) as exc:
            log.debug("reading message %s failed (%r); will retry", message_id, exc)
            return None

    def read_message(
        self,
        message_id: str,
        actor_type: str,
        actor_id: str | None,
        operation: str | None,
        context: Any,
    ) -> MessageRow:
        """The stored message a reference names, once it is shown to be the caller's to read.

        The reference's actor type (and actor id and operation, when it claims them)
        must match the stored request, and ``authorize_message`` is asked again with
        the stored operation and arguments: holding a message id is not enough to read
        another actor's outcome. With a policy configured, a missing message is refused
        exactly like one the caller may not read, so ids cannot be probed.
        """
        with self.store.read() as tx:
            row = self.store.message(tx, message_id)
        shown = f"{message_id!r} of {actor_type}"
        matches = (
            row is not None
            and row.actor_type == actor_type
            and actor_id in (None, row.actor_id)
            and operation in (None, row.operation)
        )
        if row is None or not matches:
            guarded = self.options.authorize_message is not None
            if guarded:  # asked as for a stored message, so the time taken tells nothing
                self._ask_anyway(context, actor_type, actor_id, operation, message_id)
            if not guarded and (row is None or (actor_id is None and row.actor_type != actor_type)):
                raise MessageNotFound(f"no {actor_type} message {message_id!r}")
            reason = (
                "the authorize_message policy does not allow it"
                if guarded
                else "the reference does not match the stored message"
            )
            self._deny("message", shown, reason, actor_type)
        self._may_read(row, context, shown)
        return row

    def _ask_anyway(
        self,
        context: Any,
        actor_type: str,
        actor_id: str | None,
        operation: str | None,
        message_id: str,
    ) -> None:
        """Ask ``authorize_message`` about a message that is not there, and ignore the
        answer: a missing id costs the policy's time like a refused one."""
        policy = self.options.authorize_message
        if policy is None:
            return
        request = AuthorizationRequest(
            "message", unwrap(context)[0], actor_type, actor_id or "", operation, {}, message_id
        )
        try:
            answer(policy, request)
        except Exception:  # a policy that fails denies; the caller is refused anyway
            pass

    def checked(self, message: MessageReference[Any]) -> MessageRow:
        """:meth:`read_message` for a reference, with the context it carries."""
        return self.read_message(
            message.id,
            message.actor_type,
            message.actor_id,
            message.operation,
            message.authorization,
        )

    def status(self, message: MessageReference[Any]) -> str:
        try:
            return self.checked(message).status
        except MessageNotFound:
            if message.id in self._enqueueing:  # a timed-out call's enqueue, still open
                return "enqueueing"
            raise

    def cancel(self, message: MessageReference[Any]) -> bool:
        """Cancel a message that has not started (see ``Store.cancel``)."""
        self.checked(message)
        return self.cancel_id(message.id)

    def cancel_id(self, message_id: str) -> bool:
        done = self.store.transact(lambda tx: self.store.cancel(tx, message_id))
        if done is None:
            raise MessageNotFound(f"no message {message_id}")
        return done[1]

    @staticmethod
    def settle(message: MessageReference[Any], outcome: Outcome) -> Any:
        """The value a caller gets for a terminal outcome, or the exception it raises."""
        if outcome.status == "completed":
            return message._operation.decode_result(outcome.result)
        if outcome.status == "cancelled":
            raise MessageCancelled(f"message {message.id} was cancelled before it ran")
        if outcome.status == "destroyed":
            raise ActorDestroyed(
                f"{message.actor_type} {message.actor_id!r} was destroyed before message "
                f"{message.id} ran"
            )
        document = decode_json(outcome.error) or {}
        raise error_from_document(message.id, document, rejected=outcome.status == "rejected")

    def result(self, message: MessageReference[Any]) -> Any:
        row = self.checked(message)
        outcome = Outcome(row.status, row.result, row.error) if row.status in TERMINAL else None
        if outcome is None:
            raise MessagePending(f"message {message.id} has not finished; use wait()")
        return self.settle(message, outcome)

    # --- reads of committed state -----------------------------------------------------

    def load_state(self, definition: ActorDefinition, actor_id: str) -> dict[str, Any]:
        self.ensure_schema()
        with self.store.read() as tx:
            found = self.store.actor_state(tx, definition.actor_type, actor_id)
        if found is None:
            return definition.default_state()
        return definition.load_state(found[0], found[1])

    def snapshot(
        self,
        definition: ActorDefinition,
        actor_id: str,
        *,
        context: Any = None,
        include: Iterable[str] = (),
    ) -> dict[str, Any]:
        names = check_include(definition, include)
        self.authorize("query", context, definition.actor_type, actor_id)
        state = self.load_state(definition, actor_id)
        shown: dict[str, Any] = definition.state.dump_python(state, mode="json")
        if names:
            shown.update(
                derived_values(self, definition, actor_id, state, names, context=context)
            )
        return shown

    def query(
        self,
        definition: ActorDefinition,
        actor_id: str,
        operation: Operation,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        *,
        context: Any = None,
    ) -> Any:
        """Run a ``@query`` on a throwaway instance holding the committed state."""
        encoded = operation.encode_arguments(args, kwargs, limit=self.options.max_payload_bytes)
        self.authorize("query", context, definition.actor_type, actor_id, operation.name, encoded)
        arguments = operation.decode_arguments(encoded)
        state = self.load_state(definition, actor_id)
        instance = definition.instantiate(actor_id, state)
        limit = self.options.max_state_bytes
        before = definition.dump_state(state, limit=limit)
        value = operation.function(instance, **arguments)
        if inspect.isawaitable(value):
            value = asyncio.run(value)  # type: ignore[arg-type]
        try:
            after = definition.dump_state(definition.capture_state(instance), limit=limit)
        except (InvalidArguments, InvalidState):  # changed, and into something invalid
            after = None
        if after != before:
            raise QueryMutatedState(
                f"@query {definition.actor_type}.{operation.name} changed the actor's state; "
                "a query's changes are never committed: make it an operation"
            )
        return operation.decode_result(
            operation.encode_result(value, limit=self.options.max_result_bytes)
        )

    def destroy(self, definition: ActorDefinition, actor_id: str, *, context: Any = None) -> bool:
        """Checked before the actor is looked up: denied, a missing and an existing
        actor look the same."""
        self.authorize("destroy", context, definition.actor_type, actor_id)
        self.ensure_schema()
        observed = definition.observables is not None
        destroyed = self.store.transact(
            lambda tx: self.store.destroy(tx, definition.actor_type, actor_id, observed=observed)
        )
        if destroyed and observed:
            self.pool.broadcasted(definition.actor_type, actor_id)
        return destroyed
