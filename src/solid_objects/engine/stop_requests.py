"""Stop requests: what ``run()`` waits on, on both faces.

A signal handler, another thread or ``request_stop()`` sets the request; the sync
``Runtime.run`` polls it, and ``AsyncRuntime.run`` registers a waker that sets an
``asyncio.Event`` on its loop, so neither face busy-waits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class StopRequests:
    """A stop request flag and the wakers called each time one arrives."""

    def __init__(self) -> None:
        self._requested = threading.Event()
        self._wakers: list[Callable[[], None]] = []

    def clear(self) -> None:
        """A new ``run()`` begins: forget requests made before it."""
        self._requested.clear()

    def request(self) -> None:
        """Ask every ``run()`` to return (safe from a signal handler)."""
        self._requested.set()
        for wake in list(self._wakers):
            wake()

    def wait(self, timeout: float) -> bool:
        """Whether a stop was requested within ``timeout`` seconds."""
        return self._requested.wait(timeout)

    @contextmanager
    def waking(self, wake: Callable[[], None]) -> Iterator[None]:
        """Call ``wake`` on every stop request while the block runs."""
        self._wakers.append(wake)
        try:
            yield
        finally:
            self._wakers.remove(wake)
