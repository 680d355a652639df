"""An event for every step a user may want to watch, through the existing
hooks (``Instrumentation``), logs, metrics and spans.

One scenario per database makes every step happen once, with a recording
instrumentation, the structured logs (DEBUG) and Prometheus metrics observing it;
the table then checks, row by row, that each event reached its hook, its log record
(``solid_action``) and, where it has one, its counter. A second test checks the
OpenTelemetry messaging attributes of every span kind.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from solid_objects import Actor, EffectContext, Rejected, Runtime, query
from solid_objects.observability import (
    Instrumentation,
    OpenTelemetryTracing,
    PrometheusMetrics,
    observe,
)
from solid_objects.observability.events import ReminderChange, Turn, turn_outcome

#: Set by the scenario: the URL through which ``EventfulActor.stall`` expires its lease.
_STALL: dict[str, str] = {}
_attempts: dict[str, int] = {}
_lock = threading.Lock()


def _attempt(key: str) -> int:
    with _lock:
        _attempts[key] = _attempts.get(key, 0) + 1
        return _attempts[key]


class EventfulActor(Actor):
    ticks: int = 0
    flaky_runs: int = 0

    def plan(self) -> None:
        self.schedule(delay=timedelta(hours=1), key="later").tick()

    def replan(self) -> None:
        self.schedule(delay=timedelta(hours=2), key="later").tick()
        self.schedule(delay=0.05).tick()  # fires at once

    def unplan(self) -> None:
        self.cancel_schedule("tick", key="later")

    def tick(self) -> None:
        self.ticks += 1

    def work(self) -> None:
        self.emit("event_ok")
        self.emit("event_flaky")
        self.emit("event_doomed")

    def flaky(self) -> int:
        self.flaky_runs += 1
        if _attempt(f"flaky:{self.actor_id}") == 1:
            raise RuntimeError("once")
        return self.flaky_runs

    def doomed(self) -> None:
        raise RuntimeError("always")

    def stall(self) -> None:
        url = _STALL.pop("url", None)
        if url is not None:  # another connection expires this lease mid-turn
            engine = sqlalchemy.create_engine(url)
            with engine.begin() as conn:
                conn.exec_driver_sql(
                    "UPDATE solid_actors SET lease_expires_at = 0 WHERE actor_id = 'stall'"
                )
            engine.dispose()

    @query
    def count(self) -> int:
        return self.ticks


def event_ok(ctx: EffectContext) -> None:
    pass


def event_flaky(ctx: EffectContext) -> None:
    if ctx.attempt == 1:
        raise RuntimeError("once")


def event_doomed(ctx: EffectContext) -> None:
    raise Rejected("doomed", "never works")


class Recorder(Instrumentation):
    """Every hook call, as ``hook`` or ``hook:detail``."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self._lock = threading.Lock()

    def _add(self, name: str) -> None:
        with self._lock:
            self.seen.append(name)

    def enqueue(self, actor_type: str, operation: str, message_id: str) -> Any:
        self._add("enqueue")
        return super().enqueue(actor_type, operation, message_id)

    def claimed(self, actor_type: str, actor_id: str) -> None:
        self._add("claimed")

    def activated(self, actor_type: str, actor_id: str) -> None:
        self._add("activated")

    def deactivated(self, actor_type: str, actor_id: str) -> None:
        self._add("deactivated")

    def lease_lost(self, actor_type: str, actor_id: str) -> None:
        self._add("lease_lost")

    def turn_started(self, message: Any, attempt: int) -> None:
        self._add("turn_started")

    def committed(
        self, batch: Sequence[Turn], results: Sequence[Any] | None, started: float
    ) -> None:
        for i, (_, _, outcome) in enumerate(batch):
            result = None if results is None else results[i]
            self._add(f"turn:{turn_outcome(outcome, result, results is None)}")

    def reminders_changed(self, message: Any, changes: Sequence[ReminderChange]) -> None:
        for change in changes:
            self._add(f"reminder:{change.event}")

    def reminders_fired(self, messages: Sequence[Any]) -> None:
        self._add("reminders_fired")

    def effect_started(self, effect: Any) -> None:
        self._add("effect_started")

    def effect_finished(self, effect: Any, status: str, enqueued: list[Any]) -> list[Any]:
        self._add(f"effect:{status}")
        return enqueued

    def process_event(self, event: str, owner: str) -> None:
        self._add(f"process:{event}")


