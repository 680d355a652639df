"""Observability: Prometheus metrics, OpenTelemetry spans and structured logs of real runs."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from prometheus_client import CollectorRegistry

from solid_objects import Actor, AsyncRuntime, EffectContext, Runtime
from solid_objects.errors import ConfigurationError, MessageFailed
from solid_objects.observability import (
    Instrumentation,
    OpenTelemetryTracing,
    PrometheusMetrics,
    observe,
)

from .conftest import db_now

#: Labels a series may carry: bounded by the application's code, never by its data.
ALLOWED_LABELS = {"actor_type", "operation", "source", "outcome", "effect", "event", "le"}


class Shop(Actor):
    orders: int = 0
    notified: int = 0
    ticks: int = 0

    def order(self) -> int:
        self.orders += 1
        self.emit("notify", order=self.orders, on_success="sent")
        return self.orders

    def sent(self, result: Any) -> None:
        self.notified += 1

    def remind(self) -> None:
        self.schedule(delay=timedelta(hours=1)).tick()

    def tick(self) -> None:
        self.ticks += 1

    def broken(self) -> None:
        raise RuntimeError("the supplier is down")

    def forward(self) -> None:
        self.send_to(Shop, "other").order()


#: Set by a test: the URL through which `Stalling.work` expires its own lease once.
STALL: dict[str, str] = {}


class Stalling(Actor):
    done: int = 0

    def work(self) -> None:
        url = STALL.pop("url", None)
        if url is not None:  # stall past the lease: another engine expires it meanwhile
            engine = sqlalchemy.create_engine(url)
            with engine.begin() as conn:
                conn.exec_driver_sql("UPDATE solid_actors SET lease_expires_at = 0")
            engine.dispose()
        self.done += 1


def notify(ctx: EffectContext, order: int) -> dict[str, int]:
    return {"order": order}


def shop(make_runtime: Callable[..., Runtime], **options: Any) -> Runtime:
    rt = make_runtime(**options)
    rt.register(Shop)
    rt.effect("notify")(notify)
    return rt


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    found = registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


def drain_until(rt: Runtime, done: Callable[[], bool]) -> None:
    """Drain repeatedly: a retry backoff makes work due again a little later."""
    for _ in range(500):
        rt.testing.drain()
        if done():
            return
        threading.Event().wait(0.01)
    raise AssertionError("the work did not finish")


# --- Prometheus -------------------------------------------------------------------------


def test_prometheus_counts_turns_effects_reminders_by_type_and_operation(
    make_runtime: Callable[..., Runtime],
) -> None:
    registry = CollectorRegistry()
    rt = shop(make_runtime, workers=0, max_attempts=2)
    observe(rt, PrometheusMetrics(registry=registry))
    ref = rt.ref(Shop, "s1")
    for _ in range(3):
        ref.order.send()
    # Queued and not run yet: the mailbox depth is read from the database at scrape time.
    assert value(registry, "solid_mailbox_depth", actor_type="Shop") == 3
    assert value(registry, "solid_actors_with_work", actor_type="Shop") == 1
    assert value(registry, "solid_messages_enqueued_total", **_shop("order"), source="call") == 3

    drain_until(rt, lambda: ref.snapshot()["notified"] == 3)
    assert value(registry, "solid_mailbox_depth", actor_type="Shop") == 0
    assert value(registry, "solid_turns_total", **_shop("order"), outcome="completed") == 3
    assert value(registry, "solid_turns_total", **_shop("sent"), outcome="completed") == 3
    assert value(registry, "solid_turn_duration_seconds_count", **_shop("order")) == 3
    assert value(registry, "solid_effects_total", effect="notify", outcome="done") == 3
    assert value(registry, "solid_effect_duration_seconds_count", effect="notify") == 3
    assert value(registry, "solid_messages_enqueued_total", **_shop("sent"), source="effect") == 3
    assert value(registry, "solid_commit_batch_size_count") >= 1
    assert value(registry, "solid_commit_duration_seconds_count") >= 1

    # A message that always fails: one retry, then a dead letter (max_attempts=2).
    failed = ref.broken.send()
    drain_until(rt, lambda: failed.status() == "dead")
    assert value(registry, "solid_turns_total", **_shop("broken"), outcome="retry") == 1
    assert value(registry, "solid_turns_total", **_shop("broken"), outcome="dead") == 1
    assert value(registry, "solid_dead_letters", actor_type="Shop") == 1

    # A reminder firing, and a message one actor sends another.
    ref.remind.send()
    ref.forward.send()
    rt.testing.drain()
    now = datetime.fromtimestamp(db_now(rt) / 1000, UTC) + timedelta(hours=2)
    rt.testing.run_due_reminders(now)
    assert ref.snapshot()["ticks"] == 1
    assert value(registry, "solid_reminders_fired_total", **_shop("tick")) == 1
    assert value(registry, "solid_messages_enqueued_total", **_shop("tick"), source="reminder") == 1
    assert value(registry, "solid_messages_enqueued_total", **_shop("order"), source="actor") == 1

    for family in registry.collect():
        for sample in family.samples:
            assert set(sample.labels) <= ALLOWED_LABELS, (sample.name, sample.labels)


def _shop(operation: str) -> dict[str, str]:
    return {"actor_type": "Shop", "operation": operation}


def test_a_lost_lease_is_counted_and_logged(
    make_runtime: Callable[..., Runtime], db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    rt = make_runtime(workers=0)
    rt.register(Stalling)
    observe(rt, PrometheusMetrics(registry=registry))
    ref = rt.ref(Stalling, "x")
    STALL["url"] = db_url
    ref.work.send()
    with caplog.at_level(logging.WARNING, logger="solid_objects"):
        drain_until(rt, lambda: ref.snapshot()["done"] == 1)
    labels = {"actor_type": "Stalling", "operation": "work"}
    assert value(registry, "solid_turns_total", **labels, outcome="lease_lost") == 1
    assert value(registry, "solid_turns_total", **labels, outcome="completed") == 1
    [lost] = [r for r in caplog.records if getattr(r, "solid_action", None) == "lease_lost"]
    assert (lost.actor_type, lost.operation, lost.attempt) == ("Stalling", "work", 1)  # type: ignore[attr-defined]


def test_activations_gauge_and_one_metrics_object_per_runtime(
    make_runtime: Callable[..., Runtime],
) -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry=registry, database_gauges=False)
    rt = shop(make_runtime, workers=1)
    observe(rt, metrics)
    with pytest.raises(ConfigurationError):
        observe(shop(make_runtime, workers=0), metrics)
    rt.start()
    assert rt.ref(Shop, "a").order() == 1
    assert value(registry, "solid_activations") == 1
    assert registry.get_sample_value("solid_mailbox_depth", {"actor_type": "Shop"}) is None


# --- OpenTelemetry ----------------------------------------------------------------------


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def _one(found: list[ReadableSpan], name: str) -> ReadableSpan:
    matching = [s for s in found if s.name == name]
    assert len(matching) == 1, [s.name for s in found]
    return matching[0]


def _parent_of(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def _id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


def test_a_call_traces_from_the_caller_through_the_turn_its_effect_and_callback(
    make_runtime: Callable[..., Runtime],
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    rt = shop(make_runtime, workers=2)
    observe(rt, OpenTelemetryTracing(tracer_provider=provider))
    rt.start()
    ref = rt.ref(Shop, "t1")
    with provider.get_tracer("app").start_as_current_span("POST /orders") as request:
        assert ref.order() == 1
    deadline = threading.Event()
    for _ in range(1000):
        if ref.snapshot()["notified"] == 1 and any(
            s.name == "solid.turn Shop.sent" for s in exporter.get_finished_spans()
        ):
            break
        deadline.wait(0.01)
    found = list(exporter.get_finished_spans())
    enqueue = _one(found, "solid.enqueue Shop.order")
    turn = _one(found, "solid.turn Shop.order")
    commit = next(s for s in found if s.name == "solid.commit" and _parent_of(s) == _id(turn))
    effect = _one(found, "solid.effect notify")
    callback = _one(found, "solid.turn Shop.sent")
    assert _parent_of(enqueue) == request.get_span_context().span_id
    assert _parent_of(turn) == _id(enqueue)
    assert _parent_of(effect) == _id(turn)
    assert _parent_of(callback) == _id(effect)
    trace_id = request.get_span_context().trace_id
    for span in (enqueue, turn, commit, effect, callback):
        assert span.context is not None and span.context.trace_id == trace_id
    assert turn.attributes is not None
    assert turn.attributes["solid.actor_id"] == "t1"
    assert turn.attributes["solid.outcome"] == "completed"
    assert commit.attributes is not None and commit.attributes["solid.batch_size"] >= 1


def test_failed_turns_and_reminders_are_spans_too(
    make_runtime: Callable[..., Runtime],
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    rt = shop(make_runtime, workers=0, max_attempts=2)
    observe(rt, OpenTelemetryTracing(tracer_provider=provider))
    ref = rt.ref(Shop, "t2")
    failed = ref.broken.send()
    drain_until(rt, lambda: failed.status() == "dead")
    with pytest.raises(MessageFailed):
        failed.result()
    turns = [s for s in exporter.get_finished_spans() if s.name == "solid.turn Shop.broken"]
    assert [t.attributes and t.attributes["solid.outcome"] for t in turns] == ["retry", "dead"]
    assert all(t.status.status_code is StatusCode.ERROR for t in turns)
    assert all(any(e.name == "exception" for e in t.events) for t in turns)
    enqueue = _one(list(exporter.get_finished_spans()), "solid.enqueue Shop.broken")
    assert {_parent_of(t) for t in turns} == {_id(enqueue)}  # the retry stays in the trace

    ref.remind.send()
    rt.testing.drain()
    now = datetime.fromtimestamp(db_now(rt) / 1000, UTC) + timedelta(hours=2)
    rt.testing.run_due_reminders(now)
    found = list(exporter.get_finished_spans())
    fired = _one(found, "solid.reminder Shop.tick")
    tick = _one(found, "solid.turn Shop.tick")
    assert fired.parent is None  # a timer starts a new trace
    assert _parent_of(tick) == _id(fired)

    ref.forward.send()  # one actor sends another a message: the sender's trace goes on
    rt.testing.drain()
    found = list(exporter.get_finished_spans())
    forward = _one(found, "solid.turn Shop.forward")
    [received] = [
        s for s in found if s.name == "solid.turn Shop.order" and _parent_of(s) == _id(forward)
    ]
    assert received.attributes is not None and received.attributes["solid.actor_id"] == "other"


def test_without_observe_no_span_is_made(
    make_runtime: Callable[..., Runtime],
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    rt = shop(make_runtime, workers=0)
    with provider.get_tracer("app").start_as_current_span("request"):
        rt.ref(Shop, "quiet").order.send()
    rt.testing.drain()
    assert [s.name for s in exporter.get_finished_spans()] == ["request"]
    assert trace.get_current_span() is trace.INVALID_SPAN


# --- logs and robustness ----------------------------------------------------------------


def test_dead_letters_and_retries_are_logged_with_structured_fields(
    make_runtime: Callable[..., Runtime], caplog: pytest.LogCaptureFixture
) -> None:
    rt = shop(make_runtime, workers=0, max_attempts=2)
    failed = rt.ref(Shop, "l1").broken.send()
    with caplog.at_level(logging.INFO, logger="solid_objects"):
        drain_until(rt, lambda: failed.status() == "dead")
    by_action = {getattr(r, "solid_action", None): r for r in caplog.records}
    retry, dead = by_action["retry_scheduled"], by_action["dead_letter"]
    assert retry.levelno == logging.INFO and dead.levelno == logging.WARNING
    failed_turn = by_action["turn_failed"]  # the exception itself, logged by the turn
    assert (failed_turn.actor_type, failed_turn.operation) == ("Shop", "broken")  # type: ignore[attr-defined]
    for record, attempt in ((retry, 1), (dead, 2)):
        fields = {k: getattr(record, k) for k in ("actor_type", "actor_id", "operation")}
        assert fields == {"actor_type": "Shop", "actor_id": "l1", "operation": "broken"}
        assert record.message_id == failed.id  # type: ignore[attr-defined]
        assert record.attempt == attempt  # type: ignore[attr-defined]
    assert "the supplier is down" in dead.getMessage()


class Exploding(Instrumentation):
    """An exporter that fails at every event."""

    def __getattribute__(self, name: str) -> Any:
        if name in ("bind", "__class__"):
            return object.__getattribute__(self, name)

        def explode(*_: Any) -> Any:
            raise RuntimeError("exporter down")

        return explode


def test_a_failing_instrumentation_never_fails_the_work(
    make_runtime: Callable[..., Runtime], caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    rt = shop(make_runtime, workers=0)
    observe(rt, Exploding(), PrometheusMetrics(registry=registry))
    ref = rt.ref(Shop, "e1")
    with caplog.at_level(logging.ERROR, logger="solid_objects.observability"):
        ref.order.send()
        drain_until(rt, lambda: ref.snapshot()["notified"] == 1)
    assert value(registry, "solid_turns_total", **_shop("order"), outcome="completed") == 1
    assert any(r.exc_info and "exporter down" in str(r.exc_info[1]) for r in caplog.records)


def test_traceparent_names_the_span_that_enqueued_a_message(
    make_runtime: Callable[..., Runtime],
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """What another process would need to continue the trace (once rows carry it)."""
    from solid_objects.observability.otel import _parent

    provider, exporter = spans
    tracing = OpenTelemetryTracing(tracer_provider=provider)
    rt = shop(make_runtime, workers=0)
    observe(rt, tracing)
    sent = rt.ref(Shop, "w3c").order.send()
    enqueue = _one(list(exporter.get_finished_spans()), "solid.enqueue Shop.order")
    assert enqueue.context is not None
    carried = tracing.traceparent(sent.id)
    ids = f"{enqueue.context.trace_id:032x}-{enqueue.context.span_id:016x}"
    assert carried == f"00-{ids}-{int(enqueue.context.trace_flags):02x}"
    resumed = trace.get_current_span(_parent(None, carried)).get_span_context()
    assert (resumed.trace_id, resumed.span_id) == (enqueue.context.trace_id, _id(enqueue))
    assert tracing.traceparent("no-such-message") is None


def test_an_async_call_nests_under_the_callers_span(
    db_url: str, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    """AsyncRuntime runs the enqueue in its own thread pool; the caller's context goes along."""
    provider, exporter = spans

    async def scenario() -> int:
        rt = AsyncRuntime(db_url, workers=1, poll_interval=0.05)
        await rt.install()
        rt.register(Shop)
        observe(rt, OpenTelemetryTracing(tracer_provider=provider))
        async with rt:
            with provider.get_tracer("app").start_as_current_span("GET /async") as request:
                assert await rt.ref(Shop, "async").order() == 1
        return request.get_span_context().span_id

    request_id = asyncio.run(scenario())
    found = list(exporter.get_finished_spans())
    enqueue = _one(found, "solid.enqueue Shop.order")
    assert _parent_of(enqueue) == request_id
    assert _parent_of(_one(found, "solid.turn Shop.order")) == _id(enqueue)


