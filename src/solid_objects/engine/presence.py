"""This process's row in the process registry: register, heartbeat, stop, recover peers.

The heartbeat rides in the lease-renewal transaction the poller commits every
``lease_duration / 3`` seconds, so being visible costs no extra commit. A
process whose row expired more than one lease duration ago is recovered by
whichever live process notices first: its leases and effect claims go back to
the pool at once (they would expire anyway; the fence makes this safe even if
the process is only paused).
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Callable

from ..options import Options
from ..registry import Registry
from ..store import Store, Tx

log = logging.getLogger("solid_objects.processes")

#: Most stale peers one maintenance round recovers.
_RECOVER_BATCH = 20

#: What to do about messages of a type no live process serves.
SERVE_ADVICE = (
    "the worker serves the actor classes its module defines or imports, so define or "
    "import the class in the module given to `solid-objects worker` (or register it "
    "with runtime.register(cls); a runtime made with actors=[...] serves only those)"
)


def unhandled_effects(store: Store, tx: Tx) -> dict[str, int]:
    """Unfinished effects, by name, of the names no live process handles."""
    pending = store.pending_effect_names(tx)
    if not pending:
        return {}
    handled = store.handled_effect_names(tx)
    return {name: n for name, n in pending.items() if name not in handled}


def unserved(store: Store, tx: Tx) -> dict[str, int]:
    """Waiting messages, by actor type, of the types no live process serves."""
    backlog = store.backlog_types(tx)
    if not backlog:
        return {}
    served = {t for types in store.served_types(tx).values() for t in types}
    return {t: n for t, n in sorted(backlog.items()) if n > 0 and t not in served}


class Presence:
    def __init__(
        self,
        store: Store,
        options: Options,
        owner: str,
        registry: Registry,
        effect_names: Callable[[], tuple[str, ...]] = tuple,
    ) -> None:
        self.store = store
        self.owner = owner
        self.ttl_ms = options.lease_ms
        self.registry = registry
        self.effect_names = effect_names
        #: The types and effect names written in this process's row at its last
        #: registration.
        self._published: tuple[tuple[str, ...], tuple[str, ...]] | None = None

    def register(self, tx: Tx) -> None:
        from .. import __version__

        types = self.registry.types()
        effects = self.effect_names()
        self.store.register_process(
            tx,
            owner=self.owner,
            host=socket.gethostname(),
            pid=os.getpid(),
            version=__version__,
            actor_types=json.dumps(list(types)),
            effect_names=json.dumps(list(effects)),
            ttl_ms=self.ttl_ms,
        )
        self._published = (types, effects)

    def beat(self, tx: Tx) -> None:
        """Renew the row; register again if it is gone (pruned, or the tables reinstalled),
        or if this process serves other types or effects now (a class defined after the
        start)."""
        published = (self.registry.types(), self.effect_names())
        if published != self._published or not self.store.heartbeat(tx, self.owner, self.ttl_ms):
            self.register(tx)

    def warn_unserved(self, tx: Tx) -> None:
        """Say at start what will not run: no types here, ambiguous ones, orphaned work."""
        types = self.registry.types()
        if not types:
            log.warning(
                "this process runs workers but serves no actor types: define or import the "
                "actor classes in the module it loads (for `solid-objects worker "
                "app.actors:runtime`, in app/actors.py), or pass Runtime(..., actors=[...])",
                extra={"solid_action": "no_actor_types"},
            )
        for actor_type, names in self.registry.ambiguous().items():
            log.warning(
                "actor type %r is defined by several classes (%s), so it is not served: "
                "register the one to serve with runtime.register(cls)",
                actor_type,
                ", ".join(names),
                extra={"solid_action": "ambiguous_actor_type", "actor_type": actor_type},
            )
        for actor_type, count in unserved(self.store, tx).items():
            log.warning(
                "%d message(s) for actor type %r are waiting and no live process serves "
                "that type (this one serves %s): %s",
                count,
                actor_type,
                list(types),
                SERVE_ADVICE,
                extra={"solid_action": "unserved_actor_type", "actor_type": actor_type},
            )

    def recover_stale_peers(self, tx: Tx) -> list[tuple[str, int, int]]:
        """Recover peers whose heartbeat expired; (owner, leases, claims) of each."""
        return [
            (owner, *self.store.recover_process(tx, owner, "stale"))
            for owner in self.store.stale_processes(tx, grace_ms=self.ttl_ms, limit=_RECOVER_BATCH)
        ]

    @staticmethod
    def log_recovered(recovered: list[tuple[str, int, int]]) -> None:
        for owner, leases, claims in recovered:
            log.warning(
                "process %s stopped sending heartbeats; released its %d leases and %d "
                "effect claims",
                owner,
                leases,
                claims,
                extra={"solid_action": "process_recovered", "solid_process": owner},
            )

    def draining(self, tx: Tx) -> None:
        self.store.mark_draining(tx, self.owner)

    def stopped(self, tx: Tx) -> None:
        self.store.mark_stopped(tx, self.owner, "drained")
