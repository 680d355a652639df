"""Reads that tolerate staleness on a real replica (``replica_url``), on PostgreSQL
and on MariaDB.

The PostgreSQL replica is the local server's, made by ``scripts/pg-replica start``
(``pg_basebackup -R`` to /tmp/solid-replica, port 5433); the MariaDB pair is a
throwaway primary and replica started by ``scripts/mariadb-replica start`` (ports 3321
and 3322, following by GTID). Tests pause replay (``pg_wal_replay_pause()``, ``STOP
SLAVE SQL_THREAD``) to make the replica lag on purpose. Without the servers or root
these tests skip, or fail under ``SOLID_TEST_REQUIRE_SERVERS=1`` (CI).
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import time
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from solid_objects import Actor, Runtime, query
from solid_objects.admin import Administration, allow
from solid_objects.errors import ConfigurationError, OperationRefused
from solid_objects.store.replica import POSITIONS, reached
from solid_objects.web import dashboard

with warnings.catch_warnings():  # Starlette 1.x prefers httpx2; httpx works the same here
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

# Serial: the replica must keep up with the primary, which the parallel pass keeps busy.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

REQUIRED = os.environ.get("SOLID_TEST_REQUIRE_SERVERS") == "1"
POSTGRES_URL = os.environ.get("SOLID_TEST_POSTGRES_URL")
SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@dataclass(frozen=True)
class Pair:
    """A primary and its replica, started by one of the project's scripts."""

    kind: str
    primary: str
    url: str
    script: Path
    #: The primary's log position, and the replica's replayed one (``store/replica.py``).
    positions: tuple[str, str]
    #: Held while a test may pause replay, so test workers do not resume it under another.
    lock: Path

    def run(self, command: str) -> None:
        subprocess.run([str(self.script), command], check=True, capture_output=True, timeout=180)

    def pause(self) -> None:
        self.run("pause-replay")

    def replayed(self) -> None:
        """Wait until the replica has replayed everything the primary committed so far."""
        primary, standby = create_engine(self.primary), create_engine(self.url)
        parse = POSITIONS["postgresql" if self.kind == "postgresql" else "mysql"][2]
        try:
            with primary.connect() as conn:
                target = parse(conn.execute(text(self.positions[0])).scalar_one())
            assert target is not None
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                with standby.connect() as conn:
                    done = parse(conn.execute(text(self.positions[1])).scalar_one())
                if done is not None and reached(done, target):
                    return
                time.sleep(0.05)
            raise AssertionError(f"the replica never replayed up to {target}")
        finally:
            primary.dispose()
            standby.dispose()


PAIRS = {
    # scripts/pg-replica: pg_basebackup -R of the local PostgreSQL, port 5433.
    "postgresql": lambda: Pair(
        "postgresql",
        POSTGRES_URL or "",
        "postgresql+psycopg://postgres@127.0.0.1:5433/test",
        SCRIPTS / "pg-replica",
        POSITIONS["postgresql"][:2],
        Path("/tmp/solid-replica.lock"),
    ),
    # scripts/mariadb-replica: a throwaway primary (3321) and replica (3322) by GTID.
    "mariadb": lambda: Pair(
        "mariadb",
        "mysql+pymysql://root@127.0.0.1:3321/test",
        "mysql+pymysql://root@127.0.0.1:3322/test",
        SCRIPTS / "mariadb-replica",
        POSITIONS["mysql"][:2],
        Path("/tmp/solid-mariadb-replica.lock"),
    ),
}


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


class Brittle(Actor, auto_register=False):
    """Fails every time: with ``max_attempts=1`` each message is a dead letter."""

    def fail(self) -> None:
        raise ValueError("brittle")


def _unavailable(reason: str) -> None:
    if REQUIRED:
        raise AssertionError(f"{reason}: the read-replica tests cannot run (scripts/*-replica)")
    pytest.skip(reason)


@pytest.fixture(params=sorted(PAIRS))
def replica(request: pytest.FixtureRequest) -> Iterator[Pair]:
    """The running pair, replay resumed before and after the test."""
    pair: Pair = PAIRS[request.param]()
    if pair.kind == "postgresql" and not pair.primary.startswith("postgresql"):
        _unavailable("SOLID_TEST_POSTGRES_URL is not set")
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        _unavailable(f"{pair.script.name} runs as root")
    if pair.kind == "mariadb" and shutil.which("mariadbd", path="/usr/sbin:/usr/bin") is None:
        _unavailable("mariadbd is not installed")
    with pair.lock.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            pair.run("start")
            pair.run("resume-replay")
            yield pair
        finally:
            pair.run("resume-replay")


