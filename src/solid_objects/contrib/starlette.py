"""Starlette (and FastAPI) integration: a lifespan, problem-details handlers, refs per request.

::

    runtime = AsyncRuntime("sqlite:///app.db")
    app = Starlette(
        routes=[...],
        lifespan=lifespan(runtime, context=lambda request: request.headers.get("x-user")),
        exception_handlers=exception_handlers(),
    )

    async def add(request: Request) -> Response:
        cart = ref(request, Cart, request.path_params["cart_id"])
        return JSONResponse(await cart.add(sku="x"))

The lifespan installs the tables, starts the runtime before the application's own
lifespan runs and closes it after, so a second ``TestClient(app)`` in the same
process starts it again. ``context(request)`` is the authorization context every
ref made for that request carries (``with_options(authorization=...)``): the
runtime's ``authorize_message`` policy sees it as ``request.context``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from ..extras import requires_extra

with requires_extra("fastapi", "solid_objects.contrib.starlette"):
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import HTTPConnection, Request
    from starlette.responses import JSONResponse, Response

from ..actor import Actor
from ..errors import RuntimeNotStarted
from ..ref import AsyncRef, Ref
from ..runtime import AsyncRuntime, Runtime
from ..testing import runtime_like
from . import access, idempotency, problems
from .idempotency import InvalidIdempotencyKey, RequestKeys

__all__ = [
    "Integration",
    "RequestKeys",
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
R = TypeVar("R")

#: The authorization-context hook: the request in, whatever the policies should see out.
Context = Callable[[HTTPConnection], Any]
#: A Starlette lifespan, stateless or stateful (``Any`` so both kinds type-check).
Lifespan = Callable[[Any], AbstractAsyncContextManager[Any]]

#: The attribute of ``app.state`` that holds the running :class:`Integration`.
STATE_ATTRIBUTE = "solid_objects"
#: The attribute of ``app.state`` naming the database a test runs the lifespan on.
DATABASE_OVERRIDE = "solid_objects_database"


@dataclass(frozen=True, slots=True)
class Integration:
    """What the lifespan leaves on ``app.state.solid_objects`` for the request handlers."""

    runtime: Runtime | AsyncRuntime
    context: Context | None = None
    #: Let every caller through where no ``authorize_*`` policy decides (see :mod:`.access`).
    allow_all_callers: bool = False

    def ref(self, request: HTTPConnection, cls: type[A], actor_id: str) -> Ref[A] | AsyncRef[A]:
        """``runtime.ref(cls, actor_id)`` carrying ``context(request)``, if there is a hook.

        The id comes from the request, so the ref is untrusted: a kind of call with no
        policy configured is denied unless ``allow_all_callers`` (:mod:`.access`).
        """
        context = None if self.context is None else self.context(request)
        return self.bind(self.runtime.ref(cls, actor_id), context)

    def bind(self, reference: R, context: Any) -> R:
        """``reference`` carrying ``context`` as a request's caller (:func:`.access.bind`)."""
        return access.bind(reference, context, allow_all_callers=self.allow_all_callers)


async def _start(runtime: Runtime | AsyncRuntime, install: bool) -> None:
    if isinstance(runtime, AsyncRuntime):
        if install:
            await runtime.install()
        await runtime.start()
        return
    if install:
        await run_in_threadpool(runtime.install)
    await run_in_threadpool(runtime.start)


async def _close(runtime: Runtime | AsyncRuntime) -> None:
    if isinstance(runtime, AsyncRuntime):
        await runtime.close()
    else:
        await run_in_threadpool(runtime.close)


