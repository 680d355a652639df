"""Work this process's code cannot run: leave it for a process whose code can.

In a rolling deploy old and new worker processes run at once. A message for an
operation the new code added, or an actor whose state the new code migrated to a
newer ``state_version``, may be claimed by an old worker. Running it would fail
(``UnknownOperation``, ``StateMigrationError``) and use up the message's attempts
until it is dead, although a new worker could run it.

So before a turn the worker asks :meth:`Capability.missing`. When its code lacks
what the message needs, :meth:`Capability.leave_or_fail` gives the lease back at
once (the start the claim counted is taken back) and passes the actor over for a
while, so a capable process claims it; only when no live process can run it (the
process registry's ``capabilities``) and the message has waited
``incapable_timeout`` does it become a dead letter, with an error naming what was
missing. The commit fence is the backstop: no code writes state at a version older
than the stored one (``store.turns``).
"""

from __future__ import annotations

import logging
import threading
import time

from ..errors import StateMigrationError, UnknownActorType, UnknownOperation
from ..options import Options
from ..registry import Registry
from ..store import MessageRow, Store
from .activation import Activation
from .turn import TurnOutcome, failure

log = logging.getLogger("solid_objects.worker")

#: Seconds this process passes over an actor it left before it may claim it again
#: (a capable process normally claims it well within this).
PASS_OVER = 5.0
#: Left actors remembered at most (the oldest are forgotten first).
_REMEMBERED = 10_000


class Capability:
    """Whether this process's code can run a message, and what to do when it cannot."""

    def __init__(self, store: Store, registry: Registry, options: Options) -> None:
        self.store = store
        self.registry = registry
        self.options = options
        self._lock = threading.Lock()
        #: actor pk -> ``time.monotonic()`` until which the poller passes it over.
        self._passed_over: dict[int, float] = {}
        #: What this process already warned it cannot run (``Cart.checkout``, ...).
        self._warned: set[str] = set()

    def missing(self, act: Activation, message: MessageRow) -> str | None:
        """What this code lacks to run ``message`` on ``act`` (``Cart.checkout``,
        ``state version 2 of Cart``), or None when it can run it."""
        if message.status in ("cancelled", "replaced"):  # finished unrun: any code can
            return None
        try:
            definition = self.registry.get(act.actor_type)
        except UnknownActorType:
            return None  # not served here: the usual setup failure says so
        if act.state_version > definition.state_version:
            return f"state version {act.state_version} of {act.actor_type}"
        if definition.operation(message.operation) is None:
            return f"{act.actor_type}.{message.operation}"
        return None

    def leave_or_fail(
        self, act: Activation, message: MessageRow, missing: str
    ) -> TurnOutcome | None:
        """Give the actor back for a capable process (None), or, when no live process
        has been able to run the message for ``incapable_timeout``, the dead-letter
        outcome to commit instead of a turn."""
        with self.store.read() as tx:
            gap = self.store.processes.missing_capability(
                tx, act.actor_type, message.operation, act.state_version, unserved=missing
            )
            now = self.store.now(tx)
        timeout = self.options.incapable_timeout
        waited_ms = now - max(message.available_at, message.created_at or 0)
        if gap is not None and timeout is not None and waited_ms >= timeout * 1000:
            return failure(self._error(act, message, gap, waited_ms), deterministic=True)
        self.store.transact(lambda tx: self.store.leases.leave(tx, act.lease))
        self.pass_over(act.pk)
        with self._lock:  # a WARNING once per thing missing, then DEBUG
            first = missing not in self._warned
            self._warned.add(missing)
        log.log(
            logging.WARNING if first else logging.DEBUG,
            "left %s %r: this code cannot run %s; %s",
            act.actor_type,
            act.actor_id,
            missing,
            "a live process can"
            if gap is None
            else f"waiting for a process that runs {gap} (up to incapable_timeout)",
            extra={
                "solid_action": "incapable_left",
                "actor_type": act.actor_type,
                "actor_id": act.actor_id,
                "missing": missing,
            },
        )
        return None

    def _error(
        self, act: Activation, message: MessageRow, gap: str, waited_ms: int
    ) -> Exception:
        waited = f"no live process runs {gap} (waited {waited_ms / 1000:.0f}s, incapable_timeout"
        if gap.startswith("state version"):
            return StateMigrationError(
                f"{waited}): every live process's code is older than the state of "
                f"{act.actor_type}({act.actor_id!r}); deploy the newer code"
            )
        return UnknownOperation(
            f"{waited}): {act.actor_type} has no operation {message.operation!r} in any "
            "live process's code (renamed or removed since the message was sent?)"
        )

    def pass_over(self, pk: int) -> None:
        with self._lock:
            if len(self._passed_over) >= _REMEMBERED:
                now = time.monotonic()
                self._passed_over = {k: v for k, v in self._passed_over.items() if v > now}
                while len(self._passed_over) >= _REMEMBERED:
                    self._passed_over.pop(next(iter(self._passed_over)))
            self._passed_over[pk] = time.monotonic() + PASS_OVER

    def passed_over(self, pk: int) -> bool:
        """Whether the poller should not claim ``pk`` now (this process just left it)."""
        until = self._passed_over.get(pk)
        if until is None:
            return False
        if until <= time.monotonic():
            with self._lock:
                self._passed_over.pop(pk, None)
            return False
        return True
