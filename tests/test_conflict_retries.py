"""Conflicts the server certainly rolled back are run again, not surfaced.

- PostgreSQL forced to SERIALIZABLE on every connection of three runtimes (the
  stand-in for CockroachDB's and YugabyteDB's conflict behaviour), 200 calls from
  threads spread over them to one hot identity: no call fails, each is applied once,
  each returns its own position, each thread's calls keep their order; and the
  server did report serialization failures (the retries are logged), so the run
  proves something.
- MariaDB (1213) and PostgreSQL (40P01): a real deadlock between an enqueue and
  another transaction, the enqueue chosen as the victim: ``send`` returns, and the
  message exists once.
- an enqueue whose COMMIT committed but lost its answer is found by reading its row.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
from sqlalchemy import event

from solid_objects import Actor, Runtime
from solid_objects.errors import DatabaseError

from .conftest import BACKENDS, FAST, count_rows, fresh_database

CALLS = 200
RUNTIMES = 3
THREADS_PER_RUNTIME = 4


class SerialLedger(Actor):
    """One hot identity: every call appends its item and returns the new length."""

    items: list[int] = []

    def add(self, item: int) -> int:
        self.items.append(item)
        return len(self.items)


class DeadlockInbox(Actor):
    n: int = 0

    def bump(self) -> int:
        self.n += 1
        return self.n


def force_serializable(engine: sqlalchemy.Engine) -> None:
    """Every new connection of ``engine`` runs its transactions at SERIALIZABLE.

    Registered after the library's own connect hook (which sets READ COMMITTED), so
    it wins, for this engine's connections only: the shared server is not touched.
    """

    @event.listens_for(engine, "connect")
    def _serializable(dbapi_conn: Any, _record: Any) -> None:
        with dbapi_conn.cursor() as cur:
            cur.execute("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE")
        dbapi_conn.commit()

    engine.dispose()


def server_url(backend: str) -> str:
    variable = {"postgresql": "SOLID_TEST_POSTGRES_URL", "mysql": "SOLID_TEST_MYSQL_URL"}[backend]
    url = os.environ.get(variable)
    if not url:  # with SOLID_TEST_REQUIRE_SERVERS (CI) conftest refuses to start first
        pytest.fail(f"{variable} is not set: the {backend} stand-in tests cannot run")
    return url


@pytest.fixture
def postgres_url(tmp_path: Path) -> Iterator[str]:
    server_url("postgresql")
    with fresh_database("postgresql", tmp_path) as url:
        yield url


@pytest.fixture
def mysql_url(tmp_path: Path) -> Iterator[str]:
    server_url("mysql")
    with fresh_database("mysql", tmp_path) as url:
        yield url


class RetryLog(logging.Handler):
    """Counts the store's "running it again" records."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "running it again" in record.getMessage():
            self.count += 1


