"""The events the engine reports, and the structured log lines written for them.

The engine holds one :class:`Instrumentation` per runtime and calls it at each
event: a message enqueued, an actor claimed, an activation taking effect and
ending, a turn started and executed, a batch of turns committed (with each
turn's final outcome: completed, rejected, retry, dead, lease lost (the commit
refused by the fence) or commit failed), reminders scheduled, replaced,
left unchanged, cancelled and fired, an effect started and finished (done, retry, dead), a
lease found lost at renewal, this process started and stopped, a stale peer
recovered. By default that instrumentation is :class:`LogEvents`, which only
writes log records; :func:`solid_objects.observability.observe` adds metrics
or tracing next to it. Every hook is a plain method call, so an event nobody
observes costs next to nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, NamedTuple

from ..codec import decode_json

if TYPE_CHECKING:
    from ..engine.activation import Activation
    from ..engine.turn import TurnOutcome
    from ..options import Options
    from ..runtime import Runtime
    from ..staging import Staged
    from ..store import Committed, EffectRow, Enqueued, MessageRow

#: One turn of a committed batch, as the worker holds it.
Turn = tuple["Activation", "MessageRow", "TurnOutcome"]

#: The final outcome of a turn, as reported to instrumentations and used as a label.
OUTCOMES = ("completed", "rejected", "retry", "dead", "lease_lost", "commit_failed")

#: What a committed turn did to one of its reminders (see :class:`ReminderChange`).
REMINDER_EVENTS = ("scheduled", "replaced", "unchanged", "cancelled")

#: What happened to a process: this one started or stopped, or a stale peer (no
#: heartbeat) or a gone one (its session ended) was recovered.
PROCESS_EVENTS = ("started", "stopped", "stale", "gone")

_worker_log = logging.getLogger("solid_objects.worker")
_processes_log = logging.getLogger("solid_objects.processes")
_client_log = logging.getLogger("solid_objects.client")
_effects_log = logging.getLogger("solid_objects.effects")
_poller_log = logging.getLogger("solid_objects.poller")
_instrument_log = logging.getLogger("solid_objects.observability")


def log_fields(message: MessageRow, attempt: int | None = None) -> dict[str, Any]:
    """The structured fields every log record about a message carries (``extra=``)."""
    fields: dict[str, Any] = {
        "actor_type": message.actor_type,
        "actor_id": message.actor_id,
        "operation": message.operation,
        "message_id": message.id,
    }
    if attempt is not None:
        fields["attempt"] = attempt
    return fields


def effect_fields(effect: EffectRow) -> dict[str, Any]:
    """The structured fields of a log record about an effect."""
    return {
        "actor_type": effect.actor_type,
        "actor_id": effect.actor_id,
        "effect": effect.name,
        "effect_id": effect.id,
        "message_id": effect.source_message_id,
        "attempt": effect.attempts,
    }


def turn_outcome(outcome: TurnOutcome, committed: Committed | None, batch_failed: bool) -> str:
    """The final outcome of one turn of a committed batch (one of :data:`OUTCOMES`)."""
    if batch_failed:
        return "commit_failed"
    if committed is None:
        return "lease_lost"
    return outcome.kind


class ReminderChange(NamedTuple):
    """One reminder a committed turn scheduled (new), replaced (moved), left unchanged
    (scheduled again exactly as it stood: nothing written, a firing in progress stands)
    or cancelled."""

    event: str
    operation: str
    key: str


def reminder_changes(staged: Staged) -> list[ReminderChange]:
    """The reminder changes of a committed turn, in the order it made them (a
    cancellation of a reminder that did not exist is not one)."""
    return [
        ReminderChange(event, change.operation, change.key)
        for change, event in zip(staged.reminders, staged.reminder_outcomes, strict=False)
        if event != "absent"
    ]


def _ignore(_: Future[Any]) -> None:
    pass


#: What ``Instrumentation.enqueue`` returns when nobody listens to the enqueue's future:
#: a caller that gets it back need not build a future only to pass it here.
IGNORE_ENQUEUE: Callable[[Future[Any]], None] = _ignore


class Instrumentation:
    """Receives the engine's events; every method does nothing here.

    Subclass it and override what you need, then pass an instance to
    :func:`~solid_objects.observability.observe`. Hooks run on the engine's
    threads (callers, workers, the group-commit thread on SQLite, effect
    runners, the poller): keep them short and thread-safe. An exception raised
    by a hook is logged and ignored when the hook runs under ``observe``.
    """

    def bind(self, runtime: Runtime) -> None:
        """Called once by ``observe`` with the runtime whose events this receives."""

    def enqueue(
        self, actor_type: str, operation: str, message_id: str
    ) -> Callable[[Future[Any]], None]:
        """A caller is enqueueing a message; the returned callback gets the enqueue's
        future once it committed (its result is an ``Enqueued``) or failed."""
        return _ignore

    def traceparent(self, key: str) -> str | None:
        """The W3C trace context to store with the row created for ``key``, or None.

        Keys: a message id (a caller's enqueue), ``turn:<message id>`` (the effects and
        messages a turn stages), ``effect:<effect id>:<success|failure>`` (a callback).
        Stored with the row, it lets another process continue the trace.
        """
        return None

    def claimed(self, actor_type: str, actor_id: str) -> None:
        """This process took the lease of an actor with work (an activation begins)."""

    def activated(self, actor_type: str, actor_id: str) -> None:
        """An activation took effect: its first completed turn (with what ``on_activate``
        set) committed."""

    def deactivated(self, actor_type: str, actor_id: str) -> None:
        """An activation that took effect ended (idle release, shutdown): ``on_deactivate``
        ran, and the lease is being given back."""

    def lease_lost(self, actor_type: str, actor_id: str) -> None:
        """The lease renewal found that this process no longer holds an actor's lease
        (it expired or was taken over); a commit refused by the fence is the
        ``lease_lost`` outcome of :meth:`committed` instead."""

    def turn_started(self, message: MessageRow, attempt: int) -> None:
        """A worker thread is about to run ``message`` (its ``attempt``-th start)."""

    def turn_executed(self, message: MessageRow, attempt: int, outcome: TurnOutcome) -> None:
        """The same thread ran the operation; ``outcome.kind`` is not final yet."""

    def committed(
        self, batch: Sequence[Turn], results: Sequence[Committed | None] | None, started: float
    ) -> None:
        """The commit of a batch of turns returned (``started``: ``time.perf_counter()``).

        ``results`` holds one entry per turn, ``None`` for a turn whose lease was
        lost; ``results`` itself is ``None`` when the whole transaction failed.
        """

    def reminders_changed(self, message: MessageRow, changes: Sequence[ReminderChange]) -> None:
        """The committed turn of ``message`` scheduled, replaced, left unchanged or
        cancelled reminders."""

    def effect_started(self, effect: EffectRow) -> None:
        """An effect runner thread is about to call the handler of ``effect``."""

    def effect_failed(self, effect: EffectRow, exc: BaseException, traceback: str | None) -> None:
        """The handler of ``effect`` raised ``exc`` on this thread; ``traceback`` is the
        redacted, bounded text stored with the effect (None for a ``Rejected``)."""

    def effect_finished(
        self, effect: EffectRow, status: str, enqueued: list[Enqueued]
    ) -> list[Enqueued]:
        """The same thread recorded the effect as ``done``, ``pending`` (retry later) or
        ``dead``; ``enqueued`` is its ``on_success``/``on_failure`` message, returned."""
        return enqueued

    def reminders_fired(self, messages: Sequence[MessageRow]) -> None:
        """Due reminders were fired: ``messages`` entered their actors' mailboxes."""

    def process_event(self, event: str, owner: str) -> None:
        """A process (by its lease ``owner``) ``started`` or ``stopped`` running workers
        here, or this process recovered a ``stale`` peer (no heartbeat) or a ``gone``
        one (its database session ended, or its pid)."""


