"""The hub: which actors this endpoint's sessions watch, and their committed heads.

One per endpoint. It learns of commits from the worker's hook, the wake-up
listener and polling, reads the broadcast rows after each subscription's fence, and
hands each change frame to the sessions subscribed.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...extras import requires_extra

with requires_extra("web", "solid_objects.web.realtime"):
    from starlette.concurrency import run_in_threadpool

from ...store.broadcasts import ActorHead

if TYPE_CHECKING:
    from ...runtime import AsyncRuntime, Runtime
from .protocol import (
    FETCH_LIMIT,
    PROTOCOL,
    Key,
    Position,
    Subscription,
    Tracked,
    addressed,
    change_frame,
)

log = logging.getLogger("solid_objects.realtime")
class Faces:
    """The sync runtime behind either face, and how to call its engine off the loop."""

    def __init__(self, runtime: Runtime | AsyncRuntime) -> None:
        from ...runtime import AsyncRuntime

        self.is_async = isinstance(runtime, AsyncRuntime)
        self.runtime = runtime
        self.sync: Runtime = runtime.sync if isinstance(runtime, AsyncRuntime) else runtime

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self.is_async:  # async policies are awaited on this loop (AsyncRuntime._run)
            return await self.runtime.kernel.offload(fn, *args)  # type: ignore[union-attr]
        return await run_in_threadpool(fn, *args)


class Hub:
    """One per ``realtime`` app and event loop: the tracked actors and their readers."""

    def __init__(self, faces: Faces, poll_interval: float) -> None:
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
            heads = self.store.broadcasts.actor_heads(tx, keys)
        return {(h.actor_type, h.actor_id): h for h in heads}

    # --- reading committed data (in a thread) ---------------------------------------------

    def head(self, key: Key) -> tuple[Position, ActorHead | None]:
        """The identity's committed position and head; a destroyed actor's position is
        that of its last broadcast (the end of its incarnation)."""
        with self.store.read() as tx:
            (head,) = self.store.broadcasts.actor_heads(tx, [key]) or [None]
            if head is not None:
                return (head.incarnation, head.revision), head
            last = self.store.broadcasts.latest_broadcast(tx, key[0], key[1])
        return ((0, 0) if last is None else (last.incarnation, last.revision)), None

    def rows_after(self, key: Key, position: Position) -> list[Any]:
        with self.store.read() as tx:
            return self.store.broadcasts.broadcasts_after(  # type: ignore[no-any-return]
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
                    encoded = change_frame(position, changes) if visible else ""
                    for sub in list(tracked.subscriptions):
                        if position <= sub.position or sub in resync:
                            continue  # it already holds this revision
                        if not destroyed and position[0] != sub.position[0]:
                            resync.add(sub)
                            continue
                        sub.position = position
                        if visible:
                            sub.session.offer(addressed(sub.ref, encoded))
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
