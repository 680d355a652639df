"""The ``Actor`` base class and ``@query``.

A subclass's annotated public attributes are its durable state; its public
methods are operations; methods marked ``@query`` read committed state without
a mailbox write. Everything is introspected once, when the class is defined,
so mistakes surface at import time rather than in a worker at 3 a.m.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from datetime import datetime, timedelta
from typing import Any, ClassVar, Concatenate, Generic, Literal, ParamSpec, Self, TypeVar

from . import staging
from .catalogue import CATALOGUE
from .declarations import build_definition
from .definition import ActorDefinition, operation_of
from .message import MessageInfo
from .observe import payload
from .reminders import Reminder

__all__ = ["Actor", "payload", "query"]

F = TypeVar("F", bound=Callable[..., Any])
#: The actor class a staged reminder or message names (read by the mypy plugin).
T = TypeVar("T", bound="Actor")
P = ParamSpec("P")


def query(function: F) -> F:
    """Mark a method as a read-only query against committed state.

    A query runs in the caller's process on the last committed state: it does
    not enter the mailbox, does not wait behind queued calls, and anything it
    changes is discarded.
    """
    function.__solid_query__ = True  # type: ignore[attr-defined]
    return function


class Actor:
    """Base class of durable virtual actors.

    Example::

        class Counter(Actor):
            value: int = 0

            def add(self, n: int = 1) -> int:
                self.value += n
                return self.value
    """

    #: Name stored in the database; defaults to the class name.
    actor_type: ClassVar[str]
    #: Version of the state layout; bump it and add a migration when fields change.
    state_version: ClassVar[int] = 1
    #: ``{from_version: function(state_dict) -> state_dict}`` upgrading one version.
    migrations: ClassVar[Mapping[int, Callable[[dict[str, Any]], dict[str, Any]]]] = {}
    #: What realtime subscribers may observe: state field names (only the name of a field
    #: that changed is sent), or ``{field: "value" | "invalidate"}`` ("value" sends the
    #: committed value to every authorized subscriber). See ``solid_objects.observe``.
    observables: ClassVar[Collection[str] | Mapping[str, Literal["value", "invalidate"]]] = ()

    __solid_definition__: ClassVar[ActorDefinition]

    #: The identity of this instance, set before any operation runs.
    actor_id: str

    def __init_subclass__(cls, *, auto_register: bool = True, **kwargs: Any) -> None:
        """Introspect the class; with ``auto_register`` (the default), add it to the
        process's catalogue, so runtimes that do not restrict their types serve it."""
        super().__init_subclass__(**kwargs)
        if "actor_type" not in cls.__dict__:
            cls.actor_type = cls.__name__
        cls.__solid_definition__ = build_definition(cls, Actor)
        if auto_register:
            CATALOGUE.add(cls)

    def __repr__(self) -> str:
        actor_id = getattr(self, "actor_id", "?")
        return f"<{type(self).__name__} {actor_id!r}>"

    @property
    def current_message(self) -> MessageInfo:
        """The running message: id, attempt, enqueued/due time, idempotency key, sender.

        Raises NotInTurn outside an operation (in a query, in ``on_activate``).
        """
        return staging.current_message()

    # --- staging: everything below commits with the turn's state, or not at all ---

    def emit(
        self,
        name: str,
        /,
        *,
        on_success: str | Callable[..., Any] | None = None,
        on_failure: str | Callable[..., Any] | None = None,
        **arguments: Any,
    ) -> str:
        """Stage an effect: ``handler(ctx, **arguments)`` runs after the commit, at least once.

        Returns the effect's id (``ctx.id`` in the handler), stable across retries: use it
        as the idempotency key at the receiver. ``on_success`` / ``on_failure`` name
        operations of this actor that receive the outcome as ordinary messages; they may
        take ``effect_id``, ``arguments`` and ``result`` (or ``error``).
        """
        return staging.emit(name, _name(on_success), _name(on_failure), arguments)

    def commit_action(self, name: str, /, **arguments: Any) -> None:
        """Stage a write to the application's own tables, in this turn's commit.

        The handler registered with ``@runtime.commit_action(name)`` runs inside the
        same fenced transaction as the state, as ``handler(ctx, **arguments)`` with
        ``ctx.connection`` a SQLAlchemy connection on that transaction: both commit,
        or neither does.
        """
        staging.commit_action(name, arguments)

    def schedule(
        self,
        *,
        at: datetime | None = None,
        delay: timedelta | float | None = None,
        key: str | None = None,
        every: timedelta | float | None = None,
        missed: Literal["latest", "all"] = "latest",
        cron: str | None = None,
        timezone: str | None = None,
    ) -> _Scheduler[Self]:
        """Stage a reminder: ``self.schedule(delay=timedelta(days=3)).follow_up()``.

        One reminder per (actor, operation, key): scheduling it again moves it (to the
        same time, period and arguments, it is left as it stands). With
        ``every`` it recurs; after downtime ``missed="latest"`` fires once,
        ``missed="all"`` fires every missed occurrence. ``cron="0 9 * * MON"`` with
        ``timezone="Europe/Paris"`` (default UTC) recurs on a cron schedule instead,
        evaluated in that zone (DST included), with the same ``missed`` policy.
        """
        options = dict(at=at, delay=delay, key=key, every=every, missed=missed)
        return _Scheduler(
            {**options, "cron": cron, "timezone": timezone}, definition_of(type(self))
        )

    def cancel_schedule(self, operation: str | Callable[..., Any], key: str | None = None) -> None:
        """Stage the removal of the reminder for ``operation`` (and ``key``), if any."""
        name = _name(operation)
        assert name is not None
        staging.cancel_schedule(name, key)

    def reminders(self) -> list[Reminder]:
        """This actor's reminders, soonest first, with this turn's own ``schedule`` and
        ``cancel_schedule`` calls applied; a one-shot reminder that fired is gone.

        Only while an operation runs (``NotInTurn`` elsewhere).
        """
        return staging.reminders()

    def reminder(
        self, operation: str | Callable[..., Any], key: str | None = None
    ) -> Reminder | None:
        """The reminder of ``operation`` with ``key`` (None: the unkeyed one), or None."""
        name = _name(operation)
        for found in staging.reminders():
            if found.operation == name and found.key == (key or None):
                return found
        return None

    def send_to(
        self,
        cls: type[T],
        actor_id: str,
        *,
        delay: timedelta | float | None = None,
        idempotency_key: str | None = None,
        priority: int = 0,
    ) -> _Outbound[T]:
        """Stage a message to another actor: ``self.send_to(Mailer, "m").deliver(to=...)``.

        It is enqueued in the same commit as this turn's state, exactly once.
        ``priority`` (0 to 9) ranks the target's claim once the message is its next
        one, as ``with_options(priority=...)`` does for a call.
        """
        return _Outbound(definition_of(cls), actor_id, delay, idempotency_key, priority)

    def request(
        self,
        cls: type[T],
        actor_id: str,
        *,
        reply_to: str | Callable[..., Any],
        timeout: timedelta | float | None = None,
        context: Any = None,
    ) -> _Request[T]:
        """Stage a request: ``self.request(Account, "a", reply_to=self.on_funds,
        timeout=timedelta(seconds=30), context={...}).withdraw(amount=5)``.

        Like ``send_to``, the message is enqueued in this turn's commit; its outcome
        comes back later as a message to ``reply_to`` (an operation of this actor taking
        ``reply: Reply``): the result, or why there is none (rejected, failed, destroyed,
        timed out), with ``context`` and the request id this call returns. Exactly one
        outcome per request reaches ``reply_to``; the turn never waits.
        """
        name = _name(reply_to)
        assert name is not None
        return _Request(definition_of(cls), actor_id, self.actor_id, name, timeout, context)


