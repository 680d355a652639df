"""The poller: finds work this process did not enqueue itself, and keeps leases alive.

One thread per runtime. Each round it reads the actors with due work (one
indexed read), signals the ones this process holds and claims free ones
(including leases this process still owns but no longer caches, so an
activation dropped after a failed commit is never wedged). When nothing is
found it reads when time-triggered work is next due (delayed messages,
reminders, effects, retry backoffs) and sleeps until then, or at most
``poll_interval``; a local commit that schedules earlier work wakes it. Every
``lease_duration / 3`` it renews all leases of the process in one statement
and releases activations idle for ``idle_timeout``. Idle, it writes nothing.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import TYPE_CHECKING

from .. import faults
from ..errors import DatabaseError
from ..store import Claimed, MessageRow, Tx
from ..store.store import ReadyActor, new_id
from .batch_commit import DB_ERRORS
from .retention import RetentionSchedule

if TYPE_CHECKING:
    from .activation import Activation
    from .worker import WorkerPool

log = logging.getLogger("solid_objects.poller")

_MIN_POLL = 0.002


class Poller:
    def __init__(self, pool: WorkerPool) -> None:
        self.pool = pool
        self.store = pool.store
        self.options = pool.options
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.retention = RetentionSchedule(self.store, self.options)
        #: ``time.monotonic()`` of the last committed heartbeat (for the health check).
        self.last_maintained = time.monotonic()
        #: When :meth:`maintain` next looks for effects nobody handles.
        self._next_unhandled_check = 0.0
        #: A promotion passed over an actor row another transaction held
        #: (:meth:`promote_later`): the loop promotes again on its next round.
        self._promote_pending = False

    def start(self) -> threading.Thread:
        self.last_maintained = time.monotonic()
        thread = threading.Thread(target=self._loop, name="solid-poller", daemon=True)
        thread.start()
        self._thread = thread
        return thread

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wake(self) -> None:
        self._wake.set()

    def promote_later(self) -> None:
        """Due messages were left for a later promotion (their actor's row was held):
        promote on the next round, whatever else the round finds, and again on the
        rounds after (backing off to ``poll_interval``) while the row stays held."""
        self._promote_pending = True
        self._wake.set()

    # --- one round --------------------------------------------------------------------

    def poll_once(self, *, capacity: int, now_ms: int | None = None) -> int:
        """Signal held actors with new work and claim free ones; one read when idle.

        ``now_ms`` (a test clock) makes heads held back by a retry's backoff due.
        """
        pool = self.pool
        types = pool.registry.types()
        limits = pool.registry.turn_limits()
        with self.store.read() as tx:
            if limits:
                # A type at its limit is not looked at: its queued actors would fill
                # the round and hold up every other type's.
                full = set(self.store.limits.saturated(tx, limits))
                types = tuple(t for t in types if t not in full)
            ready = self.store.leases.find_ready(
                tx, pool.owner, capacity + pool.table.held(), types, now_ms=now_ms
            )
        woken = pool.table.woken
        claimable = []
        for r in ready:
            if r.lease_owner != pool.owner:
                # A turn in flight here settles it first; one this code cannot run was
                # left for a process that can.
                if not pool.table.turn_in_flight(r.pk) and not pool.capability.passed_over(r.pk):
                    claimable.append(r)
            else:
                # Ours: new work for a cached actor. One we own but do not cache is
                # being adopted right now (by the enqueue that claimed it), or was
                # dropped after a failed commit and is left to expire.
                pool.table.signal(r.pk)
        # Claimed in the order every writer of several actor rows locks them in (a
        # batch of enqueues, ``store.writer.EnqueueBatcher``): no deadlock with one.
        claimable = sorted(claimable[:capacity], key=lambda r: r.key)
        # Work another process sent to an idle actor we hold counts as found: more may
        # follow, so keep polling fast. (A signal to a running actor does not count, or
        # the poller would spin through a long turn.)
        found = pool.table.woken - woken
        if not claimable:
            return found

        # A limited type's claim locks its type first, in a transaction of its own.
        limited = [r for r in claimable if r.key[0] in limits]
        claimable = [r for r in claimable if r.key[0] not in limits]

        def claim_all(tx: Tx) -> list[Claimed]:
            got = (
                self.store.leases.claim(
                    tx, r.pk, r.lease_generation, pool.owner, self.options.lease_ms, now_ms=now_ms
                )
                for r in claimable
            )
            return [c for c in got if c is not None]

        claimed: list[Claimed] = []
        if claimable:
            try:
                claimed = self.store.transact(claim_all)
            except DB_ERRORS:
                if len(claimable) == 1:
                    raise
                claimed = self._claim_apart(claimable, now_ms)
        if limited:
            claimed += self._claim_apart(limited, now_ms, limits)
        faults.point("claim.committed")
        # Run in the order found (an urgent message's actor first), not the lock order.
        found_at = {r.pk: i for i, r in enumerate(ready)}
        for c in sorted(claimed, key=lambda c: found_at.get(c.lease.pk, len(found_at))):
            pool.adopt(c)
        return found + len(claimed)

    def _claim_apart(
        self,
        claimable: list[ReadyActor],
        now_ms: int | None,
        limits: dict[str, int] | None = None,
    ) -> list[Claimed]:
        """Claim each alone: after a batch of claims failed (one actor's row locked
        past ``busy_timeout``, a trigger...), so that one actor never holds up the
        others; and for limited types (``limits``), whose claim locks the type first."""
        pool = self.pool
        claimed: list[Claimed] = []
        for r in claimable:
            limit = None if limits is None else limits.get(r.key[0])
            claim = functools.partial(
                self.store.leases.claim,
                pk=r.pk,
                generation=r.lease_generation,
                owner=pool.owner,
                lease_ms=self.options.lease_ms,
                now_ms=now_ms,
                type_limit=None if limit is None else (r.key[0], limit),
            )
            try:
                got = self.store.transact(claim)
            except DB_ERRORS as exc:
                if isinstance(exc, DatabaseError) and exc.disconnect:
                    raise
                log.warning("could not claim actor %d: %r; the next round tries again", r.pk, exc)
                continue
            if got is not None:
                claimed.append(got)
        return claimed

    def run_due(self, now_ms: int | None = None) -> int:
        """Promote due delayed messages and fire due reminders (``now_ms``: test clock)."""
        return self.promote_due(now_ms) + self.fire_reminders(now_ms)

    def promote_due(self, now_ms: int | None = None) -> int:
        self._promote_pending = False
        with self.store.read() as tx:
            due = self.store.promotion.due_scheduled(tx, now=now_ms)
        if not due:
            return 0
        skipped: list[int] = []
        moved = self.store.transact(
            lambda tx: self.store.promotion.promote(tx, due, now=now_ms, skipped=skipped)
        )
        if skipped:
            self._promote_pending = True
        return moved

    def fire_reminders(self, now_ms: int | None = None) -> int:
        types = self.pool.registry.types()
        with self.store.read() as tx:
            due = self.store.outbox.due_reminders(tx, types, now=now_ms, limit=100)
        if not due:
            return 0

        def fire(tx: Tx) -> list[MessageRow]:
            now = self.store.now(tx) if now_ms is None else now_ms
            fired = (
                self.store.outbox.fire_reminder(tx, r, now=now, message_id=new_id()) for r in due
            )
            return [m for m in fired if m is not None]

        sent = self.store.transact(fire)
        faults.point("reminder.fired")
        self.pool.instrument.reminders_fired(sent)
        self.pool.deliver([(m.id, m.actor_pk) for m in sent])
        return len(sent)

    def maintain(self) -> int:
        """Heartbeat, renew this process's leases, release idle activations: one commit.

        Also recovers peers whose heartbeat expired (see ``engine.presence``).
        """
        pool = self.pool
        idle = pool.idle_since(time.monotonic() - self.options.idle_timeout)
        held = pool.table.held_pks()

        faults.point("lease.renew")

        lost: list[int] = []

        def body(tx: Tx) -> list[tuple[str, int, int]]:
            pool.presence.beat(tx)
            lost.clear()
            if held and self.store.leases.renew(tx, pool.owner, held, self.options.lease_ms) < len(
                held
            ):
                lost.extend(self.store.leases.lost_leases(tx, pool.owner, held))
            for a in idle:
                self.store.leases.release(tx, a.lease)
            return pool.presence.recover_stale_peers(tx)

        try:
            recovered = self.store.transact(body)
        except DB_ERRORS:
            recovered = self._maintain_apart(idle, held)
        self.last_maintained = time.monotonic()
        pool.presence.log_recovered(recovered)
        for owner, _, _ in recovered:
            pool.instrument.process_event("stale", owner)
        for act in pool.table.still_held(lost):
            pool.instrument.lease_lost(act.actor_type, act.actor_id)
        return len(idle) + len(recovered) + self._expire_unhandled()

    def recover_gone(self) -> int:
        """Take over the leases and effect claims of peers the database proves gone
        (see ``engine.presence``): how many peers were recovered."""
        presence = self.pool.presence
        with self.store.read() as tx:
            gone = presence.gone_peers(tx)
        if not gone:
            return 0
        recovered = self.store.transact(presence.recover_gone(gone))
        presence.log_gone(recovered)
        for owner, _, _ in recovered:
            self.pool.instrument.process_event("gone", owner)
        return len(recovered)

    def _expire_unhandled(self) -> int:
        """Now and then (a tenth of ``unhandled_effect_timeout``, at most every minute),
        kill the effects no live process handled for that long (``EffectRunner``)."""
        timeout = self.options.unhandled_effect_timeout
        if timeout is None or time.monotonic() < self._next_unhandled_check:
            return 0
        self._next_unhandled_check = time.monotonic() + min(timeout / 10, 60.0)
        try:
            return self.pool.effects.expire_unhandled()
        except DB_ERRORS:
            log.exception("could not look for unhandled effects; the next heartbeat will")
            return 0

    def _maintain_apart(
        self, idle: list[Activation], held: list[int]
    ) -> list[tuple[str, int, int]]:
        """The maintenance transaction failed: do its parts one by one, so that one
        actor whose row cannot be written (locked past ``busy_timeout``) costs only its
        own lease, not the renewal of every other lease of the process."""
        pool = self.pool
        self.store.transact(pool.presence.beat)  # if even this fails, the database is down
        self._renew_apart(held)
        for a in idle:
            try:
                self.store.transact(functools.partial(self.store.leases.release, lease=a.lease))
            except DB_ERRORS:
                pass  # the lease expires by itself
        try:
            return self.store.transact(pool.presence.recover_stale_peers)
        except DB_ERRORS:
            log.exception("could not recover stale peers; the next heartbeat tries again")
            return []

    def _renew_apart(self, pks: list[int]) -> None:
        """Renew ``pks``, halving a set whose renewal fails until the failing lease is
        alone: a few failed statements, not one transaction per lease."""
        if not pks:
            return
        try:
            self.store.transact(
                lambda tx: self.store.leases.renew(tx, self.pool.owner, pks, self.options.lease_ms)
            )
        except DB_ERRORS as exc:
            if len(pks) == 1:
                log.warning("could not renew the lease of actor %d: %r", pks[0], exc)
                return
            half = len(pks) // 2
            self._renew_apart(pks[:half])
            self._renew_apart(pks[half:])

    # --- the loop ---------------------------------------------------------------------

    def _loop(self) -> None:
        pool = self.pool
        interval = _MIN_POLL
        renew_every = self.options.lease_duration / 3
        next_maintenance = time.monotonic() + renew_every
        takeover_every = self.options.takeover_interval
        next_takeover = time.monotonic() + (takeover_every or 0.0)
        failures = 0
        while not pool.stopping:
            found = 0
            sleep = self.options.poll_interval
            try:
                capacity = max(0, 2 * self.options.workers - pool.table.queued())
                found = self.poll_once(capacity=capacity)
                if self._promote_pending:
                    found += self.promote_due()
                if time.monotonic() >= next_maintenance:
                    found += self.maintain()
                    next_maintenance = time.monotonic() + renew_every
                    self.retention.start_if_due()
                if takeover_every is not None and time.monotonic() >= next_takeover:
                    next_takeover = time.monotonic() + takeover_every
                    found += self.recover_gone()
                if not found:
                    found, sleep = self._due_work()
                if failures:
                    log.warning("the database answers again after %d failed polls", failures)
                    failures = 0
            except DB_ERRORS as exc:
                # Once per outage with the traceback, then quietly: a restart must not
                # flood the log, and the loop backs off instead of spinning.
                if failures == 0:
                    log.exception("poll failed; retrying with backoff")
                else:
                    log.debug("poll failed again: %r", exc)
                failures += 1
                found = 0
                next_maintenance = max(next_maintenance, time.monotonic() + interval)
            except Exception:
                log.exception("poller error")
                found = 0
                next_maintenance = max(next_maintenance, time.monotonic() + interval)
            if found:
                interval = _MIN_POLL
                continue
            interval = min(interval * 2, self.options.poll_interval)
            sleep = min(sleep, interval, next_maintenance - time.monotonic())
            if takeover_every is not None:
                sleep = min(sleep, next_takeover - time.monotonic())
            self._wake.wait(max(sleep, _MIN_POLL if failures else 0.0))
            self._wake.clear()

    def _due_work(self) -> tuple[int, float]:
        """Run time-triggered work that is due; return (found, seconds until the next)."""
        with self.store.read() as tx:
            due = self.store.next_due(tx)
        found = 0
        if due.delayed_message is not None and due.delayed_message <= 0:
            found += self.promote_due()
        if due.reminder is not None and due.reminder <= 0:
            found += self.fire_reminders()
        if due.effect is not None and due.effect <= 0:
            found += self.pool.effects.poll()
        # Work that is due but not ours to run (types or effects this process does not
        # know) must not make the loop spin: only future due times shorten the sleep.
        future = [
            ms / 1000
            for ms in (due.actor_backoff, due.delayed_message, due.reminder, due.effect)
            if ms is not None and ms > 0
        ]
        held = self.pool.effects.next_start_in()  # an effect a limit holds back
        if held is not None:
            future.append(max(held, _MIN_POLL))
        return found, min(future, default=self.options.poll_interval)
