"""In-process delivery of committed outcomes to waiting callers.

A caller registers the message id *before* its enqueue commits; a local
worker resolves it right after the turn commits. Callers whose message runs
in another process fall back to reading the message row (see ``ref``).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class Outcome:
    """A terminal message status as stored: status, result JSON, error JSON."""

    status: str
    result: str | None
    error: str | None


#: Completes a waiter's future to make it read the message row now.
NUDGE = Outcome("nudge", None, None)


class Waiters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._futures: dict[str, Future[Outcome]] = {}
        #: Where each registered message is, when known.
        self._where: dict[str, Literal["enqueueing", "local", "remote"]] = {}

    def register(self, message_id: str, *, enqueueing: bool = False) -> Future[Outcome]:
        """A future for the outcome; ``enqueueing``: its enqueue has not committed yet."""
        with self._lock:
            future = self._futures.get(message_id)
            if future is None:
                future = self._futures[message_id] = Future()
                if enqueueing:
                    self._where[message_id] = "enqueueing"
            return future

    def mark(self, message_id: str, *, local: bool) -> None:
        """The enqueue committed; ``local``: a worker of this process will resolve it."""
        with self._lock:
            if message_id in self._futures:
                self._where[message_id] = "local" if local else "remote"

    def where(self, message_id: str) -> Literal["enqueueing", "local", "remote"]:
        """Where the message is; "remote" (read the database) when not known."""
        return self._where.get(message_id, "remote")

    def has(self, message_id: str) -> bool:
        return message_id in self._futures

    def nudge(self, message_id: str) -> None:
        """Another process finished this message: wake its waiter to read the row now."""
        with self._lock:
            future = self._futures.pop(message_id, None)
            if self._where.get(message_id) == "enqueueing":
                # It finished elsewhere, so its enqueue committed; the routing that would
                # say so finds no future any more (popped here): without this the caller
                # would never read the row.
                self._where[message_id] = "remote"
        if future is not None and not future.done():
            future.set_result(NUDGE)

    def take(self, message_id: str) -> Outcome | None:
        """The outcome already handed to ``message_id``'s waiter, forgetting the waiter;
        None (nothing forgotten) while it has none, or only a nudge or an error.

        A caller whose turn ran in its own thread finds its outcome here at once,
        without the wait loop (``Waiting.wait``) that would end the same way.
        """
        future = self._futures.get(message_id)
        if future is None or not future.done():
            return None
        try:
            outcome = future.result()  # done: returns (or raises) without waiting
        except BaseException:
            return None  # the wait loop raises it
        if outcome is NUDGE:
            return None
        self.forget(message_id)
        return outcome

    def forget(self, message_id: str) -> None:
        with self._lock:
            self._futures.pop(message_id, None)
            self._where.pop(message_id, None)

    def resolve(self, message_id: str, outcome: Outcome) -> None:
        with self._lock:
            future = self._futures.pop(message_id, None)
            self._where.pop(message_id, None)
        if future is not None and not future.done():
            future.set_result(outcome)