def runtime(pair: Pair, **options: Any) -> Runtime:
    rt = Runtime(
        pair.primary,
        replica_url=pair.url,
        actors=[Balance, Brittle],
        call_timeout=30,
        poll_interval=0.1,
        **options,
    )
    rt.install()
    return rt


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


def test_a_stale_ok_read_returns_what_the_replica_replayed(replica: Pair) -> None:
    actor_id = uuid.uuid4().hex
    with runtime(replica) as rt:
        ref = rt.ref(Balance, actor_id)
        assert ref.deposit(7) == 7
        replica.replayed()
        stale = ref.with_options(stale_ok=True)
        proven_fresh(rt, stale)
        assert stale.snapshot() == {"total": 7}
        assert stale.current() == 7
        assert rt.kernel.client.store.replica is not None
        assert rt.kernel.client.store.replica.replica_reads >= 2


def test_past_the_bound_a_stale_ok_read_falls_back_to_the_primary(replica: Pair) -> None:
    actor_id = uuid.uuid4().hex
    with runtime(replica, replica_max_lag=0.5) as rt:
        ref = rt.ref(Balance, actor_id)
        ref.deposit(1)
        replica.replayed()
        replica.pause()
        assert ref.deposit(1) == 2
        time.sleep(1.5)  # the replica is now more than 0.5 s behind
        stale = ref.with_options(stale_ok=True)
        assert stale.snapshot() == {"total": 2}
        assert stale.current() == 2
        assert rt.kernel.client.store.replica is not None
        assert rt.kernel.client.store.replica.fallbacks >= 2


def test_nothing_that_decides_a_turn_reads_the_replica(replica: Pair) -> None:
    """With replay paused and a bound of an hour the replica serves stale reads, yet
    every turn, and an idempotent retry, sees the primary's state."""
    actor_id = uuid.uuid4().hex
    with runtime(replica, replica_max_lag=3600) as rt:
        ref = rt.ref(Balance, actor_id)
        ref.deposit(10)
        replica.replayed()
        stale = ref.with_options(stale_ok=True)
        proven_fresh(rt, stale)
        replica.pause()
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
        Runtime(db, replica_url="redis://127.0.0.1/0")
    for url in ("postgresql://postgres@127.0.0.1:5433/test", "mysql+pymysql://root@h/test"):
        with pytest.raises(ConfigurationError, match="replica_url is for PostgreSQL"):
            Runtime(db, replica_url=url)
    with pytest.raises(ConfigurationError, match="replica_max_lag"):
        Runtime(db, replica_max_lag=0)


def operator(rt: Runtime) -> Administration:
    rt.admin.set_policy(allow({"ops:*": "*"}))
    return rt.admin.as_principal("ops:ann")


def _ids(rt: Runtime, prefix: str) -> tuple[list[str], float | None]:
    page = operator(rt).list_actors("Balance", id_prefix=prefix)
    return [a.actor_id for a in page.items], page.replica_lag_ms


def listed_from_the_replica(rt: Runtime, prefix: str) -> None:
    """List until a lag check has proved the replica fresh for the admin listings."""
    deadline = time.monotonic() + 30
    while _ids(rt, prefix)[1] is None:
        assert time.monotonic() < deadline, "the admin listing never read the replica"
        time.sleep(0.1)


def test_admin_listings_read_the_replica_within_the_bound_and_the_primary_past_it(
    replica: Pair,
) -> None:
    """With replay paused, an actor created on the primary is missing from a listing
    within the bound (the replica's view, with its lag) and present past it, where the
    fallback is counted; ``replica_for_admin=False`` lists from the primary."""
    import prometheus_client  # the dev extra

    from solid_objects.observability import PrometheusMetrics, observe

    prefix = uuid.uuid4().hex[:12]
    older, newer = f"{prefix}-old", f"{prefix}-new"
    with (
        runtime(replica, replica_max_lag=3600) as hour,
        runtime(replica, replica_max_lag=0.5) as short,
        runtime(replica, replica_max_lag=3600, replica_for_admin=False) as off,
    ):
        registry = prometheus_client.CollectorRegistry()
        observe(short, PrometheusMetrics(registry))
        hour.ref(Balance, older).deposit(1)
        replica.replayed()
        listed_from_the_replica(hour, prefix)
        proven_fresh(off, off.ref(Balance, older).with_options(stale_ok=True))
        replica.pause()
        hour.ref(Balance, newer).deposit(1)
        ids, lag = _ids(hour, prefix)
        assert ids == [older] and lag is not None and lag >= 0
        assert operator(hour).status().replica_lag_ms is not None
        assert _ids(off, prefix) == ([newer, older], None)  # by id
        time.sleep(1.5)  # the replica is now more than 0.5 s behind
        assert short.store.replica is not None
        before = short.store.replica.fallbacks
        assert _ids(short, prefix) == ([newer, older], None)  # by id
        assert short.store.replica.fallbacks > before
        assert registry.get_sample_value("solid_replica_fallbacks_total") >= before + 1
        ids, lag = _ids(hour, prefix)
        assert ids == [older] and lag is not None and lag >= 1000  # at least the pause


