"""Worker threads: claim → execute → fenced commit, with an activation cache.

One :class:`WorkerPool` per runtime. It holds the *activations* of this
process: actors whose lease it owns, with their hydrated instance, so the
next turn of a warm actor costs one transaction (commit-and-read-next). A
poller thread finds work from other processes and due delayed messages,
renews every lease of the process in one statement, and releases idle
activations. Worker threads take activations from a FIFO run queue; an
activation runs at most ``max_turns_per_activation`` turns before going to
the back of the queue, so one busy actor cannot starve the others.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy.exc import SQLAlchemyError

from ..definition import ActorDefinition
from ..errors import DatabaseError, LeaseLost
from ..options import Options
from ..registry import Registry
from ..store import Claimed, Lease, MessageRow, Store, Tx
from .turn import Limits, TurnOutcome, execute, failure
from .waiters import Outcome, Waiters

log = logging.getLogger("solid_objects.worker")

_MIN_POLL = 0.002
#: Activations a worker thread runs side by side, committing a turn of each at once.
_TURN_BATCH = 32
DB_ERRORS = (SQLAlchemyError, DatabaseError)


@dataclass(eq=False)
class Activation:
    """An actor this process holds the lease of."""

    lease: Lease
    actor_type: str
    actor_id: str
    state_json: str | None
    state_version: int
    done_seq: int
    head: MessageRow | None
    head_attempt: int
    definition: ActorDefinition | None = None
    instance: Any = None
    status: Literal["idle", "queued", "running"] = "idle"
    signaled: bool = False
    #: Messages enqueued by this process, by sequence number: no read needed to run them.
    inbox: dict[int, MessageRow] = field(default_factory=dict)
    #: Another process may have enqueued: read the mailbox before going idle.
    check_mailbox: bool = True
    last_used: float = field(default_factory=time.monotonic)

    @property
    def pk(self) -> int:
        return self.lease.pk


class WorkerPool:
    def __init__(
        self,
        store: Store,
        registry: Registry,
        options: Options,
        waiters: Waiters,
        owner: str,
    ) -> None:
        self.store = store
        self.registry = registry
        self.options = options
        self.waiters = waiters
        self.owner = owner
        self.limits = Limits(options.max_result_bytes, options.max_state_bytes)
        self._cond = threading.Condition()
        self._activations: dict[int, Activation] = {}
        self._queue: deque[Activation] = deque()
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self.running = False

    # --- lifecycle --------------------------------------------------------------------

    def start(self) -> None:
        if self.running:
            return
        self._stopping.clear()
        self.running = True
        for n in range(self.options.workers):
            t = threading.Thread(target=self._work, name=f"solid-worker-{n}", daemon=True)
            t.start()
            self._threads.append(t)
        poller = threading.Thread(target=self._poll_loop, name="solid-poller", daemon=True)
        poller.start()
        self._threads.append(poller)
        log.info(
            "started %d workers as %s",
            self.options.workers,
            self.owner,
            extra={"solid_action": "workers_started"},
        )

    def stop(self, timeout: float = 30.0) -> None:
        """Finish in-flight turns, then release every lease so others take over at once."""
        if not self.running:
            self.release_all()
            return
        self._stopping.set()
        self._wake.set()
        with self._cond:
            self._cond.notify_all()
        deadline = time.monotonic() + timeout
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
        self._threads.clear()
        self.running = False
        self.release_all()

    def release_all(self) -> None:
        with self._cond:
            held = list(self._activations.values())
            self._activations.clear()
            self._queue.clear()
        if not held:
            return
        try:
            self.store.transact(lambda tx: self.store.release_all(tx, self.owner))
        except DB_ERRORS:
            log.exception(
                "could not release leases; they expire in %.1fs", self.options.lease_duration
            )

    # --- activation table -------------------------------------------------------------

    def holds(self, pk: int) -> bool:
        return pk in self._activations

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
        with self._cond:
            self._activations[act.pk] = act
            act.status = "queued"
            self._queue.append(act)
            self._cond.notify()

    def signal(self, pk: int, message: MessageRow | None = None) -> bool:
        """New work for an actor this process may hold; False when it holds none.

        ``message``, when this process enqueued it, is kept so the worker need not
        read it back.
        """
        with self._cond:
            act = self._activations.get(pk)
            if act is None:
                return False
            if message is not None and message.seq is not None and message.seq > act.done_seq:
                act.inbox[message.seq] = message
            else:
                act.check_mailbox = True
            if act.status == "idle":
                act.status = "queued"
                self._queue.append(act)
                self._cond.notify()
            elif act.status == "running":
                act.signaled = True
            return True

    def wake(self) -> None:
        self._wake.set()

    def _drop(self, act: Activation) -> None:
        with self._cond:
            if self._activations.get(act.pk) is act:
                del self._activations[act.pk]

    def _finish(self, act: Activation, *, requeue: bool) -> None:
        with self._cond:
            if self._activations.get(act.pk) is not act:
                return
            act.last_used = time.monotonic()
            if requeue or act.signaled:
                act.signaled = False
                act.status = "queued"
                self._queue.append(act)
                self._cond.notify()
            else:
                act.status = "idle"

    def _take(self, limit: int, timeout: float | None) -> list[Activation]:
        """Up to ``limit`` queued activations, waiting up to ``timeout`` for the first."""
        with self._cond:
            if not self._queue and timeout:
                self._cond.wait(timeout)
            taken: list[Activation] = []
            while self._queue and len(taken) < limit:
                act = self._queue.popleft()
                act.status = "running"
                taken.append(act)
            return taken

    # --- running turns ----------------------------------------------------------------

    def _work(self) -> None:
        while not self._stopping.is_set():
            acts = self._take(_TURN_BATCH, timeout=1.0)
            if not acts:
                continue
            try:
                self.run_activations(acts)
            except Exception:
                log.exception("worker error; dropping %d activations", len(acts))
                for act in acts:
                    self._drop(act)

    def _setup(self, act: Activation) -> BaseException | None:
        """Hydrate the instance; an error here is a setup failure with an attempt budget."""
        try:
            definition = self.registry.get(act.actor_type)
            state = definition.load_state(act.state_json, act.state_version)
            act.definition = definition
            act.instance = definition.instantiate(act.actor_id, state)
        except Exception as exc:
            return exc
        return None

    def _load_head(self, act: Activation) -> bool:
        with self._cond:
            head = act.inbox.pop(act.done_seq + 1, None)
            check, act.check_mailbox = act.check_mailbox, False
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
            self._drop(act)
            return False
        act.head = head
        act.head_attempt = max(act.head_attempt, 1)
        return True

    def run_activations(self, acts: list[Activation]) -> int:
        """Run turns for several activations; one transaction commits a turn of each.

        Each activation runs until its mailbox is empty or it used its fair share
        (``max_turns_per_activation``), then goes idle or to the back of the queue.
        """
        turns = dict.fromkeys(acts, 0)
        active = list(acts)
        total = 0
        while active:
            pending: list[tuple[Activation, MessageRow, TurnOutcome]] = []
            for act in active:
                if act.head is None and not self._load_head(act):
                    if turns[act] == 0:
                        self._release_if_empty(act)
                    else:
                        self._finish(act, requeue=False)
                    continue
                assert act.head is not None
                pending.append((act, act.head, self._run_turn(act, act.head)))
            if not pending:
                break
            active = []
            for (act, message, outcome), next_head in zip(
                pending, self._commit(pending), strict=True
            ):
                if next_head is False:
                    self._drop(act)
                    continue
                turns[act] += 1
                total += 1
                if outcome.kind == "retry":
                    self._drop(act)  # the lease was released with the failure
                    continue
                self.waiters.resolve(
                    message.id, Outcome(outcome.kind, outcome.result, outcome.error)
                )
                self._advance(act, message, outcome, next_head)
                if self._stopping.is_set() and self.running:
                    self._finish(act, requeue=False)
                elif turns[act] >= self.options.max_turns_per_activation:
                    self._finish(act, requeue=act.head is not None)
                else:
                    active.append(act)
        return total

    def run_activation(self, act: Activation) -> int:
        return self.run_activations([act])

    def _advance(
        self,
        act: Activation,
        message: MessageRow,
        outcome: TurnOutcome,
        next_head: MessageRow | None,
    ) -> None:
        """Move the activation past a committed message."""
        if outcome.kind == "completed":
            if outcome.state is not None:
                act.state_json = outcome.state
                act.state_version = act.definition.state_version if act.definition else 1
        else:
            act.instance = None  # rebuilt from committed state before the next turn
        assert message.seq is not None
        act.done_seq = message.seq
        act.head = next_head
        act.head_attempt = 1
        with self._cond:
            for seq in [s for s in act.inbox if s <= act.done_seq]:
                del act.inbox[seq]

    def _release_if_empty(self, act: Activation) -> None:
        """A claimed actor with nothing to run: keep it cached, or give it back if fresh."""
        if act.instance is None and act.definition is None:
            self._drop(act)
            try:
                self.store.transact(lambda tx: self.store.release(tx, act.lease))
            except DB_ERRORS:
                log.exception("could not release %s %r", act.actor_type, act.actor_id)
        else:
            self._finish(act, requeue=False)

    def _run_turn(self, act: Activation, message: MessageRow) -> TurnOutcome:
        if act.head_attempt > self.options.max_attempts:
            return failure(
                RuntimeError(
                    f"message started {act.head_attempt - 1} times without finishing: the "
                    "worker running it crashed or lost its lease each time"
                ),
                deterministic=True,
            )
        if act.instance is None:
            error = self._setup(act)
            if error is not None:
                log.warning(
                    "setup of %s %r failed: %r",
                    act.actor_type,
                    act.actor_id,
                    error,
                    extra={"solid_action": "setup_failed"},
                )
                return failure(error, deterministic=False)
        assert act.definition is not None
        return execute(act.definition, act.instance, act.state_json, message, self.limits)

    def _commit(
        self, pending: list[tuple[Activation, MessageRow, TurnOutcome]]
    ) -> list[MessageRow | Literal[False] | None]:
        """Fenced commits of several turns in one transaction.

        Each turn is fenced by its own activation lease: a lost lease refuses that
        turn alone (its fence UPDATE changes no row, so it wrote nothing) and shows
        as False; the others commit.
        """
        for act, _, outcome in pending:
            if outcome.kind == "retry" and act.head_attempt >= self.options.max_attempts:
                outcome.kind = "dead"
        read_next = [
            message.seq is None or message.seq + 1 not in act.inbox for act, message, _ in pending
        ]

        def body(tx: Tx) -> list[MessageRow | Literal[False] | None]:
            results: list[MessageRow | Literal[False] | None] = []
            for (act, message, outcome), read in zip(pending, read_next, strict=True):
                try:
                    results.append(self._commit_turn(tx, act, message, outcome, read))
                except LeaseLost as exc:
                    log.warning("%s", exc, extra={"solid_action": "lease_lost"})
                    results.append(False)
            return results

        try:
            return self.store.transact(body)
        except DB_ERRORS:
            log.exception("commit of %d turns failed; they will run again", len(pending))
            return [False] * len(pending)

    def _commit_turn(
        self, tx: Tx, act: Activation, message: MessageRow, outcome: TurnOutcome, read: bool
    ) -> MessageRow | None:
        if outcome.kind == "retry":
            delay = self.options.retry_delay(act.head_attempt)
            self.store.retry_later(
                tx,
                act.lease,
                message,
                error=outcome.error or "{}",
                attempt=act.head_attempt,
                delay_ms=int(delay * 1000),
            )
            return None
        return self.store.finish_turn(
            tx,
            act.lease,
            message,
            status=outcome.kind,
            state=outcome.state if outcome.kind == "completed" else None,
            state_version=act.definition.state_version if act.definition else 1,
            result=outcome.result,
            error=outcome.error,
            attempt=act.head_attempt,
            lease_ms=self.options.lease_ms,
            read_next=read,
        )

    # --- finding work -----------------------------------------------------------------

    def poll_once(self, *, capacity: int) -> int:
        """Signal held actors with new work and claim free ones; one read when idle."""
        found = 0
        with self._cond:
            held = len(self._activations)
        with self.store.read() as tx:
            ready = self.store.find_ready(tx, self.owner, capacity + held, self.registry.types())
        claimable = []
        for r in ready:
            if r.lease_owner == self.owner and self.signal(r.pk):
                continue
            claimable.append(r)
        claimable = claimable[:capacity]
        if claimable:

            def claim_all(tx: Tx) -> list[Claimed]:
                got = (
                    self.store.claim(
                        tx, r.pk, r.lease_generation, self.owner, self.options.lease_ms
                    )
                    for r in claimable
                )
                return [c for c in got if c is not None]

            claimed = self.store.transact(claim_all)
            for c in claimed:
                self.adopt(c)
            found += len(claimed)
        return found

    def _promote_due(self, now_ms: int | None = None) -> int:
        """Move due delayed messages into their mailboxes (``now_ms`` overrides the clock)."""
        with self.store.read() as tx:
            due = self.store.due_scheduled(tx, now=now_ms)
        if not due:
            return 0
        return self.store.transact(lambda tx: self.store.promote(tx, due))

    def _poll_loop(self) -> None:
        interval = _MIN_POLL
        renew_every = self.options.lease_duration / 3
        next_maintenance = time.monotonic() + renew_every
        while not self._stopping.is_set():
            found = 0
            try:
                with self._cond:
                    queued = len(self._queue)
                capacity = max(0, 2 * self.options.workers - queued)
                found = self.poll_once(capacity=capacity)
                if time.monotonic() >= next_maintenance:
                    found += self._maintain()
                    next_maintenance = time.monotonic() + renew_every
            except DB_ERRORS:
                log.exception("poll failed; retrying")
            except Exception:
                log.exception("poller error")
            if found:
                interval = _MIN_POLL
                continue
            interval = min(interval * 2, self.options.poll_interval)
            sleep = min(interval, next_maintenance - time.monotonic())
            try:
                with self.store.read() as tx:
                    actor_ms, scheduled_ms = self.store.next_due(tx)
                if scheduled_ms is not None and scheduled_ms <= 0 and self._promote_due():
                    interval = _MIN_POLL
                    continue
                for due_ms in (actor_ms, scheduled_ms):
                    if due_ms is not None:
                        sleep = min(sleep, due_ms / 1000)
            except DB_ERRORS:
                log.exception("could not read the next due time")
            self._wake.wait(max(sleep, 0.0))
            self._wake.clear()

    def _maintain(self) -> int:
        """Renew all leases of this process in one statement; release idle activations."""
        cutoff = time.monotonic() - self.options.idle_timeout
        with self._cond:
            if not self._activations:
                return 0
            idle = [
                a for a in self._activations.values() if a.status == "idle" and a.last_used < cutoff
            ]
            for a in idle:
                del self._activations[a.pk]

        def body(tx: Tx) -> None:
            self.store.renew(tx, self.owner, self.options.lease_ms)
            for a in idle:
                self.store.release(tx, a.lease)

        self.store.transact(body)
        return len(idle)

    # --- testing ----------------------------------------------------------------------

    def drain(self, *, now_ms: int | None = None, timeout: float = 60.0) -> int:
        """Run all ready work now, in the calling thread; return the number of turns."""
        deadline = time.monotonic() + timeout
        total = 0
        while time.monotonic() < deadline:
            progressed = self._promote_due(now_ms)
            progressed += self.poll_once(capacity=10_000)
            while True:
                acts = self._take(_TURN_BATCH, timeout=None)
                if not acts:
                    break
                turns = self.run_activations(acts)
                total += turns
                progressed += turns
            if progressed:
                continue
            with self._cond:
                busy = any(a.status != "idle" for a in self._activations.values())
            if not busy:
                break
            time.sleep(0.005)
        if not self.running:
            self.release_all()
        return total
