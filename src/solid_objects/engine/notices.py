"""What a listening runtime does with each cross-process notice.

The payloads are written and parsed in ``store/notices.py``; this is the one place
they are acted on. A notice is a hint: a signed ``o:`` settles a waiting caller and
a signed ``m:`` goes to its activation's inbox, while anything else (unsigned,
forged, replayed into the wrong process, malformed) only makes this process read
what the database says: the message row, the mailbox, or the ready actors. The
dispatch never raises, so no payload can drop the listener's connection.
"""

from __future__ import annotations

import logging

from ..store.notices import (
    NoticeKey,
    outcome_id,
    parse_broadcast_hint,
    parse_done_hint,
    parse_held_hint,
    parse_message_hint,
    read_outcome,
)
from .outcomes import Outcome, Waiters
from .worker import WorkerPool

log = logging.getLogger("solid_objects.wakeup")


class NoticeDispatch:
    """Called by the wake-up listener (PostgreSQL or Redis) with each payload."""

    def __init__(self, key: NoticeKey, waiters: Waiters, pool: WorkerPool) -> None:
        self._key = key
        self._waiters = waiters
        self._pool = pool

    def __call__(self, payload: str) -> None:
        try:
            self._dispatch(payload)
        except Exception:  # never let a payload end the listener: read instead
            log.debug("wake-up payload not understood: %.80r", payload, exc_info=True)
            self._pool.poller.wake()

    def _dispatch(self, payload: str) -> None:
        kind = payload[:2]
        if kind == "d:":
            self._waiters.nudge(str(parse_done_hint(payload)))
        elif kind == "o:":
            self._outcome(payload)
        elif kind == "b:":  # a broadcast committed: realtime endpoints read it
            identity = parse_broadcast_hint(payload)
            if identity is not None:
                self._pool.broadcasted(*identity)
        elif kind == "m:":
            # A new message for an actor whose lease one process holds, carried to it.
            carried = parse_message_hint(payload, self._pool.owner, self._key)
            if carried is not None:
                pk, message = carried
                if pk is None or not self._pool.table.signal(pk, message):
                    self._pool.poller.wake()
        elif (held := parse_held_hint(payload)) is not None:
            # New work for an actor whose lease one process holds: only that one acts.
            pk, owner = held
            if owner == self._pool.owner and not self._pool.table.signal(pk):
                self._pool.poller.wake()  # not cached here: the poller decides
        else:
            self._pool.poller.wake()

    def _outcome(self, payload: str) -> None:
        finished = read_outcome(payload, self._key)
        if finished is not None and finished[1] == "replaced":
            self._waiters.nudge(finished[0])  # its waiter reads its replacement's
            return
        if finished is not None:
            # Another process committed this outcome (its MAC says the library sent it).
            message_id, status, result, error = finished
            self._waiters.resolve(message_id, Outcome(status, result, error))
            return
        named = outcome_id(payload)
        if named is not None:  # not authentic: its waiter, if any, reads the row
            self._waiters.nudge(named)
