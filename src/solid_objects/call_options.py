"""A call as a value: the per-call options and the ``Call`` the faces build.

``ref.add.with_options(timeout=2).send(n=1)`` builds a :class:`CallOptions` (checked
once, here: bad values raise ``InvalidArguments`` before anything is written) and a
:class:`Call`, which the engine's client runs on either face.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from .authorization import Untrusted
from .codec import MAX_DELAY_SECONDS, check_identifier, check_priority
from .definition import ActorDefinition, Operation
from .errors import InvalidArguments


@dataclass(frozen=True, slots=True)
class CallOptions:
    """Per-call options, kept apart from the operation's own keyword arguments."""

    idempotency_key: str | None = None
    timeout: float | None = None
    delay: float = 0.0
    #: What the per-call policies see as the caller (``AuthorizationRequest.context``).
    authorization: Any = None
    #: The application's SQLAlchemy Connection or Session whose transaction ``send()``
    #: writes the message in (it commits or rolls back with the application's rows).
    connection: Any = None
    #: ``@query`` and ``snapshot()`` may read a replica up to ``replica_max_lag`` behind.
    stale_ok: bool = False
    #: 0 (plain) to 9: an actor whose next message has a higher priority is claimed
    #: first; the mailbox of one actor keeps its order (docs/actors.md).
    priority: int = 0
    #: The queued messages of the actor with this key and operation that no worker may
    #: have read are replaced by this one (a debounce; docs/actors.md).
    coalesce_key: str | None = None

    def merge(
        self,
        idempotency_key: str | None,
        timeout: float | timedelta | None,
        delay: float | timedelta | None,
        authorization: Any = None,
        connection: Any = None,
        stale_ok: bool | None = None,
        priority: int | None = None,
        coalesce_key: str | None = None,
    ) -> CallOptions:
        """These options with the given ones laid over them (None keeps the current value)."""
        changes: dict[str, Any] = {}
        if priority is not None:
            changes["priority"] = check_priority(priority)
        if coalesce_key is not None:
            changes["coalesce_key"] = check_identifier(coalesce_key, what="coalesce key")
        if stale_ok is not None:
            changes["stale_ok"] = bool(stale_ok)
        if authorization is not None:
            changes["authorization"] = keep_untrusted(self.authorization, authorization)
        if connection is not None:
            changes["connection"] = connection
        if idempotency_key is not None:
            changes["idempotency_key"] = check_identifier(idempotency_key, what="idempotency key")
        if timeout is not None:
            changes["timeout"] = _seconds(timeout, "timeout")
        if delay is not None:
            changes["delay"] = _seconds(delay, "delay", maximum=MAX_DELAY_SECONDS)
        return replace(self, **changes)


def keep_untrusted(current: Any, given: Any) -> Any:
    """The context replacing ``current``: a ref built from request data stays untrusted."""
    if given is None:
        return current
    if isinstance(current, Untrusted) and not isinstance(given, Untrusted):
        return Untrusted(given)
    return given


def _seconds(value: float | timedelta, what: str, maximum: float = float("inf")) -> float:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise InvalidArguments(f"{what} must be a number of seconds or a timedelta")
    if value < 0:
        raise InvalidArguments(f"{what} must not be negative")
    if value > maximum:
        raise InvalidArguments(f"{what} must be at most {maximum:g} seconds")
    return float(value)


@dataclass(frozen=True, slots=True)
class Call:
    """One call or send as a face builds it, addressed to one actor: the operation, its
    arguments and the per-call options (what httpx calls a ``Request``). The engine's
    client runs it: ``call``/``call_async`` wait for the outcome, ``send_call``/
    ``send_call_async`` enqueue; the faces keep only what differs between them."""

    definition: ActorDefinition
    actor_id: str
    operation: Operation
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    options: CallOptions

    @property
    def actor_type(self) -> str:
        return self.definition.actor_type
