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

from ..options import Options
from ..registry import Registry
from ..store import Store, Tx

log = logging.getLogger("solid_objects.processes")

#: Most stale peers one maintenance round recovers.
_RECOVER_BATCH = 20


class Presence:
    def __init__(self, store: Store, options: Options, owner: str, registry: Registry) -> None:
        self.store = store
        self.owner = owner
        self.ttl_ms = options.lease_ms
        self.registry = registry

    def register(self, tx: Tx) -> None:
        from .. import __version__

        self.store.register_process(
            tx,
            owner=self.owner,
            host=socket.gethostname(),
            pid=os.getpid(),
            version=__version__,
            actor_types=json.dumps(list(self.registry.types())),
            ttl_ms=self.ttl_ms,
        )

    def beat(self, tx: Tx) -> None:
        """Renew the row; register again if it is gone (pruned, or the tables reinstalled)."""
        if not self.store.heartbeat(tx, self.owner, self.ttl_ms):
            self.register(tx)

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

    def stopped(self, tx: Tx) -> None:
        self.store.mark_stopped(tx, self.owner, "drained")
