"""Real-process tests of the contract: several OS processes sharing one database.

Each test runs on SQLite, PostgreSQL and MariaDB. The SIGSTOP tests first make
sure the stopped process holds no write lock (SQLite's file lock; on a server, an
open transaction and its row locks), since a process stopped inside a transaction
blocks the takeover until it is continued: that is the database, not the lease.

Workers are real ``python -m solid_objects worker tests.apps.procapp:runtime``
processes; the test process is a caller-only runtime (``workers=0``), and one
test adds a second caller process. The signals are real: SIGKILL in the
middle of a turn, SIGSTOP past the lease then SIGCONT, SIGTERM during a turn.

The application (``tests/apps/procapp.py``) records every turn's start and end
in a journal file, and its ``append`` operation can block on a *gate* file, so
a test knows which process is running a turn and can hold it there. Every wait
is bounded: a bug shows up as a failure, never as a hang. Each worker's
stderr goes to a file that is printed at teardown (visible when a test fails).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any, TypeVar

import pytest

from solid_objects import Runtime
from solid_objects.errors import CallTimeout
from tests.apps.procapp import AppendLog, Tally, Welcome, read_journal

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
TARGET = "tests.apps.procapp:runtime"
#: Bound on any single wait for something that should take well under a second.
STEP = 20.0
LEASE_LOST = re.compile(r"WARNING solid_objects\.worker: lease .* was lost")

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float, what: str) -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.01)


def poll_for(predicate: Callable[[], T], timeout: float) -> T | None:
    """Like :func:`wait_until`, but return None on timeout (to check other things first)."""
    try:
        return wait_until(predicate, timeout, "")
    except AssertionError:
        return None


class Worker:
    """One ``solid-objects worker`` OS process."""

    def __init__(
        self, name: str, proc: subprocess.Popen[bytes], stderr_path: Path, files: list[IO[bytes]]
    ) -> None:
        self.name = name
        self.proc = proc
        self.stderr_path = stderr_path
        self._files = files

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def wait_ready(self) -> None:
        def ready() -> bool:
            if not self.alive():
                raise AssertionError(
                    f"worker {self.name} exited with {self.proc.returncode}:\n{self.stderr()}"
                )
            return "solid-objects worker" in self.stderr()

        wait_until(ready, 30, f"worker {self.name} to start")

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()  # SIGKILL also ends a stopped process
        try:
            self.proc.wait(timeout=10)
        finally:
            for f in self._files:
                f.close()

    def stopped(self) -> bool:
        """Every thread of the process is in the stopped state (SIGSTOP took effect)."""
        try:
            tasks = list(Path(f"/proc/{self.pid}/task").iterdir())
            states = [(t / "stat").read_text().rsplit(")", 1)[1].split()[0] for t in tasks]
        except (FileNotFoundError, ProcessLookupError):
            return False
        return bool(states) and all(s in ("T", "t") for s in states)


class Cluster:
    """Worker processes, caller runtimes and files of one test, all in ``tmp_path``."""

    def __init__(self, tmp_path: Path, url: str) -> None:
        self.dir = tmp_path
        self.db_path = tmp_path / "test.db"  # the SQLite file, when the backend is SQLite
        self.url = url
        self.journal = tmp_path / "journal.jsonl"
        self.gate = tmp_path / "gate"
        self.workers: list[Worker] = []
        self._runtimes: list[Runtime] = []
        self._callers: list[subprocess.Popen[bytes]] = []

    def env(self, **options: Any) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SOLID_TEST_DB=self.url,
            SOLID_TEST_OPTIONS=json.dumps(options),
            PYTHONUNBUFFERED="1",
        )
        return env

    def caller(self, **options: Any) -> Runtime:
        """A caller-only runtime in this process (with ``options``); it installs the
        schema."""
        runtime = Runtime(self.url, **{"workers": 0, "call_timeout": STEP, **options})
        self._runtimes.append(runtime)
        runtime.install()
        return runtime

    def spawn(self, name: str, app: str = TARGET, **options: Any) -> Worker:
        """A worker process running ``app`` (``module:runtime``) with ``options``."""
        stdout = open(self.dir / f"{name}.stdout", "wb")
        stderr = open(self.dir / f"{name}.stderr", "wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "solid_objects", "worker", app],
            cwd=ROOT,
            env=self.env(**options),
            stdout=stdout,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
        )
        worker = Worker(name, proc, self.dir / f"{name}.stderr", [stdout, stderr])
        self.workers.append(worker)
        return worker

    def start_workers(self, count: int, app: str = TARGET, **options: Any) -> dict[int, Worker]:
        started = [
            self.spawn(f"worker{len(self.workers) + 1}", app, **options) for _ in range(count)
        ]
        for w in started:
            w.wait_ready()
        return {w.pid: w for w in started}

    def start_caller_process(self, *args: str) -> tuple[subprocess.Popen[bytes], Path, Path]:
        out, err = self.dir / "caller.stdout", self.dir / "caller.stderr"
        with open(out, "wb") as stdout, open(err, "wb") as stderr:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.apps.caller", *args],
                cwd=ROOT,
                env=self.env(),
                stdout=stdout,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
            )
        self._callers.append(proc)
        return proc, out, err

    def events(self, event: str, actor: str, item: int) -> list[dict[str, Any]]:
        return [
            e
            for e in read_journal(self.journal)
            if e["event"] == event and e["actor"] == actor and e["item"] == item
        ]

    def first_start(self, actor: str, item: int) -> dict[str, Any]:
        return wait_until(
            lambda: next(iter(self.events("start", actor, item)), None),
            STEP,
            f"the turn of {actor} item {item} to start",
        )

    def close(self) -> None:
        for runtime in self._runtimes:
            runtime.close()
        for proc in self._callers:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)
        for w in self.workers:
            w.kill()
        for w in self.workers:  # shown by pytest when the test failed
            print(f"----- {w.name} (pid {w.pid}, exit {w.proc.returncode}) stderr -----")
            print(w.stderr()[-4000:])


@pytest.fixture
def cluster(tmp_path: Path, db_url: str, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """Processes on the test's database: a SQLite file, or a PostgreSQL/MariaDB schema."""
    c = Cluster(tmp_path, db_url)
    request.addfinalizer(c.close)
    yield c


