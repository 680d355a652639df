"""Faults on the servers: a stalled commit, many processes on one identity, a restart.

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
     expired, and claims; B commits the later messages within 0.1 s.
   - SQLite: A holds the database's only write lock (``BEGIN IMMEDIATE``). B
     cannot even start: its presence row, then its claim, wait in ``BEGIN
     IMMEDIATE`` (``busy_timeout``) and go on as soon as A commits.

   So no newer holder can exist while the stalled transaction is open: A's
   commit lands (it was fenced while valid), and B continues from A's state.
   The danger left is A's *next* turn, computed from a stale activation: the
   test stalls it too (at ``turn.executed``) until B has committed the later
   messages, and the fence must refuse it. A planted bug (a fence that checks
   no lease) makes the same test fail: A's stale state overwrites B's.

2. Four worker processes and sixteen caller threads on one identity (all three
   databases): every result is handed out once and the state is exact.

3. The database server restarted under load (PostgreSQL: ``pg_ctlcluster ...
   restart``; MariaDB: ``mariadb-admin shutdown``, then ``start-stop-daemon``
   with the command line it ran with), each found from the test URL's port.
   The test always leaves the server running, even when it fails. Measured:
   the restart takes 2-4 s; callers see ``DatabaseError`` with ``disconnect``
   while the server is down (on MariaDB sometimes also ``commit_unknown``: the
   connection died during COMMIT, and such a call may have committed); calls
   already waiting for a result just wait through it; workers log failed
   polls and commits, lose their leases, and carry on; on PostgreSQL the
   LISTEN connection comes back after a few retries.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from solid_objects import Actor, MessageReference, Runtime
from solid_objects.errors import DatabaseError, SolidObjectsError
from solid_objects.faults import SimulatedCrash, inject
from solid_objects.store.turns import TurnStatements

from .apps.procapp import AppendLog
from .conftest import BACKENDS, FAST, SERVER_VARIABLES, count_rows
from .test_processes import Cluster

#: Bound on any wait for something that should happen well within it.
STEP = 20.0
LEASE = 0.5
SERVERS = [b for b in BACKENDS if b != "sqlite"]
# These tests stop, restart and cut the shared servers: every other test's connections
# would see the fault too, so they run alone, after the parallel pass (scripts/test).
pytestmark = pytest.mark.serial


class Log(Actor):
    """Its state is the list of items applied, so a repeated, lost or stale turn shows.

    Each turn also cancels a reminder it never set, so that its commit is a transaction
    on every database: the stalled-commit scenario stalls inside it, holding the actor
    row's lock (a lone turn that staged nothing commits as one autocommit statement on
    PostgreSQL, with no lock held before it: there a late commit is simply refused)."""

    items: list[int] = []

    def append(self, item: int) -> int:
        self.items.append(item)
        self.cancel_schedule("append", "never-set")
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
            # MariaDB 10.11 at times lists no innodb_trx row for a transaction whose first
            # statement waits for a row lock (seen: an UPDATE "Updating" for 5 s, absent
            # there), so a write statement running for a second or more counts too.
            return int(
                conn.exec_driver_sql(
                    "SELECT COUNT(*) FROM information_schema.processlist "
                    "WHERE db = DATABASE() AND command = 'Query' AND id <> CONNECTION_ID() "
                    "AND (id IN (SELECT trx_mysql_thread_id FROM information_schema.innodb_trx "
                    "WHERE trx_state = 'LOCK WAIT') "
                    "OR (time >= 1 AND (info LIKE 'UPDATE %%' OR info LIKE 'INSERT %%' "
                    "OR info LIKE 'DELETE %%' OR info LIKE 'SELECT %%FOR UPDATE%%')))"
                ).scalar_one()
            )
    finally:
        engine.dispose()


def stalled_commit_scenario(
    url: str, items: int = 5, actors: tuple[str, ...] = ("x",)
) -> dict[str, Any]:
    """Run the scenario of the module docstring; check the contract; return observations.

    With several ``actors``, A's stalled transaction commits a turn of each (one
    batch), so it holds several actor rows, and its stale turn is a batch too.
    """
    a = new_runtime(url, workers=0)
    refs = {
        actor: [a.ref(Log, actor).append.send(item=i) for i in range(items)] for actor in actors
    }
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
            wait_for(lambda: completed() == items * len(actors), "B to commit the rest")
            seen["b_done_after_release"] = time.monotonic() - released
            seen["stale_turn_held"] = stale_turn.reached.is_set()
            stale_turn.released.set()
            thread.join(STEP * 4)
        assert not thread.is_alive(), "A's drain did not finish"
        assert not drained, drained
        for actor, sent in refs.items():
            assert b.ref(Log, actor).snapshot() == {"items": list(range(items))}
            assert [r.wait(timeout=STEP) for r in sent] == list(range(1, items + 1))
        assert count_rows(a, "messages", "status <> 'completed'") == 0
    finally:
        commit_stall.released.set()
        stale_turn.released.set()
        thread.join(STEP)
        b.close()
        a.close()
    return seen


@pytest.mark.parametrize("actors", [("x",), ("x", "y")], ids=["one-actor", "batch-of-two"])
def test_a_commit_stalled_past_its_lease_never_overwrites_the_newer_holder(
    db_url: str, backend: str, actors: tuple[str, ...]
) -> None:
    seen = stalled_commit_scenario(db_url, actors=actors)
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
    # The planted bug: no lease check, and no check of the message row either (that one
    # alone refuses A's commit of a message B already finished).
    monkeypatch.setattr(TurnStatements, "_FENCE", "pk = :pk")
    monkeypatch.setattr(TurnStatements, "_QUEUED_FENCE", "")
    monkeypatch.setattr(TurnStatements, "_THE_MESSAGE", "id = :id")
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


# --- 3. the database server restarted under load ---------------------------------------


def connectable(url: str) -> bool:
    engine = sqlalchemy.create_engine(url, poolclass=NullPool, connect_args={"connect_timeout": 2})
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
        return True
    except sqlalchemy.exc.DBAPIError:
        return False
    finally:
        engine.dispose()


def run(*command: str) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr}")
    return done.stdout


class Server:
    """The PostgreSQL cluster or mariadbd process that serves a test URL, to restart it.

    Found from the URL's port, so the test restarts whichever server it runs on
    (in CI the ones ``scripts/services-up`` started).
    """

    def __init__(self, url: str) -> None:
        parsed = make_url(url)
        self.url = url
        self.backend = parsed.get_backend_name()
        self.host = parsed.host or "127.0.0.1"
        if self.backend == "postgresql":
            port = parsed.port or 5432
            clusters = [line.split() for line in run("pg_lsclusters", "--no-header").splitlines()]
            (self.cluster,) = [c[:2] for c in clusters if c[2] == str(port)]
        else:
            self.port = parsed.port or 3306
            self.user = parsed.username or "root"
            self.password = parsed.password
            engine = sqlalchemy.create_engine(url, poolclass=NullPool)
            try:
                with engine.connect() as conn:
                    self.pid_file = str(conn.exec_driver_sql("SELECT @@pid_file").scalar_one())
            finally:
                engine.dispose()
            pid = Path(self.pid_file).read_text().strip()
            command = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
            self.command = [part for part in command if part]

    def restart(self) -> None:
        """Stop the server (its sessions end) and start it again; return once it is up."""
        if self.backend == "postgresql":
            version, name = self.cluster
            run("pg_ctlcluster", "--skip-systemctl-redirect", version, name, "restart")
        else:
            admin = ["mariadb-admin", "-h", self.host, "-P", str(self.port), "-u", self.user]
            if self.password:
                admin.append(f"--password={self.password}")
            run(*admin, "shutdown")
            wait_for(lambda: not self.running_pid(), "mariadbd to exit", 60)
            time.sleep(1.0)  # down for a while, as a restart of a busy server is
            self.start()
        wait_for(lambda: connectable(self.url), "the server to accept connections", 60)

    def start(self) -> None:
        if self.backend == "postgresql":
            version, name = self.cluster
            subprocess.run(
                ["pg_ctlcluster", "--skip-systemctl-redirect", version, name, "start"],
                capture_output=True,
                timeout=120,
                check=False,  # "already running" is fine
            )
            return
        # A server still shutting down would make start-stop-daemon do nothing.
        wait_for(lambda: not self.running_pid(), "the old mariadbd to exit", 60)
        exe, *args = self.command
        run(
            "start-stop-daemon", "--start", "--oknodo", "--background",
            "--pidfile", self.pid_file, "--exec", exe, "--", *args,
        )  # fmt: skip

    def running_pid(self) -> str | None:
        """The pid in mariadbd's pid file, if that process still runs."""
        try:
            pid = Path(self.pid_file).read_text().strip()
        except FileNotFoundError:
            return None
        return pid if pid and Path(f"/proc/{pid}").exists() else None

    def ensure_up(self) -> None:
        """Leave the server running whatever happened (called in ``finally``)."""
        if connectable(self.url):
            return
        self.start()
        wait_for(lambda: connectable(self.url), "the server to come back up", 90)


