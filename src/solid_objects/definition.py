"""Introspection of actor classes: state fields, operations and their validators.

One :class:`ActorDefinition` per class, built when the class is defined. It
owns every conversion between Python values and stored JSON for that class:
arguments, results and state, each validated with pydantic against the
annotations the user wrote.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import (
    ConfigDict,
    TypeAdapter,
    ValidationError,
    ValidatorFunctionWrapHandler,
)
from pydantic_core import PydanticCustomError, PydanticSerializationError, SchemaValidator
from pydantic_core import core_schema as cs
from typing_extensions import TypedDict

from .codec import (
    encode_json,
    holds_nul,
    reject_non_finite,
)
from .errors import (
    InvalidArguments,
    InvalidState,
    PayloadTooLarge,
    StateMigrationError,
    UnknownOperation,
)
from .guard import fenced
from .observe import Observables
from .projections import Projections


def typed_dict(name: str, fields: dict[str, Any], *, strict: bool = False) -> Any:
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


def json_adapter(annotation: Any) -> TypeAdapter[Any]:
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