def write_locked(db_path: Path) -> bool:
    """Whether some connection holds the database's write lock (for longer than 0.5 s)."""
    conn = sqlite3.connect(db_path, timeout=0.5, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        conn.close()


def open_transactions(url: str) -> int:
    """Transactions holding row locks in the test's database right now, other than ours.

    Server-wide on PostgreSQL (the test schemas share one database): run alone, as CI
    does, only the test's own processes count.
    """
    import sqlalchemy

    engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)
    try:
        with engine.connect() as conn:
            if engine.dialect.name == "postgresql":
                query = (  # a transaction holds a transactionid lock once it wrote
                    "SELECT COUNT(DISTINCT a.pid) FROM pg_stat_activity a JOIN pg_locks l "
                    "ON l.pid = a.pid WHERE l.locktype = 'transactionid' "
                    "AND a.pid <> pg_backend_pid() AND a.datname = current_database()"
                )
            else:
                query = (
                    "SELECT COUNT(*) FROM information_schema.innodb_trx t "
                    "JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id "
                    "WHERE t.trx_mysql_thread_id <> CONNECTION_ID() AND p.db = DATABASE() "
                    "AND (t.trx_rows_locked > 0 OR t.trx_rows_modified > 0)"
                )
            return int(conn.exec_driver_sql(query).scalar() or 0)
    finally:
        engine.dispose()


