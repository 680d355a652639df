"""``AsyncRuntime``: the asyncio face of :class:`~solid_objects.runtime.Runtime`, the
same names awaited.

It wraps a ``Runtime`` (``sync``) and runs its blocking work in a thread pool of its
own, so an event loop never blocks on the database; only what differs between the
faces is written here (awaiting, the executor, ``run()`` on a loop)."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, Table
from sqlalchemy.engine import URL

from .. import shutdown
from ..actor import Actor
from ..admin import Administration
from ..authorization import bind_caller_loop, wrap_async_policies
from ..engine.kernel import AsyncKernel
from ..flow import Rate
from ..options import Options
from ..projections import FoundPage
from ..ref import AsyncMessageReference, AsyncRef
from ..registry import NamedHandlers, Registry
from ..store import Store
from ..testing import AsyncTesting
from .sync_face import A, H, Runtime, T

if TYPE_CHECKING:
    from ..doctor import Report


class AsyncRuntime:
    """The asyncio face of :class:`Runtime`: the same names, awaited.

    Database work runs in a dedicated thread pool (``executor_threads``) so the
    event loop never blocks and FastAPI's own thread pool is left alone. ``sync``
    is the underlying :class:`Runtime`, for code that runs in a thread of its own.
    """

    def __init__(
        self, database: str | URL | Engine, *, executor_threads: int = 16, **options: Any
    ) -> None:
        # ``async def`` policies are awaited on the caller's loop (see _run).
        self.sync = Runtime(database, **wrap_async_policies(options))
        self._executor_threads = executor_threads
        self._executor: ThreadPoolExecutor | None = None
        self._executor_lock = threading.Lock()
        #: The internals the library's own parts share, and the way off the event loop.
        self.kernel = AsyncKernel(self.sync.kernel, self._run)
        self.testing = AsyncTesting(self)

    # --- the underlying runtime's attributes, under the same names -------------------

    @property
    def options(self) -> Options:
        return self.sync.options

    @property
    def engine(self) -> Engine:
        return self.sync.engine

    @property
    def direct_engine(self) -> Engine | None:
        """The engine of ``listen_url`` (LISTEN and the session mark), or None."""
        return self.sync.direct_engine

    @property
    def store(self) -> Store:
        return self.sync.store

    @property
    def registry(self) -> Registry:
        return self.sync.registry

    @property
    def effects(self) -> NamedHandlers:
        return self.sync.effects

    @property
    def commit_actions(self) -> NamedHandlers:
        return self.sync.commit_actions

    @property
    def owner(self) -> str:
        return self.sync.owner

    @property
    def admin(self) -> Administration:
        """The administration API of the underlying runtime (its calls block: use a thread)."""
        return self.sync.admin

    @property
    def actors_table(self) -> Table:
        """The actors table for the application's own SQL reads (SQLAlchemy Core); see
        :attr:`Runtime.actors_table`. Run its queries on an async engine or a thread."""
        return self.sync.actors_table

    def projection_table(self, cls: type[Actor]) -> Table:
        """The projection table of ``cls`` for the application's reads and joins; see
        :meth:`Runtime.projection_table`."""
        return self.sync.projection_table(cls)

    async def find(
        self,
        cls: type[Actor],
        where: Any = None,
        *,
        limit: int = 100,
        cursor: str | None = None,
        authorization: Any = None,
    ) -> FoundPage:
        """Actors of ``cls`` whose projection row matches ``where``, a page at a time;
        see :meth:`Runtime.find`."""
        return await self._run(
            self.sync.find, cls, where, limit=limit, cursor=cursor, authorization=authorization
        )

    # --- running blocking work off the event loop -------------------------------------

    def _pool(self) -> ThreadPoolExecutor:
        """The executor, made anew after :meth:`close` so a closed runtime can start again."""
        with self._executor_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    self._executor_threads, thread_name_prefix="solid-async"
                )
            return self._executor

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()  # so the caller's trace context follows the call
        bind_caller_loop(context, loop)
        return await loop.run_in_executor(self._pool(), partial(context.run, fn, *args, **kwargs))

    # --- setup ------------------------------------------------------------------------

    async def install(self) -> None:
        """Create or upgrade the library's tables (:meth:`Runtime.install`)."""
        await self._run(self.sync.install)

    def register(self, cls: type[A]) -> type[A]:
        """Make an actor class runnable here (:meth:`Runtime.register`)."""
        return self.sync.register(cls)

    def guard(self, engine: Engine) -> Engine:
        """Refuse escaping writes through ``engine``; see :meth:`Runtime.guard`."""
        return self.sync.guard(engine)

    def effect(
        self,
        name: str,
        *,
        max_duration: float | None = None,
        rate: Rate | None = None,
        max_concurrent: int | None = None,
    ) -> Callable[[H], H]:
        """Register an effect handler (``def`` or ``async def``); see :meth:`Runtime.effect`."""
        return self.sync.effect(
            name, max_duration=max_duration, rate=rate, max_concurrent=max_concurrent
        )

    def commit_action(self, name: str) -> Callable[[H], H]:
        """Register a commit action; see :meth:`Runtime.commit_action`.

        The handler is a plain ``def``: it runs inside the turn's database
        transaction, in a worker thread.
        """
        return self.sync.commit_action(name)

    def ref(self, cls: type[A], actor_id: str) -> AsyncRef[A]:
        """An :class:`AsyncRef` to the actor ``actor_id`` of ``cls``; nothing is read or written."""
        definition = self.sync.registry.register(cls)
        return AsyncRef(self, definition, actor_id)

    async def message(
        self, cls: type[A], message_id: str, *, authorization: Any = None
    ) -> AsyncMessageReference[Any]:
        """Rebuild a reference to a message sent earlier (for example in another process)."""
        definition = self.sync.registry.register(cls)
        found = await self._run(
            self.kernel.client.messages.locate, definition, message_id, authorization
        )
        return AsyncMessageReference(self, *found, authorization=authorization)

    def enlist_sends(self, finder: Callable[[str, str], Any]) -> None:
        """Join the application transaction the caller is in (:meth:`Runtime.enlist_sends`);
        the finder is asked on the event loop's thread."""
        self.sync.enlist_sends(finder)

    # --- diagnosis ----------------------------------------------------------------------

    async def health(self) -> Report:
        """Readiness: the database answers and the schema is current (:meth:`Runtime.health`)."""
        return await self._run(self.sync.health)

    async def doctor(
        self, *, round_trip: bool = True, timeout: float = 10.0, app: str = "APP"
    ) -> Report:
        """Check configuration, database and workers (:meth:`Runtime.doctor`)."""
        return await self._run(self.sync.doctor, round_trip=round_trip, timeout=timeout, app=app)

    # --- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        """Start the in-process workers (:meth:`Runtime.start`)."""
        shutdown.guard_sigterm()  # here, on the loop's thread: the runtime starts in another
        await self._run(self.sync.start)

    async def stop(self, timeout: float = 30.0) -> None:
        """Drain the in-process workers and stop them (:meth:`Runtime.stop`)."""
        await self._run(self.sync.stop, timeout)

    async def run(self) -> None:
        """Run workers until cancelled, :meth:`request_stop`, :meth:`stop` or
        :meth:`close`, then drain and release leases."""
        loop = asyncio.get_running_loop()
        stopped = asyncio.Event()

        def wake() -> None:
            try:
                loop.call_soon_threadsafe(stopped.set)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                pass

        stops = self.kernel.sync.stops
        stops.clear()
        with stops.waking(wake):
            try:
                await self.start()
                await stopped.wait()
            finally:
                if not self.kernel.sync.closed:  # close() stopped everything already
                    await asyncio.shield(self.stop())

    def request_stop(self) -> None:
        """Ask :meth:`run` to return after draining (safe from a signal handler or thread)."""
        self.sync.request_stop()

    async def close(self) -> None:
        """Stop workers, release leases, dispose of the pools; :meth:`start` works again."""
        await self._run(self.sync.close)
        with self._executor_lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)

    async def __aenter__(self) -> AsyncRuntime:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
