"""Faults on the servers: a commit stalled past its lease, and many callers on one identity.

1. A commit transaction stalled between its first write and its COMMIT.
   ``faults.inject`` blocks runtime A at ``commit.body``: inside the commit
   transaction, after the turn's writes. The first write of that transaction
   is the fenced ``UPDATE`` of the actor row (``Store.finish_turn``), so the
   fence was checked, and passed, while A's lease was valid. A stays there for
   several lease durations; runtime B starts meanwhile and tries to claim the
   actor, whose lease has expired by the database clock.

   What happens (measured; the test prints it with ``-s``):

   - PostgreSQL and MariaDB: B's claim ``UPDATE`` waits on the row lock that
     A's fenced ``UPDATE`` holds (one session of the test's schema waiting on a
     ``Lock`` in ``pg_stat_activity``; one ``LOCK WAIT`` transaction in
     MariaDB's ``innodb_trx``). Nothing is refused: the library sets no lock
     timeout, PostgreSQL has none by default and MariaDB's
     ``innodb_lock_wait_timeout`` (50 s) is far longer than the stall (2.5 s).
     When A commits, the waiting ``UPDATE`` re-evaluates its ``WHERE`` on the
     new row version (READ COMMITTED: PostgreSQL's re-check, InnoDB's
     semi-consistent read), finds the lease that A's commit renewed already
     expired, and claims; B commits the later messages 10-50 ms later.
   - SQLite: A holds the database's only write lock (``BEGIN IMMEDIATE``). B
     cannot even start: its presence row, then its claim, wait in ``BEGIN
     IMMEDIATE`` (``busy_timeout``) and go on as soon as A commits.

   So no newer holder can exist while the stalled transaction is open: A's
   commit lands (it was fenced while valid), and B continues from A's state.
   The danger left is A's *next* turn, computed from a stale activation: the
   test stalls it too (at ``turn.executed``) until B has committed the later
   messages, and the fence must refuse it. A planted bug (a fence that checks
   no lease) makes the same test fail: A's stale state overwrites B's.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
from sqlalchemy.engine import make_url

from solid_objects import Actor, Runtime
from solid_objects.faults import SimulatedCrash, inject
from solid_objects.store.store import Store

from .apps.procapp import AppendLog
from .conftest import FAST, count_rows
from .test_processes import Cluster

#: Bound on any wait for something that should happen well within it.
STEP = 20.0
LEASE = 0.5


class Log(Actor):
    """Its state is the list of items applied, so a repeated, lost or stale turn shows."""

    items: list[int] = []

    def append(self, item: int) -> int:
        self.items.append(item)
        return len(self.items)


class Stall:
    """A fault hook: blocks the first matching arrival at ``point`` until released.

    ``thread`` restricts it to one thread by name (the commit body runs on the
    group-commit thread on SQLite, so the commit stall matches any thread).
    """

    def __init__(self, point: str, thread: str | None = None, *, armed: bool = True) -> None:
        self.point = point
        self.thread = thread
        self.reached = threading.Event()
        self.released = threading.Event()
        self.reached_at = 0.0
        self._armed = armed
        self._lock = threading.Lock()
        #: After being released, the thread "dies" the next time it reaches ``point``.
        self.then_crash = False
        self.crash_next = False

    def __call__(self, name: str) -> None:
        if name != self.point:
            return
        if self.thread is not None and threading.current_thread().name != self.thread:
            return
        if self.crash_next:
            raise SimulatedCrash(name)
        with self._lock:
            if not self._armed:
                return
            self._armed = False
        self.reached_at = time.monotonic()
        self.reached.set()
        self.released.wait(STEP * 2)
        if self.then_crash:
            self.crash_next = True

    def arm(self) -> None:
        with self._lock:
            self._armed = True


def chain(*hooks: Callable[[str], None]) -> Callable[[str], None]:
    def hook(name: str) -> None:
        for h in hooks:
            h(name)

    return hook


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = STEP) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.01)


def new_runtime(url: str, **options: Any) -> Runtime:
    rt = Runtime(url, **{**FAST, "lease_duration": LEASE, **options})
    rt.install()
    rt.register(Log)
    return rt


def lock_waiters(url: str) -> int:
    """Sessions of this test's schema/database waiting on a row lock (servers only)."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return 0
    engine = sqlalchemy.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            if backend == "postgresql":
                return int(
                    conn.exec_driver_sql(
                        "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND query LIKE '%%solid_actors%%' "
                        "AND pid IN (SELECT pid FROM pg_locks l JOIN pg_class c "
                        "ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE n.nspname = current_schema())"
                    ).scalar_one()
                )
            return int(
                conn.exec_driver_sql(
                    "SELECT COUNT(*) FROM information_schema.innodb_trx "
                    "WHERE trx_state = 'LOCK WAIT' AND trx_mysql_thread_id IN "
                    "(SELECT id FROM information_schema.processlist WHERE db = DATABASE())"
                ).scalar_one()
            )
    finally:
        engine.dispose()


