"""``Runtime``: configuration, lifecycle and references, for threads.

A runtime owns one SQLAlchemy engine (built from the URL, or making its
connections through the Engine you pass, pooled apart so the library's
connection settings never leak into your application's: ``database.py``), the
registry of actor classes, and the worker pool of this process; its internals
are shared through ``runtime.kernel`` (``engine/kernel.py``)."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from sqlalchemy import Engine, Table, event
from sqlalchemy.engine import URL

from .. import guard, shutdown, staging
from ..actor import Actor, definition_of
from ..admin import Administration
from ..authorization import check_policies
from ..catalogue import CATALOGUE
from ..database import library_engine, listen_engine, replica_engine
from ..engine.client import Client
from ..engine.kernel import Kernel
from ..engine.notices import NoticeDispatch
from ..engine.outcomes import Waiters
from ..engine.projections import find as find_by_projection
from ..engine.stop_requests import StopRequests
from ..engine.wakeup import listener_for
from ..engine.worker import WorkerPool
from ..errors import ApplicationWriteForbidden, ConfigurationError
from ..flow import Rate, effect_limits
from ..options import Options
from ..projections import FoundPage
from ..ref import MessageReference, Ref
from ..registry import NamedHandlers, Registry
from ..store import Store
from ..store.store import new_owner
from ..testing import Testing

if TYPE_CHECKING:
    from ..doctor import Report


log = logging.getLogger("solid_objects.runtime")


A = TypeVar("A", bound=Actor)


H = TypeVar("H", bound=Callable[..., Any])


T = TypeVar("T")


P = ParamSpec("P")


def _refuse_inside_turn(*_: Any) -> None:
    """Actor code may not write through the runtime's engine behind the commit's back."""
    if staging.inside_turn():
        raise ApplicationWriteForbidden(
            "actor operations may not use the runtime's database connection directly: "
            "stage the write with self.commit_action(name, ...) so it commits with the turn"
        )


def projection_table(store: Store, cls: type[Actor]) -> Table:
    projections = definition_of(cls).projections
    if projections is None:
        raise ConfigurationError(
            f"{cls.__qualname__} declares no @projection: it has no projection table"
        )
    return store.projections.table(projections.spec)


class Runtime:
    """Durable actors in one database, for this process.

    ``Runtime("sqlite:///app.db", workers=4, lease_duration=30)``; see
    :class:`~solid_objects.options.Options` for every option.
    """

    def __init__(self, database: str | URL | Engine, **options: Any) -> None:
        check_policies(options, allow_async=False)
        self.options = Options.from_kwargs(options)
        self.engine = library_engine(database, self.options)
        self.store = Store(
            self.engine,
            prefix=self.options.table_prefix,
            options={
                "sqlite_synchronous": self.options.sqlite_synchronous,
                "busy_timeout": self.options.busy_timeout,
                "pooler": self.options.pooler,
            },
        )
        #: The engine of ``listen_url``: LISTEN and the session mark go straight to the
        #: server when the main engine goes through a transaction pooler; None without.
        self.direct_engine = listen_engine(self.options, self.store.dialect.family)
        self.store.session_engine = self.direct_engine
        replica = replica_engine(self.options, self.store.dialect.family)
        if replica is not None:
            self.store.attach_replica(replica, self.options.replica_max_lag)
        self.registry = Registry(None if self.options.actors is not None else CATALOGUE)
        for cls in self.options.actors or ():
            self.registry.register(cls)
        self.effects = NamedHandlers("effect")
        self.commit_actions = NamedHandlers("commit action")
        self.owner = new_owner()
        self._waiters = Waiters()
        self._pool = WorkerPool(
            self.store,
            self.registry,
            self.effects,
            self.commit_actions,
            self.options,
            self._waiters,
            self.owner,
        )
        event.listen(self.engine, "before_cursor_execute", _refuse_inside_turn)
        self.guard(self.engine)  # migrations and commit actions, too
        self._client = Client(self.store, self._pool, self._waiters, self.options)
        # A call from a thread holding SQLite's write lock is refused (SyncInsideTransaction).
        self._client.transactions.watch(self.engine)
        if isinstance(database, Engine):
            self._client.transactions.watch(database)
        #: What a wake-up from another process does here (``engine/notices.py``).
        self._notices = NoticeDispatch(self.store.notice_key, self._waiters, self._pool)
        self._listener = listener_for(
            self.store,
            self.options.wakeup_url,
            self._notices,
            self.direct_engine,
            owner=self.owner,
            ttl_ms=self.options.lease_ms,
        )
        if self._listener is not None:
            self._client.listening.notified = self._listener.listening.is_set
            self._client.listening.connection = self._listen_connection
        #: The internals the library's own parts share (``engine/kernel.py``).
        self._stops = StopRequests()
        self.kernel = Kernel(self._client, self._pool, self._listener, self._notices, self._stops)
        self._closed = False
        #: Serializes start/stop/close, so a close() during run() waits for nothing twice.
        self._lifecycle = threading.RLock()
        self.testing = Testing(self)
        #: The administration API; denies everything until ``admin.set_policy(...)``.
        self.admin = Administration(self)

    @property
    def actors_table(self) -> Table:
        """The actors table for the application's own SQL reads (SQLAlchemy Core).

        ``state`` is typed ``JSON`` (``jsonb`` on PostgreSQL), so
        ``select(t.c.actor_id).where(t.c.actor_type == "Cart",
        t.c.state["count"].as_integer() > 3)`` runs on every database, and can join the
        application's tables. Read only: a write here bypasses the lease fence.
        """
        return self.store.actors_table

    def projection_table(self, cls: type[Actor]) -> Table:
        """The projection table of ``cls`` (its ``@projection`` values, one row per actor,
        keyed by ``actor_id``) as SQLAlchemy Core sees it, for the application's reads
        and joins. Read only: the turns write it."""
        return projection_table(self.store, cls)

    def find(
        self,
        cls: type[Actor],
        where: Any = None,
        *,
        limit: int = 100,
        cursor: str | None = None,
        authorization: Any = None,
    ) -> FoundPage:
        """Actors of ``cls`` whose projection row matches ``where``, a page at a time.

        ``where`` is a SQLAlchemy condition on :meth:`projection_table`'s columns
        (``t.c.item_count > 3``), or None for all; pages go in ``actor_id`` order, and
        ``next_cursor`` asks for the next. Each actor is shown only if
        ``authorize_query`` allows reading it (``authorization`` is the context).
        """
        return find_by_projection(
            self._client,
            definition_of(cls),
            where,
            limit=limit,
            cursor=cursor,
            context=authorization,
        )

    # --- setup ------------------------------------------------------------------------

    def install(self) -> None:
        """Create or upgrade the library's tables. Idempotent; safe from many processes."""
        self.store.install()
        self._client.schema_installed()
        ambiguous = self.registry.ambiguous()
        for actor_type in self.registry.types():
            if actor_type not in ambiguous:
                self._pool.runner.projections.prepare(self.registry.get(actor_type))

    def register(self, cls: type[A]) -> type[A]:
        """Make an actor class runnable by this process's workers. Usable as a decorator.

        A runtime without ``actors=[...]`` already serves every actor class defined in
        its process; registering still adds a class defined with ``auto_register=False``,
        and picks one class when several define the same ``actor_type``.
        """
        self.registry.register(cls)
        return cls

    def effect(
        self,
        name: str,
        *,
        max_duration: float | None = None,
        rate: Rate | None = None,
        max_concurrent: int | None = None,
    ) -> Callable[[H], H]:
        """Register an effect handler: ``@runtime.effect("send_email")``.

        The handler is called as ``handler(ctx, **arguments)`` (``def`` or
        ``async def``) after the turn that emitted the effect committed, at least
        once; ``ctx.id`` is the same on every attempt, so pass it to the receiver
        as an idempotency key. While it runs, this process renews its claim, so a
        slow handler is never started twice; ``max_duration`` (seconds) fails an
        attempt that runs longer with :class:`~solid_objects.errors.EffectTimedOut`.

        Flow control, held over every process by the database: ``rate=Rate(10,
        per=1.0)`` starts at most 10 attempts of ``name`` in any second (retries
        count), ``max_concurrent=3`` runs at most 3 at once. The limits in force are
        those of the process that started last; effects over a limit wait (see
        ``docs/actors.md``, "Flow control of effects").
        """
        limits = effect_limits(name, rate, max_concurrent)
        if max_duration is not None and (
            isinstance(max_duration, bool)
            or not isinstance(max_duration, int | float)
            or not max_duration > 0
        ):
            raise ConfigurationError(
                f"max_duration of effect {name!r} must be a positive number of seconds, "
                f"not {max_duration!r}"
            )

        def register(handler: H) -> H:
            self.effects.register(name, handler)
            self.effects.limit(name, None if max_duration is None else float(max_duration))
            self.effects.set_flow(name, limits)
            if self._pool.running:
                self._pool.effects.start()
            return handler

        return register

    def commit_action(self, name: str) -> Callable[[H], H]:
        """Register a commit action: ``@runtime.commit_action("record_order")``.

        Actor code stages it with ``self.commit_action(name, **arguments)``; the
        handler runs as ``handler(ctx, **arguments)`` inside the turn's fenced
        transaction, writing through ``ctx.connection`` (a SQLAlchemy connection on
        that transaction), so the application's rows and the actor's state commit
        together or not at all.
        """

        def register(handler: H) -> H:
            self.commit_actions.register(name, handler)
            return handler

        return register

    def ref(self, cls: type[A], actor_id: str) -> Ref[A]:
        """A reference to the actor ``cls`` with identity ``actor_id`` (registers ``cls``)."""
        definition = self.registry.register(cls)
        return Ref(self, definition, actor_id)

    def message(
        self, cls: type[A], message_id: str, *, authorization: Any = None
    ) -> MessageReference[Any]:
        """Rebuild a reference to a message sent earlier (for example in another process).

        ``authorize_message`` is asked with the stored request and ``authorization``;
        with a policy configured, a missing message is refused as one not allowed.
        """
        definition = self.registry.register(cls)
        found = self._client.messages.locate(definition, message_id, authorization)
        return MessageReference(self, *found, authorization=authorization)

    def guard(self, engine: Engine) -> Engine:
        """Refuse writes through ``engine`` that would escape a turn's commit.

        From actor code, a state migration or a commit action (other than through
        its ``ctx.connection``), a write through ``engine`` would commit on its own
        and stay done if the turn is refused or retried: it raises
        ApplicationWriteForbidden instead. Reads are allowed. A connection checked out
        in those scopes is read-only at the server until it returns to the pool, so a
        write that its text hides, or one through ``engine.raw_connection()``, is
        refused by the database. Returns ``engine``.
        """
        if not isinstance(engine, Engine):
            raise ConfigurationError(f"guard() takes a SQLAlchemy Engine, not {engine!r}")
        if not event.contains(engine, "before_cursor_execute", guard.refuse_escaping_writes):
            guard.install(engine)
        return engine

    def enlist_sends(self, finder: Callable[[str, str], Any]) -> None:
        """Integration hook: join the application transaction the caller is in.

        Before each ``send()`` and call through this runtime's refs without
        ``connection=``, ``finder(kind, what)`` (``kind`` "send" or "call", ``what``
        naming it for an error) returns the connection of the application transaction
        the calling thread is in, or None. A send then writes its message in that
        transaction, as ``with_options(connection=...)`` does; a call cannot wait
        there for its result, so the finder raises for it. ``contrib.django`` installs
        one for ``transaction.atomic()`` blocks on the runtime's database.
        """
        self._client.transactions.enlist_with(finder)

    # --- diagnosis ----------------------------------------------------------------------

    def health(self) -> Report:
        """Cheap checks for a liveness or readiness probe: database, schema, worker loop."""
        from ..doctor import health

        return health(self)

    def doctor(self, *, round_trip: bool = True, timeout: float = 10.0, app: str = "APP") -> Report:
        """Every check of ``solid-objects doctor``, with what to do about each problem."""
        from ..doctor import examine

        return examine(self, round_trip=round_trip, timeout=timeout, app=app)

    # --- lifecycle --------------------------------------------------------------------

    def start(self) -> None:
        """Start this process's worker threads, and its wake-up subscription (NOTIFY, Redis).

        With ``workers=0`` only the listener starts, so callers here learn at once
        when another process finished their message. A runtime stopped or closed
        before starts again (a web framework runs its lifespan once per test client).
        """
        with self._lifecycle:
            self._client.ensure_schema()
            self._closed = False
            self._client.state = "running"
            if self._listener is not None:
                self._listener.start()
            if self.options.workers > 0:
                self._pool.start()
            shutdown.watch(self)  # release the leases even if the process exits without close()

    def stop(self, timeout: float = 30.0) -> None:
        """Finish in-flight turns, then release every lease this process holds.

        A :meth:`run` in another thread returns once this is done.
        """
        self._stops.request()
        with self._lifecycle:
            shutdown.unwatch(self)
            self._pool.stop(timeout)
            if self._listener is not None:
                self._listener.stop()
            if not self._closed:
                self._client.state = "stopped"

    def _listen_connection(self) -> int | None:
        """Which listener connection is up (None: none), see ``Waiters.sent``."""
        listener = self._listener
        if listener is None or not listener.listening.is_set():
            return None
        return listener.connections

    def run(self) -> None:
        """Run workers until SIGTERM/SIGINT, :meth:`request_stop`, :meth:`stop` or
        :meth:`close`, then drain and return."""
        self._stops.clear()
        previous: dict[signal.Signals, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, lambda *_: self.request_stop())
        try:
            self.start()
            while not self._stops.wait(1.0):
                pass
            log.info("stopping: finishing in-flight turns", extra={"solid_action": "stopping"})
        finally:
            # After a close() from another thread this finds nothing left to stop.
            self.stop()
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def request_stop(self) -> None:
        """Ask :meth:`run` to return after draining (safe from a signal handler)."""
        self._stops.request()

    def close(self) -> None:
        """Stop workers, release leases, and dispose of the connection pool.

        :meth:`start` (or ``with runtime:``) after this starts the runtime again; a
        call that needs workers in between raises :class:`RuntimeClosed`.
        """
        with self._lifecycle:
            if self._closed:
                return
            self.stop()
            self._closed = True
            self._client.state = "closed"
            self.store.close()
            self.engine.dispose()
            if self.direct_engine is not None:
                self.direct_engine.dispose()
            if self.store.replica is not None:
                self.store.replica.engine.dispose()

    def __enter__(self) -> Runtime:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