def stop_outside_write_lock(worker: Worker, cluster: Cluster) -> float:
    """SIGSTOP ``worker`` at a moment it holds no write lock; return when.

    A process stopped inside a write transaction would block the other writers (of
    the whole file on SQLite, of the rows it locked on a server) until it is
    continued: that is the database, not the lease protocol these tests are about,
    so such a moment is skipped.
    """
    url = cluster.url
    for _ in range(50):
        os.kill(worker.pid, signal.SIGSTOP)
        wait_until(worker.stopped, 5, f"{worker.name} to stop")
        stopped_at = time.time()
        if url.startswith("sqlite"):
            locked = write_locked(cluster.db_path)
        else:
            locked = open_transactions(url) > 0
        if not locked:
            return stopped_at
        os.kill(worker.pid, signal.SIGCONT)
        time.sleep(0.01)
    raise AssertionError(f"{worker.name} held a write lock at every attempt to stop it")


# --- 1. several processes: per-identity order and exactly-once state -------------------


def test_processes_keep_per_identity_order_and_apply_each_message_once(
    cluster: Cluster,
) -> None:
    """3 worker processes and a caller: each identity's list is exactly [0..K-1].

    One caller thread per identity sends its items in order with ``.send()``,
    in bursts. ``idle_timeout`` is tiny, so in the pauses between bursts the
    holder releases idle actors and any process may claim them next. To make
    sure identities really move between processes, the three workers are
    replaced by three new ones (a rolling restart with SIGTERM) once every
    identity's first burst has committed, and the last burst is sent only
    after the old workers have exited.
    """
    rt = cluster.caller()
    options: dict[str, Any] = {
        "workers": 2,
        "lease_duration": 1.0,
        "idle_timeout": 0.05,
        "poll_interval": 0.1,
    }
    old = cluster.start_workers(3, **options)
    ids = [f"order-{n}" for n in range(8)]
    items, burst = 40, 10
    restarted = threading.Event()

    def send_all(actor_id: str) -> list[Any]:
        ref = rt.ref(AppendLog, actor_id)
        sent = []
        for item in range(items):
            if item == items - burst:
                assert restarted.wait(STEP * 3), "the rolling restart did not finish"
            elif item and item % burst == 0:
                time.sleep(0.4)  # longer than idle_timeout + one lease renewal period
            sent.append(ref.append.send(item=item))
        return sent

    def first_burst_committed() -> bool:
        return all(len(rt.ref(AppendLog, i).snapshot()["items"]) >= burst for i in ids)

    with ThreadPoolExecutor(len(ids)) as pool:
        futures = {actor_id: pool.submit(send_all, actor_id) for actor_id in ids}
        try:
            wait_until(first_burst_committed, STEP, "every identity's first burst")
            new = cluster.start_workers(3, **options)
            for w in old.values():
                os.kill(w.pid, signal.SIGTERM)
                assert w.proc.wait(timeout=STEP) == 0, w.stderr()
        finally:
            restarted.set()
        messages = {actor_id: f.result(timeout=STEP) for actor_id, f in futures.items()}

    deadline = time.monotonic() + 45
    results = {
        actor_id: [m.wait(timeout=max(0.1, deadline - time.monotonic())) for m in sent]
        for actor_id, sent in messages.items()
    }
    for actor_id in ids:
        state = rt.ref(AppendLog, actor_id).snapshot()
        assert state["items"] == list(range(items)), f"{actor_id}: {state['items']}"
        lengths = [r["length"] for r in results[actor_id]]
        assert lengths == list(range(1, items + 1)), f"{actor_id}: results {lengths}"
        pids = [r["pid"] for r in results[actor_id]]
        assert set(pids[:burst]) <= set(old), f"{actor_id}: first burst ran in {pids[:burst]}"
        assert set(pids[-burst:]) <= set(new), f"{actor_id}: last burst ran in {pids[-burst:]}"
        assert set(pids) <= set(old) | set(new), f"{actor_id}: unknown processes in {pids}"
    assert all(w.alive() for w in new.values())


