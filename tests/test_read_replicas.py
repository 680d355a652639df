"""Reads that tolerate staleness on a real streaming replica (``replica_url``).

The replica is the local PostgreSQL's, made by ``scripts/pg-replica start``
(``pg_basebackup -R`` to /tmp/solid-replica, port 5433); tests pause its replay
(``pg_wal_replay_pause()``) to make it lag on purpose. Without PostgreSQL or root these
tests skip, or fail under ``SOLID_TEST_REQUIRE_SERVERS=1`` (CI).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from solid_objects import Actor, Runtime, query
from solid_objects.errors import ConfigurationError

# Serial: the replica must keep up with the primary, which the parallel pass keeps busy.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

REQUIRED = os.environ.get("SOLID_TEST_REQUIRE_SERVERS") == "1"
SERVER_URL = os.environ.get("SOLID_TEST_POSTGRES_URL")
SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "pg-replica"
REPLICA_URL = "postgresql+psycopg://postgres@127.0.0.1:5433/test"
#: Held while a test may pause replay, so test workers do not resume it under another.
LOCK = Path("/tmp/solid-replica.lock")


class Balance(Actor):
    """A balance whose every turn returns the new total, so a turn that read stale
    state would return a wrong number."""

    total: int = 0

    def deposit(self, amount: int) -> int:
        self.total += amount
        return self.total

    @query
    def current(self) -> int:
        return self.total


def _unavailable(reason: str) -> None:
    if REQUIRED:
        raise AssertionError(f"{reason}: the read-replica tests cannot run ({SCRIPT} start)")
    pytest.skip(reason)


def _replica(command: str) -> None:
    subprocess.run([str(SCRIPT), command], check=True, capture_output=True, timeout=120)


@pytest.fixture
def replica() -> Iterator[str]:
    """The running replica's URL, replay resumed before and after the test."""
    if SERVER_URL is None or not SERVER_URL.startswith("postgresql"):
        _unavailable("SOLID_TEST_POSTGRES_URL is not set")
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        _unavailable("scripts/pg-replica runs as root (runuser -u postgres)")
    with LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            _replica("start")
            yield REPLICA_URL
        finally:
            _replica("resume-replay")


def runtime(replica_url: str, **options: Any) -> Runtime:
    assert SERVER_URL is not None
    rt = Runtime(
        SERVER_URL,
        replica_url=replica_url,
        actors=[Balance],
        call_timeout=30,
        poll_interval=0.1,
        **options,
    )
    rt.install()
    return rt


def replayed() -> None:
    """Wait until the replica has replayed everything the primary committed so far."""
    assert SERVER_URL is not None
    primary, standby = create_engine(SERVER_URL), create_engine(REPLICA_URL)
    try:
        with primary.connect() as conn:
            target = conn.execute(text("SELECT pg_current_wal_lsn()")).scalar_one()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with standby.connect() as conn:
                behind = conn.execute(
                    text("SELECT pg_wal_lsn_diff(:t, pg_last_wal_replay_lsn())"), {"t": target}
                ).scalar_one()
            if behind <= 0:
                return
            time.sleep(0.05)
        raise AssertionError(f"the replica never replayed up to {target}")
    finally:
        primary.dispose()
        standby.dispose()


def proven_fresh(rt: Runtime, stale: Any) -> None:
    """Read through ``stale`` until a lag check has proved the replica fresh (the first
    check, on a busy primary, may not: the replica has not reached its newest sample)."""
    replica = rt.kernel.client.store.replica
    assert replica is not None
    deadline = time.monotonic() + 30
    while replica.replica_reads == 0:
        assert time.monotonic() < deadline, "the replica was never proved fresh"
        stale.snapshot()
        time.sleep(0.1)


def test_a_stale_ok_read_returns_what_the_replica_replayed(replica: str) -> None:
    actor_id = uuid.uuid4().hex
    with runtime(replica) as rt:
        ref = rt.ref(Balance, actor_id)
        assert ref.deposit(7) == 7
        replayed()
        stale = ref.with_options(stale_ok=True)
        proven_fresh(rt, stale)
        assert stale.snapshot() == {"total": 7}
        assert stale.current() == 7
        assert rt.kernel.client.store.replica is not None
        assert rt.kernel.client.store.replica.replica_reads >= 2


def test_past_the_bound_a_stale_ok_read_falls_back_to_the_primary(replica: str) -> None:
    actor_id = uuid.uuid4().hex
    with runtime(replica, replica_max_lag=0.5) as rt:
        ref = rt.ref(Balance, actor_id)
        ref.deposit(1)
        replayed()
        _replica("pause-replay")
        assert ref.deposit(1) == 2
        time.sleep(1.5)  # the replica is now more than 0.5 s behind
        stale = ref.with_options(stale_ok=True)
        assert stale.snapshot() == {"total": 2}
        assert stale.current() == 2
        assert rt.kernel.client.store.replica is not None
        assert rt.kernel.client.store.replica.fallbacks >= 2


def test_nothing_that_decides_a_turn_reads_the_replica(replica: str) -> None:
    """With replay paused and a bound of an hour the replica serves stale reads, yet
    every turn, and an idempotent retry, sees the primary's state."""
    actor_id = uuid.uuid4().hex
    with runtime(replica, replica_max_lag=3600) as rt:
        ref = rt.ref(Balance, actor_id)
        ref.deposit(10)
        replayed()
        stale = ref.with_options(stale_ok=True)
        proven_fresh(rt, stale)
        _replica("pause-replay")
        assert stale.snapshot() == {"total": 10}
        results = [ref.deposit(1) for _ in range(5)]
        assert results == [11, 12, 13, 14, 15]
        keyed = ref.deposit.with_options(idempotency_key=f"k-{actor_id}")
        assert keyed(5) == 20
        assert keyed(5) == 20  # the retry's outcome, not a second turn
        assert ref.snapshot() == {"total": 20}  # a plain snapshot is the primary's
        time.sleep(1.1)
        assert stale.snapshot() == {"total": 10}  # the replica's, within the hour


def test_a_replica_url_of_another_database_is_refused(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'app.db'}"
    with pytest.raises(ConfigurationError, match="replica_url must be a postgresql"):
        Runtime(db, replica_url="mysql+pymysql://root@127.0.0.1/test")
    with pytest.raises(ConfigurationError, match="replica_url is for PostgreSQL"):
        Runtime(db, replica_url="postgresql://postgres@127.0.0.1:5433/test")
    with pytest.raises(ConfigurationError, match="replica_max_lag"):
        Runtime(db, replica_max_lag=0)
