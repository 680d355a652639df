"""FastAPI integration: the Starlette pieces plus dependencies for a ref and the runtime.

::

    runtime = AsyncRuntime("sqlite:///app.db")
    app = FastAPI(lifespan=lifespan(runtime), exception_handlers=exception_handlers())

    @app.post("/carts/{cart_id}/items")
    async def add(sku: str, cart: AsyncRef[Cart] = Depends(actor(Cart, path_param="cart_id"))):
        return await cart.add(sku=sku)

``actor(...)`` declares the path parameter itself (a ``str``, in the OpenAPI schema)
and binds the ref with the request's authorization context: the ``context=``
dependency given to it (any FastAPI dependency, ``def`` or ``async def``, with its
own dependencies: the usual ``get_current_user``), else the lifespan's
``context(request)`` hook, else none.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from ..extras import requires_extra

with requires_extra("fastapi", "solid_objects.contrib.fastapi"):
    from fastapi import Depends, Path, Request

from ..actor import Actor
from ..ref import AsyncRef, Ref
from ..runtime import AsyncRuntime, Runtime
from .idempotency import RequestKeys
from .starlette import (
    Integration,
    exception_handlers,
    idempotency_keys,
    integration_of,
    lifespan,
    problem_response,
    ref,
    runtime_of,
    use_database,
)

__all__ = [
    "IdempotencyKeys",
    "Integration",
    "RequestKeys",
    "RequiredIdempotencyKeys",
    "actor",
    "current_runtime",
    "exception_handlers",
    "idempotency_keys",
    "integration_of",
    "lifespan",
    "problem_response",
    "ref",
    "runtime_of",
    "use_database",
]

A = TypeVar("A", bound=Actor)

#: The keyword the ``context=`` dependency's value arrives under (not a path parameter).
_CONTEXT = "solid_objects_authorization"


def current_runtime(request: Request) -> Runtime | AsyncRuntime:
    """Dependency: the runtime the lifespan started (``Depends(current_runtime)``)."""
    return runtime_of(request)


def _keys(request: Request) -> RequestKeys:
    return idempotency_keys(request)


def _required_keys(request: Request) -> RequestKeys:
    return idempotency_keys(request, required=True)


#: A handler parameter: the request's ``Idempotency-Key`` (:mod:`.idempotency`), e.g.
#: ``keys: IdempotencyKeys`` then ``await keys.keyed(cart.add)(sku=sku)``.
IdempotencyKeys = Annotated[RequestKeys, Depends(_keys)]
#: The same, answering 400 to a request without the header.
RequiredIdempotencyKeys = Annotated[RequestKeys, Depends(_required_keys)]


def actor(
    cls: type[A],
    *,
    path_param: str = "actor_id",
    context: Callable[..., Any] | None = None,
) -> Callable[..., Ref[A] | AsyncRef[A]]:
    """Dependency: the ref to ``cls`` whose id is the path parameter ``path_param``.

    The ref is an ``AsyncRef`` on an ``AsyncRuntime`` and a ``Ref`` on a ``Runtime``
    (use it from a ``def`` endpoint, which FastAPI runs in a thread). Its id is user
    input: a kind of call the runtime has no ``authorize_*`` policy for is denied
    (403) unless the lifespan says ``allow_all_callers=True``.
    """
    if not path_param.isidentifier() or path_param in ("request", _CONTEXT):
        raise ValueError(f"path_param must be a Python identifier, not {path_param!r}")

    def dependency(request: Request, **values: Any) -> Ref[A] | AsyncRef[A]:
        integration = integration_of(request)
        if context is None:
            return integration.ref(request, cls, values[path_param])
        return integration.bind(integration.runtime.ref(cls, values[path_param]), values[_CONTEXT])

    keyword = inspect.Parameter.KEYWORD_ONLY
    parameters = [
        inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Request),
        inspect.Parameter(path_param, keyword, annotation=Annotated[str, Path()]),
    ]
    if context is not None:
        parameters.append(
            inspect.Parameter(_CONTEXT, keyword, annotation=Annotated[Any, Depends(context)])
        )
    setattr(dependency, "__signature__", inspect.Signature(parameters))  # noqa: B010
    dependency.__name__ = f"{cls.__name__.lower()}_ref"
    return dependency