def test_concurrent_callers_in_two_processes_get_each_result_exactly_once(
    cluster: Cluster,
) -> None:
    """Many threads in two caller processes call one identity at once: results are 1..N."""
    rt = cluster.caller()
    workers = cluster.start_workers(
        3, workers=2, lease_duration=1.0, idle_timeout=0.05, poll_interval=0.1
    )
    threads, calls = 8, 15
    remote, out, err = cluster.start_caller_process("tally", str(threads), str(calls))
    tally = rt.ref(Tally, "tally")

    def work(_: int) -> list[int]:
        return [tally.add(n=1) for _ in range(calls)]

    with ThreadPoolExecutor(threads) as pool:
        local = [r for chunk in pool.map(work, range(threads)) for r in chunk]
    try:
        code = remote.wait(timeout=45)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"caller process hung:\n{err.read_text()}") from None
    assert code == 0, f"caller process failed:\n{err.read_text()}"
    other = json.loads(out.read_text())

    total = 2 * threads * calls
    assert len(local) == len(other) == threads * calls
    assert sorted(local + other) == list(range(1, total + 1))
    assert tally.snapshot() == {"value": total}
    assert all(w.alive() for w in workers.values())


# --- 2. SIGKILL in the middle of a turn ------------------------------------------------


def test_sigkill_mid_turn_another_process_takes_over_and_commits_once(
    cluster: Cluster,
) -> None:
    lease = 1.0
    rt = cluster.caller()
    # The lease path: no proof from the database (tests/test_takeover.py has that one).
    workers = cluster.start_workers(2, workers=1, lease_duration=lease, takeover_interval=None)
    log = rt.ref(AppendLog, "killed")
    cluster.gate.touch()
    gate, journal = str(cluster.gate), str(cluster.journal)

    with ThreadPoolExecutor(1) as pool:
        # A synchronous call from the workers=0 runtime, waiting across the crash.
        first = pool.submit(
            log.with_options(timeout=STEP + 10).append, item=0, gate=gate, journal=journal
        )
        started = cluster.first_start("killed", 0)
        victim = workers[started["pid"]]
        (survivor,) = (w for w in workers.values() if w is not victim)
        later = [log.append.send(item=i, journal=journal) for i in (1, 2, 3)]

        os.kill(victim.pid, signal.SIGKILL)
        killed_at = time.time()
        assert victim.proc.wait(timeout=10) == -signal.SIGKILL
        cluster.gate.unlink()  # the re-run must not block

        assert first.result(timeout=STEP + 15) == {"length": 1, "pid": survivor.pid}
    assert [m.wait(timeout=STEP) for m in later] == [
        {"length": n, "pid": survivor.pid} for n in (2, 3, 4)
    ]
    assert log.snapshot() == {"items": [0, 1, 2, 3]}

    starts = cluster.events("start", "killed", 0)
    ends = cluster.events("end", "killed", 0)
    assert [e["pid"] for e in starts] == [victim.pid, survivor.pid]
    assert [e["pid"] for e in ends] == [survivor.pid]
    # The survivor waited for the dead worker's lease (renewed every lease/3) to expire.
    assert starts[1]["t"] - killed_at >= 0.3 * lease, "took over a lease that had not expired"
    assert survivor.alive()


# --- 3. SIGSTOP past the lease, then SIGCONT --------------------------------------------


def ends_by(cluster: Cluster, actor: str, item: int) -> list[int]:
    return [e["pid"] for e in cluster.events("end", actor, item)]


