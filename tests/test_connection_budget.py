"""A process's connections are bounded by its options, and the doctor says how many.

``pool_size + pool_overflow`` bounds the pool (callers, workers, effect runners, the
poller and SQLite's group-commit writer all draw from it); outside it PostgreSQL has
one LISTEN connection and a worker process one session mark. Many threads calling
through a pool smaller than their number wait for a connection; none fails.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import event

from solid_objects import Actor, Runtime
from solid_objects.doctor import examine
from solid_objects.errors import ConfigurationError


class Budgeted(Actor):
    count: int = 0

    def add(self) -> int:
        self.count += 1
        return self.count


def test_many_callers_share_a_small_pool_and_none_fails(
    backend: str, make_runtime: Callable[..., Runtime]
) -> None:
    rt = make_runtime(workers=2, effect_workers=1, pool_size=2, pool_overflow=1)
    most = 0
    lock = threading.Lock()

    def checkout(*_: Any) -> None:
        nonlocal most
        with lock:
            most = max(most, rt.engine.pool.checkedout())  # type: ignore[attr-defined]

    event.listen(rt.engine, "checkout", checkout)
    with rt:
        refs = [rt.ref(Budgeted, f"b{i % 4}") for i in range(16)]
        with ThreadPoolExecutor(16) as pool:
            results = list(pool.map(lambda ref: [ref.add() for _ in range(5)], refs))
        after = [rt.ref(Budgeted, f"b{i}").add() for i in range(4)]
        check = next(c for c in examine(rt, round_trip=False).checks if c.name == "connections")
    assert sorted(r for chunk in results for r in chunk) == sorted(list(range(1, 21)) * 4)
    assert after == [21] * 4
    assert 1 <= most <= 3
    extra = {"sqlite": 0, "mysql": 1, "postgresql": 2}[backend]  # LISTEN, session mark
    assert check.detail.startswith(f"at most {3 + extra}: pool_size 2 + pool_overflow 1"), check


def test_pool_overflow_must_be_a_count(tmp_path: Any) -> None:
    with pytest.raises(ConfigurationError, match="pool_overflow"):
        Runtime(f"sqlite:///{tmp_path / 'a.db'}", pool_overflow=-1)