def stalled_commit_scenario(url: str, items: int = 5) -> dict[str, Any]:
    """Run the scenario of the module docstring; check the contract; return observations."""
    a = new_runtime(url, workers=0)
    refs = [a.ref(Log, "x").append.send(item=i) for i in range(items)]
    commit_stall = Stall("commit.body")
    stale_turn = Stall("turn.executed", thread="stalled", armed=False)
    # A dies at its turn after the stale one, so whatever that commit did stays visible.
    stale_turn.then_crash = True
    b = new_runtime(url, workers=2)  # installing would wait for A's write lock on SQLite
    seen: dict[str, Any] = {}
    drained: list[BaseException] = []

    def drain_a() -> None:
        try:
            a.testing.drain(timeout=STEP * 3)
        except SimulatedCrash:
            pass  # A "died" after its stale turn, as arranged
        except BaseException as exc:  # reported by the main thread
            drained.append(exc)

    def completed() -> int:
        return count_rows(a, "messages", "status = 'completed'")

    thread = threading.Thread(target=drain_a, name="stalled")
    try:
        with inject(chain(commit_stall, stale_turn)):
            thread.start()
            assert commit_stall.reached.wait(STEP), "A never reached its commit"
            time.sleep(2 * LEASE)  # A's lease has expired by the database clock now
            # On SQLite B's start itself writes (its presence row), so it waits for A.
            starter = threading.Thread(target=b.start, name="b-start")
            starter.start()
            b_started = time.monotonic()
            time.sleep(3 * LEASE)  # B polls, finds the actor claimable, tries to claim
            seen["lock_waiters"] = lock_waiters(url)
            seen["completed_during_stall"] = completed()
            stale_turn.arm()  # A's next turn, from the activation its commit advanced
            commit_stall.released.set()
            released = time.monotonic()
            seen["stalled_for"] = released - commit_stall.reached_at
            seen["b_waited"] = released - b_started
            starter.join(STEP)
            # A's commit lands, B claims and runs the later messages while A's next
            # turn (computed from its stale activation) is held before its commit.
            wait_for(lambda: completed() == items, "B to commit the later messages")
            seen["b_done_after_release"] = time.monotonic() - released
            seen["stale_turn_held"] = stale_turn.reached.is_set()
            stale_turn.released.set()
            thread.join(STEP * 4)
        assert not thread.is_alive(), "A's drain did not finish"
        assert not drained, drained
        results = [r.wait(timeout=STEP) for r in refs]
        assert b.ref(Log, "x").snapshot() == {"items": list(range(items))}
        assert results == list(range(1, items + 1))
        assert count_rows(a, "messages", "status <> 'completed'") == 0
    finally:
        commit_stall.released.set()
        stale_turn.released.set()
        thread.join(STEP)
        b.close()
        a.close()
    return seen


def test_a_commit_stalled_past_its_lease_never_overwrites_the_newer_holder(
    db_url: str, backend: str
) -> None:
    seen = stalled_commit_scenario(db_url)
    print(f"{backend}: {seen}")
    assert seen["stale_turn_held"], "A never ran a stale turn: the test proved less than it says"


def empty_tables(url: str) -> None:
    rt = Runtime(url, workers=0)
    rt.store.transact(
        lambda tx: [
            tx.run(f"DELETE FROM solid_{table}")
            for table in ("actors", "messages", "effects", "reminders")
        ]
    )
    rt.close()


def test_the_stalled_commit_test_catches_a_planted_fence_bug(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the lease in the fence, A's stale turn overwrites what B committed."""
    stalled_commit_scenario(db_url, items=4)  # the real fence refuses it
    empty_tables(db_url)
    monkeypatch.setattr(Store, "_FENCE", "pk = :pk")  # the planted bug: no lease check
    with pytest.raises(AssertionError) as violation:
        stalled_commit_scenario(db_url, items=4)
    # B committed [0, 1, 2, 3]; A's stale turn wrote the state it computed from [0].
    assert "{'items': [0, 1]} == {'items': [0, 1, 2, 3]}" in str(violation.value), violation.value


# --- 2. four worker processes, sixteen caller threads, one identity --------------------


@pytest.fixture
def cluster(tmp_path: Path, db_url: str, request: pytest.FixtureRequest) -> Cluster:
    """Worker processes on the test's database (see ``tests/test_processes.py``)."""
    c = Cluster(tmp_path, db_url)
    request.addfinalizer(c.close)
    return c


@pytest.mark.slow
def test_four_worker_processes_and_sixteen_callers_on_one_identity(
    cluster: Cluster, backend: str
) -> None:
    """Every call's result is handed out once, and the state holds every item once, in order.

    The callers pause together between rounds, longer than ``idle_timeout`` plus
    a renewal period, so the holder releases the idle actor and the next round
    may start in any of the four processes.
    """
    rt = cluster.caller()
    workers = cluster.start_workers(
        4, workers=2, lease_duration=1.0, idle_timeout=0.05, poll_interval=0.05
    )
    threads, rounds, per_round = 16, 4, 3
    calls = rounds * per_round
    log = rt.ref(AppendLog, "shared")
    barrier = threading.Barrier(threads, timeout=STEP * 2)

    def work(thread: int) -> list[dict[str, int]]:
        got = []
        for n in range(calls):
            if n and n % per_round == 0:
                barrier.wait()
                time.sleep(0.5)
            got.append(log.append(item=thread * 1000 + n))
        return got

    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(work, range(threads)))
    total = threads * calls
    lengths = sorted(r["length"] for chunk in results for r in chunk)
    assert lengths == list(range(1, total + 1)), "a result was lost or handed out twice"
    items = log.snapshot()["items"]
    assert sorted(items) == sorted(t * 1000 + n for t in range(threads) for n in range(calls))
    for t in range(threads):  # one thread's calls are sequential: applied in its order
        mine = [i for i in items if i // 1000 == t]
        assert mine == [t * 1000 + n for n in range(calls)]
        assert [r["length"] for r in results[t]] == sorted(r["length"] for r in results[t])
    served = Counter(r["pid"] for chunk in results for r in chunk)
    assert set(served) <= set(workers)
    print(f"{backend}: turns per worker process {dict(served)}")
    assert all(w.alive() for w in workers.values())
