"""Who may call what: the per-call policies and the requests they judge.

A policy is a callable ``policy(request) -> bool`` given to the runtime as
``authorize_message=``, ``authorize_query=``, ``authorize_destroy=`` or
``authorize_subscription=`` (on ``AsyncRuntime`` it may be ``async def``). It
sees the caller's authorization context (``ref.with_options(authorization=...)``)
and what the call names, never the actor's state: it runs before the database
is touched, so a denied caller learns nothing about the actor. Only ``True``
allows; any other answer, or an exception, denies.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, cast

from .errors import ConfigurationError

Kind = Literal["message", "query", "destroy", "subscription"]
KINDS: tuple[Kind, ...] = ("message", "query", "destroy", "subscription")
#: Allowed when no policy is configured: the application's own in-process calls.
#: A subscription arrives from a network surface, so it is denied until a policy allows it.
TRUSTED_BY_DEFAULT: frozenset[Kind] = frozenset({"message", "query", "destroy"})

_NO_ARGUMENTS: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class AuthorizationRequest:
    """One call, as a per-call policy sees it."""

    #: ``message`` (calls and ``send()``), ``query`` (``@query`` and ``snapshot()``),
    #: ``destroy`` or ``subscription``.
    kind: Kind
    #: Whatever the caller passed as ``with_options(authorization=...)`` (None if nothing).
    context: Any
    actor_type: str
    actor_id: str
    #: The operation or query name; None for ``snapshot()``, ``destroy()`` and subscriptions.
    operation: str | None = None
    #: The call's arguments by name, as they are stored (JSON values); read-only.
    arguments: Mapping[str, Any] = field(default_factory=lambda: _NO_ARGUMENTS)
    #: Set when a stored message is read back (``MessageReference.status()``,
    #: ``result()``, ``wait()``, ``runtime.message()``): its id. None for a new call.
    message_id: str | None = None


Policy = Callable[[AuthorizationRequest], "bool | Awaitable[bool]"]


@dataclass(frozen=True, slots=True)
class Untrusted:
    """The authorization context of a caller outside the process (request data).

    The framework integrations bind the refs they build from a URL with it. With a
    policy configured, the policy sees ``context`` unwrapped, as if given plainly;
    with none configured for the call's kind, the call is denied (the in-process
    default trusts the application's own code, not whoever typed the URL).
    ``ref.with_options(authorization=other)`` on such a ref keeps it untrusted.
    """

    #: What the policies see as ``AuthorizationRequest.context``.
    context: Any = None


def unwrap(context: Any) -> tuple[Any, bool]:
    """``(context the policy sees, whether the caller is untrusted)``."""
    if isinstance(context, Untrusted):
        return context.context, True
    return context, False


def option_name(kind: Kind) -> str:
    """The ``Runtime`` option that holds the policy of a kind (``authorize_message``)."""
    return f"authorize_{kind}"


def check_policies(options: Mapping[str, Any], *, allow_async: bool) -> None:
    """Refuse a policy that is not callable, or ``async`` on the sync face."""
    for kind in KINDS:
        policy = options.get(option_name(kind))
        if policy is None:
            continue
        if not callable(policy):
            raise ConfigurationError(f"{option_name(kind)} must be a callable, not {policy!r}")
        if not allow_async and inspect.iscoroutinefunction(policy):
            raise ConfigurationError(
                f"{option_name(kind)} is an async function: use AsyncRuntime, or a plain "
                "function on Runtime (the sync face has no event loop to await it on)"
            )


class AsyncPolicy:
    """An ``async def`` policy given to ``AsyncRuntime``: awaited on the caller's loop."""

    def __init__(self, policy: Callable[[AuthorizationRequest], Awaitable[bool]]) -> None:
        self.policy = policy

    def __call__(self, request: AuthorizationRequest) -> Awaitable[bool]:
        return self.policy(request)

    def __repr__(self) -> str:
        return repr(self.policy)


def wrap_async_policies(options: dict[str, Any]) -> dict[str, Any]:
    """The options with each ``async def`` policy marked as one the async face awaits."""
    wrapped = dict(options)
    for kind in KINDS:
        policy = wrapped.get(option_name(kind))
        if policy is not None and inspect.iscoroutinefunction(policy):
            wrapped[option_name(kind)] = AsyncPolicy(policy)
    return wrapped


#: The event loop of the async caller whose engine call runs in this executor thread.
_caller_loop: contextvars.ContextVar[asyncio.AbstractEventLoop | None] = contextvars.ContextVar(
    "solid_objects_caller_loop", default=None
)


def bind_caller_loop(context: contextvars.Context, loop: asyncio.AbstractEventLoop) -> None:
    """Let an async policy asked from ``context`` (an executor thread) run on ``loop``."""
    context.run(_caller_loop.set, loop)


def answer(policy: Policy, request: AuthorizationRequest) -> object:
    """The policy's answer; an awaitable one is awaited on the async caller's loop."""
    value: object = policy(request)
    if not inspect.isawaitable(value):
        return value
    awaitable = cast(Awaitable[object], value)
    loop = _caller_loop.get()
    if loop is None or _on_loop(loop):
        if inspect.iscoroutine(awaitable):
            awaitable.close()
        raise ConfigurationError(
            f"{option_name(request.kind)} returned an awaitable on the sync face: "
            "async policies need AsyncRuntime"
        )

    async def wait() -> object:
        return await awaitable

    coroutine: Coroutine[Any, Any, object] = wait()
    return asyncio.run_coroutine_threadsafe(coroutine, loop).result()


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
