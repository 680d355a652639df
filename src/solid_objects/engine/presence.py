"""This process's row in the process registry: register, heartbeat, stop, recover peers.

The heartbeat rides in the lease-renewal transaction the poller commits every
``lease_duration / 3`` seconds, so being visible costs no extra commit. A
process whose row expired more than one lease duration ago is recovered by
whichever live process notices first: its leases and effect claims go back to
the pool at once (they would expire anyway; the fence makes this safe even if
the process is only paused).

That takes a lease and more after a crash. Faster, the database itself says
when a process is gone: each process holds a *session mark* (see
``store.sessions``) and names it in its row; a peer that finds the mark free, or
on SQLite finds the pid gone on the same host, recovers the process within
``takeover_interval``. A paused or slow process keeps its session, so its mark
stays held and only its heartbeat can expire it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Callable
from typing import Any

from ..errors import UnknownActorType
from ..options import Options
from ..registry import Registry
from ..store import Store, Tx
from ..store.sessions import host_identity, start_ticks

log = logging.getLogger("solid_objects.processes")

#: Most stale peers one maintenance round recovers.
_RECOVER_BATCH = 20

#: What to do about messages of a type no live process serves.
SERVE_ADVICE = (
    "the worker serves the actor classes its module defines or imports, so define or "
    "import the class in the module given to `solid-objects worker` (or register it "
    "with runtime.register(cls); a runtime made with actors=[...] serves only those)"
)


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
        #: Held from the first registration to :meth:`close` (servers only).
        self.mark = store.processes.session_mark(owner)
        #: Peers on this host with the same identity see each other's pids (SQLite).
        self.host_identity = host_identity() if store.dialect.family == "sqlite" else None
        #: The ``session_mark`` written in the row at its last registration.
        self._mark_published: str | None = None

    def _session_mark(self) -> str | None:
        """What to write as ``session_mark``: a lock this process holds, its host, or
        None (a pooler or Galera: the heartbeat alone tells)."""
        if self.host_identity is not None:
            started = start_ticks(os.getpid())
            return None if started is None else f"pid:{self.host_identity}:{started}"
        try:
            held = self.mark.held or self.mark.hold()
        except Exception:
            log.warning("could not take this process's session mark", exc_info=True)
            held = False
        return f"lock:{self.mark.name}" if held else None

    def register(self, tx: Tx) -> None:
        from .. import __version__

        types = self.registry.types()
        effects = self.effect_names()
        self.store.processes.register_process(
            tx,
            owner=self.owner,
            host=socket.gethostname(),
            pid=os.getpid(),
            version=__version__,
            actor_types=json.dumps(list(types)),
            effect_names=json.dumps(list(effects)),
            ttl_ms=self.ttl_ms,
            session_mark=(mark := self._session_mark()),
            capabilities=json.dumps(self.capabilities(types), sort_keys=True),
        )
        self._published = (types, effects)
        self._mark_published = mark

    def capabilities(self, types: tuple[str, ...]) -> dict[str, dict[str, Any]]:
        """What this code can run, per served type: its operations and state version
        (a rolling deploy's peers read it: ``store.processes.missing_capability``)."""
        found: dict[str, dict[str, Any]] = {}
        for actor_type in types:
            try:
                definition = self.registry.get(actor_type)
            except UnknownActorType:  # ambiguous here: not served
                continue
            found[actor_type] = {
                "operations": sorted(definition.operations),
                "state_version": definition.state_version,
            }
        return found

    def beat(self, tx: Tx) -> None:
        """Renew the row; register again if it is gone (pruned, or the tables reinstalled),
        or if this process serves other types or effects now (a class defined after the
        start)."""
        published = (self.registry.types(), self.effect_names())
        if (
            published != self._published
            or not self.mark_intact()
            or not self.store.processes.heartbeat(tx, self.owner, self.ttl_ms)
        ):
            self.register(tx)

    def mark_intact(self) -> bool:
        """Whether the mark named in the row is still this process's (a dropped
        connection frees it: peers then recover this process, which re-registers)."""
        if self._mark_published is None or not self._mark_published.startswith("lock:"):
            return True
        return self.mark.alive()

    def gone_peers(self, tx: Tx) -> list[str]:
        """Peers the database (or this host) proves gone. None while this process's own
        mark is lost: the server may have restarted, and every mark with it."""
        if self._mark_published is None or not self.mark_intact():
            return []
        return self.store.processes.gone_processes(
            tx, owner=self.owner, host_identity=self.host_identity, limit=_RECOVER_BATCH
        )

    def recover_gone(self, owners: list[str]) -> Callable[[Tx], list[tuple[str, int, int]]]:
        """A transaction body recovering ``owners`` (those not already stopped)."""

        def body(tx: Tx) -> list[tuple[str, int, int]]:
            recovered = []
            for owner in owners:
                released = self.store.processes.recover_gone_process(tx, owner)
                if released is not None:
                    recovered.append((owner, *released))
            return recovered

        return body

    @staticmethod
    def log_gone(recovered: list[tuple[str, int, int]]) -> None:
        for owner, leases, claims in recovered:
            log.warning(
                "process %s is gone (its database session ended, or its pid); released "
                "its %d leases and %d effect claims",
                owner,
                leases,
                claims,
                extra={"solid_action": "process_gone", "solid_process": owner},
            )

    def close(self) -> None:
        """Drop the session mark (after the row says stopped)."""
        self.mark.release()
        self._mark_published = None

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
        for actor_type, count in self.store.processes.unserved_type_counts(tx).items():
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
            (owner, *self.store.processes.recover_process(tx, owner, "stale"))
            for owner in self.store.processes.stale_processes(
                tx, grace_ms=self.ttl_ms, limit=_RECOVER_BATCH
            )
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
        self.store.processes.mark_draining(tx, self.owner)

    def stopped(self, tx: Tx) -> None:
        self.store.processes.mark_stopped(tx, self.owner, "drained")