Counter = tuple[str, dict[str, str]] | None


def act(event: str) -> Counter:
    return ("solid_activation_events_total", {"actor_type": "EventfulActor", "event": event})


def turns(operation: str, outcome: str) -> Counter:
    labels = {"actor_type": "EventfulActor", "operation": operation, "outcome": outcome}
    return ("solid_turns_total", labels)


def effects(effect: str, outcome: str) -> Counter:
    return ("solid_effects_total", {"effect": effect, "outcome": outcome})


def reminders(event: str) -> Counter:
    labels = {"actor_type": "EventfulActor", "operation": "tick", "event": event}
    return ("solid_reminder_changes_total", labels)


def process(event: str) -> Counter:
    return ("solid_process_events_total", {"event": event})


ENQUEUED = {"actor_type": "EventfulActor", "operation": "plan", "source": "call"}
FIRED = {"actor_type": "EventfulActor", "operation": "tick"}

#: (step, hook record, log ``solid_action``, counter and labels or None)
EVENTS: list[tuple[str, str, str, Counter]] = [
    ("enqueue", "enqueue", "enqueue", ("solid_messages_enqueued_total", ENQUEUED)),
    ("claim", "claimed", "claimed", act("claimed")),
    ("activate", "activated", "activated", act("activated")),
    ("deactivate", "deactivated", "deactivated", act("deactivated")),
    ("turn start", "turn_started", "turn_started", None),
    ("turn finish", "turn:completed", "turn_finished", turns("plan", "completed")),
    ("turn retry", "turn:retry", "retry_scheduled", turns("flaky", "retry")),
    ("turn dead", "turn:dead", "dead_letter", turns("doomed", "dead")),
    ("commit refused by the fence", "turn:lease_lost", "lease_lost", turns("stall", "lease_lost")),
    ("effect start", "effect_started", "effect_started", None),
    ("effect finish", "effect:done", "effect_finished", effects("event_ok", "done")),
    ("effect retry", "effect:pending", "effect_failed", effects("event_flaky", "retry")),
    ("effect dead", "effect:dead", "effect_dead", effects("event_doomed", "dead")),
    ("reminder scheduled", "reminder:scheduled", "reminder_scheduled", reminders("scheduled")),
    ("reminder replaced", "reminder:replaced", "reminder_replaced", reminders("replaced")),
    ("reminder cancelled", "reminder:cancelled", "reminder_cancelled", reminders("cancelled")),
    ("reminder fired", "reminders_fired", "reminder_fired", ("solid_reminders_fired_total", FIRED)),
    ("lease lost", "lease_lost", "lease_expired", act("lease_lost")),
    ("process start", "process:started", "workers_started", process("started")),
    ("process stop", "process:stopped", "process_stopped", process("stopped")),
    ("process stale", "process:stale", "process_recovered", process("stale")),
]


