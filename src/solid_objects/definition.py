"""Introspection of actor classes: state fields, operations and their validators.

One :class:`ActorDefinition` per class, built when the class is defined. It
owns every conversion between Python values and stored JSON for that class:
arguments, results and state, each validated with pydantic against the
annotations the user wrote.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, NotRequired, Required, get_origin

from pydantic import (
    ConfigDict,
    PydanticSchemaGenerationError,
    TypeAdapter,
    ValidationError,
    ValidatorFunctionWrapHandler,
)
from pydantic_core import PydanticCustomError, PydanticSerializationError, SchemaValidator
from pydantic_core import core_schema as cs
from typing_extensions import TypedDict

from .codec import (
    MAX_OPERATION_LENGTH,
    MAX_TYPE_LENGTH,
    encode_json,
    holds_nul,
    reject_non_finite,
)
from .errors import (
    InvalidActorDefinition,
    InvalidArguments,
    InvalidState,
    PayloadTooLarge,
    StateMigrationError,
    UnknownOperation,
)
from .guard import fenced
from .observe import Observables, build_observables, is_payload
from .projections import Projections, build_projections, is_projection

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


def _typed_dict(name: str, fields: dict[str, Any], *, strict: bool = False) -> Any:
    td: Any = TypedDict(name, fields)  # type: ignore[misc]
    setattr(td, "__pydantic_config__", ConfigDict(extra="forbid", strict=strict))  # noqa: B010
    return td


#: Said in every InvalidArguments for a value of the wrong type (README, "Arguments").
STRICT_NOTE = (
    "arguments are checked strictly, without conversion: pass the annotated type, or "
    "annotate the parameter Annotated[T, pydantic.Strict(False)] to accept conversions"
)


def _strict_message(exc: ValidationError) -> str:
    """A validation message that shows each wrong value and says that nothing converts."""
    parts = []
    wrong_type = False
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"]) or "value"
        part = f"{loc}: {err['msg']}"
        if err["type"].endswith("_type") or err["type"] in ("is_instance_of", "enum"):
            wrong_type = True
            part += f" (got {type(err['input']).__name__} {_short_repr(err['input'])})"
        parts.append(part)
    return "; ".join(parts) + (f" ({STRICT_NOTE})" if wrong_type else "")


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


#: Core schema types of mappings whose keys pydantic converts (``"1"`` to ``1``).
_MAPPING_SCHEMAS = frozenset({"dict", "counter", "ordered-dict"})


def _refuse_merged_keys(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """Fail when converting the keys made two of them one: a value would be lost."""
    converted = handler(value)
    if isinstance(value, Mapping) and isinstance(converted, Mapping):
        if len(converted) < len(value):
            keys = ", ".join(repr(k) for k in list(value)[:10])
            raise PydanticCustomError(
                "merged_keys",
                "keys {keys} become {kept} keys after conversion: a value would be lost",
                {"keys": keys, "kept": len(converted)},
            )
    return converted


def _guard_mappings(schema: Any) -> Any:
    """A copy of a core schema whose every mapping is checked by _refuse_merged_keys."""
    if isinstance(schema, list):
        return [_guard_mappings(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    guarded = {key: _guard_mappings(item) for key, item in schema.items()}
    if guarded.get("type") in _MAPPING_SCHEMAS:
        return cs.no_info_wrap_validator_function(_refuse_merged_keys, guarded)
    return guarded


def _adapter(annotation: Any) -> TypeAdapter[Any]:
    """A TypeAdapter that refuses mappings whose keys collide once converted.

    pydantic turns ``{1: "a", "1": "b"}`` for ``dict[int, str]`` into ``{1: "b"}``
    silently, and a check before validation cannot know the key type. The adapter's
    validator is rebuilt from its own core schema with every mapping wrapped; its
    serializer is left as pydantic built it. (A pydantic model's fields are validated
    by the model's own validator, which this does not rewrite.)
    """
    adapter: TypeAdapter[Any] = TypeAdapter(annotation)
    adapter.validator = SchemaValidator(_guard_mappings(adapter.core_schema))
    return adapter


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"]) or "value"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


@dataclass(frozen=True)
class Operation:
    """One public method of an actor, with its argument and result validators."""

    name: str
    function: Callable[..., Any]
    is_query: bool
    is_async: bool
    #: Names that may be passed positionally, in order.
    parameters: tuple[str, ...]
    #: Every argument name, keyword-only ones included.
    names: frozenset[str]
    arguments: TypeAdapter[Any]
    result: TypeAdapter[Any]

    def bind(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """Turn a Python call's arguments into a validated, JSON-ready dict."""
        if len(args) > len(self.parameters):
            raise InvalidArguments(
                f"{self.name}() takes {len(self.parameters)} arguments, {len(args)} given"
            )
        if args:
            values = dict(zip(self.parameters, args, strict=False))
            for key, value in kwargs.items():
                if key in values:
                    raise InvalidArguments(f"{self.name}() got multiple values for {key!r}")
                values[key] = value
        else:  # keywords only: nothing can be given twice
            values = dict(kwargs)
        try:
            validated = self.arguments.validate_python(values)
            reject_non_finite(validated, what=f"arguments of {self.name}()")
            return self.arguments.dump_python(validated, mode="json")  # type: ignore[no-any-return]
        except ValidationError as exc:
            raise InvalidArguments(f"{self.name}(): {_strict_message(exc)}") from None
        except (PydanticSerializationError, UnicodeError) as exc:
            # UnicodeError: bytes that are not UTF-8, or a lone surrogate in a dict key.
            raise InvalidArguments(f"{self.name}(): arguments are not JSON: {exc}") from None

    def encode_arguments(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any], *, limit: int
    ) -> str:
        return encode_json(self.bind(args, kwargs), what=f"arguments of {self.name}()", limit=limit)

    def decode_arguments(self, text: str, *, offer: bool = False) -> dict[str, Any]:
        """Validate stored arguments against the *current* signature (it may have changed).

        ``offer=True`` (an effect's callback) drops the arguments the operation does
        not declare instead of refusing them. Stored JSON converts as it always did
        (``strict=False``): strictness is for the caller's Python values (:meth:`bind`).
        """
        try:
            if offer:
                offered = json.loads(text)
                if isinstance(offered, dict):
                    kept = {k: v for k, v in offered.items() if k in self.names}
                    return self.arguments.validate_python(kept, strict=False)  # type: ignore[no-any-return]
            return self.arguments.validate_json(text, strict=False)  # type: ignore[no-any-return]
        except ValidationError as exc:
            raise InvalidArguments(f"{self.name}(): {_validation_message(exc)}") from None

    def encode_result(self, value: Any, *, limit: int) -> str:
        try:
            checked = self.result.validate_python(value)
            reject_non_finite(checked, what=f"result of {self.name}()")
            plain = self.result.dump_python(checked, mode="json")
        except ValidationError as exc:
            raise InvalidArguments(
                f"{self.name}() returned a value that does not match its annotation: "
                f"{_validation_message(exc)}"
            ) from None
        except (PydanticSerializationError, UnicodeError) as exc:
            raise InvalidArguments(
                f"{self.name}() returned a value that is not JSON: {exc}"
            ) from None
        return encode_json(plain, what=f"result of {self.name}()", limit=limit)

    def decode_result(self, text: str | None) -> Any:
        if text is None:
            return None
        return self.result.validate_json(text)


