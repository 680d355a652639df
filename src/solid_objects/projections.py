"""Projections: values derived from an actor's state, kept in real, indexable columns.

A method marked :func:`projection` returns one typed value computed from the state.
Each turn that changes the state writes the values into one row per actor of the
type's projection table, in the turn's own fenced commit, so the row is never out of
step with the committed state; destroying or expiring the actor deletes the row in
the same transaction. The application reads, indexes and joins that table like its own
(``runtime.projection_table(Cart)``, ``runtime.find(Cart, ...)``).

This module is the model side: which methods, which column types, the values of one
instance. The store writes the plain :class:`~solid_objects.writes.StagedProjection`.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Context, Decimal
from typing import Any, TypeVar, Union

from .errors import InvalidActorDefinition, InvalidState
from .writes import ProjectionColumn, ProjectionSpec

F = TypeVar("F", bound=Callable[..., Any])

#: Python type of a projection's value -> the column kind the store maps to SQL.
KINDS: dict[type, str] = {
    bool: "bool",
    int: "int",
    float: "float",
    str: "str",
    datetime: "datetime",
    Decimal: "decimal",
}
#: A ``str`` projection holds at most this many characters (an indexable column on
#: every database).
MAX_TEXT = 255
#: A ``Decimal`` projection: 38 digits, 10 of them after the point.
DECIMAL_PLACES = 10
_TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_INT_RANGE = (-(2**63), 2**63 - 1)
_PLACES = Decimal(1).scaleb(-DECIMAL_PLACES)
_WIDE = Context(prec=80)


@dataclass(frozen=True)
class Found:
    """One actor :meth:`Runtime.find` returned: its id and its projections' values."""

    actor_id: str
    values: dict[str, Any]


@dataclass(frozen=True)
class FoundPage:
    """A page of :meth:`Runtime.find`: pass ``next_cursor`` back for the next page (None:
    this was the last)."""

    items: list[Found]
    next_cursor: str | None


def projection(function: F) -> F:
    """Mark a method as a projection: a value derived from the state, written to a
    real column of the actor type's projection table by each turn that changes the
    state. Its return annotation (``int``, ``float``, ``str``, ``bool``, ``datetime``,
    ``Decimal``, or one of them ``| None``) is the column's type."""
    function.__solid_projection__ = True  # type: ignore[attr-defined]
    return function


def is_projection(member: object) -> bool:
    return bool(getattr(member, "__solid_projection__", False))


@dataclass(frozen=True)
class Projections:
    """An actor class's projections: the table's description and how to compute a row."""

    spec: ProjectionSpec
    functions: tuple[Callable[[Any], Any], ...]

    def row(self, instance: Any) -> tuple[Any, ...]:
        """The values of ``instance``, checked against the columns, or InvalidState."""
        values = []
        for column, function in zip(self.spec.columns, self.functions, strict=True):
            try:
                value = function(instance)
            except Exception as exc:
                raise InvalidState(
                    f"{self.spec.actor_type}: projection {column.name} raised {exc!r}"
                ) from exc
            values.append(_checked(self.spec.actor_type, column, value))
        return tuple(values)


def _checked(actor_type: str, column: ProjectionColumn, value: Any) -> Any:
    where = f"{actor_type}: projection {column.name}"
    if value is None:
        if not column.nullable:
            raise InvalidState(f"{where} returned None; annotate it '| None' to allow it")
        return None
    kind = column.kind
    if kind == "float" and type(value) is int:
        value = float(value)
    expected = next(t for t, k in KINDS.items() if k == kind)
    if type(value) is not expected and not (kind == "str" and isinstance(value, str)):
        raise InvalidState(f"{where} returned {type(value).__name__}, not {expected.__name__}")
    problem = _problem(value)
    if problem:
        raise InvalidState(f"{where} returned {problem}")
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    if isinstance(value, Decimal):
        return value.quantize(_PLACES, context=_WIDE)
    return value


def _problem(value: object) -> str | None:
    """What a column of the value's kind cannot hold, or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and not _INT_RANGE[0] <= value <= _INT_RANGE[1]:
        return f"{value}, outside a 64-bit integer"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value}, which a column cannot hold"
    if isinstance(value, str) and len(value) > MAX_TEXT:
        return f"{len(value)} characters; at most {MAX_TEXT}"
    if isinstance(value, datetime) and value.tzinfo is None:
        return "a naive datetime; give it a timezone"
    if isinstance(value, Decimal):
        if not value.is_finite():
            return f"{value}, which a column cannot hold"
        quantized = value.quantize(_PLACES, context=_WIDE)
        if len(quantized.as_tuple().digits) > 38:
            return f"{value}: more than 38 digits"
    return None


def build_projections(cls: type, actor_type: str) -> Projections | None:
    """The projections ``cls`` declares (``@projection`` methods, ``projection_table``),
    or None; InvalidActorDefinition for a type a column cannot hold."""
    members = [
        (name, member)
        for klass in reversed(cls.__mro__)
        for name, member in vars(klass).items()
        if is_projection(member)
    ]
    found: dict[str, Callable[[Any], Any]] = dict(members)
    if not found:
        if "projection_table" in vars(cls):
            raise InvalidActorDefinition(
                f"{cls.__qualname__}: projection_table is set but no method is a @projection"
            )
        return None
    table = getattr(cls, "projection_table", None)
    if table is not None and (not isinstance(table, str) or not _TABLE.match(table)):
        raise InvalidActorDefinition(
            f"{cls.__qualname__}: projection_table {table!r} must match {_TABLE.pattern}"
        )
    columns = []
    for name, function in found.items():
        if name.startswith("_") or name == "actor_id":
            raise InvalidActorDefinition(
                f"{cls.__qualname__}: projection {name!r} needs a public name other than actor_id"
            )
        parameters = list(inspect.signature(function).parameters.values())[1:]
        if any(p.default is inspect.Parameter.empty for p in parameters):
            raise InvalidActorDefinition(
                f"{cls.__qualname__}: projection {name} must take no argument but self"
            )
        columns.append(_column(cls, name, function))
    source = "\n".join(
        f"{c.name}:{c.kind}:{c.nullable}:{_source(f)}"
        for c, f in zip(columns, found.values(), strict=True)
    )
    spec = ProjectionSpec(
        actor_type=actor_type,
        table=table,
        columns=tuple(columns),
        fingerprint=hashlib.sha256(source.encode()).hexdigest()[:32],
    )
    return Projections(spec, tuple(found.values()))


def _column(cls: type, name: str, function: Callable[..., Any]) -> ProjectionColumn:
    try:
        annotation = typing.get_type_hints(function).get("return")
    except Exception as exc:
        raise InvalidActorDefinition(
            f"{cls.__qualname__}: projection {name}: cannot resolve its annotation: {exc}"
        ) from None
    nullable = False
    if typing.get_origin(annotation) in (Union, types.UnionType):
        arguments = [a for a in typing.get_args(annotation) if a is not type(None)]
        nullable = len(arguments) < len(typing.get_args(annotation))
        annotation = arguments[0] if len(arguments) == 1 else None
    kind = KINDS.get(annotation) if isinstance(annotation, type) else None
    if kind is None:
        allowed = ", ".join(t.__name__ for t in KINDS)
        raise InvalidActorDefinition(
            f"{cls.__qualname__}: projection {name} must be annotated with one of {allowed} "
            "(optionally | None)"
        )
    return ProjectionColumn(name=name, kind=kind, nullable=nullable)


def _source(function: Callable[..., Any]) -> str:
    try:
        return inspect.getsource(function)
    except (OSError, TypeError):
        return function.__qualname__
