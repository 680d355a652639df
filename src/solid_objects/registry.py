"""The actor types a runtime knows, by their stored ``actor_type`` name."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .actor import Actor, definition_of
from .catalogue import Catalogue
from .codec import check_identifier
from .definition import ActorDefinition
from .errors import InvalidActorDefinition, UnknownActorType
from .flow import EffectLimits


class Registry:
    """The actor types a runtime serves: those registered, and, unless the runtime
    restricts its types, every class in the process's catalogue (see ``catalogue``).

    A registered class wins over a catalogue class of the same ``actor_type``.
    """

    def __init__(self, catalogue: Catalogue | None = None) -> None:
        self._lock = threading.Lock()
        self._by_type: dict[str, ActorDefinition] = {}
        self._catalogue = catalogue
        self._seen: tuple[int, int] = (-1, -1)  # (registrations, catalogue version)
        self._types: tuple[str, ...] = ()
        self._limits: tuple[tuple[str, ...], dict[str, int]] = ((), {})

    @property
    def restricted(self) -> bool:
        """True when only registered types are served (``Runtime(actors=[...])``)."""
        return self._catalogue is None

    def register(self, cls: type[Any]) -> ActorDefinition:
        if not (isinstance(cls, type) and issubclass(cls, Actor)) or cls is Actor:
            raise InvalidActorDefinition(f"{cls!r} is not a subclass of solid_objects.Actor")
        definition = definition_of(cls)
        with self._lock:
            known = self._by_type.get(definition.actor_type)
            if known is not None and known.cls is not cls:
                raise InvalidActorDefinition(
                    f"actor_type {definition.actor_type!r} is already registered by "
                    f"{known.cls.__module__}.{known.cls.__qualname__}"
                )
            if known is None:
                self._by_type[definition.actor_type] = definition
        return definition

    def get(self, actor_type: str) -> ActorDefinition:
        definition = self._by_type.get(actor_type)
        if definition is not None:
            return definition
        if self._catalogue is not None:
            unique, ambiguous = self._catalogue.resolve()
            cls = unique.get(actor_type)
            if cls is not None:
                return definition_of(cls)
            if actor_type in ambiguous:
                raise UnknownActorType(
                    f"actor type {actor_type!r} is defined by several classes in this "
                    f"process ({', '.join(ambiguous[actor_type])}): register the one to "
                    "serve with runtime.register(cls), or give the others their own "
                    "actor_type"
                )
        raise UnknownActorType(
            f"actor type {actor_type!r} is not served by this process; it serves: "
            f"{list(self.types())}"
            + (
                " (this runtime serves only the types given in actors=[...] or registered)"
                if self.restricted
                else " (define or import the class in a module this process loads)"
            )
        )

    def registered(self) -> list[type[Any]]:
        """The classes registered explicitly (not found in the catalogue), by type."""
        with self._lock:
            return [d.cls for _, d in sorted(self._by_type.items())]

    def types(self) -> tuple[str, ...]:
        """Every type this runtime serves, sorted; cheap (called on every poll)."""
        version = -1 if self._catalogue is None else self._catalogue.version
        seen = (len(self._by_type), version)
        if seen != self._seen:
            names = set(self._by_type)
            if self._catalogue is not None:
                names.update(self._catalogue.resolve()[0])
            self._types, self._seen = tuple(sorted(names)), seen
        return self._types

    def turn_limits(self) -> dict[str, int]:
        """``max_active_turns`` of each served type that sets one; cheap (every poll)."""
        types = self.types()
        if self._limits[0] is not types:
            limits: dict[str, int] = {}
            for name in types:
                try:
                    limit = self.get(name).max_active_turns
                except UnknownActorType:
                    continue
                if limit is not None:
                    limits[name] = limit
            self._limits = (types, limits)
        return self._limits[1]

    def ambiguous(self) -> dict[str, list[str]]:
        """Catalogue types defined by several classes and not registered (none served)."""
        if self._catalogue is None:
            return {}
        ambiguous = self._catalogue.resolve()[1]
        return {t: names for t, names in ambiguous.items() if t not in self._by_type}


class NamedHandlers:
    """Handlers by name: effect handlers and commit actions, ``handler(ctx, **arguments)``."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._lock = threading.Lock()
        self._handlers: dict[str, Callable[..., Any]] = {}
        self._names: tuple[str, ...] = ()
        self._limits: dict[str, float] = {}
        self._flow: dict[str, EffectLimits] = {}

    def register(self, name: str, handler: Callable[..., Any]) -> None:
        check_identifier(name, what=f"{self.kind} name")
        if not callable(handler):
            raise TypeError(f"{self.kind} handler for {name!r} is not callable")
        with self._lock:
            known = self._handlers.get(name)
            if known is not None and known is not handler:
                raise ValueError(f"{self.kind} {name!r} already has a handler: {known!r}")
            self._handlers[name] = handler
            self._names = tuple(sorted(self._handlers))

    def limit(self, name: str, seconds: float | None) -> None:
        """The longest one attempt of ``name`` may run (None: no limit)."""
        with self._lock:
            if seconds is None:
                self._limits.pop(name, None)
            else:
                self._limits[name] = seconds

    def max_duration(self, name: str) -> float | None:
        return self._limits.get(name)

    def set_flow(self, name: str, limits: EffectLimits) -> None:
        """The rate and concurrency limits this process declares for effect ``name``."""
        with self._lock:
            self._flow[name] = limits

    def flow(self, name: str) -> EffectLimits:
        return self._flow.get(name) or EffectLimits()

    def get(self, name: str) -> Callable[..., Any]:
        handler = self._handlers.get(name)
        if handler is None:
            raise LookupError(f"no handler for {self.kind} {name!r} in this process")
        return handler

    def names(self) -> tuple[str, ...]:
        return self._names

    def items(self) -> list[tuple[str, Callable[..., Any]]]:
        """Every (name, handler), by name: to give another runtime the same handlers."""
        with self._lock:
            return sorted(self._handlers.items())