def _wait(predicate: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    done = threading.Event()
    for _ in range(int(timeout / 0.02)):
        if predicate():
            return
        done.wait(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_every_step_fires_its_hook_log_record_and_counter(
    make_runtime: Callable[..., Runtime], db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    _attempts.clear()
    rt = make_runtime(workers=1, lease_duration=2.0, max_attempts=2, idle_timeout=300)
    for name, handler in (
        ("event_ok", event_ok),
        ("event_flaky", event_flaky),
        ("event_doomed", event_doomed),
    ):
        rt.effect(name)(handler)
    recorder, registry = Recorder(), CollectorRegistry()
    observe(rt, recorder, PrometheusMetrics(registry))
    store = rt.store
    with caplog.at_level(logging.DEBUG, logger="solid_objects"):
        with rt:
            ref = rt.ref(EventfulActor, "a")
            ref.plan()
            ref.replan()
            _wait(lambda: ref.count() >= 1, "the reminder to fire")
            ref.unplan()
            ref.work()
            _wait(lambda: "effect:dead" in recorder.seen, "the doomed effect")
            _wait(lambda: recorder.seen.count("effect:done") >= 2, "the flaky effect's retry")
            assert ref.flaky() == 1  # after one retry (the failed run's change was rolled back)
            with pytest.raises(Exception, match="always"):
                ref.doomed()
            _STALL["url"] = db_url
            rt.ref(EventfulActor, "stall").stall()  # refused once, then runs again
            # A lease lost between renewals: expired behind this process's back.
            store.transact(
                lambda tx: tx.run(
                    "UPDATE solid_actors SET lease_expires_at = 0 WHERE actor_id = 'a'"
                )
            )

            def plant(tx: Any) -> None:  # a process that died: its heartbeat long expired
                store.processes.register_process(
                    tx, owner="dead-1", host="gone", pid=1, version="0", actor_types="[]",
                    ttl_ms=-60_000,
                )  # fmt: skip

            store.transact(plant)
            rt.kernel.pool.poller.maintain()
        # Leaving the block stopped the runtime: deactivated and stopped fired.
    records = {getattr(r, "solid_action", None) for r in caplog.records}
    missing = []
    for step, hook, action, counter in EVENTS:
        if hook not in recorder.seen:
            missing.append(f"{step}: hook {hook}")
        if action not in records:
            missing.append(f"{step}: log {action}")
        if counter is not None and not registry.get_sample_value(*counter):
            missing.append(f"{step}: metric {counter}")
    assert missing == [], (missing, recorder.seen)


def test_spans_carry_the_opentelemetry_messaging_attributes(
    make_runtime: Callable[..., Runtime],
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    rt = make_runtime(workers=1, lease_duration=2.0)
    rt.effect("event_ok")(event_ok)
    rt.effect("event_flaky")(event_flaky)
    rt.effect("event_doomed")(event_doomed)
    observe(rt, OpenTelemetryTracing(provider))
    with rt:
        ref = rt.ref(EventfulActor, "traced")
        ref.plan.send().wait(timeout=30)
        ref.replan()
        _wait(lambda: ref.count() >= 1, "the reminder to fire")
        ref.work()
        _wait(
            lambda: any(s.name == "solid.effect event_ok" for s in exporter.get_finished_spans()),
            "the effect span",
        )
    spans = exporter.get_finished_spans()

    def first(prefix: str) -> Any:
        return next(s for s in spans if s.name.startswith(prefix))

    enqueue = first("solid.enqueue EventfulActor.plan")
    turn = next(s for s in spans if s.name == "solid.turn EventfulActor.plan")
    commit = next(
        s
        for s in spans
        if s.name == "solid.commit"
        and s.parent is not None
        and s.parent.span_id == turn.context.span_id
    )
    effect = first("solid.effect event_ok")
    reminder = first("solid.reminder EventfulActor.tick")
    expected = {
        enqueue: ("send", "EventfulActor", enqueue.attributes["solid.message_id"]),
        turn: ("process", "EventfulActor", turn.attributes["solid.message_id"]),
        commit: ("settle", "EventfulActor", turn.attributes["solid.message_id"]),
        effect: ("process", "event_ok", effect.attributes["solid.effect_id"]),
        reminder: ("create", "EventfulActor", reminder.attributes["solid.message_id"]),
    }
    for span, (operation_type, destination, message_id) in expected.items():
        attributes = span.attributes
        assert attributes["messaging.system"] == "solid_objects", span.name
        assert attributes["messaging.operation.type"] == operation_type, span.name
        assert attributes["messaging.destination.name"] == destination, span.name
        assert attributes["messaging.message.id"] == message_id, span.name
        assert any(k.startswith("solid.") for k in attributes), span.name
    assert enqueue.attributes["messaging.message.id"] == turn.attributes["messaging.message.id"]
    # The turns that changed reminders say so as span events.
    events = {e.name for s in spans if s.name.startswith("solid.turn") for e in s.events}
    assert {"solid.reminder.scheduled", "solid.reminder.replaced"} <= events
