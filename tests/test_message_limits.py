"""Flow control of actors' messages, held across worker processes: a type's limit on
turns running at once (``max_active_turns``), measured from the database's rows."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from sqlalchemy import text

from solid_objects import Actor, Runtime
from solid_objects.database import engine_for
from solid_objects.errors import InvalidActorDefinition
from tests.apps.turnlimit_app import LOG_TABLE, LimitedTurnTaker, create_log
from tests.test_processes import STEP, Cluster, cluster

__all__ = ["cluster"]


def max_overlap(rows: list[tuple[str, str, int]]) -> int:
    """The most turns that were between their start and their end at one instant
    (an end and a start logged at the same microsecond do not overlap)."""
    events = sorted((at, 0 if phase == "end" else 1) for _, phase, at in rows)
    running = peak = 0
    for _, kind in events:
        running += 1 if kind else -1
        peak = max(peak, running)
    return peak


def turn_log(url: str) -> list[tuple[str, str, int]]:
    engine = engine_for(url)
    try:
        with engine.connect() as conn:
            found = conn.execute(text(f"SELECT actor_id, phase, at_us FROM {LOG_TABLE}"))
            return [(str(r[0]), str(r[1]), int(r[2])) for r in found]
    finally:
        engine.dispose()


@pytest.mark.slow
def test_a_type_limit_holds_across_worker_processes(cluster: Cluster) -> None:
    """Three processes of two workers each, twelve actors of a type limited to two
    turns at once: the turns' own start and end rows, stamped by the database's
    clock, never overlap more than two deep, and every message is answered."""
    rt = cluster.caller()
    engine = engine_for(cluster.url)
    create_log(engine)
    engine.dispose()
    cluster.start_workers(3, app="tests.apps.turnlimit_app:runtime", workers=2, poll_interval=0.05)
    sent = [
        rt.ref(LimitedTurnTaker, f"a{i}").work.send(ms=120) for i in range(12) for _ in range(2)
    ]
    results = [s.wait(timeout=STEP * 3) for s in sent]
    assert sorted(results) == [1] * 12 + [2] * 12
    rows = turn_log(cluster.url)
    assert len(rows) == 48
    assert max_overlap(rows) == 2


def test_a_turn_limit_must_be_a_positive_int() -> None:
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(InvalidActorDefinition, match="max_active_turns"):

            class BadLimitTaker(Actor, auto_register=False):
                max_active_turns = bad

                def work(self) -> None:
                    pass


#: Lets the turns of ``HeldLimitedTurn`` finish.
_RELEASE = threading.Event()


class HeldLimitedTurn(Actor, auto_register=False):
    """One turn at a time over every process; each turn waits for ``_RELEASE``."""

    max_active_turns = 1

    def hold(self) -> str:
        _RELEASE.wait(30)
        return self.actor_id


def _wait(predicate: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_doctor_and_metrics_show_actors_waiting_for_the_turn_limit(
    make_runtime: Callable[..., Runtime],
) -> None:
    """Three actors of a type limited to one turn, with four worker threads: one
    runs, two wait, and doctor and the metrics say they wait for the limit."""
    import prometheus_client  # the dev extra

    from solid_objects.observability import PrometheusMetrics, observe

    _RELEASE.clear()
    rt = make_runtime(actors=[HeldLimitedTurn], workers=4)
    registry = prometheus_client.CollectorRegistry()
    observe(rt, PrometheusMetrics(registry))
    with rt:
        sent = [rt.ref(HeldLimitedTurn, f"h{i}").hold.send() for i in range(3)]
        labels = {"actor_type": "HeldLimitedTurn"}
        try:
            _wait(
                lambda: registry.get_sample_value("solid_waiting_for_turn_limit", labels) == 2,
                "two actors waiting for the limit",
            )
            time.sleep(0.3)  # room for a second turn to start, if the limit let one
            assert registry.get_sample_value("solid_active_turns", labels) == 1
            assert registry.get_sample_value("solid_waiting_for_turn_limit", labels) == 2
            backlog = next(c for c in rt.doctor(round_trip=False).checks if c.name == "backlog")
            assert "HeldLimitedTurn 1/1 running, 2 waiting for the limit" in backlog.detail
        finally:
            _RELEASE.set()
        assert sorted(s.wait(timeout=30) for s in sent) == ["h0", "h1", "h2"]
        _wait(
            lambda: registry.get_sample_value("solid_active_turns", labels) == 0,
            "the last lease to be given back",
        )