class LogEvents(Instrumentation):
    """The built-in log records of the engine's events (always on).

    WARNING for a dead letter and a dead effect, INFO for a scheduled retry,
    DEBUG for every enqueue, turn, effect and reminder firing. Each record
    carries ``solid_action`` plus the fields of :func:`log_fields`.
    """

    def __init__(self, options: Options) -> None:
        self.options = options

    def enqueue(
        self, actor_type: str, operation: str, message_id: str
    ) -> Callable[[Future[Any]], None]:
        if _client_log.isEnabledFor(logging.DEBUG):
            _client_log.debug(
                "enqueue %s.%s as %s",
                actor_type,
                operation,
                message_id,
                extra={
                    "solid_action": "enqueue",
                    "actor_type": actor_type,
                    "operation": operation,
                    "message_id": message_id,
                },
            )
        return _ignore

    def claimed(self, actor_type: str, actor_id: str) -> None:
        self._actor_debug("claimed", "claimed %s %r", actor_type, actor_id)

    def activated(self, actor_type: str, actor_id: str) -> None:
        self._actor_debug("activated", "activated %s %r", actor_type, actor_id)

    def deactivated(self, actor_type: str, actor_id: str) -> None:
        self._actor_debug("deactivated", "deactivated %s %r", actor_type, actor_id)

    @staticmethod
    def _actor_debug(action: str, text: str, actor_type: str, actor_id: str) -> None:
        if _worker_log.isEnabledFor(logging.DEBUG):
            _worker_log.debug(
                text,
                actor_type,
                actor_id,
                extra={"solid_action": action, "actor_type": actor_type, "actor_id": actor_id},
            )

    def turn_started(self, message: MessageRow, attempt: int) -> None:
        if _worker_log.isEnabledFor(logging.DEBUG):
            _worker_log.debug(
                "turn %s.%s of %r started (attempt %d)",
                message.actor_type,
                message.operation,
                message.actor_id,
                attempt,
                extra={"solid_action": "turn_started", **log_fields(message, attempt)},
            )

    def effect_started(self, effect: EffectRow) -> None:
        if _effects_log.isEnabledFor(logging.DEBUG):
            _effects_log.debug(
                "effect %s %s started (attempt %d)",
                effect.name,
                effect.id,
                effect.attempts,
                extra={"solid_action": "effect_started", **effect_fields(effect)},
            )

    def lease_lost(self, actor_type: str, actor_id: str) -> None:
        _worker_log.warning(
            "the lease of %s %r was lost before its renewal (expired or taken over): "
            "its next commit here is refused",
            actor_type,
            actor_id,
            extra={
                "solid_action": "lease_expired",
                "actor_type": actor_type,
                "actor_id": actor_id,
            },
        )

    def reminders_changed(self, message: MessageRow, changes: Sequence[ReminderChange]) -> None:
        if _worker_log.isEnabledFor(logging.DEBUG):
            for change in changes:
                _worker_log.debug(
                    "reminder %s.%s (key %r) of %r %s",
                    message.actor_type,
                    change.operation,
                    change.key,
                    message.actor_id,
                    change.event,
                    extra={
                        "solid_action": f"reminder_{change.event}",
                        "reminder": change.operation,
                        "reminder_key": change.key,
                        **log_fields(message),
                    },
                )

    def process_event(self, event: str, owner: str) -> None:
        # Starting and recovering a peer are logged where they happen (INFO
        # ``workers_started``, WARNING ``process_recovered`` and ``process_gone``).
        if event == "stopped":
            _processes_log.info(
                "process %s stopped: its leases were released",
                owner,
                extra={"solid_action": "process_stopped", "solid_process": owner},
            )

    def committed(
        self, batch: Sequence[Turn], results: Sequence[Committed | None] | None, started: float
    ) -> None:
        debug = _worker_log.isEnabledFor(logging.DEBUG)
        for i, (act, message, outcome) in enumerate(batch):
            kind = turn_outcome(outcome, None if results is None else results[i], results is None)
            if kind == "dead":
                document = decode_json(outcome.error) if outcome.error else None
                reason = document.get("message", "") if isinstance(document, dict) else ""
                _worker_log.warning(
                    "dead letter: message %s to %s %r (%s) failed for good after %d attempt(s): %s",
                    message.id,
                    message.actor_type,
                    message.actor_id,
                    message.operation,
                    act.head_attempt,
                    reason,
                    extra={"solid_action": "dead_letter", **log_fields(message, act.head_attempt)},
                )
            elif kind == "retry":
                delay = self.options.retry_delay(act.head_attempt)
                _worker_log.info(
                    "retrying message %s to %s %r (%s) in %.2fs (attempt %d of %d failed)",
                    message.id,
                    message.actor_type,
                    message.actor_id,
                    message.operation,
                    delay,
                    act.head_attempt,
                    self.options.max_attempts,
                    extra={
                        "solid_action": "retry_scheduled",
                        "delay": delay,
                        **log_fields(message, act.head_attempt),
                    },
                )
            elif debug:
                _worker_log.debug(
                    "turn %s.%s of %r: %s",
                    message.actor_type,
                    message.operation,
                    message.actor_id,
                    kind,
                    extra={
                        "solid_action": "turn_finished",
                        "outcome": kind,
                        **log_fields(message, act.head_attempt),
                    },
                )

    def effect_finished(
        self, effect: EffectRow, status: str, enqueued: list[Enqueued]
    ) -> list[Enqueued]:
        if status == "dead":
            _effects_log.warning(
                "effect %s %s is dead after %d attempt(s)",
                effect.name,
                effect.id,
                effect.attempts,
                extra={"solid_action": "effect_dead", **effect_fields(effect)},
            )
        elif _effects_log.isEnabledFor(logging.DEBUG):
            _effects_log.debug(
                "effect %s %s: %s",
                effect.name,
                effect.id,
                status,
                extra={
                    "solid_action": "effect_finished",
                    "status": status,
                    **effect_fields(effect),
                },
            )
        return enqueued

    def reminders_fired(self, messages: Sequence[MessageRow]) -> None:
        if _poller_log.isEnabledFor(logging.DEBUG):
            for m in messages:
                _poller_log.debug(
                    "reminder fired: %s.%s of %r",
                    m.actor_type,
                    m.operation,
                    m.actor_id,
                    extra={"solid_action": "reminder_fired", **log_fields(m)},
                )


