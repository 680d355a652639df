"""OpenTelemetry spans of a runtime (``pip install solid-objects[otel]``).

Spans: ``solid.enqueue <Type>.<operation>`` (in the caller's trace),
``solid.turn <Type>.<operation>`` (the operation and its commit), with a
``solid.commit`` child for its share of the commit transaction,
``solid.effect <name>`` and ``solid.reminder <Type>.<operation>``.

Trace context follows the work: a turn is a child of the span that enqueued
its message (the caller's enqueue, the sending actor's turn, the effect whose
callback it is, the reminder firing), and an effect is a child of the turn
that emitted it. Within a process the link is a bounded map from message or
effect id to span context; across processes it is the W3C ``traceparent``
(:meth:`OpenTelemetryTracing.traceparent`) the engine stores with each
message and effect row, so a turn run by another worker process continues the
caller's trace. Reminder firings start a new trace.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextvars import Token
from typing import TYPE_CHECKING, Any

from ..extras import requires_extra

with requires_extra("otel", "solid_objects.observability.otel"):
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.context import Context
    from opentelemetry.trace import (
        NonRecordingSpan,
        Span,
        SpanContext,
        SpanKind,
        Status,
        StatusCode,
    )
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .events import Instrumentation, Turn, reminder_changes, turn_outcome

if TYPE_CHECKING:
    from ..engine.turn import TurnOutcome
    from ..store import Committed, EffectRow, Enqueued, MessageRow

_W3C = TraceContextTextMapPropagator()
_FAILED = frozenset({"dead", "lease_lost", "commit_failed"})
_EFFECT_OUTCOMES = {"done": "done", "pending": "retry", "dead": "dead"}


def messaging(operation_type: str, destination: str, message_id: str) -> dict[str, str]:
    """OpenTelemetry's messaging attributes of a span (semantic conventions): the
    system, the kind of step, the destination (the actor type, or the effect's name)
    and the message (or effect) id; the ``solid.*`` attributes go beside them."""
    return {
        "messaging.system": "solid_objects",
        "messaging.operation.type": operation_type,
        "messaging.destination.name": destination,
        "messaging.message.id": message_id,
    }


class _Recent:
    """A bounded, thread-safe map from message or effect id to the span that caused it."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._items: OrderedDict[str, SpanContext] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, key: str, value: SpanContext) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._limit:
                self._items.popitem(last=False)

    def get(self, key: str) -> SpanContext | None:
        with self._lock:
            return self._items.get(key)


def _parent(found: SpanContext | None, traceparent: str | None = None) -> Context:
    """The context to start a span in: under ``found``, else under a W3C ``traceparent``
    carried from another process, else a new trace."""
    if found is not None:
        return trace.set_span_in_context(NonRecordingSpan(found))
    if traceparent:
        return _W3C.extract({"traceparent": traceparent}, context=Context())
    return Context()


class OpenTelemetryTracing(Instrumentation):
    """Spans for enqueues, turns, commits, effects and reminder firings.

    Uses the global tracer provider unless ``tracer_provider`` is given. While an
    operation or an effect handler runs, its span is the current span, so spans
    the application creates there (an HTTP client's, a database driver's) nest
    under it. ``max_links`` bounds the in-process map that carries trace context
    from a message or effect to the span that created it.
    """

    def __init__(
        self, tracer_provider: trace.TracerProvider | None = None, *, max_links: int = 10_000
    ) -> None:
        self.tracer = trace.get_tracer("solid_objects", tracer_provider=tracer_provider)
        self._links = _Recent(max_links)
        self._local = threading.local()

    def _turns(self) -> dict[tuple[str, int], Span]:
        """Turn spans this thread started and has not committed yet."""
        turns: dict[tuple[str, int], Span] | None = getattr(self._local, "turns", None)
        if turns is None:
            turns = self._local.turns = {}
        return turns

    def traceparent(self, key: str) -> str | None:
        """The W3C ``traceparent`` of the span that created a message or effect (by id).

        The value to store with the row so that the process running it continues the
        trace; ``_parent(None, traceparent)`` turns it back into a parent context.
        """
        found = self._links.get(key)
        if found is None:
            return None
        carrier: dict[str, str] = {}
        _W3C.inject(carrier, context=_parent(found))
        return carrier.get("traceparent")

    # --- enqueue ----------------------------------------------------------------------

    def enqueue(
        self, actor_type: str, operation: str, message_id: str
    ) -> Callable[[Future[Any]], None]:
        span = self.tracer.start_span(
            f"solid.enqueue {actor_type}.{operation}",
            kind=SpanKind.PRODUCER,
            attributes={
                **messaging("send", actor_type, message_id),
                "solid.actor_type": actor_type,
                "solid.operation": operation,
                "solid.message_id": message_id,
            },
        )
        self._links.put(message_id, span.get_span_context())

        def done(future: Future[Any]) -> None:
            exc = future.exception()
            if exc is not None:
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            else:
                enqueued = future.result()
                span.set_attribute("solid.actor_id", enqueued.message.actor_id)
                if enqueued.existing:  # an idempotency key returned an earlier message
                    span.set_attribute("solid.existing_message_id", enqueued.message.id)
            span.end()

        return done

    # --- turns ------------------------------------------------------------------------

    def turn_started(self, message: MessageRow, attempt: int) -> None:
        turns = self._turns()
        stale = turns.pop((message.id, attempt), None)
        if stale is not None:
            stale.end()
        span = self.tracer.start_span(
            f"solid.turn {message.actor_type}.{message.operation}",
            context=_parent(self._origin(message), message.traceparent),
            kind=SpanKind.CONSUMER,
            attributes={
                **messaging("process", message.actor_type, message.id),
                "solid.actor_type": message.actor_type,
                "solid.actor_id": message.actor_id,
                "solid.operation": message.operation,
                "solid.message_id": message.id,
                "solid.attempt": attempt,
            },
        )
        turns[(message.id, attempt)] = span
        self._links.put(f"turn:{message.id}", span.get_span_context())
        self._local.attached = otel_context.attach(trace.set_span_in_context(span))

    def _origin(self, message: MessageRow) -> SpanContext | None:
        """The span that created ``message``: by its id, or (for an effect's callback,
        whose id is drawn inside the recording transaction) by its idempotency key."""
        found = self._links.get(message.id)
        if found is None and message.idempotency_key is not None:
            found = self._links.get(message.idempotency_key)
        return found

    def turn_executed(self, message: MessageRow, attempt: int, outcome: TurnOutcome) -> None:
        token = getattr(self._local, "attached", None)
        if token is not None:
            self._local.attached = None
            otel_context.detach(token)
        span = self._turns().get((message.id, attempt))
        if span is None:
            return
        if outcome.exception is not None:
            span.record_exception(outcome.exception, attributes=_stacktrace(outcome.traceback))
        if outcome.staged is not None:
            # Before the commit makes the effects visible to another runner thread.
            here = span.get_span_context()
            for effect in outcome.staged.effects:
                self._links.put(effect.id, here)

    def committed(
        self, batch: Sequence[Turn], results: Sequence[Committed | None] | None, started: float
    ) -> None:
        end = time.time_ns()
        start = end - int((time.perf_counter() - started) * 1e9)
        turns = self._turns()
        for i, (act, message, outcome) in enumerate(batch):
            span = turns.pop((message.id, act.head_attempt), None)
            if span is None:
                continue
            result = None if results is None else results[i]
            kind = turn_outcome(outcome, result, results is None)
            commit = self.tracer.start_span(
                "solid.commit",
                context=trace.set_span_in_context(span),
                start_time=start,
                attributes={
                    **messaging("settle", message.actor_type, message.id),
                    "solid.batch_size": len(batch),
                    "solid.outcome": kind,
                },
            )
            if kind in ("lease_lost", "commit_failed"):
                commit.set_status(Status(StatusCode.ERROR, kind))
            commit.end(end_time=end)
            span.set_attribute("solid.outcome", kind)
            if kind in _FAILED or kind == "retry":
                span.set_status(Status(StatusCode.ERROR, kind))
            if result is not None:
                for sent in result.outbound:
                    self._links.put(sent.id, span.get_span_context())
                if kind == "completed" and outcome.staged and outcome.staged.reminders:
                    for change in reminder_changes(outcome.staged):
                        span.add_event(
                            f"solid.reminder.{change.event}",
                            {"solid.operation": change.operation, "solid.reminder_key": change.key},
                            timestamp=end,
                        )
            span.end(end_time=end)

    # --- effects and reminders --------------------------------------------------------

    def effect_started(self, effect: EffectRow) -> None:
        stale = self._end_effect("abandoned")  # its outcome was never recorded
        if stale is not None:
            stale.end()
        span = self.tracer.start_span(
            f"solid.effect {effect.name}",
            context=_parent(self._links.get(effect.id), effect.traceparent),
            attributes={
                **messaging("process", effect.name, effect.id),
                "solid.effect": effect.name,
                "solid.effect_id": effect.id,
                "solid.actor_type": effect.actor_type,
                "solid.actor_id": effect.actor_id,
                "solid.message_id": effect.source_message_id,
                "solid.attempt": effect.attempts,
            },
        )
        for outcome in ("success", "failure"):  # the callback's key (see EffectRunner._record)
            self._links.put(f"effect:{effect.id}:{outcome}", span.get_span_context())
        token = otel_context.attach(trace.set_span_in_context(span))
        self._local.effect = (span, token)

    def _end_effect(self, outcome: str) -> Span | None:
        """Detach this thread's open effect span and set its outcome; the caller ends it.

        ``effect_started`` also calls it, for a span whose outcome was never recorded.
        """
        open_: tuple[Span, Token[Context]] | None = getattr(self._local, "effect", None)
        if open_ is None:
            return None
        self._local.effect = None
        span, token = open_
        otel_context.detach(token)
        span.set_attribute("solid.outcome", outcome)
        if outcome != "done":
            span.set_status(Status(StatusCode.ERROR, outcome))
        return span

    def effect_failed(self, effect: EffectRow, exc: BaseException, traceback: str | None) -> None:
        open_: tuple[Span, Token[Context]] | None = getattr(self._local, "effect", None)
        if open_ is not None:
            open_[0].record_exception(exc, attributes=_stacktrace(traceback))

    def effect_finished(
        self, effect: EffectRow, status: str, enqueued: list[Enqueued]
    ) -> list[Enqueued]:
        span = self._end_effect(_EFFECT_OUTCOMES.get(status, status))
        if span is not None:
            span.end()
        return enqueued

    def reminders_fired(self, messages: Sequence[MessageRow]) -> None:
        for m in messages:
            span = self.tracer.start_span(
                f"solid.reminder {m.actor_type}.{m.operation}",
                context=Context(),
                kind=SpanKind.PRODUCER,
                attributes={
                    **messaging("create", m.actor_type, m.id),
                    "solid.actor_type": m.actor_type,
                    "solid.actor_id": m.actor_id,
                    "solid.operation": m.operation,
                    "solid.message_id": m.id,
                },
            )
            self._links.put(m.id, span.get_span_context())
            span.end()


def _stacktrace(traceback: str | None) -> dict[str, str] | None:
    """The stored traceback as the event's ``exception.stacktrace``: the same redacted,
    bounded text the database holds, instead of the SDK's own unredacted one."""
    return None if traceback is None else {"exception.stacktrace": traceback}
