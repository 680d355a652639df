"""A mypy plugin that type-checks the attribute form: ``ref.add(sku="x")``.

Python's type system has no mapped types, so no annotation can say "the ref has the
actor's operations, with their results turned into calls through a mailbox"; the refs'
``__getattr__`` is therefore typed as Any and only ``ref.call(Cart.add, ...)`` was
checked. With this plugin enabled (``plugins = ["solid_objects.mypy"]`` in the mypy
configuration) mypy reads the operation off the actor class instead, for

- ``runtime.ref(Cart, id).add`` (sync and async): ``OperationHandle[P, R]`` /
  ``AsyncOperationHandle[P, R]`` with the method's parameters (``self`` dropped) and
  result (an ``async def``'s awaited type), so the call, ``.send()``, ``.with_options()``
  and what they return are all checked; a ``@query`` has no ``send``;
- ``self.send_to(Cart, id).add`` and ``self.schedule(...).add``: a callable with the
  operation's parameters returning None (queries are refused there, as at run time);
  ``self.request(Cart, id, reply_to=...).add`` the same, returning the request id (str);

and reports a name that is not an operation of the class (unknown, private, state, a
lifecycle hook) where the runtime would raise UnknownOperation. pyright has no plugins;
``docs/typing.md`` says what it checks.
"""

from __future__ import annotations

from collections.abc import Callable

from mypy.checker import TypeChecker
from mypy.errorcodes import ATTR_DEFINED
from mypy.nodes import (
    Decorator,
    FuncDef,
    OverloadedFuncDef,
    RefExpr,
    SymbolNode,
    TypeInfo,
)
from mypy.plugin import AttributeContext, Plugin
from mypy.subtypes import find_member
from mypy.types import (
    AnyType,
    CallableType,
    Instance,
    NoneType,
    Parameters,
    ProperType,
    Type,
    TypeOfAny,
    get_proper_type,
)

from .declarations import HOOK_NAMES

_ACTOR = "solid_objects.actor.Actor"
_QUERY = "solid_objects.actor.query"
#: The class whose ``__getattr__`` answers, and the type its operations get there.
_REFS = {
    "solid_objects.ref.Ref": (
        "solid_objects.ref.OperationHandle",
        "solid_objects.ref._QueryHandle",
    ),
    "solid_objects.ref.AsyncRef": (
        "solid_objects.ref.AsyncOperationHandle",
        "solid_objects.ref._AsyncQueryHandle",
    ),
}
_STAGERS = {
    "solid_objects.actor._Scheduler": "a reminder",
    "solid_objects.actor._Outbound": "a message",
    "solid_objects.actor._Request": "a request",
}
#: The stager whose staged call returns something: the request id.
_REQUEST = "solid_objects.actor._Request"


class SolidObjectsPlugin(Plugin):
    """Types the operations read off refs, ``send_to(...)`` and ``schedule(...)``."""

    def get_attribute_hook(self, fullname: str) -> Callable[[AttributeContext], Type] | None:
        owner, _, name = fullname.rpartition(".")
        if owner in _REFS:
            return lambda ctx: _ref_attribute(ctx, owner, name)
        if owner in _STAGERS:
            return lambda ctx: _staged_attribute(ctx, owner, name)
        return None


def plugin(version: str) -> type[Plugin]:
    """mypy's entry point."""
    return SolidObjectsPlugin


def _actor_of(ctx: AttributeContext, owner: str) -> Instance | None:
    """The actor class ``A`` of ``Ref[A]`` (or ``T`` of ``_Outbound[T]``), when known."""
    holder = ctx.type
    if not isinstance(holder, Instance) or holder.type.fullname != owner or not holder.args:
        return None
    actor = get_proper_type(holder.args[0])
    # Ref[Actor] (a class only known at run time) stays Any, as without the plugin.
    if (
        isinstance(actor, Instance)
        and actor.type.has_base(_ACTOR)
        and actor.type.fullname != _ACTOR
    ):
        return actor
    return None


def _exists(ctx: AttributeContext, name: str) -> bool:
    """A real attribute of the ref itself (``actor_id``, ``_options``): not an operation."""
    holder = ctx.type
    return isinstance(holder, Instance) and holder.type.get(name) is not None