def test_sigstopped_worker_finishes_its_turn_late_but_its_commit_is_refused(
    cluster: Cluster,
) -> None:
    """A is stopped mid-turn past its lease; B takes over and commits; A resumes: refused."""
    lease = 1.0
    rt = cluster.caller()
    workers = cluster.start_workers(2, workers=1, lease_duration=lease)
    log = rt.ref(AppendLog, "stopped")
    cluster.gate.touch()
    gate, journal = str(cluster.gate), str(cluster.journal)

    m0 = log.append.send(item=0, gate=gate, journal=journal)
    started = cluster.first_start("stopped", 0)
    a = workers[started["pid"]]
    (b,) = (w for w in workers.values() if w is not a)
    later = [log.append.send(item=i, journal=journal) for i in (1, 2, 3)]

    stopped_at = stop_outside_write_lock(a, cluster)
    try:
        cluster.gate.unlink()  # B's re-run goes through; A's turn ends as soon as it runs again
        results = [m.wait(timeout=STEP) for m in (m0, *later)]
        assert results == [{"length": n, "pid": b.pid} for n in (1, 2, 3, 4)]
        assert log.snapshot() == {"items": [0, 1, 2, 3]}
        b_start = [e for e in cluster.events("start", "stopped", 0) if e["pid"] == b.pid]
        assert b_start, "B committed item 0 without running it"
        assert b_start[0]["t"] - stopped_at >= 0.3 * lease, (
            "B took over a lease that had not expired"
        )
    finally:
        os.kill(a.pid, signal.SIGCONT)

    # A wakes up inside its turn, finishes the Python, and tries to commit.
    wait_until(
        lambda: a.pid in ends_by(cluster, "stopped", 0),
        STEP,
        "the stopped worker to finish its turn after SIGCONT",
    )
    warned = poll_for(lambda: LEASE_LOST.search(a.stderr()), STEP)

    assert log.snapshot() == {"items": [0, 1, 2, 3]}, "the stale worker's commit was accepted"
    assert m0.result() == {"length": 1, "pid": b.pid}, "the stale worker's result replaced B's"
    assert sorted(ends_by(cluster, "stopped", 0)) == sorted([a.pid, b.pid])
    for item in (1, 2, 3):
        assert ends_by(cluster, "stopped", item) == [b.pid], f"item {item} ran again"
    assert warned, f"no lease-lost warning from the stale worker:\n{a.stderr()}"
    assert a.alive(), f"the worker that lost its lease died:\n{a.stderr()}"
    # Both workers keep serving the actor afterwards.
    assert log.append.send(item=4).wait(timeout=STEP)["length"] == 5
    assert log.snapshot() == {"items": [0, 1, 2, 3, 4]}
    assert b.alive()


def test_worker_resumed_while_the_new_holder_is_mid_turn_cannot_commit(
    cluster: Cluster,
) -> None:
    """A resumes while B, which took over A's expired lease, is still running the message.

    Nothing has advanced the mailbox yet, so only the lease (owner, token,
    generation, expiry) in the commit's fence can refuse A's stale commit.
    """
    lease = 1.0
    rt = cluster.caller()
    workers = cluster.start_workers(2, workers=1, lease_duration=lease)
    log = rt.ref(AppendLog, "overlap")
    cluster.gate.touch()
    gate, journal = str(cluster.gate), str(cluster.journal)

    m0 = log.append.send(item=0, gate=gate, journal=journal)
    started = cluster.first_start("overlap", 0)
    a = workers[started["pid"]]
    (b,) = (w for w in workers.values() if w is not a)
    m1 = log.append.send(item=1, journal=journal)

    stopped_at = stop_outside_write_lock(a, cluster)
    try:
        Path(f"{gate}.{a.pid}").touch()  # A may leave the gate once it runs again; B may not
        b_start = wait_until(
            lambda: [e for e in cluster.events("start", "overlap", 0) if e["pid"] == b.pid],
            STEP,
            "B to take over the expired lease and start the message",
        )
        assert b_start[0]["t"] - stopped_at >= 0.3 * lease, (
            "B took over a lease that had not expired"
        )
    finally:
        os.kill(a.pid, signal.SIGCONT)

    wait_until(
        lambda: a.pid in ends_by(cluster, "overlap", 0),
        STEP,
        "the resumed worker to finish its turn",
    )
    warned = poll_for(lambda: LEASE_LOST.search(a.stderr()), STEP)
    assert m0.status() == "queued", "the stale worker's commit completed the message"
    assert log.snapshot() == {"items": []}, "the stale worker's commit was accepted"
    assert warned, f"no lease-lost warning from the stale worker:\n{a.stderr()}"

    cluster.gate.unlink()  # now B's turn finishes and commits
    assert m0.wait(timeout=STEP) == {"length": 1, "pid": b.pid}
    assert m1.wait(timeout=STEP) == {"length": 2, "pid": b.pid}
    assert log.snapshot() == {"items": [0, 1]}
    assert sorted(ends_by(cluster, "overlap", 0)) == sorted([a.pid, b.pid])
    assert ends_by(cluster, "overlap", 1) == [b.pid]
    assert not LEASE_LOST.search(b.stderr()), b.stderr()
    assert a.alive() and b.alive()


