"""Prometheus metrics of a runtime (``pip install solid-objects[metrics]``).

Every series is labelled by actor type, operation, effect name or outcome,
never by actor or message id, so the number of series stays bounded by the
application's code rather than by its data. The gauges that describe the
database (mailbox depth, open dead letters) are read at scrape time by one
cheap aggregate query; every process that registers them reports the same
values, so aggregate them with ``max``, not ``sum``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from ..extras import requires_extra

with requires_extra("metrics", "solid_objects.observability.prometheus"):
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
    from prometheus_client.registry import Collector

from ..errors import ConfigurationError
from ..store import priority
from ..store.metrics import type_gauges
from .events import Instrumentation, ReminderChange, Turn, turn_outcome

if TYPE_CHECKING:
    from ..engine.turn import TurnOutcome
    from ..runtime import Runtime
    from ..store import Committed, EffectRow, Enqueued, MessageRow

log = logging.getLogger("solid_objects.observability")

#: Turn and effect durations: from a millisecond up to a minute.
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
#: Commit transactions are shorter: from 100 µs up to 5 s.
COMMIT_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)

_EFFECT_OUTCOMES = {"done": "done", "pending": "retry", "dead": "dead"}


class PrometheusMetrics(Instrumentation):
    """Counters and histograms of messages, turns, commits, effects and reminders.

    ``observe(runtime, PrometheusMetrics())`` registers them in the default
    registry (pass ``registry=`` for another); expose them with
    ``prometheus_client.start_http_server(port)`` or ``make_asgi_app()``.
    ``database_gauges=False`` leaves out the scrape-time database read (for
    example in all processes but one).
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        namespace: str = "solid",
        database_gauges: bool = True,
    ) -> None:
        self.registry = REGISTRY if registry is None else registry
        self.namespace = namespace
        self.database_gauges = database_gauges
        self._bound = False
        self._local = threading.local()
        #: Labelled children by (metric, label values): ``labels()`` costs a lock and more.
        self._children: dict[tuple[object, tuple[str, ...]], Any] = {}
        r, ns = self.registry, namespace
        self.enqueued = Counter(
            "messages_enqueued",
            "Messages enqueued, by who sent them: a caller, an actor, an effect's "
            "callback, a reminder.",
            ["actor_type", "operation", "source"],
            namespace=ns,
            registry=r,
        )
        self.replaced = Counter(
            "messages_replaced",
            "Queued messages a caller's later send with the same coalesce_key replaced "
            "(they never run).",
            ["actor_type", "operation"],
            namespace=ns,
            registry=r,
        )
        self.turns = Counter(
            "turns",
            "Turns run, by final outcome: completed, rejected, retry, dead (a new dead "
            "letter), lease_lost, commit_failed.",
            ["actor_type", "operation", "outcome"],
            namespace=ns,
            registry=r,
        )
        self.turn_seconds = Histogram(
            "turn_duration_seconds",
            "Time the operation ran (actor code, before the commit).",
            ["actor_type", "operation"],
            namespace=ns,
            registry=r,
            buckets=DURATION_BUCKETS,
        )
        self.commit_seconds = Histogram(
            "commit_duration_seconds",
            "Time of one commit transaction of a batch of turns.",
            namespace=ns,
            registry=r,
            buckets=COMMIT_BUCKETS,
        )
        self.commit_batch = Histogram(
            "commit_batch_size",
            "Turns committed together in one transaction.",
            namespace=ns,
            registry=r,
            buckets=BATCH_BUCKETS,
        )
        self.effects = Counter(
            "effects",
            "Effect handler runs, by outcome: done, retry, dead.",
            ["effect", "outcome"],
            namespace=ns,
            registry=r,
        )
        self.effect_seconds = Histogram(
            "effect_duration_seconds",
            "Time an effect handler ran, including recording its outcome.",
            ["effect"],
            namespace=ns,
            registry=r,
            buckets=DURATION_BUCKETS,
        )
        self.reminders = Counter(
            "reminders_fired",
            "Reminder firings (each enqueues one message).",
            ["actor_type", "operation"],
            namespace=ns,
            registry=r,
        )

        self.activation_events = Counter(
            "activation_events",
            "Activations here, by event: claimed (this process took the lease), activated "
            "(its first turn committed), deactivated (released idle or at shutdown), "
            "lease_lost (found lost at renewal).",
            ["actor_type", "event"],
            namespace=ns,
            registry=r,
        )
        self.reminder_changes = Counter(
            "reminder_changes",
            "Reminders committed turns scheduled (new), replaced (moved), left unchanged "
            "(scheduled again as they stood) or cancelled.",
            ["actor_type", "operation", "event"],
            namespace=ns,
            registry=r,
        )
        self.process_events = Counter(
            "process_events",
            "This process started or stopped running workers; stale: a peer that stopped "
            "sending heartbeats was recovered by this process.",
            ["event"],
            namespace=ns,
            registry=r,
        )

    def bind(self, runtime: Runtime) -> None:
        if self._bound:
            raise ConfigurationError(
                "this PrometheusMetrics already observes a runtime: create one per runtime, "
                "each with its own registry"
            )
        self._bound = True
        self.registry.register(_RuntimeCollector(runtime, self.namespace, self.database_gauges))

    def _child(self, metric: Counter | Histogram, *labels: str) -> Any:
        key = (metric, labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    # --- events -----------------------------------------------------------------------

    def enqueue(
        self, actor_type: str, operation: str, message_id: str
    ) -> Callable[[Future[Any]], None]:
        counter = self._child(self.enqueued, actor_type, operation, "call")

        def done(future: Future[Any]) -> None:
            if future.exception() is None and not future.result().existing:
                counter.inc()
                if future.result().replaced:
                    replaced = self._child(self.replaced, actor_type, operation)
                    replaced.inc(future.result().replaced)

        return done

    def claimed(self, actor_type: str, actor_id: str) -> None:
        self._child(self.activation_events, actor_type, "claimed").inc()

    def activated(self, actor_type: str, actor_id: str) -> None:
        self._child(self.activation_events, actor_type, "activated").inc()

    def deactivated(self, actor_type: str, actor_id: str) -> None:
        self._child(self.activation_events, actor_type, "deactivated").inc()

    def lease_lost(self, actor_type: str, actor_id: str) -> None:
        self._child(self.activation_events, actor_type, "lease_lost").inc()

    def reminders_changed(self, message: MessageRow, changes: Sequence[ReminderChange]) -> None:
        for change in changes:
            self._child(
                self.reminder_changes, message.actor_type, change.operation, change.event
            ).inc()

    def process_event(self, event: str, owner: str) -> None:
        self._child(self.process_events, event).inc()

    def turn_started(self, message: MessageRow, attempt: int) -> None:
        self._local.turn = time.perf_counter()

    def turn_executed(self, message: MessageRow, attempt: int, outcome: TurnOutcome) -> None:
        started: float | None = getattr(self._local, "turn", None)
        if started is not None:
            self._local.turn = None
            self._child(self.turn_seconds, message.actor_type, message.operation).observe(
                time.perf_counter() - started
            )

    def committed(
        self, batch: Sequence[Turn], results: Sequence[Committed | None] | None, started: float
    ) -> None:
        self.commit_seconds.observe(time.perf_counter() - started)
        self.commit_batch.observe(len(batch))
        for i, (_, message, outcome) in enumerate(batch):
            result = None if results is None else results[i]
            kind = turn_outcome(outcome, result, results is None)
            self._child(self.turns, message.actor_type, message.operation, kind).inc()
            if result is not None:
                for sent in result.outbound:
                    self._child(self.enqueued, sent.actor_type, sent.operation, "actor").inc()

    def effect_started(self, effect: EffectRow) -> None:
        self._local.effect = time.perf_counter()

    def effect_finished(
        self, effect: EffectRow, status: str, enqueued: list[Enqueued]
    ) -> list[Enqueued]:
        started: float | None = getattr(self._local, "effect", None)
        if started is not None:
            self._local.effect = None
            self._child(self.effect_seconds, effect.name).observe(time.perf_counter() - started)
        self._child(self.effects, effect.name, _EFFECT_OUTCOMES.get(status, status)).inc()
        for e in enqueued:
            if not e.existing:
                self._child(
                    self.enqueued, e.message.actor_type, e.message.operation, "effect"
                ).inc()
        return enqueued

    def reminders_fired(self, messages: Sequence[MessageRow]) -> None:
        for m in messages:
            self._child(self.reminders, m.actor_type, m.operation).inc()
            self._child(self.enqueued, m.actor_type, m.operation, "reminder").inc()


class _RuntimeCollector(Collector):
    """Gauges read at scrape time: this process's activations, and the database's
    mailbox depth and open dead letters per actor type."""

    def __init__(self, runtime: Runtime, namespace: str, database: bool) -> None:
        self._runtime = runtime
        self._ns = namespace
        self._database = database

    def _families(self) -> dict[str, GaugeMetricFamily]:
        ns = self._ns
        families = {
            "activations": GaugeMetricFamily(
                f"{ns}_activations",
                "Actors whose lease this process holds (cached activations).",
            )
        }
        if self._database:
            for name, text in (
                ("mailbox_depth", "Messages queued in mailboxes, waiting to run."),
                ("actors_with_work", "Actors with at least one queued message."),
                (
                    "oldest_ready_seconds",
                    "How long the actor waiting longest for a worker has had queued work.",
                ),
                ("dead_letters", "Dead letters no operator has retried or discarded yet."),
                (
                    "active_turns",
                    "Turns of a type with max_active_turns running now over every process.",
                ),
                (
                    "waiting_for_turn_limit",
                    "Actors with due work waiting because their type is at max_active_turns.",
                ),
            ):
                families[name] = GaugeMetricFamily(f"{ns}_{name}", text, labels=["actor_type"])
            families["urgent_messages"] = GaugeMetricFamily(
                f"{ns}_urgent_messages",
                "Queued messages with a priority above 0 (at the head, their actor is claimed "
                "first).",
                labels=["actor_type", "priority"],
            )
            families["unhandled_effects"] = GaugeMetricFamily(
                f"{ns}_unhandled_effects",
                "Unfinished effects whose name no live process handles (a typo in emit, "
                "a handler not deployed).",
                labels=["effect"],
            )
            families["effects_held_back"] = GaugeMetricFamily(
                f"{ns}_effects_held_back",
                "Due effects a flow-control limit holds back, by effect name and limit "
                "(rate or concurrency).",
                labels=["effect", "limit"],
            )
        return families

    def _replica_families(self) -> list[Metric]:
        """This process's reads that tolerate staleness (``replica_url``): how many the
        replica served, how many fell back to the primary, and the lag last measured."""
        replica = self._runtime.store.replica
        if replica is None:
            return []
        ns = self._ns
        reads = CounterMetricFamily(
            f"{ns}_replica_reads", "Stale-tolerant reads the read replica served."
        )
        fallbacks = CounterMetricFamily(
            f"{ns}_replica_fallbacks",
            "Stale-tolerant reads sent to the primary: the replica was past "
            "replica_max_lag, unreachable, or not yet proved fresh.",
        )
        lag = GaugeMetricFamily(
            f"{ns}_replica_lag_seconds",
            "How far the read replica was behind the primary at the last check.",
        )
        reads.add_metric([], replica.replica_reads)
        fallbacks.add_metric([], replica.fallbacks)
        if replica.lag != float("inf"):
            lag.add_metric([], replica.lag)
        return [reads, fallbacks, lag]

    def describe(self) -> Iterable[Metric]:
        """The families without samples: registering reads nothing from the database."""
        return [*self._families().values(), *self._replica_families()]

    def collect(self) -> Iterable[Metric]:
        return [*self._collect_families(), *self._replica_families()]

    def _collect_families(self) -> Iterable[Metric]:
        families = self._families()
        families["activations"].add_metric([], self._runtime.kernel.held_activations())
        if self._database:
            store = self._runtime.store
            try:
                with store.read() as tx:
                    rows = type_gauges(tx, store.prefix)
                    unhandled = store.processes.unhandled_effect_counts(tx)
                    limited = store.limits.held_back(tx, self._runtime.registry.turn_limits())
                    limits = store.effect_limits.effect_limit_status(tx)
                    urgent = priority.urgent_queued(tx)
            except Exception as exc:  # a scrape must not fail because the database did
                log.warning("metrics: cannot read the database gauges: %r", exc)
                return [families["activations"]]
            for name, count in unhandled.items():
                families["unhandled_effects"].add_metric([name], count)
            for (actor_type, rank), count in sorted(urgent.items()):
                families["urgent_messages"].add_metric([actor_type, str(rank)], count)
            for s in limits:
                if s.waiting_on is not None:
                    families["effects_held_back"].add_metric([s.name, s.waiting_on], s.due)
            for g in rows:
                families["mailbox_depth"].add_metric([g.actor_type], g.queued)
                families["actors_with_work"].add_metric([g.actor_type], g.actors_with_work)
                families["oldest_ready_seconds"].add_metric([g.actor_type], g.oldest_ready_seconds)
                families["dead_letters"].add_metric([g.actor_type], g.dead_letters)
            for actor_type, (active, waiting) in limited.items():
                families["active_turns"].add_metric([actor_type], active)
                families["waiting_for_turn_limit"].add_metric([actor_type], waiting)
        return list(families.values())
