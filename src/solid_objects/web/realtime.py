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

import asyncio
import inspect
import json
import logging
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..extras import requires_extra

with requires_extra("web", "solid_objects.web.realtime"):
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import FileResponse
    from starlette.routing import Route, WebSocketRoute
    from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from ..codec import check_identifier
from ..errors import SolidObjectsError, Unauthorized, UnknownActorType
from ..observe import MAX_PAYLOADS
from ..store.broadcasts import ActorHead

if TYPE_CHECKING:
    from ..definition import ActorDefinition
    from ..runtime import AsyncRuntime, Runtime

log = logging.getLogger("solid_objects.realtime")

#: The protocol version this endpoint speaks (``"v"`` of every frame).
PROTOCOL = 1
#: Close codes (4000-4999 are the application's): the protocol version is not spoken here.
CLOSE_UNSUPPORTED = 4001
#: The client did not read its frames fast enough: its send queue filled up.
CLOSE_TOO_SLOW = 4008
#: The connection asked for more subscriptions than ``max_subscriptions``.
CLOSE_TOO_MANY = 4009
#: A frame larger than ``MAX_FRAME`` bytes.
CLOSE_TOO_BIG = 1009
#: The page's origin is not allowed (``allowed_origins``): refused before the handshake.
CLOSE_ORIGIN = 1008
#: Largest client frame accepted (subscribe/unsubscribe requests are small).
MAX_FRAME = 16 * 1024
#: Broadcast rows read per statement while catching up one actor.
FETCH_LIMIT = 200

HERE = Path(__file__).parent
Context = Callable[[WebSocket], Any]
Position = tuple[int, int]
Key = tuple[str, str]


