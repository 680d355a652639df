"""What realtime subscribers may observe of an actor, declared on its class.

An actor opts in with ``observables`` (state fields) and ``@payload`` methods::

    class Room(Actor):
        title: str = ""
        members: list[str] = []
        notes: dict[str, str] = {}

        observables = {"title": "value", "members": "invalidate"}

        @payload
        def my_note(self, context: Any) -> dict[str, str]:
            return {"note": self.notes.get(str(context), "")}

``"invalidate"`` (the default, and what a plain list of names means) sends only the
*name* of a field that changed, so a client refetches through its own authorized
path; ``"value"`` sends the committed value to every subscriber the subscription
policy admits; a ``@payload`` is computed per subscriber from committed state,
after ``authorize_query`` admitted that subscriber for that name. A turn that
changes nothing observed writes no broadcast, and an actor that declares nothing
costs nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from .codec import canonical_json
from .errors import InvalidActorDefinition

F = TypeVar("F", bound=Callable[..., Any])

Mode = Literal["value", "invalidate"]
MODES: tuple[Mode, ...] = ("value", "invalidate")
#: The most payload names one actor class may declare (and one subscription ask for).
MAX_PAYLOADS = 50


def payload(function: F) -> F:
    """Mark a method as a personalized realtime payload: ``fn(self, context) -> JSON``.

    It runs on a throwaway instance holding the committed state, once per
    subscriber that asked for it and that ``authorize_query`` (operation = the
    method's name) admits, with that subscriber's authorization context. It is
    not an operation: nothing can call it through a reference.
    """
    function.__solid_payload__ = True  # type: ignore[attr-defined]
    return function


def is_payload(member: object) -> bool:
    return bool(getattr(member, "__solid_payload__", False))


@dataclass(frozen=True, slots=True)
class Observables:
    """An actor class's realtime declaration, checked when the class is defined."""

    #: Fields whose committed value travels to every authorized subscriber.
    values: tuple[str, ...]
    #: Fields of which only the name travels when they change.
    invalidations: tuple[str, ...]
    #: ``@payload`` methods by name.
    payloads: Mapping[str, Callable[..., Any]]
    #: The default state in its JSON form: what a turn of a new actor changed from.
    initial: Mapping[str, Any]

    def changes(self, before: str | None, after: str) -> str | None:
        """The broadcast document of a turn that changed state from ``before`` to
        ``after`` (stored JSON), or None when nothing a subscriber sees changed.

        ``{"values": {name: new value}, "invalidated": [names], "payloads": bool}``;
        ``payloads`` is true whenever the state changed and the class has payloads
        (any field may feed one).
        """
        old = self.initial if before is None else json.loads(before)
        new = json.loads(after)
        values = {
            name: new.get(name)
            for name in self.values
            if canonical_json(old.get(name)) != canonical_json(new.get(name))
        }
        invalidated = [
            name
            for name in self.invalidations
            if canonical_json(old.get(name)) != canonical_json(new.get(name))
        ]
        payloads = bool(self.payloads) and before != after
        if not values and not invalidated and not payloads:
            return None
        return canonical_json({"values": values, "invalidated": invalidated, "payloads": payloads})

    def projection(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """What a new subscriber gets: every value field, every invalidation name."""
        return {
            "values": {name: state.get(name) for name in self.values},
            "invalidated": list(self.invalidations),
        }


def build_observables(
    cls: type,
    declared: object,
    initial: Mapping[str, Any],
    payloads: Mapping[str, Callable[..., Any]],
) -> Observables | None:
    """Check ``cls.observables`` against its state fields; None if it observes nothing."""
    if isinstance(declared, str):
        declared = (declared,)
    if isinstance(declared, Mapping):
        pairs = list(declared.items())
    elif isinstance(declared, Sequence | set | frozenset):
        pairs = [(name, "invalidate") for name in declared]
    else:
        raise InvalidActorDefinition(
            f"{cls.__qualname__}: observables must name state fields: a list of names "
            f"(invalidation only) or a mapping name -> 'value' | 'invalidate', not {declared!r}"
        )
    values: list[str] = []
    invalidations: list[str] = []
    for name, mode in pairs:
        if not isinstance(name, str) or name not in initial:
            raise InvalidActorDefinition(
                f"{cls.__qualname__}: observables names {name!r}, which is not a state field"
            )
        if mode not in MODES:
            raise InvalidActorDefinition(
                f"{cls.__qualname__}: observable {name!r} has mode {mode!r}; "
                "use 'value' or 'invalidate'"
            )
        (values if mode == "value" else invalidations).append(name)
    if len(payloads) > MAX_PAYLOADS:
        raise InvalidActorDefinition(
            f"{cls.__qualname__}: at most {MAX_PAYLOADS} @payload methods, not {len(payloads)}"
        )
    if not values and not invalidations and not payloads:
        return None
    return Observables(tuple(values), tuple(invalidations), dict(payloads), dict(initial))
