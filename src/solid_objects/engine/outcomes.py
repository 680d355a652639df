"""In-process delivery of committed outcomes to waiting callers.

A caller registers the message id *before* its enqueue commits; a local
worker resolves it right after the turn commits. Callers whose message runs
in another process fall back to reading the message row (see ``ref``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Literal

from ..store.rows import MessageRow


@dataclass(frozen=True, slots=True)
class Outcome:
    """A terminal message status as stored: status, result JSON, error JSON."""

    status: str
    result: str | None
    error: str | None


#: Completes a waiter's future to make it read the message row now.
NUDGE = Outcome("nudge", None, None)

#: Messages sent here that nobody waits for yet, remembered at most (the oldest go).
SENT_MEMORY = 4096


class Waiters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._futures: dict[str, Future[Outcome]] = {}
        #: Where each registered message is, when known.
        self._where: dict[str, Literal["enqueueing", "local", "remote"]] = {}
        #: Messages this process sent while its listener was connected, and nobody waits
        #: for: the listener's connection (see ``sent``) and the outcome, once announced.
        self._sent: OrderedDict[str, tuple[int, Outcome | None]] = OrderedDict()

    def sent(self, message_id: str, connection: int) -> None:
        """``message_id`` is being sent while the listener's ``connection`` is up.

        Called before its enqueue commits, so its outcome's announcement (committed
        later) is kept here if it arrives before anyone waits; a later :meth:`adopt`
        then needs no read. Bounded: past ``SENT_MEMORY`` the oldest is forgotten (its
        wait reads the row, as before).
        """
        with self._lock:
            self._sent[message_id] = (connection, None)
            if len(self._sent) > SENT_MEMORY:
                self._sent.popitem(last=False)

    def adopt(self, message_id: str, connection: int | None) -> Future[Outcome] | None:
        """The future a wait on ``message_id`` may trust without reading the row first.

        The registered waiter's, or one for a message :meth:`sent` remembers: completed
        with its announced outcome, or pending when the listener has stayed on the same
        ``connection`` since the send (the announcement will come). None otherwise
        (not sent here, forgotten, or the listener reconnected or is down: read the row).
        """
        with self._lock:
            future = self._futures.get(message_id)
            if future is not None:
                return future
            entry = self._sent.pop(message_id, None)
            if entry is None or (entry[1] is None and entry[0] != connection):
                return None
            future = self._futures[message_id] = Future()
        if entry[1] is not None:
            future.set_result(entry[1])
        return future

    def _announced(self, message_id: str, outcome: Outcome) -> None:
        """Keep an announced outcome of a sent message nobody waits for (lock held)."""
        entry = self._sent.get(message_id)
        if entry is not None:
            self._sent[message_id] = (entry[0], outcome)

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
            if future is None:
                self._announced(message_id, NUDGE)
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
            self._sent.pop(message_id, None)

    def finished(self, message: MessageRow, outcome: Outcome) -> None:
        """A local turn finished ``message``: hand its waiter the outcome, or, for a
        replaced message (coalescing), wake it to read its replacement's."""
        if message.status == "replaced":
            self.nudge(message.id)
        else:
            self.resolve(message.id, outcome)

    def resolve(self, message_id: str, outcome: Outcome) -> None:
        with self._lock:
            future = self._futures.pop(message_id, None)
            self._where.pop(message_id, None)
            if future is None:
                self._announced(message_id, outcome)
        if future is not None and not future.done():
            future.set_result(outcome)
