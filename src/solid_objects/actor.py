"""The ``Actor`` base class and ``@query``.

A subclass's annotated public attributes are its durable state; its public
methods are operations; methods marked ``@query`` read committed state without
a mailbox write. Everything is introspected once, when the class is defined,
so mistakes surface at import time rather than in a worker at 3 a.m.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

from .definition import ActorDefinition, build_definition

F = TypeVar("F", bound=Callable[..., Any])


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

    __solid_definition__: ClassVar[ActorDefinition]

    #: The identity of this instance, set before any operation runs.
    actor_id: str

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "actor_type" not in cls.__dict__:
            cls.actor_type = cls.__name__
        cls.__solid_definition__ = build_definition(cls, Actor)

    def __repr__(self) -> str:
        actor_id = getattr(self, "actor_id", "?")
        return f"<{type(self).__name__} {actor_id!r}>"


def definition_of(cls: type[Actor]) -> ActorDefinition:
    """The introspected definition of an actor class."""
    try:
        return cls.__dict__["__solid_definition__"]  # type: ignore[no-any-return]
    except (KeyError, AttributeError):
        from .errors import InvalidActorDefinition

        raise InvalidActorDefinition(f"{cls!r} is not a subclass of solid_objects.Actor") from None