class Fanout(Instrumentation):
    """Several instrumentations as one; a hook that raises is logged, never propagated.

    The engine calls hooks inside its commit and effect paths: a broken exporter
    must not fail a turn or drop an effect's outcome.
    """

    def __init__(self, parts: Sequence[Instrumentation]) -> None:
        self.parts = tuple(parts)

    def _each(self, hook: str, *args: Any) -> None:
        for part in self.parts:
            try:
                getattr(part, hook)(*args)
            except Exception:
                _instrument_log.exception("instrumentation %r failed in %s", part, hook)

    def enqueue(
        self, actor_type: str, operation: str, message_id: str
    ) -> Callable[[Future[Any]], None]:
        callbacks: list[Callable[[Future[Any]], None]] = []
        for part in self.parts:
            try:
                callback = part.enqueue(actor_type, operation, message_id)
            except Exception:
                _instrument_log.exception("instrumentation %r failed in enqueue", part)
                continue
            if callback is not _ignore:
                callbacks.append(callback)
        if not callbacks:
            return _ignore

        def done(future: Future[Any]) -> None:
            for callback in callbacks:
                try:
                    callback(future)
                except Exception:
                    _instrument_log.exception("instrumentation callback %r failed", callback)

        return done

    def traceparent(self, key: str) -> str | None:
        for part in self.parts:
            try:
                found = part.traceparent(key)
            except Exception:
                _instrument_log.exception("instrumentation %r failed in traceparent", part)
                continue
            if found is not None:
                return found
        return None

    def claimed(self, actor_type: str, actor_id: str) -> None:
        self._each("claimed", actor_type, actor_id)

    def activated(self, actor_type: str, actor_id: str) -> None:
        self._each("activated", actor_type, actor_id)

    def deactivated(self, actor_type: str, actor_id: str) -> None:
        self._each("deactivated", actor_type, actor_id)

    def lease_lost(self, actor_type: str, actor_id: str) -> None:
        self._each("lease_lost", actor_type, actor_id)

    def reminders_changed(self, message: MessageRow, changes: Sequence[ReminderChange]) -> None:
        self._each("reminders_changed", message, changes)

    def process_event(self, event: str, owner: str) -> None:
        self._each("process_event", event, owner)

    def turn_started(self, message: MessageRow, attempt: int) -> None:
        self._each("turn_started", message, attempt)

    def turn_executed(self, message: MessageRow, attempt: int, outcome: TurnOutcome) -> None:
        self._each("turn_executed", message, attempt, outcome)

    def committed(
        self, batch: Sequence[Turn], results: Sequence[Committed | None] | None, started: float
    ) -> None:
        self._each("committed", batch, results, started)

    def effect_started(self, effect: EffectRow) -> None:
        self._each("effect_started", effect)

    def effect_failed(self, effect: EffectRow, exc: BaseException, traceback: str | None) -> None:
        self._each("effect_failed", effect, exc, traceback)

    def effect_finished(
        self, effect: EffectRow, status: str, enqueued: list[Enqueued]
    ) -> list[Enqueued]:
        self._each("effect_finished", effect, status, enqueued)
        return enqueued

    def reminders_fired(self, messages: Sequence[MessageRow]) -> None:
        self._each("reminders_fired", messages)