@pytest.fixture
def restartable(tmp_path: Path, backend: str) -> Iterator[tuple[Cluster, Server]]:
    """A cluster on a fresh schema/database of its own, and the server it runs on.

    The schema is created and dropped without a connection pool (``db_url``'s
    admin engine keeps its connection across the test, and a restart ends it);
    before dropping it, the server is started again if the test left it down.
    """
    base = make_url(os.environ[SERVER_VARIABLES[backend]])
    name = f"solid_t_{uuid.uuid4().hex[:12]}"
    admin = sqlalchemy.create_engine(base, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    schema, drop = ("SCHEMA", " CASCADE") if backend == "postgresql" else ("DATABASE", "")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE {schema} {name}")
    if backend == "postgresql":
        url = base.update_query_dict({"options": f"-csearch_path={name}"})
    else:
        url = base.set(database=name)
    c = Cluster(tmp_path, url.render_as_string(hide_password=False))
    server = Server(c.url)  # while the server is up: how to start it again
    try:
        yield c, server
    finally:
        c.close()
        server.ensure_up()
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP {schema} {name}{drop}")
        admin.dispose()


@pytest.mark.slow
@pytest.mark.parametrize("backend", SERVERS, indirect=True)
def test_server_restart_under_load_loses_no_acknowledged_call_or_message(
    restartable: tuple[Cluster, Server], backend: str
) -> None:
    """Callers keep calling and sending through a restart of the database server.

    Six caller threads on three identities alternate calls and sends. Three
    give every operation an idempotency key and retry it until it returns, so
    each of their operations must be applied exactly once, in order. The other
    three use no key and do not retry: an operation that returned must be
    applied exactly once; one that raised during the outage may or may not
    have committed (the error does not say), so it must be applied at most once.
    Every returned result must match the committed state.
    """
    cluster, server = restartable
    rt = cluster.caller()
    workers = cluster.start_workers(2, workers=2, lease_duration=1.0, poll_interval=0.05)
    stop = threading.Event()
    deadline = time.monotonic() + 45
    returned: list[tuple[int, int | None]] = []  # (item, length) of each call; None: a send
    sent: list[tuple[int, MessageReference[dict[str, int]]]] = []
    raised: dict[int, list[str]] = {}  # item -> errors of its attempts
    lock = threading.Lock()

    def work(thread: int) -> None:
        keyed = thread % 2 == 0
        ref = rt.ref(AppendLog, f"restart-{thread // 2}")
        n = 0
        while not stop.is_set() and time.monotonic() < deadline:
            item = thread * 100_000 + n
            n += 1
            while time.monotonic() < deadline:
                target = ref.with_options(idempotency_key=f"op-{item}") if keyed else ref
                try:
                    if item % 2:
                        message = target.append.send(item=item)
                        with lock:
                            sent.append((item, message))
                    else:
                        length = target.append(item=item)["length"]
                        with lock:
                            returned.append((item, length))
                    break
                except SolidObjectsError as exc:
                    with lock:
                        raised.setdefault(item, []).append(describe(exc))
                    if not keyed:
                        break
                    time.sleep(0.05)  # then the same operation again, with the same key

    try:
        with ThreadPoolExecutor(6) as pool:
            futures = [pool.submit(work, t) for t in range(6)]
            time.sleep(1.0)
            before = len(returned) + len(sent)
            down = time.monotonic()
            server.restart()
            up = time.monotonic()
            time.sleep(2.0)
            stop.set()
            for f in futures:
                f.result(timeout=60)
        outcomes = [(item, m.wait(timeout=STEP)["length"]) for item, m in sent]
    finally:
        stop.set()
        server.ensure_up()

    # Everything that was enqueued runs, including operations whose caller saw an error.
    wait_for(lambda: count_rows(rt, "messages", "status <> 'completed'") == 0, "the mailboxes")
    states = {i: rt.ref(AppendLog, f"restart-{i}").snapshot()["items"] for i in range(3)}
    applied = [item for items in states.values() for item in items]
    assert len(applied) == len(set(applied)), "an operation was applied twice"
    for items in states.values():
        for thread in range(6):  # one thread's operations in its order
            mine = [i for i in items if i // 100_000 == thread]
            assert mine == sorted(mine)
    position = {item: index + 1 for items in states.values() for index, item in enumerate(items)}
    for item, length in returned + outcomes:
        assert position.get(item) == length, f"item {item}: returned {length}"
    acknowledged = {item for item, _ in returned + outcomes}
    for item in applied:  # nothing was applied that was not attempted
        assert item in acknowledged or item in raised
    unkeyed_raised = [i for i in raised if (i // 100_000) % 2 and i not in acknowledged]
    keyed_lost = [i for i in raised if (i // 100_000) % 2 == 0 and i not in acknowledged]
    assert not keyed_lost, "a keyed operation never returned, even retried after the restart"
    for item in unkeyed_raised:  # an error without commit_unknown: COMMIT was never sent
        if not any("commit_unknown" in error for error in raised[item]):
            assert item not in position, f"item {item} committed, yet raised {raised[item]}"
    assert all(w.alive() for w in workers.values()), "a worker process died"
    assert len(returned) + len(sent) > before, "nothing returned after the restart"
    print(
        f"{backend}: {before} ops before the restart, restart took {up - down:.1f}s, "
        f"{len(returned)} calls and {len(sent)} sends returned, "
        f"{sum(len(e) for e in raised.values())} attempts raised "
        f"({Counter(e for errors in raised.values() for e in errors)}); of "
        f"{len(unkeyed_raised)} unkeyed operations that raised, "
        f"{len(set(unkeyed_raised) & set(applied))} were committed"
    )


def describe(exc: BaseException) -> str:
    """An error's kind, for the summary: its class and, for a database error, its flags."""
    if isinstance(exc, DatabaseError):
        flags = [f for f in ("disconnect", "commit_unknown") if getattr(exc, f)]
        return f"DatabaseError({', '.join(flags)})"
    return type(exc).__name__
