"""One WebSocket connection: its context, subscriptions and bounded send queue."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any

from ...extras import requires_extra

with requires_extra("web", "solid_objects.web.realtime"):
    from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from ...codec import check_identifier
from ...errors import SolidObjectsError, Unauthorized, UnknownActorType
from ...observe import MAX_PAYLOADS
from ...store.broadcasts import ActorHead

if TYPE_CHECKING:
    pass
from .protocol import (
    CLOSE_TOO_BIG,
    CLOSE_TOO_MANY,
    CLOSE_TOO_SLOW,
    CLOSE_UNSUPPORTED,
    MAX_FRAME,
    PROTOCOL,
    ProtocolError,
    Subscription,
    error_frame,
)

if TYPE_CHECKING:
    from . import _Realtime

log = logging.getLogger("solid_objects.realtime")
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

    async def closed(self) -> None:
        """Wait until a close this session started (a drop) has finished."""
        if self._closing is not None:
            await self._closing

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
                self.offer(error_frame(sub.ref, "payload_failed", f"{name}: {exc}"))
                continue
            except Exception as exc:  # the application's payload raised
                log.warning("payload %s of %s %r failed", name, *sub.key, exc_info=True)
                self.offer(error_frame(sub.ref, "payload_failed", f"{name}: {type(exc).__name__}"))
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
                    self.offer(error_frame(exc.ref, exc.code, exc.message))
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
                error_frame(ref, "unsupported_version", f"this endpoint speaks protocol {PROTOCOL}")
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
            self.offer(error_frame(ref, "too_many", "too many subscriptions on one connection"))
            self.drop(CLOSE_TOO_MANY)
            return
        try:  # before anything is looked up: a denied subscriber learns nothing
            await self.app.faces.call(
                self.app.faces.sync.kernel.client.access.authorize,
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
