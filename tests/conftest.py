"""Shared fixtures: each test gets its own SQLite file and runtimes built on it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from solid_objects import Runtime

FAST = {
    "retry_base_delay": 0.02,
    "retry_max_delay": 0.1,
    "poll_interval": 0.05,
    "call_timeout": 20.0,
}


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'test.db'}"


@pytest.fixture
def make_runtime(db_url: str) -> Iterator[Callable[..., Runtime]]:
    """Build installed runtimes on the test's database; all are closed afterwards."""
    created: list[Runtime] = []

    def make(**options: Any) -> Runtime:
        runtime = Runtime(db_url, **{**FAST, **options})
        runtime.install()
        created.append(runtime)
        return runtime

    yield make
    for runtime in reversed(created):
        runtime.close()


def count_rows(runtime: Runtime, table: str, where: str = "1=1") -> int:
    with runtime.store.read() as tx:
        return int(tx.scalar(f"SELECT COUNT(*) FROM solid_{table} WHERE {where}"))
