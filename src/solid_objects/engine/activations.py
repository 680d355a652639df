"""The activation table: the actors this process holds, and the run queue of those
with work, under one lock.

Worker threads, the poller, direct turns and wake-ups all move activations between
``idle``, ``queued`` and ``running``; every such move happens here, under the table's
condition, so the pool's turn logic (``worker``) never touches the lock itself.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from ..store import MessageRow
from .activation import Activation


class ActivationTable:
    """Activations by pk and by identity, the FIFO run queue, and its condition."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._by_pk: dict[int, Activation] = {}
        #: The same activations by (actor_type, actor_id), for callers that know no pk.
        self._by_identity: dict[tuple[str, str], Activation] = {}
        self._queue: deque[Activation] = deque()
        #: Worker threads waiting for work in :meth:`take`.
        self._idle_workers = 0
        #: Idle activations put back on the run queue by :meth:`signal` (for the poller).
        self.woken = 0

    # --- reading ----------------------------------------------------------------------

    def holds(self, pk: int) -> bool:
        return pk in self._by_pk

    def held(self) -> int:
        return len(self._by_pk)

    def held_pks(self) -> list[int]:
        with self._cond:
            return list(self._by_pk)

    def all(self) -> list[Activation]:
        """Every activation held now (a copy)."""
        with self._cond:
            return list(self._by_pk.values())

    def by_identity(self, actor_type: str, actor_id: str) -> Activation | None:
        with self._cond:
            return self._by_identity.get((actor_type, actor_id))

    def holds_identity(self, actor_type: str, actor_id: str) -> bool:
        with self._cond:
            return (actor_type, actor_id) in self._by_identity

    def still_held(self, pks: list[int]) -> list[Activation]:
        """The activations of ``pks`` this process still caches (for lost leases: one
        dropped meanwhile, after a retry released it, is not a loss)."""
        if not pks:
            return []
        with self._cond:
            return [a for a in map(self._by_pk.get, pks) if a is not None]

    def turn_in_flight(self, pk: int) -> bool:
        """Whether a turn of actor ``pk`` is in flight here: even once its lease has
        expired, that turn's commit settles it (see ``BatchCommit._record_overrun``)."""
        with self._cond:
            act = self._by_pk.get(pk)
            return act is not None and act.status == "running"

    def running(self) -> int:
        with self._cond:
            return sum(1 for a in self._by_pk.values() if a.status == "running")

    def busy(self) -> bool:
        """Whether any activation is queued or running."""
        with self._cond:
            return any(a.status != "idle" for a in self._by_pk.values())

    def pending_here(self, actor_type: str, actor_id: str, message_id: str) -> bool:
        """Whether a worker of this process has the message still to run (head or inbox).

        True means its outcome will be handed to a waiter registered now; False means
        it may have finished already, or runs elsewhere: read the row.
        """
        with self._cond:
            act = self._by_identity.get((actor_type, actor_id))
            if act is None:
                return False
            if act.head is not None and act.head.id == message_id:
                return True
            return any(m.id == message_id for m in act.inbox.values())

    def queued(self) -> int:
        return len(self._queue)

    # --- moving activations -----------------------------------------------------------

    def add_queued(self, act: Activation) -> None:
        """Hold a freshly claimed activation and queue it."""
        with self._cond:
            self._by_pk[act.pk] = act
            self._by_identity[(act.actor_type, act.actor_id)] = act
            act.status = "queued"
            self._queue.append(act)
            self._cond.notify()

    def signal(self, pk: int, message: MessageRow | None = None) -> bool:
        """New work for actor ``pk``; False when this process holds none.

        ``message``, when this process enqueued it, is kept in the inbox so the worker
        need not read it back; otherwise the next turn reads the mailbox.
        """
        with self._cond:
            act = self._by_pk.get(pk)
            if act is None:
                return False
            if message is not None and message.seq is not None and message.seq > act.done_seq:
                act.inbox[message.seq] = message
            else:
                act.check_mailbox = True
            if act.status == "idle":
                act.status = "queued"
                self._queue.append(act)
                self.woken += 1
                self._cond.notify()
            elif act.status == "running":
                act.signaled = True
            return True

    def start_idle(
        self, actor_type: str, actor_id: str, may: Callable[[Activation], bool]
    ) -> Activation | None:
        """Mark the identity's idle activation running, if it has nothing to do and
        ``may(act)`` (checked under the lock) allows; None otherwise."""
        with self._cond:
            act = self._by_identity.get((actor_type, actor_id))
            if (
                act is None
                or act.status != "idle"
                or act.head is not None
                or act.inbox
                or act.check_mailbox
                or not may(act)
            ):
                return None
            act.status = "running"
            return act

    def forget(self, act: Activation) -> None:
        """Stop holding ``act`` (if it is still the one held for its actor)."""
        with self._cond:
            if self._by_pk.get(act.pk) is act:
                del self._by_pk[act.pk]
                if self._by_identity.get((act.actor_type, act.actor_id)) is act:
                    del self._by_identity[(act.actor_type, act.actor_id)]

    def hand_back(self, acts: list[Activation]) -> list[Activation]:
        """Give activations not started yet to waiting threads; return those kept."""
        with self._cond:
            if not self._idle_workers:
                return acts
            for act in reversed(acts):
                if self._by_pk.get(act.pk) is act:
                    act.status = "queued"
                    self._queue.appendleft(act)
            self._cond.notify(len(acts))
        return []

    def finish(self, act: Activation, *, requeue: bool) -> None:
        """A run of ``act`` ended: back to the queue (asked, or signalled meanwhile) or idle."""
        with self._cond:
            if self._by_pk.get(act.pk) is not act:
                return
            act.last_used = time.monotonic()
            if requeue or act.signaled:
                act.signaled = False
                act.status = "queued"
                self._queue.append(act)
                self._cond.notify()
            else:
                act.status = "idle"

    def take(self, limit: int, timeout: float | None) -> list[Activation]:
        """Up to ``limit`` queued activations, waiting up to ``timeout`` for the first.

        A thread takes only its share while other worker threads wait for work: one
        thread running several actors' turns one after the other would make a slow
        turn delay an unrelated actor. Batching is for when every thread is busy.
        """
        with self._cond:
            if not self._queue and timeout:
                self._idle_workers += 1
                try:
                    self._cond.wait(timeout)
                finally:
                    self._idle_workers -= 1
            limit = min(limit, -(-len(self._queue) // (self._idle_workers + 1)))
            taken: list[Activation] = []
            while self._queue and len(taken) < limit:
                act = self._queue.popleft()
                act.status = "running"
                taken.append(act)
            return taken

    def wake_all(self) -> None:
        """Wake every thread waiting in :meth:`take` (a stop)."""
        with self._cond:
            self._cond.notify_all()

    def remove_idle_since(self, cutoff: float) -> list[Activation]:
        """Stop holding the activations idle since before ``cutoff`` (monotonic)."""
        with self._cond:
            idle = [a for a in self._by_pk.values() if a.status == "idle" and a.last_used < cutoff]
            for a in idle:
                del self._by_pk[a.pk]
                if self._by_identity.get((a.actor_type, a.actor_id)) is a:
                    del self._by_identity[(a.actor_type, a.actor_id)]
        return idle

    def clear(self) -> list[Activation]:
        """Stop holding everything; return the activations not running a turn.

        Queued ones are among them (a signal during their last turn requeued them, and
        no thread takes work once stopping); a turn still running on a stuck thread is
        left out: its commit is refused once the lease is released.
        """
        with self._cond:
            ending = [a for a in self._by_pk.values() if a.status != "running"]
            self._by_pk.clear()
            self._by_identity.clear()
            self._queue.clear()
        return ending

    # --- an activation's inbox --------------------------------------------------------

    def take_head(self, act: Activation) -> tuple[MessageRow | None, bool]:
        """The next message from the inbox (or None), and whether the mailbox must be
        read (a signal without the message came); clears that flag."""
        with self._cond:
            head = act.inbox.pop(act.done_seq + 1, None)
            check, act.check_mailbox = act.check_mailbox, False
        return head, check

    def take_following(self, act: Activation, seq: int) -> MessageRow | None:
        """The inbox's message right after ``seq``, removed from the inbox."""
        with self._cond:
            return act.inbox.pop(seq + 1, None)

    def put_back(self, act: Activation, message: MessageRow, seq: int) -> None:
        """Return a message taken by :meth:`take_following` (it stays the next head)."""
        with self._cond:
            act.inbox[seq] = message

    def drop_inbox_through(self, act: Activation, seq: int) -> None:
        """Forget inbox messages at or before ``seq`` (already committed)."""
        with self._cond:
            for done in [s for s in act.inbox if s <= seq]:
                del act.inbox[done]

    def mailbox_read(self, acts: list[Activation]) -> None:
        """The coming commit reads these actors' mailboxes: signals so far need no read."""
        with self._cond:
            for act in acts:
                act.check_mailbox = False