@pytest.fixture
def retries() -> Iterator[RetryLog]:
    handler = RetryLog()
    logger = logging.getLogger("solid_objects.store")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def hot_identity_run(
    runtimes: list[Runtime], calls: int, threads_per_runtime: int
) -> tuple[dict[int, int], list[BaseException], dict[int, list[int]]]:
    """``calls`` calls to one identity from threads spread over ``runtimes``.

    Returns what each item's call returned, the errors raised, and each thread's items
    in the order it sent them.
    """
    threads = len(runtimes) * threads_per_runtime
    returned: dict[int, int] = {}
    errors: list[BaseException] = []
    sent: dict[int, list[int]] = {t: [] for t in range(threads)}
    lock = threading.Lock()

    def caller(t: int) -> None:
        ledger = runtimes[t % len(runtimes)].ref(SerialLedger, "hot").with_options(timeout=120)
        for k in range(t, calls, threads):
            item = t * 1000 + k
            sent[t].append(item)
            try:
                position = ledger.add(item)
            except Exception as exc:
                with lock:
                    errors.append(exc)
                continue
            with lock:
                returned[item] = position

    workers = [threading.Thread(target=caller, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=600)
    assert not any(w.is_alive() for w in workers), "a caller thread hung"
    return returned, errors, sent


def check_exactly_once(
    rt: Runtime, returned: dict[int, int], sent: dict[int, list[int]], calls: int
) -> None:
    """Each item applied once, at the position its call returned, in its thread's order."""
    items: list[int] = rt.ref(SerialLedger, "hot").snapshot()["items"]
    assert len(items) == calls
    assert len(set(items)) == calls, "an operation was applied twice"
    position = {item: i + 1 for i, item in enumerate(items)}
    for item, length in returned.items():
        assert position[item] == length, f"item {item} returned {length}"
    for order in sent.values():
        assert [i for i in items if i in set(order)] == order, "a caller's order was not kept"


@pytest.mark.timeout(600)
def test_serializable_postgresql_three_runtimes_one_hot_identity_no_failed_call(
    postgres_url: str, retries: RetryLog
) -> None:
    runtimes: list[Runtime] = []
    try:
        for _ in range(RUNTIMES):
            rt = Runtime(postgres_url, **{**FAST, "workers": 2, "call_timeout": 120.0})
            force_serializable(rt.engine)
            rt.install()
            rt.start()
            runtimes.append(rt)
        with runtimes[0].store.read() as tx:
            assert tx.scalar("SHOW transaction_isolation") == "serializable"
        returned, errors, sent = hot_identity_run(runtimes, CALLS, THREADS_PER_RUNTIME)
        assert errors == [], f"{len(errors)} of {CALLS} calls failed: {errors[:3]!r}"
        check_exactly_once(runtimes[0], returned, sent, CALLS)
        assert retries.count > 0, "no serialization failure happened: the run proves nothing"
        print(f"{CALLS} calls, 0 failed, {retries.count} transactions run again")
    finally:
        for rt in reversed(runtimes):
            rt.close()


@pytest.mark.timeout(120)
def test_a_mariadb_deadlock_victim_enqueue_runs_again(mysql_url: str, retries: RetryLog) -> None:
    rt = Runtime(mysql_url, **{**FAST, "workers": 0})
    rt.install()
    side = sqlalchemy.create_engine(mysql_url, poolclass=sqlalchemy.pool.NullPool)
    try:
        inbox = rt.ref(DeadlockInbox, "victim")
        inbox.bump.send()  # the actor row exists: the next enqueue locks it first
        with side.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE side_lock (id INT PRIMARY KEY)")
            conn.exec_driver_sql("CREATE TABLE side_bulk (id INT PRIMARY KEY)")
            conn.exec_driver_sql("INSERT INTO side_lock VALUES (1)")
            # Every message row the library inserts then needs side_lock's row too.
            conn.exec_driver_sql(
                "CREATE TRIGGER side_lock_on_enqueue AFTER INSERT ON solid_messages "
                "FOR EACH ROW UPDATE side_lock SET id = id WHERE id = 1"
            )
        with side.connect() as conn:
            conn.exec_driver_sql("SET SESSION innodb_lock_wait_timeout = 60")
            # A heavy transaction (InnoDB rolls back the one that changed fewer rows).
            conn.exec_driver_sql("INSERT INTO side_bulk (id) SELECT seq FROM seq_1_to_500")
            conn.exec_driver_sql("UPDATE side_lock SET id = id WHERE id = 1")
            outcome: list[Any] = []

            def send() -> None:
                try:
                    outcome.append(inbox.bump.send())
                except BaseException as exc:
                    outcome.append(exc)

            sender = threading.Thread(target=send)
            sender.start()
            waited = 0.0
            while not _waiting_for_lock(side):  # the enqueue holds the actor
                assert waited < 60, "the enqueue never waited for side_lock"
                time.sleep(0.05)
                waited += 0.05
            # Close the cycle: this transaction now waits for the enqueue's actor row.
            conn.exec_driver_sql(
                "UPDATE solid_actors SET updated_at = updated_at WHERE actor_id = 'victim'"
            )
            conn.commit()
            sender.join(timeout=60)
        assert len(outcome) == 1
        assert not isinstance(outcome[0], BaseException), f"send raised {outcome[0]!r}"
        assert retries.count >= 1, "the enqueue was not the deadlock victim"
        assert count_rows(rt, "messages") == 2  # the victim's re-run wrote once
        with side.begin() as conn:
            conn.exec_driver_sql("DROP TRIGGER side_lock_on_enqueue")
        rt.testing.drain()
        assert inbox.snapshot() == {"n": 2}
    finally:
        side.dispose()
        rt.close()


@pytest.mark.timeout(120)
def test_a_postgresql_deadlock_victim_enqueue_runs_again(
    postgres_url: str, retries: RetryLog
) -> None:
    """40P01: the same cycle as on MariaDB; the other transaction's deadlock_timeout is
    raised for its session only, so the enqueue's own check finds the cycle first."""
    rt = Runtime(postgres_url, **{**FAST, "workers": 0})
    rt.install()
    side = sqlalchemy.create_engine(postgres_url, poolclass=sqlalchemy.pool.NullPool)
    try:
        inbox = rt.ref(DeadlockInbox, "pg-victim")
        inbox.bump.send()
        with side.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE side_lock (id INT PRIMARY KEY)")
            conn.exec_driver_sql("INSERT INTO side_lock VALUES (1)")
            conn.exec_driver_sql(
                "CREATE FUNCTION side_lock_touch() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN UPDATE side_lock SET id = id WHERE id = 1; RETURN NEW; END $$"
            )
            conn.exec_driver_sql(
                "CREATE TRIGGER side_lock_on_enqueue AFTER INSERT ON solid_messages "
                "FOR EACH ROW EXECUTE FUNCTION side_lock_touch()"
            )
        with side.connect() as conn:
            conn.exec_driver_sql("SET deadlock_timeout = '60s'")
            conn.exec_driver_sql("SET lock_timeout = '60s'")
            conn.exec_driver_sql("UPDATE side_lock SET id = id WHERE id = 1")
            outcome: list[Any] = []

            def send() -> None:
                try:
                    outcome.append(inbox.bump.send())
                except BaseException as exc:
                    outcome.append(exc)

            sender = threading.Thread(target=send)
            sender.start()
            waited = 0.0
            while not _pg_waiting_for_lock(side):
                assert waited < 60, "the enqueue never waited for side_lock"
                time.sleep(0.05)
                waited += 0.05
            conn.exec_driver_sql(
                "UPDATE solid_actors SET updated_at = updated_at WHERE actor_id = 'pg-victim'"
            )
            conn.commit()
            sender.join(timeout=60)
        assert len(outcome) == 1
        assert not isinstance(outcome[0], BaseException), f"send raised {outcome[0]!r}"
        assert retries.count >= 1, "the enqueue was not the deadlock victim"
        assert count_rows(rt, "messages") == 2
        with side.begin() as conn:
            conn.exec_driver_sql("DROP TRIGGER side_lock_on_enqueue ON solid_messages")
        rt.testing.drain()
        assert inbox.snapshot() == {"n": 2}
    finally:
        side.dispose()
        rt.close()


def _pg_waiting_for_lock(engine: sqlalchemy.Engine) -> bool:
    """Whether a session of this schema waits for a row lock (the trigger's UPDATE).

    The enqueue's message INSERT is its own statement, or (PostgreSQL's one-statement
    enqueue) part of a ``WITH``.
    """
    with engine.connect() as conn:
        found = conn.exec_driver_sql(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND (query LIKE 'INSERT INTO solid_messages%%' "
            "OR query LIKE 'WITH %%INSERT INTO solid_messages%%')"
        ).scalar()
    return bool(found)


def _waiting_for_lock(engine: sqlalchemy.Engine) -> bool:
    """Whether a transaction on this test's database waits for a row lock (the trigger's)."""
    with engine.connect() as conn:
        found = conn.exec_driver_sql(
            "SELECT COUNT(*) FROM information_schema.innodb_trx t "
            "JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id "
            "WHERE t.trx_state = 'LOCK WAIT' AND p.db = DATABASE()"
        ).scalar()
    return bool(found)


def test_the_backoff_is_jittered_and_bounded() -> None:
    from solid_objects.store.store import _BACKOFF_CAP, backoff

    draws = [backoff(n) for n in range(40) for _ in range(5)]
    assert all(0.0 <= d <= _BACKOFF_CAP for d in draws)
    assert len(set(draws)) > 100  # not in step


class AmbiguousInbox(Actor):
    n: int = 0

    def bump(self) -> int:
        self.n += 1
        return self.n


# SQLite's COMMIT has no unknown outcome (the writer is local): the servers only.
@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "sqlite"], indirect=True)
def test_an_enqueue_whose_commit_answer_was_lost_is_resolved_by_reading(
    make_runtime: Any, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The COMMIT reached the server and committed, then its answer was lost (as when
    the connection drops during COMMIT): the row is there, so ``send`` returns."""
    rt = make_runtime(workers=0)
    inbox = rt.ref(AmbiguousInbox, "a")
    inbox.bump.send()
    dialect = rt.store.dialect
    lost: list[bool] = [True]

    def answer_lost(real: Any) -> Any:
        @contextmanager
        def run(engine: Any, render: Any) -> Iterator[Any]:
            with real(engine, render) as tx:
                yield tx
            if lost and lost.pop():
                raise DatabaseError(
                    "OperationalError: the connection was lost during COMMIT",
                    None,
                    disconnect=True,
                    commit_unknown=True,
                )

        return run

    # A transaction's COMMIT, or a lone enqueue's one autocommit statement (PostgreSQL).
    monkeypatch.setattr(dialect, "write", answer_lost(dialect.write))
    monkeypatch.setattr(dialect, "statement", answer_lost(dialect.statement))
    message = inbox.bump.send()  # without the read: DatabaseError(commit_unknown=True)
    assert not lost, "the injected failure did not happen"
    assert message.status() == "queued"
    assert count_rows(rt, "messages") == 2  # written once, not re-run
    rt.testing.drain()
    assert inbox.snapshot() == {"n": 2}
