"""Workers whose wall clock is hours wrong (contract 2.4): the database clock governs.

Each worker is a real ``python -m tests.apps.skewed OFFSET worker
tests.apps.clockapp:runtime`` process whose ``time.time()`` and ``datetime.now()``
are four hours ahead or behind. Leases, retry backoffs, delayed messages and
reminders must all be timed by the database clock, so with such workers:

- a lease written by a worker that is hours behind is not already expired for the
  others (they do not take over a live holder), and one written by a worker hours
  ahead does not outlive a killed holder by hours;
- calls complete exactly once across the two workers;
- a retry waits its backoff, neither skipped nor stretched by hours;
- a reminder and a delayed message fire at their due time on the database clock,
  not before it and not hours after it.

The test process (the caller) has a correct clock; bounds on elapsed time are lower
bounds ("not early"), or upper bounds minutes below the skew ("not hours late").
Runs on SQLite, PostgreSQL and MariaDB.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.apps.clockapp import Alarm
from tests.apps.procapp import AppendLog, Tally
from tests.test_processes import ROOT, STEP, Cluster, Worker, wait_until

from .conftest import db_now

pytestmark = pytest.mark.slow

SKEW = 4 * 3600.0  # seconds: far more than any lease, delay or timeout below
AHEAD, BEHIND = SKEW, -SKEW
#: "Not hours late": any real delay in these tests stays far below this.
LATE = 15_000  # ms


class SkewedCluster(Cluster):
    """A :class:`Cluster` whose workers run the clock app with a wrong wall clock."""

    def spawn_skewed(
        self, name: str, offset: float, *, plant: bool = False, **options: Any
    ) -> Worker:
        env = self.env(**options)
        if plant:
            env["SOLID_SKEW_PLANT_LOCAL_CLOCK"] = "1"
        stdout = open(self.dir / f"{name}.stdout", "wb")
        stderr = open(self.dir / f"{name}.stderr", "wb")
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.apps.skewed",
                str(offset),
                "worker",
                "tests.apps.clockapp:runtime",
            ],
            cwd=ROOT,
            env=env,
            stdout=stdout,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
        )
        worker = Worker(name, proc, self.dir / f"{name}.stderr", [stdout, stderr])
        self.workers.append(worker)
        worker.wait_ready()
        check_skew(worker, offset)
        return worker


def check_skew(worker: Worker, offset: float) -> None:
    """The worker really lives ``offset`` seconds away from the real clock."""
    line = next(ln for ln in worker.stderr().splitlines() if ln.startswith("skewed clock:"))
    seen = float(line.split()[-1])
    assert abs(seen - time.time() - offset) < 60, line


@pytest.fixture
def cluster(tmp_path: Path, db_url: str, request: pytest.FixtureRequest) -> Iterator[SkewedCluster]:
    c = SkewedCluster(tmp_path, db_url)
    request.addfinalizer(c.close)
    yield c


def message_times(cluster: SkewedCluster, message_id: str) -> tuple[int, int | None, int | None]:
    """(created_at, available_at, completed_at) of a message, on the database clock."""
    rt = cluster._runtimes[0]
    with rt.store.read() as tx:
        row = tx.row(
            "SELECT created_at, available_at, completed_at FROM solid_messages WHERE id = :id",
            {"id": message_id},
        )
    return int(row[0]), row[1], row[2]


def test_a_worker_hours_behind_keeps_its_lease_and_calls_complete_exactly_once(
    cluster: SkewedCluster,
) -> None:
    """A (4 h behind) holds a turn for several lease durations; B (4 h ahead) must not
    take it over: a lease timed by A's clock would have been expired when written."""
    lease = 1.0
    rt = cluster.caller()
    options: dict[str, Any] = {"workers": 2, "lease_duration": lease, "poll_interval": 0.1}
    a = cluster.spawn_skewed("behind", BEHIND, **options)
    log = rt.ref(AppendLog, "held")
    cluster.gate.touch()
    gate, journal = str(cluster.gate), str(cluster.journal)
    held = log.append.send(item=0, gate=gate, journal=journal)
    assert cluster.first_start("held", 0)["pid"] == a.pid
    b = cluster.spawn_skewed("ahead", AHEAD, **options)

    # Meanwhile the two workers share other work: each call exactly once.
    tally = rt.ref(Tally, "shared")
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: tally.add(n=1), range(40)))
    assert sorted(results) == list(range(1, 41))
    assert tally.snapshot() == {"value": 40}

    started = time.monotonic()
    while time.monotonic() - started < 4 * lease:  # A renews; nobody else starts item 0
        assert [e["pid"] for e in cluster.events("start", "held", 0)] == [a.pid]
        time.sleep(0.05)
    cluster.gate.unlink()
    assert held.wait(timeout=STEP) == {"length": 1, "pid": a.pid}
    assert [e["pid"] for e in cluster.events("end", "held", 0)] == [a.pid]
    assert log.snapshot() == {"items": [0]}
    assert a.alive() and b.alive()


