"""CockroachDB and YugabyteDB: their URLs and dialects, and their failure modes on stand-ins.

Neither engine can be installed on this machine, so what they share with PostgreSQL
under their documented differences is tested on PostgreSQL made to behave like
them, for the test's own connections only:

- the CockroachDB dialect of the store (``store.dialect.CockroachDBDialect``: no
  NOTIFY, the server's isolation kept, no advisory lock for install) on PostgreSQL
  forced to SERIALIZABLE: concurrent installs from several threads all succeed (the
  losers run again), and three runtimes calling one hot identity with polling only
  lose no call and apply each once, in each caller's order;
- the URL ``cockroachdb+psycopg://`` builds that dialect; ``cockroachdb://`` without
  psycopg2 says which URL works; a YugabyteDB server (``version()`` with ``-YB-``)
  turns off NOTIFY and the advisory lock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from solid_objects import Runtime
from solid_objects.errors import ConfigurationError
from solid_objects.store import store as store_module
from solid_objects.store.dialect.postgresql import CockroachDBDialect, PostgreSQLDialect
from solid_objects.store.schema import SCHEMA_VERSION

from .conftest import FAST, fresh_database
from .test_conflict_retries import (
    RetryLog,
    check_exactly_once,
    force_serializable,
    hot_identity_run,
    retries,  # noqa: F401  (a fixture)
    server_url,
)

CALLS = 100


class StandInCockroachDB(CockroachDBDialect):
    """The CockroachDB dialect on a PostgreSQL server: only the server's name differs
    (PostgreSQL has no ``crdb_internal.cluster_id()``)."""

    identity_sql = PostgreSQLDialect.identity_sql


@pytest.fixture
def cockroach_stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh PostgreSQL schema whose runtimes get the CockroachDB dialect."""
    server_url("postgresql")
    monkeypatch.setattr(store_module, "dialect_for", lambda engine: StandInCockroachDB())
    with fresh_database("postgresql", tmp_path) as url:
        yield url


def stand_in_runtime(url: str, **options: object) -> Runtime:
    rt = Runtime(url, **{**FAST, "call_timeout": 120.0, **options})
    assert isinstance(rt.store.dialect, CockroachDBDialect)
    force_serializable(rt.engine)
    return rt


@pytest.mark.timeout(300)
def test_concurrent_installs_without_an_advisory_lock_all_succeed(cockroach_stand_in: str) -> None:
    runtimes = [stand_in_runtime(cockroach_stand_in, workers=0) for _ in range(4)]
    barrier = threading.Barrier(len(runtimes))
    outcomes: list[object] = []

    def install(rt: Runtime) -> None:
        barrier.wait(timeout=60)
        try:
            outcomes.append(rt.store.install())
        except Exception as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=install, args=(rt,)) for rt in runtimes]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=240)
        assert outcomes == [SCHEMA_VERSION] * len(runtimes), outcomes
        runtimes[0].store.check_installed()
    finally:
        for rt in runtimes:
            rt.close()


@pytest.mark.timeout(600)
def test_serializable_without_notify_three_runtimes_lose_no_call(
    cockroach_stand_in: str,
    retries: RetryLog,  # noqa: F811  (the fixture imported above)
) -> None:
    runtimes: list[Runtime] = []
    try:
        for _ in range(3):
            rt = stand_in_runtime(cockroach_stand_in, workers=2)
            rt.install()
            rt.start()
            runtimes.append(rt)
        for rt in runtimes:
            assert rt.kernel.listener is None  # no LISTEN: the poller finds the work
        with runtimes[0].store.read() as tx:
            assert tx.scalar("SHOW transaction_isolation") == "serializable"
        returned, errors, sent = hot_identity_run(runtimes, CALLS, 3)
        assert errors == [], f"{len(errors)} of {CALLS} calls failed: {errors[:3]!r}"
        check_exactly_once(runtimes[0], returned, sent, CALLS)
        print(f"{CALLS} calls, 0 failed, {retries.count} transactions run again")
    finally:
        for rt in reversed(runtimes):
            rt.close()


def test_a_cockroachdb_url_builds_the_cockroachdb_dialect() -> None:
    rt = Runtime("cockroachdb+psycopg://root@127.0.0.1:1/defaultdb", workers=0)
    try:
        dialect = rt.store.dialect
        assert isinstance(dialect, CockroachDBDialect)
        assert dialect.notify_sql is None
        assert dialect.isolation is None  # SERIALIZABLE, the server's default, is kept
        assert dialect.install_retries > 0
        assert dialect.rolled_back(_Failure("40001"))
        assert not dialect.rolled_back(_Failure("40003"))  # ambiguous: may have committed
    finally:
        rt.close()


def test_a_cockroachdb_url_without_its_driver_names_the_one_that_works() -> None:
    with pytest.raises(ConfigurationError, match=r"cockroachdb\+psycopg://"):
        Runtime("cockroachdb://root@127.0.0.1:1/defaultdb", workers=0)


def test_a_yugabytedb_server_turns_off_notify_and_the_install_lock() -> None:
    dialect = PostgreSQLDialect()
    dialect.adapt("PostgreSQL 15.12-YB-2025.1.0.0-b0 on x86_64-pc-linux-gnu")
    assert dialect.notify_sql is None
    assert dialect.install_retries > 0
    plain = PostgreSQLDialect()
    plain.adapt("PostgreSQL 15.20 (Debian 15.20-0+deb12u1) on x86_64-pc-linux-gnu")
    assert plain.notify_sql is not None and plain.install_retries == 0


class _Failure(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__(sqlstate)
        self.sqlstate = sqlstate
