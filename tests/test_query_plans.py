"""The plans PostgreSQL picks for a call's statements when most actors are idle.

Statistics of a table of mostly idle actors say ``lease_owner`` is almost always NULL,
which makes the ``actors_owner`` index look cheaper than the primary key for anything
that also names an owner. A turn's fenced commit names both its actor's pk and its
owner: served from the owner index it reads every actor the process holds, so its
cost grows with the leases a process holds and the table's share of idle actors
(what the scaling study saw as a warm call slowing from 1k to 100k actors).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from solid_objects import Actor, Runtime
from solid_objects.store import Tx

from .conftest import BACKENDS, FAST, fresh_database

IDLE = 3000
HELD = 60


class PlanCounter(Actor, auto_register=False):
    n: int = 0

    def add(self) -> int:
        self.n += 1
        return self.n


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    if "postgresql" not in BACKENDS:
        # In CI SOLID_TEST_REQUIRE_SERVERS=1 makes an unset URL an error in conftest.
        pytest.skip("no PostgreSQL server (SOLID_TEST_POSTGRES_URL)")
    with fresh_database("postgresql", tmp_path) as url:
        yield url


def fill_idle_actors(url: str, prefix: str, n: int) -> None:
    """``n`` actors as a day of traffic leaves them (no lease), then fresh statistics."""
    engine = create_engine(url)
    with engine.begin() as c:
        c.execute(
            text(
                f"INSERT INTO {prefix}actors (actor_type, actor_id, state, state_version, "
                "next_seq, done_seq, attempt, lease_generation, paused, created_at, updated_at) "
                "SELECT 'PlanCounter', 'idle-' || g, CAST('{\"n\": 1}' AS jsonb), 1, 2, 1, 0, 1, "
                "0, 0, 0 FROM generate_series(1, :n) AS g"
            ),
            {"n": n},
        )
        c.execute(text(f"ANALYZE {prefix}actors"))
    engine.dispose()


def test_a_turns_fenced_commit_is_served_by_the_primary_key_when_most_actors_are_idle(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = Runtime(pg_url, **{**FAST, "workers": 2})
    rt.register(PlanCounter)
    rt.install()
    fill_idle_actors(pg_url, rt.store.prefix, IDLE)
    plans: list[Any] = []
    original = Tx.run

    def explained(self: Tx, template: str, params: Any = None) -> int:
        """The direct turn's one statement, run as EXPLAIN ANALYZE (it still runs once)."""
        if not (template.startswith("WITH turn AS (") and "UPDATE {actors}" in template):
            return original(self, template, params)
        plan = self.scalar("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + template, params)
        plans.append(json.loads(plan) if isinstance(plan, str) else plan)
        return 1

    with rt:
        for k in range(HELD):  # this process now holds HELD leases
            assert rt.ref(PlanCounter, f"held-{k}").add() == 1
        monkeypatch.setattr(Tx, "run", explained)
        for k in range(5):
            assert rt.ref(PlanCounter, f"held-{k}").add() == 2
    assert len(plans) == 5

    def indexes(node: dict[str, Any]) -> set[str]:
        found = {node["Index Name"]} if "Index Name" in node else set()
        for child in node.get("Plans", []):
            found |= indexes(child)
        return found

    used = set().union(*(indexes(p[0]["Plan"]) for p in plans))
    assert used == {f"{rt.store.prefix}actors_pkey"}, used
