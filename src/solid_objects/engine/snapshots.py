"""Derived values in a snapshot: ``ref.snapshot(include=("total", ...))``.

Both Solid Objects anchors hand back values computed from the state on request: a
``@property``, an argument-less ``@query`` or a ``@projection`` of the class, computed
against the committed state the snapshot read. A ``@query`` is run as a query (asked
of ``authorize_query`` under its own name, refused if it changes the state), so
``include`` reveals nothing a direct call would not.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..codec import encode_json
from ..definition import ActorDefinition
from ..errors import InvalidArguments
from ..projections import is_projection

if TYPE_CHECKING:
    from .reads import CommittedReads


def check_include(definition: ActorDefinition, include: Iterable[str]) -> tuple[str, ...]:
    """The names, checked before anything is read: each a property, an argument-less
    ``@query`` or a ``@projection`` of the class."""
    if isinstance(include, str):
        raise InvalidArguments("include takes a sequence of names, not one string")
    names = tuple(include)
    for name in names:
        if not isinstance(name, str) or name.startswith("_"):
            raise InvalidArguments(f"include names public members, not {name!r}")
        member = inspect.getattr_static(definition.cls, name, None)
        operation = definition.operation(name)
        if isinstance(member, property) or is_projection(member):
            continue
        if operation is not None and operation.is_query:
            required = [
                p
                for p in list(inspect.signature(operation.function).parameters.values())[1:]
                if p.default is inspect.Parameter.empty
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            ]
            if required:
                raise InvalidArguments(
                    f"{definition.actor_type}.{name} needs arguments "
                    f"({', '.join(p.name for p in required)}): call it as a query"
                )
            continue
        raise InvalidArguments(
            f"{definition.actor_type} has no property, argument-less @query or @projection "
            f"named {name!r}"
        )
    return names


def derived_values(
    reads: CommittedReads,
    definition: ActorDefinition,
    actor_id: str,
    state: dict[str, Any],
    names: tuple[str, ...],
    *,
    context: Any,
) -> dict[str, Any]:
    """The values of ``names`` against ``state`` (the snapshot's committed state)."""
    instance = definition.instantiate(actor_id, state)
    limit = reads.options.max_result_bytes
    values: dict[str, Any] = {}
    for name in names:
        operation = definition.operation(name)
        if operation is not None and operation.is_query:
            values[name] = reads.query(definition, actor_id, operation, (), {}, context=context)
            continue
        value = getattr(instance, name)
        if callable(value):  # a @projection method
            value = value()
        values[name] = json.loads(
            encode_json(value, what=f"{definition.actor_type}.{name}", limit=limit)
        )
    return values
