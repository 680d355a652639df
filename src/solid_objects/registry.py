"""The actor types a runtime knows, by their stored ``actor_type`` name."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .actor import Actor, definition_of
from .codec import check_identifier
from .definition import ActorDefinition
from .errors import InvalidActorDefinition, UnknownActorType


class Registry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_type: dict[str, ActorDefinition] = {}
        self._types: tuple[str, ...] = ()

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
                self._types = tuple(sorted(self._by_type))
        return definition

    def get(self, actor_type: str) -> ActorDefinition:
        definition = self._by_type.get(actor_type)
        if definition is None:
            raise UnknownActorType(
                f"actor type {actor_type!r} is not registered in this process; "
                f"known: {sorted(self._by_type)}"
            )
        return definition

    def types(self) -> tuple[str, ...]:
        return self._types


class NamedHandlers:
    """Handlers by name: effect handlers and commit actions, ``handler(ctx, **arguments)``."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._lock = threading.Lock()
        self._handlers: dict[str, Callable[..., Any]] = {}
        self._names: tuple[str, ...] = ()

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

    def get(self, name: str) -> Callable[..., Any]:
        handler = self._handlers.get(name)
        if handler is None:
            raise LookupError(f"no handler for {self.kind} {name!r} in this process")
        return handler

    def names(self) -> tuple[str, ...]:
        return self._names