def test_worker_paused_past_its_lease_cannot_commit_even_if_nobody_took_over(
    cluster: Cluster,
) -> None:
    """One worker, stopped mid-turn until its lease expired: its commit is still refused.

    The fence compares the lease's expiry with the database clock; the worker
    then claims the actor again and re-runs the message, which commits once.
    """
    lease = 1.0
    rt = cluster.caller()
    (a,) = cluster.start_workers(1, workers=1, lease_duration=lease).values()
    log = rt.ref(AppendLog, "expired")
    cluster.gate.touch()
    gate, journal = str(cluster.gate), str(cluster.journal)

    m0 = log.append.send(item=0, gate=gate, journal=journal)
    assert cluster.first_start("expired", 0)["pid"] == a.pid
    stop_outside_write_lock(a, cluster)
    try:
        cluster.gate.unlink()
        time.sleep(lease + 0.5)  # every renewal happened before the stop
    finally:
        os.kill(a.pid, signal.SIGCONT)

    assert m0.wait(timeout=STEP) == {"length": 1, "pid": a.pid}
    assert log.snapshot() == {"items": [0]}
    warned = poll_for(lambda: LEASE_LOST.search(a.stderr()), STEP)
    assert warned, f"a commit after the lease expired was accepted:\n{a.stderr()}"
    assert [e["pid"] for e in cluster.events("start", "expired", 0)] == [a.pid, a.pid]
    assert ends_by(cluster, "expired", 0) == [a.pid, a.pid]
    assert log.append.send(item=1).wait(timeout=STEP) == {"length": 2, "pid": a.pid}
    assert log.snapshot() == {"items": [0, 1]}


# --- 4. SIGTERM drains: finish the turn, release the leases, exit 0 ---------------------


def test_sigterm_finishes_the_turn_releases_leases_and_exits_0(cluster: Cluster) -> None:
    lease = 30.0  # far longer than the test: only a released lease lets B in quickly
    rt = cluster.caller()
    workers = cluster.start_workers(2, workers=1, lease_duration=lease)
    log = rt.ref(AppendLog, "drained")
    cluster.gate.touch()
    gate, journal = str(cluster.gate), str(cluster.journal)

    m0 = log.append.send(item=0, gate=gate, journal=journal)
    started = cluster.first_start("drained", 0)
    a = workers[started["pid"]]
    (b,) = (w for w in workers.values() if w is not a)
    later = [log.append.send(item=i) for i in (1, 2, 3)]

    os.kill(a.pid, signal.SIGTERM)
    time.sleep(0.5)
    assert a.alive(), f"SIGTERM ended the worker in the middle of a turn:\n{a.stderr()}"
    assert m0.status() == "queued"

    cluster.gate.unlink()
    opened = time.monotonic()
    try:
        code = a.proc.wait(timeout=STEP)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"worker did not exit after SIGTERM:\n{a.stderr()}") from None
    exited = time.monotonic() - opened
    assert code == 0, a.stderr()
    assert exited < 5, f"took {exited:.1f}s to exit after its turn could finish"
    assert "Traceback" not in a.stderr(), a.stderr()

    # The in-flight turn was finished and committed by A itself.
    assert m0.result() == {"length": 1, "pid": a.pid}
    assert [e["pid"] for e in cluster.events("end", "drained", 0)] == [a.pid]

    # The rest of the mailbox, and a new call, run on B long before A's lease would expire.
    try:
        assert [m.wait(timeout=lease / 3)["length"] for m in later] == [2, 3, 4]
        assert log.append.send(item=4).wait(timeout=lease / 3) == {"length": 5, "pid": b.pid}
    except CallTimeout as exc:
        raise AssertionError(
            f"B could not take the actor: A's lease was not released ({exc})"
        ) from None
    took = time.monotonic() - opened
    assert took < lease / 3, f"B took {took:.1f}s to take the actor: the lease was not released"
    assert log.snapshot() == {"items": [0, 1, 2, 3, 4]}
    assert b.alive()


