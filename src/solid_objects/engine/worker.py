"""Worker threads: execute → fenced commit, over a table of activations.

One :class:`WorkerPool` per runtime holds this process's activations (see
``activation``), a FIFO run queue of those with work, and the worker threads.
A worker takes several queued activations, runs the head message of each
outside any transaction, and commits all those turns in one transaction,
each fenced by its own lease; the commit also reads each actor's next
message, so a warm actor's next turn costs no extra round trip. An activation
runs at most ``max_turns_per_activation`` turns, and for at most
``max_activation_seconds``, before going to the back of the queue, so one busy
actor cannot starve the others. The poller (see
``poller``) feeds the queue with work from other processes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from .. import faults
from ..observability.events import Instrumentation, reminder_changes
from ..options import Options
from ..registry import NamedHandlers, Registry
from ..store import Claimed, Committed, Enqueued, MessageRow, Store, Tx
from .activation import Activation
from .activations import ActivationTable
from .batch_commit import DB_ERRORS, BatchCommit
from .capability import Capability
from .direct import DirectTurns
from .effects import EffectRunner
from .lifecycle import deactivate
from .outcomes import Outcome, Waiters
from .presence import Presence
from .turn import TurnOutcome
from .turn_commit import TurnCommit
from .turn_runner import TurnRunner

log = logging.getLogger("solid_objects.worker")

#: A process's stop, step by step (``solid-objects worker`` shows it at INFO by default).
shutdown_log = logging.getLogger("solid_objects.shutdown")

#: Activations a worker thread runs side by side, committing a turn of each at once.
_TURN_BATCH = 32
#: Turn time after which a worker commits what it has instead of running more turns,
#: so a fast call is not held back behind a batch of slow ones.
_BATCH_BUDGET = 0.005


__all__ = ["DB_ERRORS", "WorkerPool"]


class WorkerPool:
    """This process's worker threads and the turns they run; see the module docstring."""

    def __init__(
        self,
        store: Store,
        registry: Registry,
        effects: NamedHandlers,
        actions: NamedHandlers,
        options: Options,
        waiters: Waiters,
        owner: str,
    ) -> None:
        from .poller import Poller

        self.store = store
        self.registry = registry
        self.actions = actions
        self.options = options
        self.waiters = waiters
        self.owner = owner
        #: The activations held here and the run queue (``activations``).
        self.table = ActivationTable()
        #: Runs one turn of an activation (``turn_runner``).
        self.runner = TurnRunner(store, registry, actions, options)
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self.running = False
        self.effects = EffectRunner(store, registry, effects, options, owner, self.route)
        self.instrument: Instrumentation = self.effects.instrument  # see observability
        self.presence = Presence(store, options, owner, registry, self.effects.serving)
        self.turn_commit = TurnCommit(
            store,
            options,
            actions,
            awaited=waiters.has,
            traceparent=lambda key: self.instrument.traceparent(key),
        )
        self.batch_commit = BatchCommit(
            store, options, self.turn_commit, self.instrument, self.drop
        )
        self.capability = Capability(store, registry, options)
        #: A warm sync call's turn in the caller's thread (``direct``).
        self.direct = DirectTurns(self)
        self.poller = Poller(self)
        self.effects.on_idle_slot = self.poller.wake
        #: Called with (actor_type, actor_id) after a commit that wrote a broadcast row
        #: (the realtime endpoints of this process); see :meth:`broadcasted`.
        self.broadcast_listeners: list[Callable[[str, str], None]] = []

    def instrument_with(self, instrumentation: Instrumentation) -> None:
        """Send this pool's events (turns, commits, effects) to ``instrumentation``."""
        self.instrument = instrumentation
        self.effects.instrument = instrumentation
        self.batch_commit.instrument = instrumentation

    # --- lifecycle --------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def start(self) -> None:
        if self.running:
            return
        self._stopping.clear()
        self.running = True
        self.effects.start()  # first: the registry row lists the effects it runs
        try:
            self.store.transact(self.presence.register)
            with self.store.read() as tx:
                self.presence.warn_unserved(tx)
        except DB_ERRORS:
            log.exception("could not register this process; the next heartbeat will")
        for n in range(self.options.workers):
            t = threading.Thread(target=self._work, name=f"solid-worker-{n}", daemon=True)
            t.start()
            self._threads.append(t)
        self._threads.append(self.poller.start())
        self.instrument.process_event("started", self.owner)
        log.info(
            "started %d workers as %s",
            self.options.workers,
            self.owner,
            extra={"solid_action": "workers_started"},
        )

    def stop(self, timeout: float = 30.0) -> None:
        """Finish in-flight turns, then release every lease so others take over at once."""
        if not self.running:
            if self.table.held():  # leases taken by testing.drain() and never released
                self.release_all()
            return
        began = time.monotonic()
        self._stopping.set()
        try:
            self.store.transact(self.presence.draining)  # the registry says so meanwhile
        except DB_ERRORS:
            log.exception("could not mark this process draining in the registry")
        running = self.table.running()
        shutdown_log.info(
            "draining %s: finishing %d in-flight turn(s), taking no new work (up to %.0fs)",
            self.owner,
            running,
            timeout,
            extra={"solid_action": "draining", "solid_process": self.owner},
        )
        self.poller.wake()
        self.table.wake_all()
        deadline = began + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in self._threads if t.is_alive()]
        if stuck:
            log.warning(
                "threads still running a turn after %.1fs: %s; their commits will be "
                "refused once the lease is released",
                timeout,
                stuck,
            )
        else:
            shutdown_log.info(
                "turns finished in %.2fs",
                time.monotonic() - began,
                extra={"solid_action": "turns_finished", "solid_process": self.owner},
            )
        self.effects.stop(max(0.0, deadline - time.monotonic()))
        self._threads.clear()
        self.running = False
        released = self.release_all()
        self.presence.close()
        if released is not None:
            shutdown_log.info(
                "leases released: %d; %s is stopped in the registry",
                released,
                self.owner,
                extra={"solid_action": "leases_released", "solid_process": self.owner},
            )
        self.instrument.process_event("stopped", self.owner)

    def _release_and_sign_off(self, tx: Tx) -> int:
        released = self.store.leases.release_all(tx, self.owner)
        self.presence.stopped(tx)
        return released

    def release_all(self) -> int | None:
        """Give back every lease of this process, cached or orphaned: how many (None
        when the database could not be reached; they expire on their own)."""
        faults.point("shutdown.release")
        for act in self.table.clear():
            if deactivate(act):
                self.instrument.deactivated(act.actor_type, act.actor_id)
        try:
            return self.store.transact(self._release_and_sign_off)
        except DB_ERRORS:
            log.exception(
                "could not release leases; they expire in %.1fs", self.options.lease_duration
            )
            return None

    # --- work arriving ----------------------------------------------------------------

    def adopt(self, claimed: Claimed) -> None:
        """Take over an actor whose lease this process just claimed, and queue it."""
        act = Activation(
            lease=claimed.lease,
            actor_type=claimed.actor_type,
            actor_id=claimed.actor_id,
            state_json=claimed.state,
            state_version=claimed.state_version,
            done_seq=claimed.done_seq,
            head=claimed.head,
            head_attempt=max(claimed.attempt, 1),
        )
        self.table.add_queued(act)
        self.instrument.claimed(act.actor_type, act.actor_id)

    def route(self, enqueued: list[Enqueued]) -> None:
        """After a commit that enqueued messages: hand each to its local activation."""
        for item in enqueued:
            message = item.message
            if message.status != "queued" or not self.table.signal(message.actor_pk, message):
                self.poller.wake()

    def deliver(self, due: list[tuple[str, int]]) -> None:
        """Promote messages sent as ``scheduled`` and due now into their mailboxes."""
        if not due:
            return
        skipped: list[int] = []
        try:
            self.store.transact(lambda tx: self.store.promotion.promote(tx, due, skipped=skipped))
        except DB_ERRORS:
            log.exception("could not deliver %d messages now; the poller will", len(due))
        if skipped:  # a row held by another transaction: this worker does not wait for it
            self.poller.promote_later()
        faults.point("promote.committed")
        for _, pk in due:
            if not self.table.signal(pk):
                self.poller.wake()

    def broadcasted(self, actor_type: str, actor_id: str) -> None:
        """Tell this process's realtime listeners that the actor committed a broadcast.

        Listeners only take note (they read the committed rows themselves), so one that
        fails is logged and never fails the turn that already committed.
        """
        for listener in list(self.broadcast_listeners):
            try:
                listener(actor_type, actor_id)
            except Exception:
                log.exception("realtime listener failed")

    def drop(self, act: Activation, *, release: bool = False) -> None:
        """Forget an activation; with ``release``, also give its lease back if still ours."""
        self.table.forget(act)
        if release:
            try:
                self.store.transact(lambda tx: self.store.leases.release(tx, act.lease))
            except DB_ERRORS:
                log.warning(
                    "could not release %s %r; the poller will reclaim it",
                    act.actor_type,
                    act.actor_id,
                    extra={
                        "solid_action": "release_failed",
                        "actor_type": act.actor_type,
                        "actor_id": act.actor_id,
                    },
                )

    def idle_since(self, cutoff: float) -> list[Activation]:
        """Remove and return activations idle since before ``cutoff`` (monotonic)."""
        idle = self.table.remove_idle_since(cutoff)
        for a in idle:
            if deactivate(a):
                self.instrument.deactivated(a.actor_type, a.actor_id)
        return idle

    # --- running turns ----------------------------------------------------------------

    def _work(self) -> None:
        while not self._stopping.is_set():
            acts = self.table.take(_TURN_BATCH, timeout=1.0)
            if not acts:
                continue
            try:
                self.run_activations(acts)
            except BaseException:  # a worker thread must survive anything a turn does
                log.exception("worker error; releasing %d activations", len(acts))
                for act in acts:
                    self.drop(act, release=True)

    def _load_head(self, act: Activation) -> bool:
        head, check = self.table.take_head(act)
        if head is not None:
            act.head = head
            act.head_attempt = max(act.head_attempt, 1)
            return True
        if not check:
            return False  # the last commit read the mailbox; local sends arrive in the inbox
        with self.store.read() as tx:
            head = self.store.head_message(tx, act.pk, act.done_seq + 1)
        if head is None:
            return False
        if head.status != "queued":
            # Our view is stale: another worker advanced this mailbox since our lease lapsed.
            self.drop(act)
            return False
        act.head = head
        act.head_attempt = max(act.head_attempt, 1)
        return True

    def run_activations(self, acts: list[Activation]) -> int:
        """Run turns for several activations; one transaction commits a turn of each.

        Each activation runs until its mailbox is empty or it used its fair share
        (``max_turns_per_activation`` turns or ``max_activation_seconds``), then goes
        idle or to the back of the queue.
        """
        turns = dict.fromkeys(acts, 0)
        share = self.options.max_activation_seconds
        yield_at = None if share is None else time.monotonic() + share
        active = list(acts)
        total = 0
        while active:
            pending: list[tuple[Activation, MessageRow, TurnOutcome]] = []
            started = time.monotonic()
            waiting: list[Activation] = []
            for act in active:
                if pending and time.monotonic() - started > _BATCH_BUDGET:
                    waiting.append(act)  # commit what we have first
                    continue
                if act.head is None and not self._load_head(act):
                    if turns[act] == 0:
                        self._release_if_empty(act)
                    else:
                        self.table.finish(act, requeue=False)
                    continue
                allowed = self.options.max_turns_per_activation - turns[act]
                self._start(act, pending, started, 1 if _limited(act) else allowed)
            if not pending:
                break
            faults.point("turn.executed")
            # Past the budget, the turns not started here go to idle threads, if any.
            active = self.table.hand_back(waiting) if waiting else waiting
            due_now: list[tuple[str, int]] = []
            results = self._commit(pending)
            for i, ((act, message, outcome), committed) in enumerate(
                zip(pending, results, strict=True)
            ):
                if committed is None:
                    continue
                turns[act] += 1
                total += 1
                due_now.extend(committed.due_now)
                # Move past the message before handing its outcome over: a caller that
                # starts waiting meanwhile then sees it is no longer pending here
                # (``pending_here``) and reads the row instead of waiting for a handover.
                kept = self.settle(act, message, outcome, committed)
                if outcome.kind != "retry":
                    self.waiters.finished(
                        message, Outcome(outcome.kind, outcome.result, outcome.error)
                    )
                if not kept:
                    continue
                if _limited(act):
                    # A limited type's lease is one turn: the type's live leases are
                    # its turns running now, and its other actors get their turn.
                    self.drop(act, release=True)
                    self.poller.wake()  # a slot is free: claim the next one now
                    continue
                if i + 1 < len(pending) and pending[i + 1][0] is act:
                    continue  # the activation's chain goes on: decide after its last turn
                if self._stopping.is_set() and self.running:
                    self.table.finish(act, requeue=False)
                elif turns[act] >= self.options.max_turns_per_activation or (
                    yield_at is not None and time.monotonic() >= yield_at
                ):
                    self.table.finish(act, requeue=act.head is not None)
                else:
                    active.append(act)
            self.deliver(due_now)
        return total

    def _run_chain(
        self,
        act: Activation,
        pending: list[tuple[Activation, MessageRow, TurnOutcome]],
        started: float,
        allowed: int,
    ) -> None:
        """Run the head turn of ``act``, then its next queued turns while they are at
        hand, all to be committed in one transaction (a hot identity's mailbox drains
        at several turns per commit, not one).

        A chain goes on only after a completed turn with no commit action (an action
        that fails at commit turns its turn into a failure, which later turns must not
        have built on), only for messages already in the inbox, only on a first
        attempt, within the batch's time budget and the activation's fair share, and
        not once the pool is stopping (a stop finishes the turns it finds, nothing more).
        Each turn's fence expects the previous one's ``done_seq``, so the chain
        commits in order or, once the lease is lost, not at all.
        """
        assert act.head is not None
        message = act.head
        committed_state = act.state_json
        for n in range(max(allowed, 1)):
            self.instrument.turn_started(message, act.head_attempt)
            outcome = self.runner.run(act, message, committed_state)
            self.instrument.turn_executed(message, act.head_attempt, outcome)
            pending.append((act, message, outcome))
            if (
                n + 1 >= allowed
                or outcome.kind != "completed"
                or (outcome.staged is not None and outcome.staged.actions)
                or act.head_attempt != 1
                or time.monotonic() - started > _BATCH_BUDGET
                or message.seq is None
                or self._stopping.is_set()  # stopping finishes turns, starts none
            ):
                return
            following = self.table.take_following(act, message.seq)
            if following is not None and self.capability.missing(act, following):
                self.table.put_back(act, following, following.seq or message.seq + 1)
                following = None  # left as head
            if following is None:
                return
            if outcome.state is not None:
                committed_state = outcome.state
            message = following

    def settle(
        self, act: Activation, message: MessageRow, outcome: TurnOutcome, committed: Committed
    ) -> bool:
        """After a turn committed: move the activation on; False if it was dropped."""
        if outcome.kind == "completed" and outcome.staged and outcome.staged.reminders:
            changes = reminder_changes(outcome.staged)
            if changes:
                self.instrument.reminders_changed(message, changes)
        if outcome.staged is not None and outcome.staged.broadcast is not None:
            self.broadcasted(act.actor_type, act.actor_id)
        if outcome.staged and (
            outcome.staged.effects
            or outcome.staged.reminders
            or len(committed.due_now) < len(committed.outbound)
        ):
            self.poller.wake()
        if outcome.kind == "retry":
            self.drop(act)  # the lease was released with the failure
            return False
        self._advance(act, message, outcome, committed.next_head)
        return True

    def _advance(
        self,
        act: Activation,
        message: MessageRow,
        outcome: TurnOutcome,
        next_head: MessageRow | None,
    ) -> None:
        """Move the activation past a committed message."""
        if outcome.kind == "completed":
            if not act.activated:
                self.instrument.activated(act.actor_type, act.actor_id)
            act.activated = True  # on_activate's state committed with this turn
            if outcome.state is not None:
                act.state_json = outcome.state
                act.state_version = act.definition.state_version if act.definition else 1
        else:
            act.instance = None  # rebuilt from committed state before the next turn
        assert message.seq is not None
        act.done_seq = message.seq
        act.head = next_head
        act.head_attempt = 1
        self.table.drop_inbox_through(act, act.done_seq)

    def _start(
        self,
        act: Activation,
        pending: list[tuple[Activation, MessageRow, TurnOutcome]],
        started: float,
        allowed: int,
    ) -> None:
        """Run the head turn of ``act`` and its chain, unless this code cannot run it."""
        assert act.head is not None
        missing = self.capability.missing(act, act.head)
        if missing is None:
            self._run_chain(act, pending, started, allowed)
            return
        given_up = self._cannot_run(act, missing)
        if given_up is not None:
            pending.append((act, act.head, given_up))

    def _cannot_run(self, act: Activation, missing: str) -> TurnOutcome | None:
        """The head needs code this process lacks: leave the actor for a process that
        has it (None), or the dead-letter outcome when none has for too long."""
        assert act.head is not None
        try:
            given_up = self.capability.leave_or_fail(act, act.head, missing)
        except DB_ERRORS:
            log.warning("could not leave %s %r; its lease expires", act.actor_type, act.actor_id)
            given_up = None
        if given_up is None:
            self.drop(act)
        return given_up

    def _release_if_empty(self, act: Activation) -> None:
        """A claimed actor with nothing to run: keep it cached, or give it back if fresh."""
        if (act.instance is None and act.definition is None) or _limited(act):
            self.drop(act, release=True)
        else:
            self.table.finish(act, requeue=False)

    def _commit(
        self, pending: list[tuple[Activation, MessageRow, TurnOutcome]]
    ) -> list[Committed | None]:
        """Fenced commits of several turns in one transaction.

        Each turn is fenced by its own activation lease: a lost lease refuses that
        turn alone (its fence UPDATE changes no row, so it wrote nothing) and shows
        as None, and its activation is dropped; the others commit.

        ``pending`` is sorted in place (stably: a chain keeps its order) by
        ``(actor_type, actor_id)``, the one order every writer of several actor rows
        locks them in, so it cannot deadlock with a batch of enqueues.
        """
        pending.sort(key=lambda turn: (turn[0].actor_type, turn[0].actor_id))
        for act, _, outcome in pending:
            if outcome.kind == "retry" and act.head_attempt >= self.options.max_attempts:
                outcome.kind = "dead"
        # Read the next head after an activation's last turn here, unless it is known
        # (in the inbox); a turn followed by the next of its chain needs no read.
        read_next = [
            not (i + 1 < len(pending) and pending[i + 1][0] is act)
            and (message.seq is None or message.seq + 1 not in act.inbox)
            for i, (act, message, _) in enumerate(pending)
        ]
        # A commit that reads the mailbox sees every message whose enqueue committed
        # before it, so a signal received so far (an h: wake-up that came during the
        # turn) needs no head read after it; one that comes later sets the flag again.
        # A turn whose commit is refused drops its activation anyway.
        self.table.mailbox_read(
            [act for (act, _, _), read in zip(pending, read_next, strict=True) if read]
        )

        results = self.batch_commit.commit(pending, read_next)
        for (act, _, _), committed in zip(pending, results, strict=True):
            if committed is None:
                self.drop(act)
        return results

    # --- testing ----------------------------------------------------------------------

    def drain(self, *, now_ms: int | None = None, timeout: float = 60.0) -> int:
        """Run all ready work now, in the calling thread; return the number of turns.

        Time-triggered work (delayed messages, reminders, retries held back by their
        backoff) counts as due at ``now_ms``
        when given; effects run inline, so their callbacks run in the same drain.
        """
        deadline = time.monotonic() + timeout
        total = 0
        while time.monotonic() < deadline:
            progressed = self.poller.run_due(now_ms)
            progressed += self.poller.poll_once(capacity=10_000, now_ms=now_ms)
            progressed += self.effects.poll(inline=True)
            while True:
                acts = self.table.take(_TURN_BATCH, timeout=None)
                if not acts:
                    break
                turns = self.run_activations(acts)
                total += turns
                progressed += turns
            if progressed:
                continue
            if not self.table.busy():
                break
            time.sleep(0.005)
        if not self.running:
            self.release_all()
        return total


def _limited(act: Activation) -> bool:
    """Whether the actor's type limits its concurrent turns (``max_active_turns``)."""
    return act.definition is not None and act.definition.max_active_turns is not None
