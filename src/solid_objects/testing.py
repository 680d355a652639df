"""``runtime.testing``: deterministic control of work and time for tests."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .runtime import AsyncRuntime, Runtime


def _epoch_ms(now: datetime) -> int:
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    return int(now.timestamp() * 1000)


class Testing:
    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    def drain(self, *, timeout: float = 60.0) -> int:
        """Run every ready message now, in this thread; returns the number of turns run.

        Works whether or not the runtime's workers are started; leases taken here
        are released afterwards when the runtime is not running workers.
        """
        self._runtime._engine.ensure_schema()
        return self._runtime._pool.drain(timeout=timeout)

    def run_due_reminders(self, now: datetime, *, timeout: float = 60.0) -> int:
        """Fire time-triggered work (delayed messages, reminders, retries) due at ``now``.

        ``now`` stands in for the database clock when deciding what is due, so
        a test can jump three days ahead; a naive datetime is taken as UTC.
        Returns the number of turns run.
        """
        self._runtime._engine.ensure_schema()
        return self._runtime._pool.drain(now_ms=_epoch_ms(now), timeout=timeout)


class AsyncTesting:
    def __init__(self, runtime: AsyncRuntime) -> None:
        self._runtime = runtime

    async def drain(self, *, timeout: float = 60.0) -> int:
        return await self._runtime._run(self._runtime.sync.testing.drain, timeout=timeout)

    async def run_due_reminders(self, now: datetime, *, timeout: float = 60.0) -> int:
        return await self._runtime._run(
            self._runtime.sync.testing.run_due_reminders, now, timeout=timeout
        )