def test_a_missing_optional_package_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    import solid_objects.observability as observability

    monkeypatch.delitem(sys.modules, "solid_objects.observability.prometheus", raising=False)
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(ImportError, match=r"solid-objects\[metrics\]"):
        observability.PrometheusMetrics  # noqa: B018
    with pytest.raises(AttributeError):
        observability.Nothing  # noqa: B018


def test_trace_context_crosses_processes_with_the_message_and_effect_rows(
    make_runtime: Callable[..., Runtime],
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """Three runtimes stand for three processes: each has its own tracer state, so the
    only way a span's parent can reach the next is the ``traceparent`` stored in the row."""
    provider, exporter = spans
    caller = make_runtime(workers=0)
    caller.register(Shop)
    turns = make_runtime(workers=2)
    turns.register(Shop)
    effects = make_runtime(workers=1)
    effects.effect("notify")(notify)
    for rt in (caller, turns, effects):
        observe(rt, OpenTelemetryTracing(tracer_provider=provider))
    turns.start()
    effects.start()
    ref = caller.ref(Shop, "x1")
    with provider.get_tracer("app").start_as_current_span("POST /orders") as request:
        assert ref.order() == 1
    for _ in range(1000):
        if any(s.name == "solid.turn Shop.sent" for s in exporter.get_finished_spans()):
            break
        threading.Event().wait(0.01)
    found = list(exporter.get_finished_spans())
    enqueue = _one(found, "solid.enqueue Shop.order")
    turn = _one(found, "solid.turn Shop.order")
    effect = _one(found, "solid.effect notify")
    callback = _one(found, "solid.turn Shop.sent")
    assert _parent_of(turn) == _id(enqueue)
    assert _parent_of(effect) == _id(turn)
    assert _parent_of(callback) == _id(effect)
    trace_id = request.get_span_context().trace_id
    for span in (enqueue, turn, effect, callback):
        assert span.context is not None and span.context.trace_id == trace_id