@dataclass
class ActorDefinition:
    """Everything the runtime needs to know about one actor class."""

    cls: type[Any]
    actor_type: str
    state_version: int
    migrations: Mapping[int, Callable[[dict[str, Any]], dict[str, Any]]]
    defaults: dict[str, Any]
    state: TypeAdapter[Any]
    operations: dict[str, Operation] = field(default_factory=dict)
    #: What realtime subscribers may observe (``observables``, ``@payload``); None: nothing.
    observables: Observables | None = None
    #: Values derived from the state, kept in a table's columns (``@projection``); None:
    #: the class declares none.
    projections: Projections | None = None
    #: Whether each finished turn is written to the journal (``journaled = True``).
    journaled: bool = False
    #: At most this many actors of the type run a turn at once over every process
    #: (``max_active_turns = N``); None: no limit.
    max_active_turns: int | None = None

    #: Each state field's Python type when every field is a plain ``int``, ``str`` or
    #: ``bool`` (no constraint, no validator); None otherwise. See :meth:`reload_into`.
    _scalars: dict[str, type] | None = field(init=False, default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._scalars = _scalar_fields(self.state)

    def operation(self, name: str) -> Operation | None:
        return self.operations.get(name)

    def default_state(self) -> dict[str, Any]:
        return copy.deepcopy(self.defaults)

    def load_state(self, text: str | None, version: int | None) -> dict[str, Any]:
        """Decode stored state, migrating it from ``version`` to the class's version."""
        if text is None:
            return self.default_state()
        raw = json.loads(text)
        current = version or 1
        if current > self.state_version:
            raise StateMigrationError(
                f"{self.actor_type} state was written by state_version {current}; this code "
                f"knows version {self.state_version}. Deploy the newer code everywhere."
            )
        while current < self.state_version:
            step = self.migrations.get(current)
            if step is None:
                raise StateMigrationError(
                    f"{self.actor_type}: no migration from state_version {current} to {current + 1}"
                )
            try:
                with fenced(f"the {self.actor_type} state migration from {current}"):
                    raw = step(raw)
            except Exception as exc:
                raise StateMigrationError(
                    f"{self.actor_type}: migration from state_version {current} failed: {exc!r}"
                ) from exc
            if not isinstance(raw, dict):
                raise StateMigrationError(
                    f"{self.actor_type}: migration from {current} returned "
                    f"{type(raw).__name__}, not dict"
                )
            current += 1
        return self._hydrate(raw)

    def _hydrate(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Stored (current-version) state as the Python values a turn sees."""
        if raw.keys() == self.defaults.keys():
            merged = raw
        else:
            merged = self.default_state()
            merged.update({k: v for k, v in raw.items() if k in self.defaults})
        try:
            return self.state.validate_python(merged)  # type: ignore[no-any-return]
        except ValidationError as exc:
            raise StateMigrationError(
                f"{self.actor_type}: stored state does not match the class: "
                f"{_validation_message(exc)}"
            ) from None

    def reload_into(self, instance: Any, text: str) -> None:
        """Make ``instance`` hold exactly what a reload of the committed ``text`` gives.

        A turn may leave values the commit coerces (``"b"`` for an Enum, a list for a
        tuple): without this the cached activation would run its next turn on values
        that differ from the committed ones, and behave unlike a reloaded actor.
        When every field is a plain int, str or bool and holds exactly that type,
        ``text`` is their own encoding and a reload gives the same values back.
        """
        scalars = self._scalars
        if scalars is not None and all(
            type(getattr(instance, name, None)) is kind for name, kind in scalars.items()
        ):
            return
        for name, value in self._hydrate(json.loads(text)).items():
            setattr(instance, name, value)

    def capture_state(self, instance: Any) -> dict[str, Any]:
        return {name: getattr(instance, name) for name in self.defaults}

    def dump_state(self, values: dict[str, Any], *, limit: int) -> str:
        try:
            checked = self.state.validate_python(values)
            reject_non_finite(checked, what=f"{self.actor_type} state")
            plain = self.state.dump_python(checked, mode="json")
        except InvalidArguments as exc:
            raise InvalidState(str(exc)) from None
        except ValidationError as exc:
            raise InvalidState(f"{self.actor_type}: {_validation_message(exc)}") from None
        except (PydanticSerializationError, UnicodeError) as exc:
            raise InvalidState(f"{self.actor_type}: state is not JSON: {exc}") from None
        try:
            encoded = encode_json(plain, what=f"{self.actor_type} state", limit=limit)
        except PayloadTooLarge:
            raise
        except InvalidArguments as exc:
            raise InvalidState(str(exc)) from None
        if holds_nul(encoded):
            raise InvalidState(
                f"{self.actor_type}: state holds the character U+0000, which PostgreSQL's "
                "jsonb cannot store; it is refused on every database, so state moves "
                "between them unchanged"
            )
        return encoded

    def instantiate(self, actor_id: str, state: dict[str, Any]) -> Any:
        """A fresh instance holding ``state``; ``__init__`` is never called."""
        instance = object.__new__(self.cls)
        instance.actor_id = actor_id
        for name, value in state.items():
            setattr(instance, name, value)
        return instance


_SCALAR_SCHEMAS: dict[str, type] = {"int": int, "str": str, "bool": bool}


def _scalar_fields(state: TypeAdapter[Any]) -> dict[str, type] | None:
    """The state fields' types if each is exactly a plain int, str or bool schema."""
    schema = state.core_schema
    if schema.get("type") != "typed-dict" or schema.get("computed_fields"):
        return None
    found: dict[str, type] = {}
    for name, spec in schema["fields"].items():
        kind = _SCALAR_SCHEMAS.get(spec["schema"].get("type"))
        if kind is None or set(spec["schema"]) != {"type"} or not spec.get("required", True):
            return None
        found[name] = kind
    return found


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
        arguments = _adapter(_typed_dict(f"{cls.__name__}_{name}", fields, strict=True))
        result = _adapter(
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
        state = _adapter(
            _typed_dict(f"{cls.__name__}State", {k: Required[v] for k, v in fields.items()})
        )
        normalized = state.dump_python(state.validate_python(defaults), mode="json")
        encode_json(normalized, what="default state", limit=1 << 30)
    except (PydanticSchemaGenerationError, TypeError) as exc:
        raise _fail(cls, f"state annotations cannot be stored as JSON: {exc}") from None
    except (ValidationError, PydanticSerializationError, InvalidArguments) as exc:
        raise _fail(cls, f"default state is not valid JSON state: {exc}") from None
    return state, normalized


def resolve_operation(definition: ActorDefinition, name: str) -> Operation:
    """Look up a public operation or query by name; refuse private and unknown names."""
    if name.startswith("_"):
        raise UnknownOperation(f"{name!r} is private; only public methods can be called")
    operation = definition.operation(name)
    if operation is None:
        raise UnknownOperation(
            f"{definition.actor_type} has no operation {name!r}; "
            f"known: {sorted(definition.operations)}"
        )
    return operation


def operation_of(definition: ActorDefinition, method: Callable[..., Any]) -> Operation:
    """The operation a method object (``Counter.add``) names, checked against the actor."""
    name = getattr(method, "__name__", None)
    if not isinstance(name, str):
        raise UnknownOperation(f"{method!r} is not a method of {definition.actor_type}")
    operation = resolve_operation(definition, name)
    if operation.function is not method and getattr(method, "__wrapped__", None) is not (
        operation.function
    ):
        raise UnknownOperation(
            f"{getattr(method, '__qualname__', name)} is not an operation of "
            f"{definition.actor_type}"
        )
    return operation
