"""Flow control of actors' messages, held across worker processes: a type's limit on
turns running at once (``max_active_turns``), measured from the database's rows."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from solid_objects import Actor
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
