#!/usr/bin/env python
"""CPU cost of the observability hooks of one call, in microseconds.

One call raises these events: the enqueue (and its completion callback), the
turn started and executed, and the commit of a batch of one turn. This runs
exactly those hooks on fixed rows, without a database, for the default
(structured logs only), with Prometheus metrics, and with the OpenTelemetry
SDK (no span processor, so the number is the SDK creating spans, not an
exporter). Compare with a call's database time, hundreds of microseconds.

    .venv/bin/python benchmarks/bench_observability.py
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

from solid_objects.engine.activation import Activation
from solid_objects.engine.turn import TurnOutcome
from solid_objects.observability.events import Fanout, Instrumentation, LogEvents
from solid_objects.observability.otel import OpenTelemetryTracing
from solid_objects.observability.prometheus import PrometheusMetrics
from solid_objects.options import Options
from solid_objects.store import Committed, Enqueued, Lease, MessageRow

MESSAGE = MessageRow("0" * 32, 1, "Counter", "a", 1, "add", "{}", None, "queued", 0, None, None, 0)
ACTIVATION = Activation(Lease(1, "owner", "token", 1), "Counter", "a", None, 1, 0, None, 1)
OUTCOME = TurnOutcome("completed", result="1")
RESULTS = [Committed(None, [], [])]


def per_call(instrument: Instrumentation, calls: int) -> float:
    """Microseconds of hooks per call, over ``calls`` calls."""
    enqueued: Future[Any] = Future()
    enqueued.set_result(Enqueued(MESSAGE, existing=False, claimed=None))
    started = time.perf_counter()
    for _ in range(calls):
        instrument.enqueue("Counter", "add", MESSAGE.id)(enqueued)
        instrument.turn_started(MESSAGE, 1)
        instrument.turn_executed(MESSAGE, 1, OUTCOME)
        instrument.committed([(ACTIVATION, MESSAGE, OUTCOME)], RESULTS, time.perf_counter())
    return (time.perf_counter() - started) / calls * 1e6


def main() -> None:
    options = Options()
    setups: list[tuple[str, Instrumentation]] = [
        ("default (logs only)", LogEvents(options)),
        (
            "+ PrometheusMetrics",
            Fanout([LogEvents(options), PrometheusMetrics(CollectorRegistry())]),
        ),
        (
            "+ OpenTelemetryTracing (SDK)",
            Fanout([LogEvents(options), OpenTelemetryTracing(TracerProvider())]),
        ),
    ]
    for name, instrument in setups:
        per_call(instrument, 2_000)  # warm up
        best = min(per_call(instrument, 20_000) for _ in range(5))
        print(f"{name:32s} {best:7.1f} us per call")


if __name__ == "__main__":
    main()