def _operation(actor: Instance, name: str) -> tuple[SymbolNode | None, str | None]:
    """The method defining operation ``name`` of ``actor``, or why it is not one."""
    if name.startswith("_"):
        return None, f'"{name}" is private; only public methods of {actor.type.name} are operations'
    defined: TypeInfo | None = next((info for info in actor.type.mro if name in info.names), None)
    if defined is None:
        return None, f'"{actor.type.name}" has no operation "{name}"'
    if defined.fullname == _ACTOR or defined.fullname == "builtins.object":
        return None, f'"{name}" belongs to Actor; it is not an operation of {actor.type.name}'
    node = defined.names[name].node
    function = node.func if isinstance(node, Decorator) else node
    if isinstance(node, Decorator) and node.var.is_property:
        function = None
    if isinstance(function, FuncDef) and (function.is_static or function.is_class):
        function = None
    if function is None or not isinstance(function, FuncDef | OverloadedFuncDef):
        return None, f'"{name}" is not an operation of {actor.type.name} (not a method)'
    if name in HOOK_NAMES:
        return None, f"{name}() is a lifecycle hook of {actor.type.name}, not an operation"
    return node, None


def _is_query(node: SymbolNode | None) -> bool:
    return isinstance(node, Decorator) and any(
        isinstance(d, RefExpr) and d.fullname == _QUERY for d in node.decorators
    )


def _signature(actor: Instance, name: str) -> tuple[Parameters, Type] | None:
    """The operation's parameters without ``self`` and its result (awaited if async)."""
    bound = get_proper_type(find_member(name, actor, actor))
    if not isinstance(bound, CallableType):
        return None  # overloaded or decorated into something else: leave it Any
    result: ProperType = get_proper_type(bound.ret_type)
    if isinstance(result, Instance) and result.type.fullname == "typing.Coroutine":
        result = get_proper_type(result.args[2])
    parameters = Parameters(
        bound.arg_types, bound.arg_kinds, bound.arg_names, variables=bound.variables
    )
    return parameters, result


def _fail(ctx: AttributeContext, message: str) -> Type:
    ctx.api.fail(message, ctx.context, code=ATTR_DEFINED)
    return AnyType(TypeOfAny.from_error)


def _ref_attribute(ctx: AttributeContext, owner: str, name: str) -> Type:
    actor = _actor_of(ctx, owner)
    if actor is None or _exists(ctx, name):
        return ctx.default_attr_type
    node, problem = _operation(actor, name)
    if problem is not None:
        return _fail(ctx, problem)
    signature = _signature(actor, name)
    if signature is None:
        return ctx.default_attr_type
    handle, query_handle = _REFS[owner]
    info = _type_info(ctx, query_handle if _is_query(node) else handle)
    if info is None:
        return ctx.default_attr_type
    return Instance(info, list(signature))


def _type_info(ctx: AttributeContext, fullname: str) -> TypeInfo | None:
    """A class of this library by full name (its module is loaded: the ref's class is in it)."""
    module, _, name = fullname.rpartition(".")
    checker = ctx.api
    if not isinstance(checker, TypeChecker) or module not in checker.modules:
        return None
    symbol = checker.modules[module].names.get(name)
    return symbol.node if symbol is not None and isinstance(symbol.node, TypeInfo) else None


def _staged_attribute(ctx: AttributeContext, owner: str, name: str) -> Type:
    actor = _actor_of(ctx, owner)
    if actor is None or _exists(ctx, name):
        return ctx.default_attr_type
    node, problem = _operation(actor, name)
    if problem is not None:
        return _fail(ctx, problem)
    if _is_query(node):
        return _fail(
            ctx, f'"{name}" is a query of {actor.type.name}: it cannot be {_STAGERS[owner]}'
        )
    signature = _signature(actor, name)
    if signature is None:
        return ctx.default_attr_type
    parameters, _ = signature
    return CallableType(
        parameters.arg_types,
        parameters.arg_kinds,
        parameters.arg_names,
        ctx.api.named_generic_type("builtins.str", []) if owner == _REQUEST else NoneType(),
        ctx.api.named_generic_type("builtins.function", []),
        variables=parameters.variables,
    )
