"""Running staged effects: at least once, each with a stable id.

An effect row exists if and only if the turn that staged it committed. The
runner claims due effects (a claim is a deadline: a hung or killed handler's
effect is taken over after ``effect_timeout``), runs the handler outside any
transaction, then records the outcome only if its claim still holds, in the
same transaction as the ``on_success`` / ``on_failure`` message to the actor.
"""

from __future__ import annotations

import inspect
import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from .. import faults
from ..codec import canonical_json, encode_json
from ..errors import (
    EffectTimedOut,
    IdempotencyConflict,
    Rejected,
    UnhandledEffect,
    error_document,
)
from ..observability.events import Instrumentation, LogEvents, effect_fields
from ..options import Options
from ..registry import NamedHandlers, Registry
from ..staging import callback_key
from ..store import EffectRow, Enqueued, Store, Tx
from ..store.effect_limits import HeldBack
from ..store.rows import encode_sender
from ..store.store import new_id
from ..tracebacks import format_traceback
from .turn import run_coroutine

log = logging.getLogger("solid_objects.effects")


@dataclass(frozen=True, slots=True)
class EffectContext:
    """What an effect handler knows about the effect it runs.

    ``id`` is the same on every attempt: pass it to the receiver as the
    idempotency key and the receiver can make the effect exactly once.
    """

    id: str
    name: str
    attempt: int
    actor_type: str
    actor_id: str
    source_message_id: str
    _beat: Callable[[], None] | None = field(default=None, repr=False, compare=False)

    def heartbeat(self) -> None:
        """Report progress: renew this attempt's claim now.

        The runtime renews it on its own while the handler runs in a live process;
        call this from a long loop to learn early that the attempt is over. Raises
        :class:`~solid_objects.errors.EffectTimedOut` once the attempt ran past its
        ``max_duration`` or its claim was taken over (stop: the outcome would be
        dropped). Does nothing outside a runner (a test calling the handler).
        """
        if self._beat is not None:
            self._beat()


@dataclass(slots=True)
class _Running:
    """An attempt whose handler runs in this process: its claim is renewed until it ends."""

    effect: EffectRow
    started: float
    max_duration: float | None
    #: Why the attempt is over while its handler still runs (its claim is not renewed).
    over: str | None = None


