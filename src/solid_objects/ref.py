"""References: the user-facing handles on actors and their messages.

``Ref`` / ``AsyncRef`` address one actor; ``ref.add(n=1)`` waits for the
committed result, ``ref.add.send(n=1)`` returns a ``MessageReference`` after
the durable enqueue, and ``ref.call(Counter.add, n=1)`` is the same call in a
form type checkers understand. The async classes mirror the sync ones name
for name; both delegate every database step to the runtime's engine.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import timedelta
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Generic,
    ParamSpec,
    Protocol,
    Self,
    TypeVar,
    overload,
)

from . import staging
from .call_options import Call as Call
from .call_options import CallOptions as CallOptions
from .call_options import keep_untrusted
from .codec import check_identifier
from .definition import ActorDefinition, Operation, operation_of
from .definition import resolve_operation as resolve_operation

if TYPE_CHECKING:
    # Named in the faces' quoted base classes (``_Message["Runtime"]``), which ruff cannot see.
    from .runtime import AsyncRuntime, Runtime  # noqa: F401

A = TypeVar("A")
P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)
#: The runtime a face's objects belong to (``Runtime`` or ``AsyncRuntime``).
RT = TypeVar("RT")
#: The reference an operation handle calls through (``Ref`` or ``AsyncRef``).
RefT = TypeVar("RefT")


# --- what both faces share (one engine, two faces) -----------------------------------------


class _Message(Generic[RT]):
    """Which message a reference names, and the context it is read with."""

    def __init__(
        self,
        runtime: RT,
        id: str,
        operation: Operation,
        actor_type: str,
        actor_id: str,
        *,
        authorization: Any = None,
        verified: bool = False,
    ) -> None:
        self._runtime = runtime
        self._operation = operation
        self.id = id
        self.actor_type = actor_type
        self.actor_id = actor_id
        #: The context the message policy sees when this reference is read.
        self.authorization = authorization
        #: True for the reference ``send()`` returned: its call was just authorized.
        self.verified = verified

    @property
    def operation(self) -> str:
        return self._operation.name

    def decode_result(self, result: str | None) -> Any:
        """The operation's committed result text as the value a caller gets (the
        engine settles a terminal outcome through it)."""
        return self._operation.decode_result(result)

    def with_options(self, *, authorization: Any = None) -> Self:
        """This reference, read with another authorization context."""
        return type(self)(
            self._runtime,
            self.id,
            self._operation,
            self.actor_type,
            self.actor_id,
            authorization=keep_untrusted(self.authorization, authorization),
        )


class _Handle(Generic[RefT]):
    """One operation of a reference, with the per-call options given so far."""

    def __init__(self, ref: RefT, operation: Operation, options: CallOptions) -> None:
        self._ref = ref
        self._operation = operation
        self._options = options

    def with_options(
        self,
        *,
        idempotency_key: str | None = None,
        timeout: float | timedelta | None = None,
        delay: float | timedelta | None = None,
        authorization: Any = None,
        connection: Any = None,
        stale_ok: bool | None = None,
        priority: int | None = None,
        coalesce_key: str | None = None,
    ) -> Self:
        """Per-call options; ``connection=`` makes ``send()`` enqueue in that transaction,
        ``stale_ok=True`` lets a ``@query`` read the replica (``replica_url``),
        ``priority=`` (0 to 9), once the message is its actor's next one, has the actor
        claimed before actors whose next message is plainer, ``coalesce_key=``
        replaces the still-queued messages of the actor with the same key and
        operation (docs/actors.md, "Priority and coalescing")."""
        return type(self)(
            self._ref,
            self._operation,
            self._options.merge(
                idempotency_key, timeout, delay, authorization, connection, stale_ok,
                priority, coalesce_key,
            ),
        )


class _Actor(Generic[RT, A]):
    """Which actor identity a reference addresses, and its default call options."""

    def __init__(
        self,
        runtime: RT,
        definition: ActorDefinition,
        actor_id: str,
        options: CallOptions | None = None,
    ) -> None:
        self._runtime = runtime
        self._definition = definition
        self._options = options or CallOptions()
        self.actor_id = check_identifier(actor_id)

    @property
    def actor_type(self) -> str:
        return self._definition.actor_type

    @property
    def actor_class(self) -> type[A]:
        return self._definition.cls

    def _call(
        self,
        operation: Operation,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        options: CallOptions,
    ) -> Call:
        return Call(self._definition, self.actor_id, operation, args, kwargs, options)

    def _typed_call(
        self, method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Call:
        """The call of ``ref.call(Cart.add, ...)`` / ``ref.send(Cart.add, ...)``."""
        return self._call(operation_of(self._definition, method), args, kwargs, self._options)

    def with_options(
        self,
        *,
        idempotency_key: str | None = None,
        timeout: float | timedelta | None = None,
        delay: float | timedelta | None = None,
        authorization: Any = None,
        stale_ok: bool | None = None,
    ) -> Self:
        """This reference with default call options; ``stale_ok=True`` lets its
        ``@query`` calls and ``snapshot()`` read the replica (``replica_url``)."""
        return type(self)(
            self._runtime,
            self._definition,
            self.actor_id,
            self._options.merge(idempotency_key, timeout, delay, authorization, None, stale_ok),
        )


# --- sync face -----------------------------------------------------------------------------


class MessageReference(_Message["Runtime"], Generic[R_co]):
    """A durable message: poll it, read its outcome, or wait for it.

    ``status()``, ``result()`` and ``wait()`` check that the stored message is this
    reference's (actor type, actor id, operation) and ask ``authorize_message`` again,
    with the stored arguments and this reference's ``authorization`` context.
    """

    def status(self) -> str:
        """``scheduled``, ``queued``, ``completed``, ``rejected``, ``dead``, ``destroyed``
        or ``cancelled`` (``enqueueing``: a call of this process timed out before its
        enqueue committed)."""
        return self._runtime.kernel.client.messages.status(self)

    def cancel(self) -> bool:
        """Cancel the message if it has not started: True when it ends ``cancelled``.

        False when it finished, or may be running: a queued message of an actor a
        worker holds the lease of cannot be cancelled (pause the actor first).
        """
        return self._runtime.kernel.client.messages.cancel(self)

    def result(self) -> R_co:
        """The committed result now; raises MessagePending if the message has not finished."""
        return self._runtime.kernel.client.messages.result(self)  # type: ignore[no-any-return]

    def wait(self, timeout: float | None = None) -> R_co:
        """Wait for the committed result; CallTimeout keeps this reference usable."""
        return self._runtime.kernel.client.waiting.wait(self, timeout)  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"<MessageReference {self.id} {self.actor_type}({self.actor_id!r}).{self.operation}>"


class OperationHandle(_Handle["Ref[Any]"], Generic[P, R]):
    """``ref.add``: call it to wait for the result, or ``.send(...)`` to enqueue.

    ``P`` and ``R`` are the operation's parameters and result: the mypy plugin
    (``solid_objects.mypy``) fills them in from the actor class; without it they are Any.
    """

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        call = self._ref._call(self._operation, args, kwargs, self._options)
        return self._ref._invoke(call)  # type: ignore[no-any-return]

    def send(self, *args: P.args, **kwargs: P.kwargs) -> MessageReference[R]:
        """Enqueue this operation durably and return at once with its
        :class:`MessageReference` (``ref.add.send(n=1)``).
        """
        return self._ref._send(self._ref._call(self._operation, args, kwargs, self._options))


class _QueryHandle(Protocol[P, R_co]):
    """What the mypy plugin types ``ref.current`` as for a ``@query``: no ``send``."""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co: ...

    def with_options(
        self,
        *,
        idempotency_key: str | None = None,
        timeout: float | timedelta | None = None,
        delay: float | timedelta | None = None,
        authorization: Any = None,
        connection: Any = None,
        stale_ok: bool | None = None,
    ) -> Self: ...


class _AsyncQueryHandle(Protocol[P, R_co]):
    """The asyncio twin of :class:`_QueryHandle`."""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Awaitable[R_co]: ...

    def with_options(
        self,
        *,
        idempotency_key: str | None = None,
        timeout: float | timedelta | None = None,
        delay: float | timedelta | None = None,
        authorization: Any = None,
        connection: Any = None,
        stale_ok: bool | None = None,
    ) -> Self: ...


class Ref(_Actor["Runtime", A]):
    """A reference to one actor identity: ``runtime.ref(Counter, "a")``."""

    def __getattr__(self, name: str) -> OperationHandle[..., Any]:
        if name.startswith("__"):
            raise AttributeError(name)
        return OperationHandle(self, resolve_operation(self._definition, name), self._options)

    @overload
    def call(
        self,
        method: Callable[Concatenate[A, P], Coroutine[Any, Any, R]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> R: ...
    @overload
    def call(
        self, method: Callable[Concatenate[A, P], R], /, *args: P.args, **kwargs: P.kwargs
    ) -> R: ...
    def call(self, method: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Call an operation or query, type-checked: ``ref.call(Counter.add, n=1)``."""
        return self._invoke(self._typed_call(method, args, kwargs))

    @overload
    def send(
        self,
        method: Callable[Concatenate[A, P], Coroutine[Any, Any, R]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> MessageReference[R]: ...
    @overload
    def send(
        self, method: Callable[Concatenate[A, P], R], /, *args: P.args, **kwargs: P.kwargs
    ) -> MessageReference[R]: ...
    def send(self, method: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Enqueue an operation, type-checked: ``ref.send(Counter.add, n=1)``."""
        return self._send(self._typed_call(method, args, kwargs))

    def snapshot(self, include: Sequence[str] = ()) -> dict[str, Any]:
        """The committed state (defaults if the actor never ran); no mailbox write.

        ``include`` adds values derived from that state, by name: a ``@property``, an
        argument-less ``@query`` (authorized as that query) or a ``@projection``.
        """
        return self._runtime.kernel.client.reads.snapshot(
            self._definition,
            self.actor_id,
            context=self._options.authorization,
            include=include,
            stale_ok=self._options.stale_ok,
        )

    def destroy(self) -> bool:
        """Delete this incarnation; pending messages fail with ActorDestroyed.

        Refused inside a turn: it would commit on its own, outside the turn's commit.
        """
        staging.refuse_destroy_inside_turn(f"destroying {self.actor_type}({self.actor_id!r})")
        return self._runtime.kernel.client.destroy(
            self._definition, self.actor_id, context=self._options.authorization
        )

    def _invoke(self, call: Call) -> Any:
        return self._runtime.kernel.client.call(call, self._waited)

    def _send(self, call: Call) -> MessageReference[Any]:
        return self._waited(call, self._runtime.kernel.client.send_call(call))

    def _waited(self, call: Call, message_id: str) -> MessageReference[Any]:
        return MessageReference(
            self._runtime,
            message_id,
            call.operation,
            self.actor_type,
            self.actor_id,
            authorization=call.options.authorization,
            verified=True,
        )

    def __repr__(self) -> str:
        return f"<Ref {self.actor_type}({self.actor_id!r})>"


# --- async face ----------------------------------------------------------------------------


class AsyncMessageReference(_Message["AsyncRuntime"], Generic[R_co]):
    """The asyncio twin of :class:`MessageReference`."""

    def _sync(self) -> MessageReference[R_co]:
        return MessageReference(
            self._runtime.sync,
            self.id,
            self._operation,
            self.actor_type,
            self.actor_id,
            authorization=self.authorization,
            verified=self.verified,
        )

    async def status(self) -> str:
        """The message's status now: queued, scheduled, completed, rejected, dead,
        destroyed or cancelled.
        """
        return await self._runtime.kernel.offload(self._sync().status)

    async def cancel(self) -> bool:
        """Cancel the message if it has not started; True if it was cancelled."""
        return await self._runtime.kernel.offload(self._sync().cancel)

    async def result(self) -> R_co:
        """The committed result; raises the stored failure, or ``MessageFailed``
        while it has none yet.
        """
        return await self._runtime.kernel.offload(self._sync().result)

    async def wait(self, timeout: float | None = None) -> R_co:
        """Wait for the committed outcome (at most ``timeout`` seconds) and return the
        result or raise the failure (``CallTimeout`` when the time ran out).
        """
        return await self._runtime.kernel.wait(self._sync(), timeout)  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return (
            f"<AsyncMessageReference {self.id} "
            f"{self.actor_type}({self.actor_id!r}).{self.operation}>"
        )


class AsyncOperationHandle(_Handle["AsyncRef[Any]"], Generic[P, R]):
    """The asyncio twin of :class:`OperationHandle` (typed the same way)."""

    async def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        call = self._ref._call(self._operation, args, kwargs, self._options)
        return await self._ref._invoke(call)  # type: ignore[no-any-return]

    async def send(self, *args: P.args, **kwargs: P.kwargs) -> AsyncMessageReference[R]:
        """Enqueue this operation durably and return at once with its
        :class:`AsyncMessageReference` (``await ref.add.send(n=1)``).
        """
        return await self._ref._send(self._ref._call(self._operation, args, kwargs, self._options))


class AsyncRef(_Actor["AsyncRuntime", A]):
    """The asyncio twin of :class:`Ref`: ``await ref.add(n=1)``."""

    def __getattr__(self, name: str) -> AsyncOperationHandle[..., Any]:
        if name.startswith("__"):
            raise AttributeError(name)
        return AsyncOperationHandle(self, resolve_operation(self._definition, name), self._options)

    @overload
    async def call(
        self,
        method: Callable[Concatenate[A, P], Coroutine[Any, Any, R]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> R: ...
    @overload
    async def call(
        self, method: Callable[Concatenate[A, P], R], /, *args: P.args, **kwargs: P.kwargs
    ) -> R: ...
    async def call(self, method: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Call an operation and wait for its committed result.

        ``await ref.call(Cart.add, sku="x")`` is the typed form of
        ``await ref.add(sku="x")``, checked by mypy and pyright.
        """
        return await self._invoke(self._typed_call(method, args, kwargs))

    @overload
    async def send(
        self,
        method: Callable[Concatenate[A, P], Coroutine[Any, Any, R]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> AsyncMessageReference[R]: ...
    @overload
    async def send(
        self, method: Callable[Concatenate[A, P], R], /, *args: P.args, **kwargs: P.kwargs
    ) -> AsyncMessageReference[R]: ...
    async def send(self, method: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Enqueue an operation durably and return its message reference:
        ``await ref.send(Cart.add, sku="x")``, the typed form of ``await ref.add.send(...)``.
        """
        return await self._send(self._typed_call(method, args, kwargs))

    async def snapshot(self, include: Sequence[str] = ()) -> dict[str, Any]:
        """The actor's committed state as a dict (authorized like a query), with the
        derived values named in ``include`` (:meth:`Ref.snapshot`)."""
        return await self._runtime.kernel.offload(
            self._runtime.kernel.client.reads.snapshot,
            self._definition,
            self.actor_id,
            context=self._options.authorization,
            include=include,
            stale_ok=self._options.stale_ok,
        )

    async def destroy(self) -> bool:
        """Destroy the actor: its state, mailbox and reminders; True if it existed."""
        staging.refuse_destroy_inside_turn(f"destroying {self.actor_type}({self.actor_id!r})")
        return await self._runtime.kernel.offload(
            self._runtime.kernel.client.destroy,
            self._definition,
            self.actor_id,
            context=self._options.authorization,
        )

    async def _invoke(self, call: Call) -> Any:
        kernel = self._runtime.kernel
        return await kernel.client.call_async(call, self._waited, kernel.offload)

    async def _send(self, call: Call) -> AsyncMessageReference[Any]:
        kernel = self._runtime.kernel
        message_id = await kernel.client.send_call_async(call, kernel.offload)
        return AsyncMessageReference(
            self._runtime,
            message_id,
            call.operation,
            self.actor_type,
            self.actor_id,
            authorization=call.options.authorization,
            verified=True,
        )

    def _waited(self, call: Call, message_id: str) -> MessageReference[Any]:
        """The sync reference a waiting call reads its message through."""
        return MessageReference(
            self._runtime.sync,
            message_id,
            call.operation,
            self.actor_type,
            self.actor_id,
            authorization=call.options.authorization,
            verified=True,
        )

    def __repr__(self) -> str:
        return f"<AsyncRef {self.actor_type}({self.actor_id!r})>"