# --- 6. the article's email: killed after the commit, and after the send ----------------


def test_killed_after_the_commit_another_worker_sends_with_the_same_id(cluster: Cluster) -> None:
    """The decision committed; its worker dies mid-send; another worker drains the effect.

    The handler is entered by two processes with the same ``ctx.id`` (the mail
    provider's idempotency key), and the actor's decision was made once.
    """
    rt = cluster.caller()
    options: dict[str, Any] = {"workers": 1, "effect_timeout": 1.0, "lease_duration": 1.0}
    (first,) = cluster.start_workers(1, **options).values()
    cluster.gate.touch()
    journal = str(cluster.journal)
    user = rt.ref(Welcome, "ann@example.com")
    assert user.send_email(gate=str(cluster.gate), journal=journal) == "sent"

    def sends() -> list[dict[str, Any]]:
        return [e for e in read_journal(cluster.journal) if e["event"].startswith("send:")]

    started = wait_until(sends, STEP, "the effect handler to start")[0]
    assert started["pid"] == first.pid
    os.kill(first.pid, signal.SIGKILL)  # killed after the send began, before it was recorded
    first.kill()
    (second,) = cluster.start_workers(1, **options).values()
    cluster.gate.unlink()
    done = wait_until(
        lambda: [e for e in read_journal(cluster.journal) if e["event"].startswith("sent:")],
        STEP,
        "the effect to be sent by the second worker",
    )
    assert [e["pid"] for e in done] == [second.pid]
    ids = {e["event"].split(":", 1)[1] for e in sends() + done}
    assert len(ids) == 1  # the same ctx.id on both attempts
    assert [e["pid"] for e in sends()] == [first.pid, second.pid]
    assert user.snapshot() == {"status": "sent"}
    assert user.send_email() == "sent"  # a second job finds the decision made

    def effect_statuses() -> list[str]:
        with rt.store.read() as tx:
            return [r[0] for r in tx.rows("SELECT status FROM solid_effects")]

    # The journal's "sent" line is written inside the handler, before the outcome commits.
    wait_until(lambda: effect_statuses() == ["done"], STEP, "the effect to be recorded done")


def test_killed_before_the_commit_nothing_happened_and_the_retry_sends(cluster: Cluster) -> None:
    """The worker dies inside the turn: no state, no effect; the next worker sends once."""
    rt = cluster.caller()
    options: dict[str, Any] = {"workers": 1, "lease_duration": 1.0, "effect_timeout": 5.0}
    (first,) = cluster.start_workers(1, **options).values()
    turn_gate = cluster.dir / "turn-gate"
    turn_gate.touch()
    journal = str(cluster.journal)
    user = rt.ref(Welcome, "bo@example.com")
    message = user.send_email.send(journal=journal, turn_gate=str(turn_gate))
    wait_until(
        lambda: [e for e in read_journal(cluster.journal) if e["event"] == "turn"],
        STEP,
        "the turn to start",
    )
    os.kill(first.pid, signal.SIGKILL)  # killed before the commit
    first.kill()
    with rt.store.read() as tx:
        assert tx.scalar("SELECT COUNT(*) FROM solid_effects") == 0  # nothing happened
    assert user.snapshot() == {"status": "unsent"}
    turn_gate.unlink()
    cluster.start_workers(1, **options)
    assert message.wait(timeout=STEP) == "sent"
    sent = wait_until(
        lambda: [e for e in read_journal(cluster.journal) if e["event"].startswith("sent:")],
        STEP,
        "the email to be sent",
    )
    assert len(sent) == 1
    with rt.store.read() as tx:
        assert tx.scalar("SELECT COUNT(*) FROM solid_effects") == 1
