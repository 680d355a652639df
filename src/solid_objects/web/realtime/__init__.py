"""Realtime: ``realtime(runtime, context=...)``, a Starlette app serving committed
changes of actors to browsers over a WebSocket, in revision order, authorized.

The endpoint never shows anything uncommitted: it reads the broadcast rows
(``store/broadcasts.py``) that turns commit with their state, and the actors'
committed state for snapshots and personalized payloads. Commits reach it in
this process through the worker's hook, from other processes through the
runtime's wake-up listener (PostgreSQL ``LISTEN/NOTIFY`` or Redis) when the
runtime is started, and by polling in any case (the fallback: a lost hint
costs latency, never a change). Each subscription has a fence, the last
``(incarnation, revision)`` it was sent, so nothing older or repeated reaches
it. Every connection has a bounded send queue: a client that cannot keep up
is closed with :data:`CLOSE_TOO_SLOW` instead of growing the server's memory.
The protocol is in ``docs/realtime.md``.
"""

from __future__ import annotations

import inspect
import json
import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ...extras import requires_extra

with requires_extra("web", "solid_objects.web.realtime"):
    from starlette.applications import Starlette
    from starlette.responses import FileResponse
    from starlette.routing import Route, WebSocketRoute
    from starlette.websockets import WebSocket

from ...store.broadcasts import ActorHead

if TYPE_CHECKING:
    from ...runtime import AsyncRuntime, Runtime
from .hub import Faces, Hub
from .protocol import (
    CLOSE_ORIGIN,
    CLOSE_TOO_BIG,
    CLOSE_TOO_MANY,
    CLOSE_TOO_SLOW,
    CLOSE_UNSUPPORTED,
    FETCH_LIMIT,
    HERE,
    MAX_FRAME,
    PROTOCOL,
    Context,
    ProtocolError,
    Subscription,
)
from .session import Session

__all__ = [
    "CLOSE_ORIGIN",
    "CLOSE_TOO_BIG",
    "CLOSE_TOO_MANY",
    "CLOSE_TOO_SLOW",
    "CLOSE_UNSUPPORTED",
    "FETCH_LIMIT",
    "MAX_FRAME",
    "PROTOCOL",
    "ProtocolError",
    "realtime",
]

log = logging.getLogger("solid_objects.realtime")


class _Realtime:
    def __init__(
        self,
        runtime: Runtime | AsyncRuntime,
        context: Context,
        *,
        poll_interval: float,
        queue_size: int,
        max_subscriptions: int,
        allowed_origins: frozenset[str] | None,
    ) -> None:
        self.faces = Faces(runtime)
        self.context = context
        self.queue_size = queue_size
        self.max_subscriptions = max_subscriptions
        self.allowed_origins = allowed_origins
        self.hub = Hub(self.faces, poll_interval)
        self.sessions: weakref.WeakSet[Session] = weakref.WeakSet()

    def compute_payload(self, sub: Subscription, name: str, head: ActorHead) -> Any:
        """``@payload name`` for this subscriber, under ``authorize_query``, from the
        committed state of ``head`` (in a thread)."""
        from ...codec import encode_json

        access = self.faces.sync.kernel.client.access
        actor_type, actor_id = sub.key
        access.authorize("query", sub.session.context, actor_type, actor_id, name, "{}")
        definition = sub.definition
        state = definition.load_state(head.state, head.state_version)
        instance = definition.instantiate(actor_id, state)
        observables = definition.observables
        assert observables is not None
        value = observables.payloads[name](instance, sub.session.context)
        limit = self.faces.sync.options.max_result_bytes
        return json.loads(encode_json(value, what=f"payload {name!r}", limit=limit))

    def origin_allowed(self, websocket: WebSocket) -> bool:
        """Cross-site WebSocket hijacking: a browser sends its cookies to any origin's
        socket, so a page of another site is refused unless allowed.

        With ``allowed_origins`` only those origins pass. Without it, a page passes
        when its ``Origin`` names the ``Host`` it connected to: right in development,
        but a DNS-rebinding page (its own name pointed at this server) passes too.
        """
        origin = websocket.headers.get("origin")
        if origin is None:  # not a browser
            return True
        if self.allowed_origins is not None:
            return origin in self.allowed_origins
        host = websocket.headers.get("host", "")
        return urlsplit(origin).netloc == host

    async def endpoint(self, websocket: WebSocket) -> None:
        if not self.origin_allowed(websocket):
            await websocket.close(code=CLOSE_ORIGIN)
            return
        context = self.context(websocket)
        if inspect.isawaitable(context):
            context = await context
        await websocket.accept()
        self.hub.ensure_running()
        session = Session(self, websocket, context, self.queue_size)
        self.sessions.add(session)
        await session.serve()
        await session.closed()

    async def client_js(self, request: Any) -> FileResponse:
        return FileResponse(HERE / "static" / "realtime.js", media_type="text/javascript")

    async def client_dts(self, request: Any) -> FileResponse:
        return FileResponse(HERE / "static" / "realtime.d.ts", media_type="text/plain")


def realtime(
    runtime: Runtime | AsyncRuntime,
    *,
    context: Context | Callable[[WebSocket], Awaitable[Any]],
    poll_interval: float = 1.0,
    queue_size: int = 256,
    max_subscriptions: int = 100,
    allowed_origins: list[str] | None = None,
) -> Starlette:
    """The realtime endpoint of ``runtime`` as an ASGI app to mount (``Mount("/live",
    realtime(...))``): the WebSocket at ``/ws``, the browser client at ``/client.js``.

    ``context(websocket)`` (may be ``async``) resolves the connection's authorization
    context once, from the host's session; ``authorize_subscription`` and, for
    payloads, ``authorize_query`` judge each subscription with it. ``poll_interval``
    is how often the committed heads of subscribed actors are compared (the
    fallback behind the wake-up hints); ``queue_size`` frames may wait for a slow
    client before it is closed with ``CLOSE_TOO_SLOW``. A browser page whose origin
    is not in ``allowed_origins`` is refused before the handshake; without the list a
    page of the same host passes, which a DNS-rebinding page also does, so set it in
    production (a warning is logged when it is not set).
    """
    if not callable(context):
        raise TypeError("context is a callable context(websocket) -> authorization context")
    if poll_interval <= 0 or queue_size < 1 or max_subscriptions < 1:
        raise ValueError("poll_interval, queue_size and max_subscriptions must be positive")
    if allowed_origins is None:
        log.warning(
            "realtime(): allowed_origins is not set, so a page is accepted when its Origin "
            "names the Host it connected to, which a DNS-rebinding page also passes; in "
            "production pass allowed_origins=['https://your.site']"
        )
    app = _Realtime(
        runtime,
        context,
        poll_interval=poll_interval,
        queue_size=queue_size,
        max_subscriptions=max_subscriptions,
        allowed_origins=None if allowed_origins is None else frozenset(allowed_origins),
    )
    routes = [
        WebSocketRoute("/ws", app.endpoint),
        Route("/client.js", app.client_js),
        Route("/client.d.ts", app.client_dts),
    ]
    starlette = Starlette(routes=routes)
    starlette.state.solid_realtime = app
    return starlette