class ProtocolError(Exception):
    """A frame that is not a valid request: answered with an ``error`` frame."""

    def __init__(self, code: str, message: str, ref: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.ref = code, message, ref


@dataclass(eq=False)
class Subscription:
    session: Session
    ref: str
    key: Key
    definition: ActorDefinition
    payloads: tuple[str, ...]
    #: The last (incarnation, revision) sent on the change channel.
    position: Position = (0, 0)
    #: The same per payload name.
    payload_positions: dict[str, Position] = field(default_factory=dict)


@dataclass(eq=False)
class Tracked:
    """An actor this process has subscribers for, and how far its broadcasts were read."""

    key: Key
    position: Position
    #: The actor's committed (incarnation, done_seq) the last poll saw.
    seen: Position
    subscriptions: set[Subscription] = field(default_factory=set)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class _Faces:
    """The sync runtime behind either face, and how to call its engine off the loop."""

    def __init__(self, runtime: Runtime | AsyncRuntime) -> None:
        from ..runtime import AsyncRuntime

        self.is_async = isinstance(runtime, AsyncRuntime)
        self.runtime = runtime
        self.sync: Runtime = runtime.sync if isinstance(runtime, AsyncRuntime) else runtime

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self.is_async:  # async policies are awaited on this loop (AsyncRuntime._run)
            return await self.runtime.kernel.offload(fn, *args)  # type: ignore[union-attr]
        return await run_in_threadpool(fn, *args)


class Hub:
    """One per ``realtime`` app and event loop: the tracked actors and their readers."""

    def __init__(self, faces: _Faces, poll_interval: float) -> None:
        self.faces = faces
        self.poll_interval = poll_interval
        self.tracked: dict[Key, Tracked] = {}
        self._dirty: set[Key] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._listener = self._hint  # one bound method, to add and remove

    @property
    def store(self) -> Any:
        return self.faces.sync.store

    def ensure_running(self) -> None:
        """Start the reader on the running loop (again, after its loop went away)."""
        loop = asyncio.get_running_loop()
        if self._loop is loop and self._task is not None and not self._task.done():
            return
        self.tracked.clear()
        self._dirty.clear()
        self._loop, self._wake = loop, asyncio.Event()
        self._task = loop.create_task(self._run(), name="solid-realtime-hub")
        self.faces.sync.kernel.remove_broadcast_listener(self._listener)
        self.faces.sync.kernel.add_broadcast_listener(self._listener)

    def close(self) -> None:
        self.faces.sync.kernel.remove_broadcast_listener(self._listener)
        if self._task is not None:
            self._task.cancel()

    def _hint(self, actor_type: str, actor_id: str) -> None:
        """From any thread: that actor committed a broadcast."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._mark, (actor_type, actor_id))
        except RuntimeError:  # the loop closed meanwhile
            pass

    def _mark(self, key: Key) -> None:
        if key in self.tracked and self._wake is not None:
            self._dirty.add(key)
            self._wake.set()

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), self.poll_interval)
            except TimeoutError:
                await self._poll()
            self._wake.clear()
            dirty, self._dirty = self._dirty, set()
            for key in dirty:
                tracked = self.tracked.get(key)
                if tracked is not None:
                    try:
                        await self.refresh(tracked)
                    except Exception:  # the database is away: the next poll tries again
                        log.warning("realtime read of %s %r failed", *key, exc_info=True)

    async def _poll(self) -> None:
        """The fallback: one statement compares every tracked actor's committed head."""
        for key, tracked in list(self.tracked.items()):
            if not tracked.subscriptions and not tracked.lock.locked():
                del self.tracked[key]
        if not self.tracked:
            return
        keys = list(self.tracked)
        try:
            heads = await self.faces.call(self._heads, keys)
        except Exception:
            log.warning("realtime poll failed", exc_info=True)
            return
        for key in keys:
            found = self.tracked.get(key)
            head = heads.get(key)
            now = (0, 0) if head is None else (head.incarnation, head.revision)
            if found is not None and now != found.seen:
                found.seen = now
                self._dirty.add(key)

    def _heads(self, keys: list[Key]) -> dict[Key, ActorHead]:
        with self.store.read() as tx:
            heads = self.store.actor_heads(tx, keys)
        return {(h.actor_type, h.actor_id): h for h in heads}

    # --- reading committed data (in a thread) ---------------------------------------------

    def head(self, key: Key) -> tuple[Position, ActorHead | None]:
        """The identity's committed position and head; a destroyed actor's position is
        that of its last broadcast (the end of its incarnation)."""
        with self.store.read() as tx:
            (head,) = self.store.actor_heads(tx, [key]) or [None]
            if head is not None:
                return (head.incarnation, head.revision), head
            last = self.store.latest_broadcast(tx, key[0], key[1])
        return ((0, 0) if last is None else (last.incarnation, last.revision)), None

    def rows_after(self, key: Key, position: Position) -> list[Any]:
        with self.store.read() as tx:
            return self.store.broadcasts_after(  # type: ignore[no-any-return]
                tx, key[0], key[1], position[0], position[1], FETCH_LIMIT
            )

    # --- fan-out ---------------------------------------------------------------------------

    async def refresh(self, tracked: Tracked) -> None:
        """Send every broadcast after the tracked position to its subscribers, in order.

        A subscriber that meets a new incarnation gets a snapshot of it instead of its
        changes, since those describe a change from the defaults it never saw.
        """
        async with tracked.lock:
            while True:
                rows = await self.faces.call(self.rows_after, tracked.key, tracked.position)
                payloads_changed = False
                resync: set[Subscription] = set()
                for row in rows:
                    position = (row.incarnation, row.revision)
                    changes = json.loads(row.changes)
                    destroyed = bool(changes.get("destroyed"))
                    visible = destroyed or changes["values"] or changes["invalidated"]
                    encoded = _change_frame(position, changes) if visible else ""
                    for sub in list(tracked.subscriptions):
                        if position <= sub.position or sub in resync:
                            continue  # it already holds this revision
                        if not destroyed and position[0] != sub.position[0]:
                            resync.add(sub)
                            continue
                        sub.position = position
                        if visible:
                            sub.session.offer(_addressed(sub.ref, encoded))
                    payloads_changed = payloads_changed or bool(changes.get("payloads"))
                    tracked.position = position
                if resync or (payloads_changed and any(s.payloads for s in tracked.subscriptions)):
                    position, head = await self.faces.call(self.head, tracked.key)
                    for sub in resync:
                        if position > sub.position:
                            self.send_snapshot(sub, position, head)
                    if head is not None:
                        for sub in list(tracked.subscriptions):
                            await sub.session.send_payloads(sub, head)
                if len(rows) < FETCH_LIMIT:
                    return

    def send_snapshot(self, sub: Subscription, position: Position, head: ActorHead | None) -> None:
        """The full projection of the committed state at ``position``."""
        observables = sub.definition.observables
        assert observables is not None
        state = (
            sub.definition.default_state()
            if head is None
            else sub.definition.load_state(head.state, head.state_version)
        )
        plain = sub.definition.state.dump_python(state, mode="json")
        sub.position = position
        sub.session.offer(
            {
                "v": PROTOCOL,
                "type": "snapshot",
                "id": sub.ref,
                "incarnation": position[0],
                "revision": position[1],
                "exists": head is not None,
                **observables.projection(plain),
            }
        )

    async def subscribe(self, sub: Subscription) -> None:
        """Register ``sub`` and send it the current committed projection, atomically with
        respect to this actor's fan-out (so it misses nothing and sees nothing twice)."""
        key = sub.key
        tracked = self.tracked.get(key)
        if tracked is None:
            position, _ = await self.faces.call(self.head, key)
            # another subscriber may have won the race
            tracked = self.tracked.setdefault(key, Tracked(key, position, position))
        async with tracked.lock:
            position, head = await self.faces.call(self.head, key)
            self.send_snapshot(sub, position, head)
            if sub.payloads:
                await sub.session.send_payloads(
                    sub, head or ActorHead(key[0], key[1], position[0], position[1], None, 1)
                )
            tracked.subscriptions.add(sub)

    def unsubscribe(self, sub: Subscription) -> None:
        tracked = self.tracked.get(sub.key)
        if tracked is None:
            return
        tracked.subscriptions.discard(sub)
        if not tracked.subscriptions and not tracked.lock.locked():
            del self.tracked[sub.key]


def _change_frame(position: Position, changes: dict[str, Any]) -> str:
    """A change (or destroyed) frame without its subscription id, encoded once for
    every subscriber of the actor (:func:`_addressed` adds the id)."""
    frame: dict[str, Any] = {
        "v": PROTOCOL,
        "type": "destroyed" if changes.get("destroyed") else "change",
        "incarnation": position[0],
        "revision": position[1],
    }
    if not changes.get("destroyed"):
        frame["values"] = changes.get("values", {})
        frame["invalidated"] = changes.get("invalidated", [])
    return json.dumps(frame, separators=(",", ":"))


def _addressed(ref: str, encoded: str) -> str:
    return '{"id":' + json.dumps(ref) + "," + encoded[1:]


class Session:
    """One WebSocket connection: its context, subscriptions and bounded send queue."""

    def __init__(self, app: _Realtime, websocket: WebSocket, context: Any, queue_size: int) -> None:
        self.app = app
        self.websocket = websocket
        self.context = context
        self.subscriptions: dict[str, Subscription] = {}
        #: Frames to send: a dict, or one already encoded (a change shared by subscribers).
        self.queue: asyncio.Queue[dict[str, Any] | str] = asyncio.Queue(maxsize=queue_size)
        self.close_code: int | None = None
        self._writer: asyncio.Task[None] | None = None
        self._closing: asyncio.Task[None] | None = None

    def offer(self, frame: dict[str, Any] | str) -> None:
        """Queue a frame; a full queue closes the connection (``CLOSE_TOO_SLOW``)."""
        if self.close_code is not None:
            return
        try:
            self.queue.put_nowait(frame)
        except asyncio.QueueFull:
            self.drop(CLOSE_TOO_SLOW)

    def drop(self, code: int) -> None:
        """Close the connection with ``code``: at once for a client too slow to read,
        after the frames already queued (an error frame saying why) otherwise."""
        if self.close_code is not None:
            return
        self.close_code = code
        for sub in list(self.subscriptions.values()):
            self.app.hub.unsubscribe(sub)
        self.subscriptions.clear()
        if code == CLOSE_TOO_SLOW and self._writer is not None:
            self._writer.cancel()
        self._closing = asyncio.get_running_loop().create_task(self._close(code))

    async def _close(self, code: int) -> None:
        if code != CLOSE_TOO_SLOW and self._writer is not None and not self._writer.done():
            try:
                await asyncio.wait_for(self.queue.join(), 5.0)
            except TimeoutError:
                pass
            self._writer.cancel()
        try:
            if self.websocket.application_state == WebSocketState.CONNECTED:
                await self.websocket.close(code=code)
        except (RuntimeError, OSError, WebSocketDisconnect):
            pass

    async def write(self) -> None:
        while True:
            frame = await self.queue.get()
            try:
                text = frame if isinstance(frame, str) else json.dumps(frame, separators=(",", ":"))
                await self.websocket.send_text(text)
            finally:
                self.queue.task_done()

    async def send_payloads(self, sub: Subscription, head: ActorHead) -> None:
        """Each payload ``sub`` asked for, computed for this subscriber from ``head``'s
        committed state; a name ``authorize_query`` denies is left out, silently."""
        position = (head.incarnation, head.revision)
        for name in sub.payloads:
            if position <= sub.payload_positions.get(name, (-1, -1)):
                continue
            try:
                value = await self.app.faces.call(self.app.compute_payload, sub, name, head)
            except Unauthorized:
                continue
            except SolidObjectsError as exc:
                self.offer(_error(sub.ref, "payload_failed", f"{name}: {exc}"))
                continue
            except Exception as exc:  # the application's payload raised
                log.warning("payload %s of %s %r failed", name, *sub.key, exc_info=True)
                self.offer(_error(sub.ref, "payload_failed", f"{name}: {type(exc).__name__}"))
                continue
            sub.payload_positions[name] = position
            self.offer(
                {
                    "v": PROTOCOL,
                    "type": "payload",
                    "id": sub.ref,
                    "name": name,
                    "incarnation": position[0],
                    "revision": position[1],
                    "payload": value,
                }
            )

    async def serve(self) -> None:
        self._writer = asyncio.get_running_loop().create_task(self.write())
        self.offer({"v": PROTOCOL, "type": "welcome", "protocol": PROTOCOL})
        try:
            while self.close_code is None:
                message = await self.websocket.receive()
                if message["type"] == "websocket.disconnect":
                    break
                text = message.get("text")
                if text is None:
                    data = message.get("bytes") or b""
                    text = data.decode("utf-8", "replace")
                if len(text) > MAX_FRAME:
                    self.drop(CLOSE_TOO_BIG)
                    break
                try:
                    await self.handle(text)
                except ProtocolError as exc:
                    log.info("refused a realtime frame (%s): %s", exc.code, exc.message)
                    self.offer(_error(exc.ref, exc.code, exc.message))
        except (WebSocketDisconnect, RuntimeError):  # closed under us (RuntimeError: by us)
            pass
        finally:
            if self.close_code is None:
                self.close_code = 1000
            for sub in list(self.subscriptions.values()):
                self.app.hub.unsubscribe(sub)
            self.subscriptions.clear()
            if self._writer is not None and self._closing is None:
                self._writer.cancel()  # the client left; a drop flushes, then closes

    async def handle(self, text: str) -> None:
        try:
            request = json.loads(text)
        except (ValueError, RecursionError):  # RecursionError: nested too deep to parse
            raise ProtocolError("malformed", "a frame must be a JSON object") from None
        if not isinstance(request, dict):
            raise ProtocolError("malformed", "a frame must be a JSON object")
        ref = request.get("id")
        if not isinstance(ref, str) or not 0 < len(ref) <= 64:
            raise ProtocolError("malformed", "id must be a string of 1 to 64 characters")
        if request.get("v") != PROTOCOL:
            self.offer(
                _error(ref, "unsupported_version", f"this endpoint speaks protocol {PROTOCOL}")
            )
            self.drop(CLOSE_UNSUPPORTED)
            return
        kind = request.get("type")
        if kind == "unsubscribe":
            sub = self.subscriptions.pop(ref, None)
            if sub is not None:
                self.app.hub.unsubscribe(sub)
            return
        if kind != "subscribe":
            raise ProtocolError("malformed", "type must be subscribe or unsubscribe", ref)
        await self.subscribe(ref, request)

    async def subscribe(self, ref: str, request: dict[str, Any]) -> None:
        actor_type, actor_id = request.get("actor_type"), request.get("actor_id")
        names = request.get("payloads", [])
        try:
            if not isinstance(actor_type, str) or not isinstance(actor_id, str):
                raise ValueError("actor_type and actor_id must be strings")
            check_identifier(actor_type, what="actor type")
            check_identifier(actor_id)
        except (ValueError, SolidObjectsError) as exc:
            raise ProtocolError("malformed", str(exc), ref) from None
        if (
            not isinstance(names, list)
            or len(names) > MAX_PAYLOADS
            or not all(isinstance(n, str) for n in names)
        ):
            raise ProtocolError(
                "malformed", f"payloads must be a list of at most {MAX_PAYLOADS} names", ref
            )
        if ref in self.subscriptions:
            raise ProtocolError("duplicate", f"subscription {ref!r} exists: unsubscribe first", ref)
        if len(self.subscriptions) >= self.app.max_subscriptions:
            self.offer(_error(ref, "too_many", "too many subscriptions on one connection"))
            self.drop(CLOSE_TOO_MANY)
            return
        try:  # before anything is looked up: a denied subscriber learns nothing
            await self.app.faces.call(
                self.app.faces.sync.kernel.client.authorize,
                "subscription",
                self.context,
                actor_type,
                actor_id,
            )
        except Unauthorized:
            raise ProtocolError("unauthorized", "not authorized to subscribe", ref) from None
        try:
            definition = self.app.faces.sync.registry.get(actor_type)
        except UnknownActorType:
            message = f"unknown actor type {actor_type!r}"
            raise ProtocolError("unknown_actor_type", message, ref) from None
        observables = definition.observables
        if observables is None:
            raise ProtocolError("not_observable", f"{actor_type} declares no observables", ref)
        unknown = [n for n in names if n not in observables.payloads]
        if unknown:
            raise ProtocolError("unknown_payload", f"{actor_type} has no payload {unknown}", ref)
        sub = Subscription(
            self, ref, (actor_type, actor_id), definition, tuple(dict.fromkeys(names))
        )
        self.subscriptions[ref] = sub
        try:
            await self.app.hub.subscribe(sub)
        except Exception:
            self.subscriptions.pop(ref, None)
            self.app.hub.unsubscribe(sub)
            log.warning("realtime subscribe to %s %r failed", actor_type, actor_id, exc_info=True)
            raise ProtocolError("unavailable", "the subscription could not be read", ref) from None


def _error(ref: str | None, code: str, message: str) -> dict[str, Any]:
    return {"v": PROTOCOL, "type": "error", "id": ref, "code": code, "message": message}


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
        self.faces = _Faces(runtime)
        self.context = context
        self.queue_size = queue_size
        self.max_subscriptions = max_subscriptions
        self.allowed_origins = allowed_origins
        self.hub = Hub(self.faces, poll_interval)
        self.sessions: weakref.WeakSet[Session] = weakref.WeakSet()

    def compute_payload(self, sub: Subscription, name: str, head: ActorHead) -> Any:
        """``@payload name`` for this subscriber, under ``authorize_query``, from the
        committed state of ``head`` (in a thread)."""
        from ..codec import encode_json

        engine = self.faces.sync.kernel.client
        actor_type, actor_id = sub.key
        engine.authorize("query", sub.session.context, actor_type, actor_id, name, "{}")
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
        if session._closing is not None:
            await session._closing

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
