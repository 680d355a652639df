"""The realtime protocol's constants, frames and per-subscription records (``docs/realtime.md``)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...extras import requires_extra

with requires_extra("web", "solid_objects.web.realtime"):
    from starlette.websockets import WebSocket


if TYPE_CHECKING:
    from ...definition import ActorDefinition
    from .session import Session

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

HERE = Path(__file__).parent.parent
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


def change_frame(position: Position, changes: dict[str, Any]) -> str:
    """A change (or destroyed) frame without its subscription id, encoded once for
    every subscriber of the actor (:func:`addressed` adds the id)."""
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


def addressed(ref: str, encoded: str) -> str:
    return '{"id":' + json.dumps(ref) + "," + encoded[1:]


def error_frame(ref: str | None, code: str, message: str) -> dict[str, Any]:
    return {"v": PROTOCOL, "type": "error", "id": ref, "code": code, "message": message}
