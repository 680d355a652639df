"""The runtime's internals, as one seam for the library's own parts.

References, ``runtime.testing``, the administration API, the web endpoints,
observability and the doctor need a few things the faces do not offer
applications: the client that runs calls, waking the workers, the broadcast
listeners, the wake-up listener, the pool's counts, instrumentation. They reach
them through ``runtime.kernel`` (this :class:`Kernel`), never through the
runtime's underscore attributes; ``tests/test_seams.py`` checks that no module
does. Applications use the faces; this API may change between releases.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar, cast

if TYPE_CHECKING:
    from ..observability.events import Instrumentation
    from ..store.rows import Enqueued
    from .client import Client
    from .notices import NoticeDispatch
    from .stop_requests import StopRequests
    from .wakeup import Listener
    from .worker import WorkerPool


T = TypeVar("T")


class Kernel:
    """What one runtime's parts share: its client, worker pool and wake-up listener."""

    def __init__(
        self,
        client: Client,
        pool: WorkerPool,
        listener: Listener | None,
        notices: NoticeDispatch,
        stops: StopRequests,
    ) -> None:
        #: Calls, sends, outcomes, queries and authorization: the faces' one engine.
        self.client = client
        #: The worker pool (activations, poller, effects), for the engine and tests.
        self.pool = pool
        #: The wake-up listener (PostgreSQL ``LISTEN``, Redis or peer datagrams), or None:
        #: polling only.
        self.listener = listener
        #: What a payload from the wake-up channel does here.
        self.notices = notices
        #: What ``run()`` waits on, on both faces.
        self.stops = stops

    @property
    def closed(self) -> bool:
        """Whether the runtime is closed (``close()`` ran, no ``start()`` since)."""
        return self.client.state == "closed"

    # --- workers --------------------------------------------------------------------------

    @property
    def owner(self) -> str:
        """The lease owner this process's leases and claims carry."""
        return self.pool.owner

    @property
    def running(self) -> bool:
        """Whether this process's workers are started."""
        return self.pool.running

    def wake_workers(self) -> None:
        """New work may be ready (a retry, a resumed actor): look for it now."""
        self.pool.poller.wake()

    def route(self, enqueued: Sequence[Enqueued]) -> None:
        """Hand committed enqueues to this process's activations, or wake the poller."""
        self.pool.route(list(enqueued))

    def held_activations(self) -> int:
        """How many actors this process holds the lease of now."""
        return self.pool.table.held()

    def worker_loop(self) -> tuple[bool, float]:
        """Whether the poller thread runs, and the seconds since it last maintained."""
        poller = self.pool.poller
        return poller.alive(), time.monotonic() - poller.last_maintained

    def drain(self, *, now_ms: int | None = None, timeout: float = 60.0) -> int:
        """Run all ready work now in the calling thread (``runtime.testing``)."""
        return self.pool.drain(now_ms=now_ms, timeout=timeout)

    def release_all(self) -> int | None:
        """Give back every lease this process holds (``testing.reset``)."""
        return self.pool.release_all()

    @contextmanager
    def effects_held(self) -> Iterator[None]:
        """Keep effect handlers from running while the block runs (capture_effects)."""
        self.pool.effects.held += 1
        try:
            yield
        finally:
            self.pool.effects.held -= 1

    def instrument(self, instrumentation: Instrumentation) -> None:
        """Send the engine's events (turns, effects, processes) to ``instrumentation``."""
        self.pool.instrument_with(instrumentation)

    # --- broadcasts and notices ----------------------------------------------------------

    def broadcasted(self, actor_type: str, actor_id: str) -> None:
        """An actor's subscribers have something new: tell the realtime listeners."""
        self.pool.broadcasted(actor_type, actor_id)

    def add_broadcast_listener(self, listener: Callable[[str, str], None]) -> None:
        """Call ``listener(actor_type, actor_id)`` after each committed broadcast."""
        self.pool.broadcast_listeners.append(listener)

    def remove_broadcast_listener(self, listener: Callable[[str, str], None]) -> None:
        """Stop calling a listener added by :meth:`add_broadcast_listener`."""
        if listener in self.pool.broadcast_listeners:
            self.pool.broadcast_listeners.remove(listener)

    def deliver_notice(self, payload: str) -> None:
        """Act on ``payload`` as if it came from the wake-up channel (tests, bridges)."""
        self.notices(payload)

    # --- schema ---------------------------------------------------------------------------

    def ensure_schema(self) -> None:
        """Refuse to work on tables older than this library (once per runtime)."""
        self.client.ensure_schema()


class AsyncKernel:
    """The kernel of an ``AsyncRuntime``: the same parts, and its way off the event loop."""

    def __init__(
        self,
        kernel: Kernel,
        offload: Callable[..., Awaitable[Any]],
    ) -> None:
        #: The kernel of the wrapped ``Runtime``.
        self.sync = kernel
        self.client = kernel.client
        self._offload = offload

    async def offload(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run blocking ``fn`` in the runtime's thread pool, with the caller's context."""
        return cast(T, await self._offload(fn, *args, **kwargs))

    async def wait(self, message: Any, timeout: float | None) -> Any:
        """Wait for a message's outcome without blocking the event loop."""
        return await self.client.waiting.wait_async(message, timeout, self._offload)
