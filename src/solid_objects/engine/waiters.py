"""In-process delivery of committed outcomes to waiting callers.

A caller registers the message id *before* its enqueue commits; a local
worker resolves it right after the turn commits. Callers whose message runs
in another process fall back to reading the message row (see ``ref``).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Outcome:
    """A terminal message status as stored: status, result JSON, error JSON."""

    status: str
    result: str | None
    error: str | None


class Waiters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._futures: dict[str, Future[Outcome]] = {}
        self._local: set[str] = set()

    def register(self, message_id: str) -> Future[Outcome]:
        with self._lock:
            future = self._futures.get(message_id)
            if future is None:
                future = self._futures[message_id] = Future()
            return future

    def mark_local(self, message_id: str) -> None:
        """A worker of this process holds the actor: the future will be resolved."""
        with self._lock:
            if message_id in self._futures:
                self._local.add(message_id)

    def is_local(self, message_id: str) -> bool:
        return message_id in self._local

    def forget(self, message_id: str) -> None:
        with self._lock:
            self._futures.pop(message_id, None)
            self._local.discard(message_id)

    def resolve(self, message_id: str, outcome: Outcome) -> None:
        with self._lock:
            future = self._futures.pop(message_id, None)
            self._local.discard(message_id)
        if future is not None and not future.done():
            future.set_result(outcome)