class EffectRunner:
    def __init__(
        self,
        store: Store,
        actors: Registry,
        handlers: NamedHandlers,
        options: Options,
        owner: str,
        route: Callable[[list[Enqueued]], None],
    ) -> None:
        self.store = store
        self.actors = actors
        self.handlers = handlers
        self.options = options
        self.owner = owner
        self.route = route
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._inflight = 0
        self._stopped = True
        #: While above 0 no handler starts here (``runtime.testing.capture_effects()``).
        self.held = 0
        self.on_idle_slot: Callable[[], None] = lambda: None
        self.instrument: Instrumentation = LogEvents(options)  # see observability
        #: Attempts whose handlers run here, by effect id (see ``_renew``).
        self._running: dict[str, _Running] = {}
        self._wake = threading.Event()
        self._renewer: threading.Thread | None = None
        #: Effect names whose limits this process put in force (see ``_declare``).
        self._declared: tuple[str, ...] = ()
        #: Names held back by a limit, until when (monotonic): not polled before then.
        self._held_until: dict[str, float] = {}
        #: Why each held name waits (``rate`` or ``concurrency``): for logs and tests.
        self.held_back: dict[str, str] = {}

    def start(self) -> None:
        if self._executor is None and self.handlers.names():
            self._stopped = False
            self._executor = ThreadPoolExecutor(
                self.options.effect_workers, thread_name_prefix="solid-effect"
            )
            self._wake.clear()
            self._renewer = threading.Thread(
                target=self._renew_loop, name="solid-effect-heartbeat", daemon=True
            )
            self._renewer.start()
            try:
                self._declare(self.handlers.names())
            except Exception:  # the first poll declares them again
                log.exception("could not declare the effects' limits; the next poll will")

    def stop(self, timeout: float) -> None:
        self._stopped = True
        executor, self._executor = self._executor, None
        if executor is not None:
            # Running handlers finish (their claims renewed meanwhile); a handler that
            # hangs past shutdown stops being renewed and is taken over after effect_timeout.
            executor.shutdown(wait=timeout > 0, cancel_futures=True)
        renewer, self._renewer = self._renewer, None
        self._wake.set()
        if renewer is not None:
            renewer.join(5)

    # --- heartbeats: a running attempt's claim is renewed while its handler runs ------

    def _renew_loop(self) -> None:
        """Every third of ``effect_timeout``, renew the claims of this process's running
        attempts, so a live process's slow handler is never started elsewhere; fail an
        attempt past its ``max_duration``. A dead or stalled process renews nothing: its
        claims expire after ``effect_timeout`` of silence and another process takes over."""
        interval = max(0.02, self.options.effect_timeout / 3)
        while not self._wake.wait(interval):
            try:
                self.renew()
            except Exception:
                log.exception(
                    "renewing running effects' claims failed; retrying in %.2fs",
                    interval,
                    extra={"solid_action": "effect_heartbeat_failed"},
                )

    def renew(self) -> None:
        """One round of heartbeats (the loop's body; callable from tests)."""
        with self._lock:
            running = [r for r in self._running.values() if r.over is None]
        if not running:
            return
        now = time.monotonic()
        overdue = [
            r for r in running if r.max_duration is not None and now - r.started > r.max_duration
        ]
        for r in overdue:
            r.over = f"effect {r.effect.name!r} ran past its max_duration of {r.max_duration:g}s"
        live = [r for r in running if r.over is None]
        timeout_ms = int(self.options.effect_timeout * 1000)

        def body(tx: Tx) -> list[_Running]:
            return [
                r
                for r in live
                if not self.store.outbox.renew_effect_claim(
                    tx, r.effect.id, self.owner, r.effect.attempts, timeout_ms
                )
            ]

        lost = self.store.transact(body) if live else []
        for r in lost:
            r.over = f"the claim on effect {r.effect.id} was taken over or recorded"
        for r in overdue:
            exc = EffectTimedOut(r.over or "")
            self._failed(r.effect, exc, permanent=False)

    def _beat(self, effect_id: str) -> None:
        """``ctx.heartbeat()``: renew now, or say that the attempt is over."""
        with self._lock:
            running = self._running.get(effect_id)
        if running is None:
            return
        if running.over is None and running.max_duration is not None:
            if time.monotonic() - running.started > running.max_duration:
                self.renew()
        if running.over is None:
            ok = self.store.transact(
                lambda tx: self.store.outbox.renew_effect_claim(
                    tx,
                    effect_id,
                    self.owner,
                    running.effect.attempts,
                    int(self.options.effect_timeout * 1000),
                )
            )
            if not ok:
                running.over = f"the claim on effect {effect_id} was taken over or recorded"
        if running.over is not None:
            raise EffectTimedOut(running.over)

    def poll(self, *, inline: bool = False) -> int:
        """Claim due effects and run them (in this thread when ``inline``)."""
        names = self.handlers.names()
        if not names or self.held:
            return 0
        if self._executor is None and not inline:
            return 0
        with self._lock:
            free = self.options.effect_workers - self._inflight if not inline else 1000
        if free <= 0:
            return 0
        if self._declared != names:
            self._declare(names)
        now = time.monotonic()
        with self._lock:
            names = tuple(n for n in names if self._held_until.get(n, 0.0) <= now)
        if not names:
            return 0
        with self.store.read() as tx:
            due = self.store.outbox.due_effects(tx, names, free)
        if not due:
            return 0

        def claim(tx: Tx) -> tuple[list[EffectRow], dict[str, HeldBack]]:
            return self.store.effect_limits.claim_effects(
                tx, due, self.owner, int(self.options.effect_timeout * 1000)
            )

        claimed, held = self.store.transact(claim)
        self._hold(held)
        faults.point("effect.claimed")
        for effect in claimed:
            effect.attempts += 1
            if inline or self._executor is None:
                self._run(effect)
                continue
            with self._lock:
                self._inflight += 1
            self._executor.submit(self._run_and_release, effect)
        return len(claimed)

    def _declare(self, names: tuple[str, ...]) -> None:
        """Put this process's limits for each handled name in force (the last process
        to start decides; every claimer applies what the database holds)."""

        def declare(tx: Tx) -> None:
            for name in names:
                self.store.effect_limits.declare_effect_limits(
                    tx, name, self.handlers.flow(name), owner=self.owner
                )

        self.store.transact(declare)
        self._declared = names

    def declare_again(self) -> None:
        """Put the limits in force again before the next claim (their rows were deleted:
        ``runtime.testing.reset()``)."""
        self._declared = ()
        with self._lock:
            self._held_until.clear()
            self.held_back.clear()

    def _hold(self, held: dict[str, HeldBack]) -> None:
        """Leave names a limit holds back alone until the database says one may start.

        A concurrency wait ends at the latest when the soonest live claim expires, and
        is rechecked every ``poll_interval`` (another process's finish wakes nobody
        here) or as soon as an attempt of the name ends in this process.
        """
        now = time.monotonic()
        with self._lock:
            for name, why in held.items():
                wait = why.wait_ms / 1000
                if why.limit == "concurrency":
                    wait = min(wait, self.options.poll_interval)
                self._held_until[name] = now + wait
                self.held_back[name] = why.limit
            for name in [n for n, until in self._held_until.items() if until <= now]:
                del self._held_until[name]
                self.held_back.pop(name, None)

    def next_start_in(self) -> float | None:
        """Seconds until a name held back by a limit may start here (None: none held)."""
        with self._lock:
            if not self._held_until:
                return None
            return max(0.0, min(self._held_until.values()) - time.monotonic())

    def serving(self) -> tuple[str, ...]:
        """The effect names this process runs handlers for (published in its registry row)."""
        return self.handlers.names() if self._executor is not None else ()

    def expire_unhandled(self) -> int:
        """Kill the effects no process handled for ``unhandled_effect_timeout``.

        An effect qualifies when it has been due that long and no process that handles
        its name was live during that time (the process registry's ``effect_names``).
        Each is claimed like any effect, then recorded ``dead`` on the same path as an
        effect out of attempts, so its ``on_failure`` callback runs; a process that
        starts handling the name first wins the claim and runs it instead.
        """
        timeout = self.options.unhandled_effect_timeout
        if timeout is None:
            return 0
        age = int(timeout * 1000)
        with self.store.read() as tx:
            handled = self.store.processes.handled_effect_names(tx, within_ms=age)
            stranded = self.store.outbox.unhandled_effects(
                tx, sorted(handled), due_for_ms=age, limit=100
            )
        if not stranded:
            return 0

        def claim(tx: Tx) -> list[EffectRow]:
            return [
                e
                for e in stranded
                if self.store.outbox.claim_effect(
                    tx, e, self.owner, int(self.options.effect_timeout * 1000)
                )
            ]

        claimed = self.store.transact(claim)
        for effect in claimed:
            effect.attempts += 1
            exc = UnhandledEffect(
                f"no live process handled effect {effect.name!r} for {timeout:g}s "
                "(unhandled_effect_timeout): register a handler with @runtime.effect"
                f"({effect.name!r}) in a process that runs workers"
            )
            log.warning(
                "effect %s %s is dead: %s",
                effect.name,
                effect.id,
                exc,
                extra={"solid_action": "effect_unhandled", **effect_fields(effect)},
            )
            self._record(effect, "dead", result=None, error=canonical_json(error_document(exc)))
        return len(claimed)

    def _run_and_release(self, effect: EffectRow) -> None:
        try:
            self._run(effect)
        finally:
            with self._lock:
                self._inflight -= 1
                if self.held_back.get(effect.name) == "concurrency":
                    self._held_until.pop(effect.name, None)  # a slot of its name is free
            self.on_idle_slot()

    def _run(self, effect: EffectRow) -> None:
        ctx = EffectContext(
            effect.id,
            effect.name,
            effect.attempts,
            effect.actor_type,
            effect.actor_id,
            effect.source_message_id,
            lambda: self._beat(effect.id),
        )
        arguments = json.loads(effect.arguments)
        running = _Running(effect, time.monotonic(), self.handlers.max_duration(effect.name))
        with self._lock:
            self._running[effect.id] = running
        self.instrument.effect_started(effect)
        try:
            handler = self.handlers.get(effect.name)
            value = handler(ctx, **arguments)
            if inspect.isawaitable(value):
                value = run_coroutine(value)
            result = encode_json(
                value, what=f"result of effect {effect.name!r}", limit=self.options.max_result_bytes
            )
        except BaseException as exc:  # a handler must never take the runner down
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            if running.over is None:
                self._failed(effect, exc, permanent=isinstance(exc, Rejected))
            return
        finally:
            with self._lock:
                self._running.pop(effect.id, None)
        if running.over is not None:
            log.warning(
                "effect %s %s finished after its attempt was over (%s); outcome dropped",
                effect.name,
                effect.id,
                running.over,
                extra={"solid_action": "effect_claim_lost", **effect_fields(effect)},
            )
            return
        faults.point("effect.handled")
        self._record(effect, "done", result=result, error=None)

    def _failed(self, effect: EffectRow, exc: BaseException, *, permanent: bool) -> None:
        error = canonical_json(error_document(exc))
        log.warning(
            "effect %s %s attempt %d failed: %r",
            effect.name,
            effect.id,
            effect.attempts,
            exc,
            exc_info=None if permanent else exc,
            extra={"solid_action": "effect_failed", **effect_fields(effect)},
        )
        trace = None if permanent else format_traceback(exc)
        self.instrument.effect_failed(effect, exc, trace)
        if not permanent and effect.attempts < self.options.effect_max_attempts:
            delay = self.options.retry_delay(effect.attempts)
            self._record(
                effect,
                "pending",
                result=None,
                error=error,
                retry_in_ms=int(delay * 1000),
                traceback=trace,
            )
        else:
            self._record(effect, "dead", result=None, error=error, traceback=trace)

    def _record(
        self,
        effect: EffectRow,
        status: str,
        *,
        result: str | None,
        error: str | None,
        retry_in_ms: int | None = None,
        traceback: str | None = None,
    ) -> None:
        callback = None
        if retry_in_ms is None:
            callback = effect.on_success if status == "done" else effect.on_failure
        outcome = "success" if status == "done" else "failure"

        def body(tx: Tx) -> list[Enqueued]:
            if not self.store.outbox.finish_effect(
                tx,
                effect,
                self.owner,
                status=status,
                result=result,
                error=error,
                retry_in_ms=retry_in_ms,
            ):
                log.warning(
                    "effect %s: claim lost to another runner; outcome dropped",
                    effect.id,
                    extra={"solid_action": "effect_claim_lost", **effect_fields(effect)},
                )
                return []
            if traceback is not None or effect.attempts > 1:
                self.store.tracebacks.record_traceback(tx, "effects", effect.id, traceback)
            if callback is None:
                return []
            arguments = self._callback_arguments(effect, callback, result, error)
            key = callback_key(effect.id, outcome)
            if not self.store.lock_incarnation(tx, effect.actor_pk):
                # The incarnation that emitted the effect was destroyed: its callback is
                # one of its messages, not the first message of a new incarnation.
                self.store.insert_destroyed(
                    tx,
                    message_id=new_id(),
                    actor_pk=effect.actor_pk,
                    actor_type=effect.actor_type,
                    actor_id=effect.actor_id,
                    operation=callback,
                    arguments=arguments,
                    idempotency_key=key,
                )
                return []
            try:
                return [
                    self.store.mailbox.enqueue(
                        tx,
                        message_id=new_id(),
                        actor_type=effect.actor_type,
                        actor_id=effect.actor_id,
                        operation=callback,
                        arguments=arguments,
                        idempotency_key=key,
                        delay_ms=0,
                        claim_for=None,
                        lease_ms=0,
                        traceparent=self.instrument.traceparent(key),
                        sender=encode_sender("effect", key=effect.id),
                    )
                ]
            except IdempotencyConflict:
                # A callback for this effect was delivered before (with other arguments):
                # never let it block recording the outcome, or the effect would rerun.
                log.warning(
                    "effect %s: its %s callback was already delivered",
                    effect.id,
                    outcome,
                    extra={"solid_action": "effect_callback_delivered", **effect_fields(effect)},
                )
                return []

        try:
            enqueued = self.store.transact(body)
            faults.point("effect.recorded")
            self.route(self.instrument.effect_finished(effect, status, enqueued))
        except Exception:
            log.exception(
                "could not record effect %s; it will run again after its claim expires",
                effect.id,
                extra={"solid_action": "effect_record_failed", **effect_fields(effect)},
            )

    def _callback_arguments(
        self, effect: EffectRow, callback: str, result: str | None, error: str | None
    ) -> str:
        offered: dict[str, Any] = {
            "effect_id": effect.id,
            "arguments": json.loads(effect.arguments),
        }
        if result is not None:
            offered["result"] = json.loads(result)
        if error is not None:
            offered["error"] = json.loads(error)
        try:
            operation = self.actors.get(effect.actor_type).operation(callback)
        except LookupError:
            operation = None
        if operation is not None:
            offered = {k: v for k, v in offered.items() if k in operation.names}
        return canonical_json(offered)
