"""``runtime.testing``: deterministic control of work and time for tests, a reset of
every table between tests, and capturing effects instead of running their handlers."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, overload

from .engine.turn import replay
from .errors import ConfigurationError, NotFound, OperationRefused

if TYPE_CHECKING:
    from .runtime import AsyncRuntime, Runtime


def _epoch_ms(now: datetime) -> int:
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    return int(now.timestamp() * 1000)


@dataclass(frozen=True)
class CapturedEffect:
    """An effect a turn emitted (and committed) while :class:`EffectCapture` held it."""

    #: ``ctx.id`` its handler would get.
    id: str
    name: str
    arguments: dict[str, Any]
    actor_type: str
    actor_id: str
    #: ``pending`` while held; whatever became of it if it was run after the block.
    status: str


class EffectCapture:
    """``with runtime.testing.capture_effects() as effects:``: the effects emitted in
    the block, their handlers not run in this runtime meanwhile.

    Inside the block the list is read from the database on each use; on leaving it
    is fixed. The effects stay pending: a later ``drain()`` runs their handlers, so
    a test may look first and run them after, or never.
    """

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._first: str | None = None
        self._before: frozenset[str] = frozenset()
        self._fixed: list[CapturedEffect] | None = None
        self._held = ExitStack()

    def __enter__(self) -> EffectCapture:
        if self._first is not None:
            raise OperationRefused("an EffectCapture is entered once: make a new one")
        runtime = self._runtime
        runtime.kernel.ensure_schema()
        self._held.enter_context(runtime.kernel.effects_held())
        # Ids start with their ms clock: every later effect sorts at or after this one;
        # the few made in this very millisecond before it are left out by id.
        self._first = f"{int(time.time() * 1000):012x}" + "0" * 20
        self._before = frozenset(e.id for e in self._read())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self._fixed = self._read()
        finally:
            self._held.close()

    async def __aenter__(self) -> EffectCapture:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    def _read(self) -> list[CapturedEffect]:
        assert self._first is not None
        store = self._runtime.store
        with store.read() as tx:
            rows = store.idle.effects_from(tx, self._first)
        return [
            CapturedEffect(str(i), str(n), json.loads(a), str(t), str(a_id), str(s))
            for i, n, a, t, a_id, s in rows
            if i not in self._before
        ]

    @property
    def effects(self) -> list[CapturedEffect]:
        if self._first is None:
            raise OperationRefused("use the capture as a context manager: with ... as effects")
        return list(self._fixed) if self._fixed is not None else self._read()

    def names(self) -> list[str]:
        """The captured effects' names, in the order they were emitted."""
        return [e.name for e in self.effects]

    def named(self, name: str) -> list[CapturedEffect]:
        """The captured effects called ``name``, in the order they were staged."""
        return [e for e in self.effects if e.name == name]

    def __len__(self) -> int:
        return len(self.effects)

    def __iter__(self) -> Iterator[CapturedEffect]:
        return iter(self.effects)

    @overload
    def __getitem__(self, index: int) -> CapturedEffect: ...

    @overload
    def __getitem__(self, index: slice) -> list[CapturedEffect]: ...

    def __getitem__(self, index: int | slice) -> CapturedEffect | list[CapturedEffect]:
        return self.effects[index]

    def __repr__(self) -> str:
        return f"EffectCapture({self.effects!r})"


