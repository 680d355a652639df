"""The application of the turn-limit tests across processes (``tests/test_message_limits.py``).

    python -m solid_objects worker tests.apps.turnlimit_app:runtime

``LimitedTurnTaker.work`` writes its start and its end, with the database's clock,
into a side table through a connection of its own (``turn_log``), so the test
measures how many turns of the type overlapped from the database's rows, not from
any process's counters. ``SOLID_TEST_LIMIT`` sets the class's ``max_active_turns``
("none": no limit, to see the measurement catch a violation).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from sqlalchemy import Engine, text

from solid_objects import Actor, Runtime
from solid_objects.database import engine_for

#: The database clock in microseconds, per backend family.
CLOCK = {
    "sqlite": "CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)",
    "postgresql": "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)",
    "mysql": "CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED)",
}

LOG_TABLE = "turn_log"


def create_log(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(
            text(
                f"CREATE TABLE {LOG_TABLE} (actor_id VARCHAR(64) NOT NULL, "
                "phase VARCHAR(8) NOT NULL, at_us BIGINT NOT NULL)"
            )
        )


def log_phase(engine: Engine, actor_id: str, phase: str) -> None:
    clock = CLOCK["mysql" if engine.dialect.name in ("mysql", "mariadb") else engine.dialect.name]
    with engine.begin() as conn:
        conn.execute(
            text(f"INSERT INTO {LOG_TABLE} (actor_id, phase, at_us) VALUES (:a, :p, {clock})"),
            {"a": actor_id, "p": phase},
        )


_engine: Engine | None = None


def _log_engine() -> Engine:
    global _engine
    if _engine is None:
        _engine = engine_for(os.environ["SOLID_TEST_DB"])
    return _engine


_limit = os.environ.get("SOLID_TEST_LIMIT", "2")


class LimitedTurnTaker(Actor, auto_register=False):
    """A turn that takes ``ms`` milliseconds, its start and end logged in the database."""

    max_active_turns = None if _limit == "none" else int(_limit)

    done: int = 0

    def work(self, ms: int) -> int:
        log_phase(_log_engine(), self.actor_id, "start")
        time.sleep(ms / 1000)
        log_phase(_log_engine(), self.actor_id, "end")
        self.done += 1
        return self.done


def __getattr__(name: str) -> Any:
    if name == "runtime":
        options = json.loads(os.environ.get("SOLID_TEST_OPTIONS", "{}"))
        built = Runtime(os.environ["SOLID_TEST_DB"], actors=[LimitedTurnTaker], **options)
        globals()["runtime"] = built
        return built
    raise AttributeError(name)
