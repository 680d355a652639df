"""Automatic retention: prune finished rows every ``retention_interval`` seconds.

Only with ``Runtime(retention=...)``, and only in processes running workers. The
prune runs in a thread of its own (a large backlog takes a while and must never
delay lease renewals), one at a time per process; several processes pruning at
once is harmless, as every delete re-checks its rule.
"""

from __future__ import annotations

import logging
import random
import threading
import time

from ..options import Options
from ..store import Store
from ..store.retention import PruneKind

log = logging.getLogger("solid_objects.retention")

#: What the automatic schedule prunes (audit records are kept: prune them by hand).
AUTOMATIC_KINDS: tuple[PruneKind, ...] = ("messages", "effects", "processes")


class RetentionSchedule:
    def __init__(self, store: Store, options: Options) -> None:
        self.store = store
        self.options = options
        self._running: threading.Thread | None = None
        # Spread the first prune of many processes started together over the interval.
        self._next = time.monotonic() + options.retention_interval * random.uniform(0.1, 1.0)

    def start_if_due(self) -> bool:
        """Start a prune in the background if one is due and none is running."""
        if not self.enabled or time.monotonic() < self._next:
            return False
        if self._running is not None and self._running.is_alive():
            return False
        self._next = time.monotonic() + self.options.retention_interval * random.uniform(0.9, 1.1)
        self._running = threading.Thread(target=self.prune, name="solid-retention", daemon=True)
        self._running.start()
        return True

    @property
    def enabled(self) -> bool:
        return self.options.retention is not None or bool(self.options.retention_by_type)

    def prune(self) -> dict[str, int]:
        """Prune every automatic kind once; returns the rows deleted per kind.

        Messages of a type in ``retention_by_type`` go after that type's retention;
        with ``retention=None`` only those are pruned.
        """
        assert self.enabled
        retention = self.options.retention
        deleted: dict[str, int] = {}
        try:
            with self.store.read() as tx:
                now = self.store.now(tx)
            # With no general retention, only the messages of the listed types go.
            cutoff = 0 if retention is None else now - int(retention * 1000)
            by_type = {
                t: now - int(seconds * 1000)
                for t, seconds in (self.options.retention_by_type or {}).items()
            }
            kinds = AUTOMATIC_KINDS if retention is not None else ("messages",)
            for kind in kinds:
                deleted[kind] = self.store.retention.prune_older(kind, cutoff, by_type=by_type)
            if retention is not None:  # the realtime outbox: no subscriber reads old rows
                deleted["broadcasts"] = self.store.broadcasts.prune_broadcasts(cutoff)
        except Exception:
            log.exception(
                "automatic prune failed; it runs again in %gs", self.options.retention_interval
            )
            return deleted
        if any(deleted.values()):
            log.info(
                "pruned %s",
                ", ".join(f"{n} {kind}" for kind, n in deleted.items()),
                extra={"solid_action": "pruned", **{f"pruned_{k}": n for k, n in deleted.items()}},
            )
        return deleted