def test_a_killed_worker_hours_ahead_does_not_hold_its_actor_for_hours(
    cluster: SkewedCluster,
) -> None:
    """A (4 h ahead) is SIGKILLed mid-turn; B (4 h behind) takes over once the lease has
    expired on the database clock, not four hours later, and commits once."""
    lease = 1.0
    rt = cluster.caller()
    options: dict[str, Any] = {"workers": 1, "lease_duration": lease, "poll_interval": 0.1}
    a = cluster.spawn_skewed("ahead", AHEAD, **options)
    log = rt.ref(AppendLog, "killed")
    cluster.gate.touch()
    gate, journal = str(cluster.gate), str(cluster.journal)
    first = log.append.send(item=0, gate=gate, journal=journal)
    assert cluster.first_start("killed", 0)["pid"] == a.pid
    b = cluster.spawn_skewed("behind", BEHIND, **options)
    later = [log.append.send(item=i, journal=journal) for i in (1, 2)]

    os.kill(a.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    assert a.proc.wait(timeout=10) == -signal.SIGKILL
    cluster.gate.unlink()
    assert first.wait(timeout=STEP) == {"length": 1, "pid": b.pid}
    taken_over = time.monotonic() - killed_at
    assert [m.wait(timeout=STEP)["length"] for m in later] == [2, 3]
    assert log.snapshot() == {"items": [0, 1, 2]}
    assert [e["pid"] for e in cluster.events("start", "killed", 0)] == [a.pid, b.pid]
    assert [e["pid"] for e in cluster.events("end", "killed", 0)] == [b.pid]
    assert taken_over >= 0.3 * lease, "B took over a lease that had not expired"
    assert b.alive()


@pytest.mark.parametrize("offset", [AHEAD, BEHIND], ids=["ahead", "behind"])
def test_skewed_worker_times_retries_reminders_and_delays_by_the_database_clock(
    cluster: SkewedCluster, offset: float
) -> None:
    rt = cluster.caller()
    backoff = 0.4
    cluster.spawn_skewed(
        "skewed",
        offset,
        workers=2,
        lease_duration=2.0,
        poll_interval=0.2,
        retry_base_delay=backoff,
        retry_max_delay=backoff,
        max_attempts=5,
    )
    alarm = rt.ref(Alarm, "a")

    # A retryable failure waits its backoff (from the database clock) before each retry.
    attempts_file = cluster.dir / "attempts"
    assert alarm.flaky(attempts_file=str(attempts_file), failures=2) == 3
    stamps = [float(ln.split()[1]) for ln in attempts_file.read_text().splitlines()]
    assert len(stamps) == 3
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert all(gap >= 0.5 * backoff for gap in gaps), f"retried early: {gaps}"
    assert all(gap * 1000 < LATE for gap in gaps), f"retried hours late: {gaps}"

    # A reminder scheduled by the skewed worker fires once, at due_at on the database clock.
    delay = 1.5
    alarm.arm(delay=delay, label="reminder")
    with rt.store.read() as tx:
        due_at = int(tx.scalar("SELECT due_at FROM solid_reminders WHERE rkey = 'reminder'"))
    assert abs(due_at - (db_now(rt) + delay * 1000)) < LATE  # not the worker's clock
    # A delayed message sent by the skewed worker's turn.
    alarm.relay(delay=delay, label="delayed")
    with rt.store.read() as tx:
        message_id, available_at = tx.row(
            "SELECT id, available_at FROM solid_messages "
            "WHERE operation = 'ring' AND status = 'scheduled'"
        )
    assert abs(int(available_at) - (db_now(rt) + delay * 1000)) < LATE

    wait_until(
        lambda: sorted(alarm.snapshot()["rung"]) == ["delayed", "reminder"],
        STEP,
        "the reminder and the delayed message to arrive",
    )
    with rt.store.read() as tx:
        rung = tx.rows(
            "SELECT id, created_at, completed_at, arguments FROM solid_messages "
            "WHERE operation = 'ring' ORDER BY created_at"
        )
        reminders_left = tx.scalar("SELECT COUNT(*) FROM solid_reminders")
    assert len(rung) == 2 and reminders_left == 0
    by_label = {("reminder" if "reminder" in r[3] else "delayed"): r for r in rung}
    fired = by_label["reminder"]
    assert due_at <= int(fired[1]), "the reminder fired before its due time (database clock)"
    assert int(fired[2]) - due_at < LATE, "the reminder fired hours late"
    relayed = by_label["delayed"]
    assert relayed[0] == message_id
    assert int(available_at) <= int(relayed[2]), "the delayed message ran early"
    assert int(relayed[2]) - int(available_at) < LATE, "the delayed message ran hours late"
    # Nothing fires twice later on.
    assert alarm.ring(label="last") == 3
    assert alarm.snapshot()["rung"][-1] == "last"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_skew_checks_catch_a_worker_that_uses_its_own_clock(cluster: SkewedCluster) -> None:
    """With a planted bug (the worker's SQL reads its own wall clock, see
    ``tests.apps.skewed.plant_local_clock``) the checks above fail: the reminder is due
    hours off the database clock, and the lease would outlive a killed holder by hours."""
    rt = cluster.caller()
    cluster.spawn_skewed(
        "planted", AHEAD, plant=True, workers=1, lease_duration=1.0, poll_interval=0.1
    )
    alarm = rt.ref(Alarm, "planted")
    alarm.arm(delay=1.5, label="reminder")
    with rt.store.read() as tx:
        due_at = int(tx.scalar("SELECT due_at FROM solid_reminders WHERE rkey = 'reminder'"))
        expires = int(
            tx.scalar("SELECT lease_expires_at FROM solid_actors WHERE actor_id = 'planted'")
        )
    now = db_now(rt)
    assert abs(due_at - (now + 1500)) >= LATE  # the reminder check above would fail
    assert expires - now > SKEW * 1000 / 2  # a killed holder would block its actor for hours