class Testing:
    """``runtime.testing``: run ready work and due reminders now, deterministically, in tests."""
    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    def drain(self, *, timeout: float = 60.0) -> int:
        """Run every ready message now, in this thread; returns the number of turns run.

        Works whether or not the runtime's workers are started; leases taken here
        are released afterwards when the runtime is not running workers.
        """
        self._runtime.kernel.ensure_schema()
        return self._runtime.kernel.drain(timeout=timeout)

    def run_due_reminders(self, now: datetime, *, timeout: float = 60.0) -> int:
        """Fire time-triggered work (delayed messages, reminders, retries) due at ``now``.

        ``now`` stands in for the database clock when deciding what is due, so
        a test can jump three days ahead; a naive datetime is taken as UTC.
        Returns the number of turns run.
        """
        self._runtime.kernel.ensure_schema()
        return self._runtime.kernel.drain(now_ms=_epoch_ms(now), timeout=timeout)

    def reset(self) -> None:
        """Delete every row of the library's tables (actors, messages, effects, reminders,
        processes, audit...), keeping the schema: a clean slate between tests.

        Refused unless the runtime was made for tests (``allow_reset=True``, which the
        pytest plugin's fixtures set), and while this runtime runs workers.
        """
        runtime = self._runtime
        if not runtime.options.allow_reset:
            raise ConfigurationError(
                "runtime.testing.reset() deletes every actor, message and effect in the "
                "database, so it is refused unless the runtime was made for tests: use the "
                "pytest plugin's solid_runtime fixtures, or Runtime(..., allow_reset=True) "
                "on a database that holds nothing you want to keep"
            )
        if runtime.kernel.running:
            raise OperationRefused(
                "runtime.testing.reset() while this runtime runs workers: stop() it first "
                "(their turns in flight would be refused, or write into the emptied tables)"
            )
        runtime.kernel.ensure_schema()
        runtime.kernel.release_all()
        runtime.store.transact(runtime.store.idle.empty_tables)
        runtime.kernel.pool.effects.declare_again()  # the effect limits' rows went too

    def replay(self, message_id: str) -> Any:
        """Run a finished message of a journaled class (``journaled = True``) again, with
        today's code, against the state it originally ran on; return its result or raise
        what it raises (a dead letter's exception, with its traceback in this process).
        Nothing is written."""
        runtime = self._runtime
        runtime.kernel.ensure_schema()
        with runtime.store.read() as tx:
            entry = runtime.store.journal.of_message(tx, message_id)
        if entry is None:
            raise NotFound(
                f"message {message_id!r} has no journal entry (its class is not journaled, "
                "it has not finished, or retention pruned it)"
            )
        definition = runtime.registry.get(entry.actor_type)
        return replay(
            definition,
            entry.actor_id,
            entry.state_before,
            entry.state_version,
            entry.operation,
            entry.arguments,
        )

    def capture_effects(self) -> EffectCapture:
        """Hold this runtime's effect handlers and list the effects emitted meanwhile:
        ``with runtime.testing.capture_effects() as effects: ...``."""
        return EffectCapture(self._runtime)


class AsyncTesting:
    """``runtime.testing`` of an :class:`AsyncRuntime`: the same helpers, awaitable."""
    def __init__(self, runtime: AsyncRuntime) -> None:
        self._runtime = runtime

    async def drain(self, *, timeout: float = 60.0) -> int:
        """Run all ready work now (:meth:`Testing.drain`)."""
        return await self._runtime.kernel.offload(self._runtime.sync.testing.drain, timeout=timeout)

    async def run_due_reminders(self, now: datetime, *, timeout: float = 60.0) -> int:
        """Fire reminders as if the database clock read ``now``
        (:meth:`Testing.run_due_reminders`).
        """
        return await self._runtime.kernel.offload(
            self._runtime.sync.testing.run_due_reminders, now, timeout=timeout
        )

    async def reset(self) -> None:
        """Empty the library's tables (:meth:`Testing.reset`; needs ``allow_reset=True``)."""
        await self._runtime.kernel.offload(self._runtime.sync.testing.reset)

    async def replay(self, message_id: str) -> Any:
        """Run a journaled message again against the state it ran on
        (:meth:`Testing.replay`)."""
        return await self._runtime.kernel.offload(self._runtime.sync.testing.replay, message_id)

    def capture_effects(self) -> EffectCapture:
        """As :meth:`Testing.capture_effects`; use it with ``with`` or ``async with``."""
        return EffectCapture(self._runtime.sync)


def runtime_like(
    app: Runtime | AsyncRuntime, url: str, **overrides: Any
) -> Runtime | AsyncRuntime:
    """A runtime like ``app`` (same face) on the database ``url``, for one test.

    It has ``app``'s options (``overrides`` on top; no wake-up broker, ``allow_reset``
    on), actor classes, effect handlers, commit actions and administration policy;
    ``app`` itself never touches a database. Not installed: the caller installs it
    (the framework integrations' lifespans and first requests do).
    """
    import dataclasses

    from .options import Options
    from .runtime import AsyncRuntime, Runtime

    options = {f.name: getattr(app.options, f.name) for f in dataclasses.fields(Options)}
    options = {**options, "wakeup_url": None, "allow_reset": True, **overrides}
    made: Runtime | AsyncRuntime = (
        AsyncRuntime(url, **options) if isinstance(app, AsyncRuntime) else Runtime(url, **options)
    )
    copy_registrations(made, app)
    return made


def copy_registrations(runtime: Runtime | AsyncRuntime, app: Runtime | AsyncRuntime) -> None:
    """Give ``runtime`` ``app``'s actor classes, handlers and administration policy."""
    from .runtime import AsyncRuntime

    source = app.sync if isinstance(app, AsyncRuntime) else app
    for cls in source.registry.registered():
        runtime.register(cls)
    for name, handler in source.effects.items():
        runtime.effect(name)(handler)
    for name, handler in source.commit_actions.items():
        runtime.commit_action(name)(handler)
    runtime.admin.set_policy(source.admin.policy)