def test_an_action_after_a_stale_listing_acts_on_the_primary_rows(replica: Pair) -> None:
    """The replica still lists a dead letter as open after it was retried on the
    primary: retrying it again, from the API or the dashboard, returns the first retry
    (nothing sent twice) and discarding it is refused."""
    actor_id = uuid.uuid4().hex
    with runtime(replica, replica_max_lag=3600, max_attempts=1) as rt:
        ops = operator(rt)
        with pytest.raises(Exception, match="brittle"):
            rt.ref(Brittle, actor_id).fail()
        (letter,) = ops.list_dead_letters(actor_type="Brittle", actor_id=actor_id).items
        replica.replayed()
        deadline = time.monotonic() + 30
        while ops.list_dead_letters(actor_id=actor_id).replica_lag_ms is None:
            assert time.monotonic() < deadline, "the admin listing never read the replica"
            time.sleep(0.1)
        replica.pause()
        first = ops.retry_dead_letter(letter.id)
        assert not first.already
        stale = ops.list_dead_letters(actor_id=actor_id)
        assert stale.replica_lag_ms is not None
        assert [(d.id, d.resolution) for d in stale.items] == [(letter.id, None)]
        again = ops.retry_dead_letter(letter.id)
        assert (again.retry_message_id, again.already) == (first.retry_message_id, True)
        with pytest.raises(OperationRefused, match="already retried"):
            ops.discard_dead_letter(letter.id)
        with TestClient(
            dashboard(rt, principal=lambda request: "ops:ann"), follow_redirects=False
        ) as client:
            page = client.get(f"/dead-letters?actor={actor_id}").text
            assert f'name="one" value="{letter.id}"' in page  # the replica's: open
            token = re.search(r'name="csrf" value="([^"]+)"', page)
            assert token is not None
            posted = client.post(
                "/dead-letters/retry",
                data={"csrf": token.group(1), "one": letter.id, "next": "/dead-letters"},
            )
        assert posted.status_code == 303
        assert ops.get_dead_letter(letter.id).retry_message_id == first.retry_message_id
        retried = ops.list_dead_letters(actor_id=actor_id, state="retried")
        assert [d.id for d in retried.items] == []  # the replica has not seen the retry


def test_the_dashboard_says_when_a_page_was_read_from_the_replica(replica: Pair) -> None:
    """A list page read from the replica carries "replica, N ms behind"; past the
    bound, read from the primary, it carries no note."""
    prefix = uuid.uuid4().hex[:12]
    with (
        runtime(replica, replica_max_lag=3600) as hour,
        runtime(replica, replica_max_lag=0.5) as short,
    ):
        hour.ref(Balance, f"{prefix}-a").deposit(1)
        replica.replayed()
        listed_from_the_replica(hour, prefix)
        operator(short)
        path = f"/actors?type=Balance&prefix={prefix}"
        replica.pause()
        hour.ref(Balance, f"{prefix}-b").deposit(1)  # the primary moves on
        time.sleep(1.5)
        pages = {}
        for name, rt in (("hour", hour), ("short", short)):
            with TestClient(dashboard(rt, principal=lambda request: "ops:ann")) as client:
                pages[name] = client.get(path).text
        note = re.search(r"replica, (\d+) ms behind", pages["hour"])
        assert note is not None and int(note.group(1)) >= 1000
        assert f"{prefix}-a" in pages["hour"] and f"{prefix}-b" not in pages["hour"]
        assert "ms behind" not in pages["short"] and f"{prefix}-b" in pages["short"]


def test_a_gtid_position_is_reached_per_replication_domain() -> None:
    """MariaDB's positions: one sequence number per domain; a replica has reached a
    sample when every domain of the sample is applied (a domain it lacks is not)."""
    parse = POSITIONS["mysql"][2]
    assert parse("0-1-42,1-2-7") == {0: 42, 1: 7}
    assert parse("") == {}
    assert reached({0: 42, 1: 7}, {0: 42}) and reached({0: 43}, {0: 42})
    assert not reached({0: 41, 1: 9}, {0: 42}) and not reached({0: 42}, {0: 42, 1: 1})