def _name(operation: str | Callable[..., Any] | None) -> str | None:
    if operation is None or isinstance(operation, str):
        return operation
    return str(getattr(operation, "__name__", operation))


class _Scheduler(Generic[T]):
    """``self.schedule(...)``: its attributes stage a reminder for this actor's operations."""

    def __init__(self, options: dict[str, Any], definition: ActorDefinition) -> None:
        self._options = options
        self._definition = definition

    def call(
        self, method: Callable[Concatenate[T, P], object], /, *args: P.args, **kwargs: P.kwargs
    ) -> None:
        """The reminder in a form every type checker checks: ``.call(Cart.remind, note=...)``.

        ``call`` is a reserved name, so it never hides an operation of the actor.
        """
        operation = operation_of(self._definition, method)
        staging.schedule(operation.name, args, kwargs, **self._options)

    def __getattr__(self, operation: str) -> Callable[..., None]:
        if operation.startswith("__"):
            raise AttributeError(operation)

        def stage(*args: Any, **kwargs: Any) -> None:
            staging.schedule(operation, args, kwargs, **self._options)

        return stage


class _Outbound(Generic[T]):
    """``self.send_to(Cls, id)``: its attributes stage a message to ``Cls``'s operations."""

    def __init__(
        self,
        target: ActorDefinition,
        actor_id: str,
        delay: timedelta | float | None,
        idempotency_key: str | None,
        priority: int = 0,
    ) -> None:
        self._target = target
        self._actor_id = actor_id
        self._delay = delay
        self._key = idempotency_key
        self._priority = priority

    def call(
        self, method: Callable[Concatenate[T, P], object], /, *args: P.args, **kwargs: P.kwargs
    ) -> None:
        """The message in a form every type checker checks: ``.call(Mailer.deliver, to=...)``.

        ``call`` is a reserved name, so it never hides an operation of the target.
        """
        operation = operation_of(self._target, method)
        self._stage(operation.name, args, kwargs)

    def _stage(self, operation: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        staging.send_to(
            self._target,
            self._actor_id,
            operation,
            args,
            kwargs,
            delay=self._delay,
            idempotency_key=self._key,
            priority=self._priority,
        )

    def __getattr__(self, operation: str) -> Callable[..., None]:
        if operation.startswith("__"):
            raise AttributeError(operation)

        def stage(*args: Any, **kwargs: Any) -> None:
            self._stage(operation, args, kwargs)

        return stage


def definition_of(cls: type[Actor]) -> ActorDefinition:
    """The introspected definition of an actor class."""
    try:
        return cls.__dict__["__solid_definition__"]  # type: ignore[no-any-return]
    except (KeyError, AttributeError):
        from .errors import InvalidActorDefinition

        raise InvalidActorDefinition(f"{cls!r} is not a subclass of solid_objects.Actor") from None


class _Request(Generic[T]):
    """``self.request(Cls, id, reply_to=...)``: its attributes stage a request to
    ``Cls``'s operations and return the request id."""

    def __init__(
        self,
        target: ActorDefinition,
        actor_id: str,
        asker_id: str,
        reply_to: str,
        timeout: timedelta | float | None,
        context: Any,
    ) -> None:
        self._target = target
        self._actor_id = actor_id
        self._asker_id = asker_id
        self._reply_to = reply_to
        self._timeout = timeout
        self._context = context

    def call(
        self, method: Callable[Concatenate[T, P], object], /, *args: P.args, **kwargs: P.kwargs
    ) -> str:
        """The request in a form every type checker checks: ``.call(Account.withdraw, 5)``.

        ``call`` is a reserved name, so it never hides an operation of the target.
        """
        operation = operation_of(self._target, method)
        return self._stage(operation.name, args, kwargs)

    def _stage(self, operation: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        return staging.request(
            self._target,
            self._actor_id,
            operation,
            args,
            kwargs,
            asker_id=self._asker_id,
            reply_to=self._reply_to,
            timeout=self._timeout,
            context=self._context,
        )

    def __getattr__(self, operation: str) -> Callable[..., str]:
        if operation.startswith("__"):
            raise AttributeError(operation)

        def stage(*args: Any, **kwargs: Any) -> str:
            return self._stage(operation, args, kwargs)

        return stage
