"""Reading an actor class's declarations into its :class:`ActorDefinition`.

``build_definition`` runs when a class is defined: it collects the state fields (with
their defaults), the public methods that are operations, the lifecycle hooks and the
class settings (``actor_type``, ``state_version``, ``migrations``,
``max_active_turns``, ``journaled``), and raises :class:`InvalidActorDefinition`
naming the class and the rule for each declaration it cannot accept.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, NotRequired, Required, get_origin

from pydantic import (
    PydanticSchemaGenerationError,
    TypeAdapter,
    ValidationError,
)
from pydantic_core import PydanticSerializationError

from .codec import (
    MAX_OPERATION_LENGTH,
    MAX_TYPE_LENGTH,
    encode_json,
)
from .definition import ActorDefinition, Operation, json_adapter, typed_dict
from .errors import (
    InvalidActorDefinition,
    InvalidArguments,
)
from .observe import build_observables, is_payload
from .projections import build_projections, is_projection

#: Names that belong to the library on actors and references; no field or
#: operation may use them.
RESERVED_NAMES = frozenset(
    {
        "actor_id",
        "actor_type",
        "actor_class",
        "state_version",
        "migrations",
        "runtime",
        "ref",
        "call",
        "send",
        "snapshot",
        "destroy",
        "with_options",
        "emit",
        "schedule",
        "cancel_schedule",
        "reminders",
        "reminder",
        "send_to",
        "request",
        "commit_action",
        "current_message",
        "on_activate",
        "on_deactivate",
    }
)
#: Reserved names an actor may define as methods: lifecycle hooks, never operations.
HOOK_NAMES = frozenset({"on_activate", "on_deactivate"})
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_TYPE_NAME = re.compile(rf"^[A-Za-z0-9_.:-]{{1,{MAX_TYPE_LENGTH}}}$")
_MUTABLE = (list, dict, set, bytearray)


def _fail(cls: type, message: str) -> InvalidActorDefinition:
    return InvalidActorDefinition(f"{cls.__qualname__}: {message}")


def _is_classvar(annotation: Any) -> bool:
    return annotation is ClassVar or get_origin(annotation) is ClassVar


def _build_operation(cls: type, name: str, function: Callable[..., Any]) -> Operation:
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except Exception as exc:
        raise _fail(cls, f"cannot resolve annotations of {name}(): {exc}") from None
    signature = inspect.signature(function)
    params = list(signature.parameters.values())[1:]  # drop self
    fields: dict[str, Any] = {}
    order: list[str] = []
    for param in params:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise _fail(cls, f"{name}() may not take *args or **kwargs; name each argument")
        if param.kind is param.POSITIONAL_ONLY:
            raise _fail(cls, f"{name}(): positional-only argument {param.name!r} is not allowed")
        if param.name.startswith("_"):
            raise _fail(cls, f"{name}(): argument names may not start with '_'")
        annotation = hints.get(param.name, Any)
        wrapper = Required if param.default is param.empty else NotRequired
        fields[param.name] = wrapper[annotation]
        if param.kind is param.POSITIONAL_OR_KEYWORD:
            order.append(param.name)
    returns = hints.get("return", Any)
    try:
        # Strict: a caller's "3" for an int is refused, not turned into 3 (README,
        # "Arguments"); a parameter annotated Annotated[T, Strict(False)] converts.
        arguments = json_adapter(typed_dict(f"{cls.__name__}_{name}", fields, strict=True))
        result = json_adapter(
            type(None) if returns is None else returns  # `-> None`
        )
    except (PydanticSchemaGenerationError, TypeError) as exc:
        raise _fail(cls, f"{name}(): its annotations cannot be stored as JSON: {exc}") from None
    unwrapped = inspect.unwrap(function)
    return Operation(
        name=name,
        function=function,
        is_query=bool(getattr(function, "__solid_query__", False)),
        is_async=inspect.iscoroutinefunction(unwrapped),
        parameters=tuple(order),
        names=frozenset(fields),
        arguments=arguments,
        result=result,
    )


def _check_hook(cls: type[Any], name: str, function: Callable[..., Any]) -> None:
    """A hook is called with no arguments: refuse one that needs some, at import time."""
    params = list(inspect.signature(function).parameters.values())[1:]
    if any(
        p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        for p in params
    ):
        raise _fail(cls, f"{name}() is a lifecycle hook and is called with no arguments")


def build_definition(cls: type, base: type) -> ActorDefinition:
    """Introspect ``cls`` (a subclass of ``base``) or raise InvalidActorDefinition.

    One step per concern: the class's own settings, its state fields, its
    operations, payloads and hooks, then the state's JSON schema and defaults.
    """
    actor_type, version, migrations = _class_settings(cls)
    base_names = set(vars(base)) | set(getattr(base, "__annotations__", {}))
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception as exc:
        raise _fail(cls, f"cannot resolve annotations: {exc}") from None

    defaults: dict[str, Any] = {}
    fields: dict[str, Any] = {}
    operations: dict[str, Operation] = {}
    payloads: dict[str, Callable[..., Any]] = {}
    for klass in reversed(cls.__mro__):
        if klass is base or not issubclass(klass, base):
            continue
        _collect_fields(cls, klass, hints, base_names, defaults, fields)
        _collect_members(cls, klass, base_names, operations, payloads)
    clash = set(fields) & set(operations)
    if clash:
        raise _fail(cls, f"{sorted(clash)} are both state fields and operations")
    for name in fields:
        operations.pop(name, None)
    state, normalized = _state_of(cls, fields, defaults)
    return ActorDefinition(
        cls=cls,
        actor_type=actor_type,
        state_version=version,
        migrations=dict(migrations),
        defaults=defaults,
        state=state,
        operations=operations,
        observables=build_observables(cls, getattr(cls, "observables", ()), normalized, payloads),
        projections=build_projections(cls, actor_type),
        journaled=_journaled(cls),
        max_active_turns=_max_active_turns(cls),
    )


def _max_active_turns(cls: type) -> int | None:
    """The class setting ``max_active_turns`` (a positive int, or None: no limit)."""
    value = getattr(cls, "max_active_turns", None)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise _fail(cls, f"max_active_turns must be a positive int or None, not {value!r}")
    return value


def _journaled(cls: type) -> bool:
    """The class setting ``journaled`` (a bool; off by default)."""
    value = getattr(cls, "journaled", False)
    if not isinstance(value, bool):
        raise _fail(cls, f"journaled must be True or False, not {value!r}")
    return value


def _class_settings(cls: type) -> tuple[str, int, Mapping[int, Any]]:
    """``actor_type``, ``state_version`` and ``migrations``, checked; no ``__init__``."""
    actor_type = cls.__dict__.get("actor_type", cls.__name__)
    if not isinstance(actor_type, str) or not _TYPE_NAME.match(actor_type):
        raise _fail(cls, f"actor_type {actor_type!r} must match {_TYPE_NAME.pattern}")
    version = getattr(cls, "state_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _fail(cls, f"state_version must be a positive int, not {version!r}")
    migrations = getattr(cls, "migrations", {})
    if not isinstance(migrations, Mapping) or not all(
        isinstance(k, int) and callable(v) for k, v in migrations.items()
    ):
        raise _fail(cls, "migrations must map int versions to functions")
    if "__init__" in cls.__dict__:
        raise _fail(
            cls,
            "actors may not define __init__: state comes from annotated attributes with "
            "defaults; the runtime builds instances",
        )
    return actor_type, version, migrations


def _collect_fields(
    cls: type,
    klass: type,
    hints: Mapping[str, Any],
    base_names: set[str],
    defaults: dict[str, Any],
    fields: dict[str, Any],
) -> None:
    """The state fields ``klass`` declares: annotated public attributes with defaults."""
    for name in getattr(klass, "__annotations__", {}):
        annotation = hints.get(name)
        if _is_classvar(annotation) or name.startswith("_"):
            continue
        if name in RESERVED_NAMES or name in base_names:
            raise _fail(cls, f"{name!r} is reserved and cannot be a state field")
        if not _NAME.match(name):
            raise _fail(cls, f"state field {name!r} is not a valid name")
        if name not in klass.__dict__ and name not in defaults:
            raise _fail(cls, f"state field {name!r} needs a default value")
        if name in klass.__dict__:
            value = klass.__dict__[name]
            if inspect.isfunction(value):
                raise _fail(cls, f"{name!r} is both a state field and an operation")
            defaults[name] = value
        fields[name] = annotation


def _collect_members(
    cls: type,
    klass: type,
    base_names: set[str],
    operations: dict[str, Operation],
    payloads: dict[str, Callable[..., Any]],
) -> None:
    """The operations, payloads and hooks ``klass`` defines; a bare mutable is refused."""
    for name, member in klass.__dict__.items():
        if name.startswith("_") or name in getattr(klass, "__annotations__", {}):
            continue
        if isinstance(member, staticmethod | classmethod | property):
            continue
        if not inspect.isfunction(member):
            if isinstance(member, _MUTABLE) and name not in base_names:
                raise _fail(
                    cls,
                    f"{name!r} holds a mutable value but has no annotation: annotate it to "
                    "make it durable state, or mark it ClassVar",
                )
            continue
        if name in HOOK_NAMES:
            _check_hook(cls, name, member)
        elif is_projection(member):
            operations.pop(name, None)
        elif is_payload(member):
            payloads[name] = member
            operations.pop(name, None)
        else:
            _check_operation_name(cls, name, base_names)
            operations[name] = _build_operation(cls, name, member)


def _check_operation_name(cls: type, name: str, base_names: set[str]) -> None:
    if name in RESERVED_NAMES or name in base_names:
        raise _fail(cls, f"{name!r} is reserved and cannot be an operation")
    if len(name) > MAX_OPERATION_LENGTH:
        raise _fail(
            cls,
            f"operation name {name[:20]}... is {len(name)} characters; the "
            f"database stores at most {MAX_OPERATION_LENGTH}",
        )


def _state_of(
    cls: type, fields: Mapping[str, Any], defaults: Mapping[str, Any]
) -> tuple[TypeAdapter[Any], Any]:
    """The state's validator and its default state as JSON data, or InvalidActorDefinition."""
    try:
        state = json_adapter(
            typed_dict(f"{cls.__name__}State", {k: Required[v] for k, v in fields.items()})
        )
        normalized = state.dump_python(state.validate_python(defaults), mode="json")
        encode_json(normalized, what="default state", limit=1 << 30)
    except (PydanticSchemaGenerationError, TypeError) as exc:
        raise _fail(cls, f"state annotations cannot be stored as JSON: {exc}") from None
    except (ValidationError, PydanticSerializationError, InvalidArguments) as exc:
        raise _fail(cls, f"default state is not valid JSON state: {exc}") from None
    return state, normalized