def lifespan(
    runtime: Runtime | AsyncRuntime,
    *,
    install: bool = True,
    context: Context | None = None,
    wraps: Lifespan | None = None,
    allow_all_callers: bool = False,
) -> Lifespan:
    """A lifespan for ``Starlette(lifespan=...)`` / ``FastAPI(lifespan=...)``.

    On startup it installs the tables (``install=False`` when a deployment step
    does it), starts ``runtime`` (a ``Runtime``'s blocking work runs in a thread)
    and then enters ``wraps(app)``, the application's own lifespan, whose state it
    passes on; on shutdown it leaves ``wraps`` first and then closes the runtime
    (finishing in-flight turns, releasing leases), so the application's startup and
    shutdown code can use the runtime. A closed runtime starts again, so the
    lifespan runs any number of times in one process (one per ``TestClient``).

    Refs built for a request are denied every kind of call that has no
    ``authorize_*`` policy on the runtime; ``allow_all_callers=True`` is the explicit
    opt-in to letting every caller through there (:mod:`.access`).
    """

    @asynccontextmanager
    async def run(app: Any) -> AsyncIterator[Mapping[str, Any] | None]:
        url = getattr(app.state, DATABASE_OVERRIDE, None)
        active = runtime if url is None else runtime_like(runtime, url)
        try:
            await _start(active, install or url is not None)  # a failed start still closes
            app.state.solid_objects = Integration(active, context, allow_all_callers)
            if wraps is None:
                yield None
            else:
                async with wraps(app) as state:
                    yield state
        finally:
            await _close(active)

    return run


@contextmanager
def use_database(app: Any, url: str) -> Iterator[None]:
    """For tests: every lifespan run inside the block uses a runtime on ``url``.

    The lifespan builds a runtime like the application's (its options, policies,
    actor classes and handlers: :func:`solid_objects.testing.runtime_like`) on
    ``url``, installs and starts it, and closes it when the lifespan ends; the
    application's own runtime is not touched. Give it the pytest plugin's
    ``solid_db_url`` for a fresh database per test::

        with use_database(app, solid_db_url), TestClient(app) as client: ...

    Handlers must reach the runtime through the integration (``actor(...)``,
    ``ref(request, ...)``, ``current_runtime``), not through a module-level name.
    """
    setattr(app.state, DATABASE_OVERRIDE, url)
    try:
        yield
    finally:
        delattr(app.state, DATABASE_OVERRIDE)


def integration_of(request: HTTPConnection) -> Integration:
    """The integration the lifespan installed on the request's application."""
    found = getattr(request.app.state, STATE_ATTRIBUTE, None)
    if not isinstance(found, Integration):
        raise RuntimeNotStarted(
            "no Solid Objects runtime on this application: pass "
            "lifespan=solid_objects.contrib.starlette.lifespan(runtime) to the application "
            "(and enter TestClient(app) with `with`, which runs the lifespan)"
        )
    return found


def runtime_of(request: HTTPConnection) -> Runtime | AsyncRuntime:
    """The runtime the application's lifespan started."""
    return integration_of(request).runtime


def ref(request: HTTPConnection, cls: type[A], actor_id: str) -> Ref[A] | AsyncRef[A]:
    """A ref for this request: bound with the lifespan's ``context(request)``."""
    return integration_of(request).ref(request, cls, actor_id)


def idempotency_keys(request: HTTPConnection, *, required: bool = False) -> RequestKeys:
    """The request's ``Idempotency-Key``, for keying its calls (:mod:`.idempotency`).

    One :class:`~.idempotency.RequestKeys` per request (kept on ``request.state``), so
    every part of a handler counts its keyed calls together. A malformed header, or a
    missing one with ``required=True``, raises ``InvalidIdempotencyKey`` (400).
    """
    found = getattr(request.state, "solid_objects_keys", None)
    if not isinstance(found, RequestKeys):
        found = idempotency.from_headers(request.headers, required=required)
        request.state.solid_objects_keys = found
    elif required and not found:
        raise InvalidIdempotencyKey(f"this request needs an {idempotency.HEADER} header")
    return found


async def problem_response(request: Request, exc: Exception) -> Response:
    """The RFC 9457 ``application/problem+json`` response for a library error."""
    body = problems.document(exc)
    return JSONResponse(
        body,
        status_code=body["status"],
        headers=problems.headers(exc),
        media_type=problems.MEDIA_TYPE,
    )


def exception_handlers() -> dict[Any, Callable[[Request, Exception], Any]]:
    """``{error class: handler}`` for ``Starlette(exception_handlers=...)``.

    Starlette picks the handler of the nearest class in the raised error's MRO, so
    merge the application's own handlers in with ``{**exception_handlers(), ...}``.
    """
    return {cls: problem_response for cls in problems.handled()}
