"""The runtime behind a real PgBouncer (``pool_mode = transaction`` and ``session``).

Each test starts its own ``pgbouncer`` (a subprocess on a free port, ini in a tmp
dir, ``auth_type = trust``) in front of the PostgreSQL of ``SOLID_TEST_POSTGRES_URL``
and a fresh database made for the test (PgBouncer passes no ``search_path``
startup option, so the tests' usual per-schema databases cannot be reached through
it). Install PgBouncer with ``apt-get install -y pgbouncer``; without it these
tests skip, or fail under ``SOLID_TEST_REQUIRE_SERVERS=1`` (CI).

In transaction mode each transaction may run on another server session that
other clients share: the tests check that the library prepares nothing there,
sets nothing for the session, holds no session lock there, and hears wake-ups
only through ``listen_url`` (a direct connection), polling without it. A pool of
one server session makes any leak visible to the next client.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from solid_objects import Actor, Runtime
from solid_objects.doctor import examine
from solid_objects.engine.wakeup import PostgresListener
from solid_objects.errors import ConfigurationError
from tests.apps.procapp import Tally
from tests.test_processes import ROOT, STEP, Cluster, wait_until

pytestmark = pytest.mark.slow

REQUIRED = os.environ.get("SOLID_TEST_REQUIRE_SERVERS") == "1"
SERVER_URL = os.environ.get("SOLID_TEST_POSTGRES_URL")
INSTALL = "apt-get install -y pgbouncer"
#: Session advisory locks held in the current database (pg_locks is server-wide).
ADVISORY = (
    "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _unavailable(reason: str) -> None:
    if REQUIRED:
        raise AssertionError(f"{reason}: the PgBouncer tests cannot run ({INSTALL})")
    pytest.skip(reason)


def _libpq(url: str) -> str:
    """A libpq connection string for a SQLAlchemy URL (psycopg, not SQLAlchemy)."""
    u = make_url(url)
    parts = {"host": u.host, "port": u.port or 5432, "user": u.username, "dbname": u.database}
    if u.password:
        parts["password"] = u.password
    return " ".join(f"{k}={v}" for k, v in parts.items())


class PgBouncer:
    """A private ``pgbouncer`` in front of the test server's PostgreSQL."""

    def __init__(self, pool_mode: str, pool_size: int) -> None:
        binary = shutil.which("pgbouncer") or (
            "/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None
        )
        if SERVER_URL is None:
            _unavailable("SOLID_TEST_POSTGRES_URL is not set")
        if binary is None:
            _unavailable("pgbouncer is not installed")
        assert SERVER_URL is not None and binary is not None
        self.server = make_url(SERVER_URL)
        self.port = free_port()
        # PgBouncer refuses to run as root: it then runs as the postgres user, which
        # must read the ini (a pytest tmp_path is private to root).
        self.dir = Path(tempfile.mkdtemp(prefix="solid-pgbouncer-"))
        self.dir.chmod(0o755)
        user = "postgres" if os.geteuid() == 0 else None
        (self.dir / "users.txt").write_text(f'"{self.server.username}" ""\n')
        (self.dir / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={self.server.host} port={self.server.port or 5432}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.dir / 'users.txt'}\n"
            f"pool_mode = {pool_mode}\ndefault_pool_size = {pool_size}\n"
            "max_client_conn = 1000\nserver_reset_query = DISCARD ALL\n"
            f"logfile = {self.dir / 'pgbouncer.log'}\n"
        )
        if user is not None:
            uid = pwd.getpwnam(user).pw_uid
            for path in (self.dir, *self.dir.iterdir()):
                os.chown(path, uid, -1)
        command = [binary, *(["-u", user] if user else []), str(self.dir / "pgbouncer.ini")]
        self.proc = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        wait_until(self.answers, STEP, "pgbouncer to answer")

    def answers(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"pgbouncer exited:\n{self.log()}")
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
            return True
        except OSError:
            return False

    def log(self) -> str:
        path = self.dir / "pgbouncer.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def url(self, database: str) -> str:
        user = self.server.username
        return f"postgresql+psycopg://{user}@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


class Pooled:
    """A fresh database reached both through PgBouncer (``url``) and directly."""

    def __init__(self, bouncer: PgBouncer) -> None:
        self.bouncer = bouncer
        self.name = f"solid_pgb_{uuid.uuid4().hex[:12]}"
        self.direct = bouncer.server.set(drivername="postgresql+psycopg", database=self.name)
        self.direct_url = self.direct.render_as_string(hide_password=False)
        self.url = bouncer.url(self.name)
        with psycopg.connect(_libpq(str(SERVER_URL)), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"')

    def through_pooler(self) -> psycopg.Connection[Any]:
        """A plain client of the pooler: it gets the server session the library used."""
        return psycopg.connect(_libpq(self.url), autocommit=True, prepare_threshold=None)

    def drop(self) -> None:
        with psycopg.connect(_libpq(str(SERVER_URL)), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


@pytest.fixture
def pooler() -> Iterator[Callable[..., Pooled]]:
    """Start a PgBouncer (``pool_mode``, ``pool_size``) with a fresh database behind it."""
    started: list[tuple[PgBouncer, Pooled]] = []

    def start(pool_mode: str = "transaction", pool_size: int = 20) -> Pooled:
        bouncer = PgBouncer(pool_mode, pool_size)
        try:
            pooled = Pooled(bouncer)
        except BaseException:
            bouncer.stop()
            raise
        started.append((bouncer, pooled))
        return pooled

    yield start
    for bouncer, pooled in started:
        log = bouncer.log()
        bouncer.stop()
        pooled.drop()
        print(f"----- pgbouncer log -----\n{log}")


class Reminded(Actor):
    """Counts its turns and the reminders that fired, so a double or a loss shows."""

    turns: int = 0
    fired: int = 0

    def bump(self) -> int:
        self.turns += 1
        return self.turns

    def arm(self) -> None:
        self.schedule(delay=timedelta(milliseconds=100)).ring()

    def ring(self) -> None:
        self.fired += 1

    def counts(self) -> tuple[int, int]:
        return self.turns, self.fired


#: The application's own engine of the guard test, and what its actor saw there.
APP_ENGINE: dict[str, Any] = {}


class Reader(Actor):
    """Reads through the application's (guarded) engine, then asks the pooler's next
    client whether the server session it gets was left read-only."""

    def read_then_look(self, libpq: str) -> str:
        with APP_ENGINE["engine"].connect() as conn:
            conn.execute(text("SELECT 1"))
            conn.rollback()
            with psycopg.connect(libpq, autocommit=True, prepare_threshold=None) as other:
                row = other.execute("SHOW default_transaction_read_only").fetchone()
            writable = conn.execute(text("SHOW transaction_read_only")).scalar()
        return f"{row[0] if row else None}/{writable}"


#: The classes these runtimes serve (other test modules define actors of the same names).
ACTORS = [Tally, Reminded, Reader]


def runtime(url: str, **options: Any) -> Runtime:
    rt = Runtime(
        url, **{"call_timeout": STEP, "poll_interval": 0.1, "actors": ACTORS, **options}
    )
    rt.install()
    return rt


def test_calls_sends_and_reminders_run_exactly_once_through_a_transaction_pooler(
    pooler: Callable[..., Pooled],
) -> None:
    pooled = pooler("transaction", pool_size=4)
    rt = runtime(pooled.url, pooler="transaction", listen_url=pooled.direct_url, workers=4)
    with rt:
        actor = rt.ref(Reminded, "a")
        # far more executions than psycopg's prepare_threshold (5) of each statement
        assert [actor.bump() for _ in range(40)] == list(range(1, 41))
        sent = [rt.ref(Reminded, f"s{i}").send(Reminded.bump) for i in range(20)]
        for i, message in enumerate(sent):
            assert message.wait(timeout=STEP) == 1, i
        actor.arm()
        wait_until(lambda: actor.counts()[1] == 1, STEP, "the reminder to fire")
        time.sleep(0.5)
        assert actor.counts() == (40, 1)
        assert all(rt.ref(Reminded, f"s{i}").counts() == (1, 0) for i in range(20))


def test_nothing_is_prepared_set_or_locked_for_the_pooled_server_session(
    pooler: Callable[..., Pooled],
) -> None:
    """One server session serves everyone: what the library leaves there, the next
    client gets. The library's own transactions still run at READ COMMITTED with its
    lock_timeout, though this database defaults to REPEATABLE READ."""
    pooled = pooler("transaction", pool_size=1)
    with psycopg.connect(_libpq(pooled.direct_url), autocommit=True) as conn:
        conn.execute(
            f'ALTER DATABASE "{pooled.name}" SET default_transaction_isolation = '
            "'repeatable read'"
        )
    rt = runtime(pooled.url, pooler="transaction", workers=2, busy_timeout=7)
    with rt:
        tally = rt.ref(Tally, "t")
        assert [tally.add(n=1) for _ in range(30)] == list(range(1, 31))
        with rt.store.dialect.write(rt.engine, rt.store.sql) as tx:
            inside = (tx.scalar("SHOW transaction_isolation"), tx.scalar("SHOW lock_timeout"))
        assert inside == ("read committed", "7s")
        # the doctor's round trip runs a runtime of its own: behind the pooler too
        checks = {c.name: c for c in examine(rt).checks}
        assert checks["round trip"].status == "ok", checks["round trip"]
    rt.close()
    with pooled.through_pooler() as conn:
        prepared = conn.execute("SELECT name FROM pg_prepared_statements").fetchall()
        settings = conn.execute(
            "SELECT current_setting('lock_timeout'), "
            "current_setting('default_transaction_isolation')"
        ).fetchone()
        locks = conn.execute(ADVISORY).fetchone()
    assert prepared == []
    assert settings == ("0", "repeatable read")
    assert locks == (0,)


def test_a_guarded_application_engine_leaves_no_read_only_session_behind(
    pooler: Callable[..., Pooled],
) -> None:
    """Inside a turn the guard makes the application's connections read-only: per
    transaction (BEGIN READ ONLY), so the pooler's next client of that server session
    (here the only one) is not refused its writes."""
    pooled = pooler("transaction", pool_size=1)
    rt = runtime(pooled.url, pooler="transaction", workers=1)
    engine = create_engine(pooled.url, connect_args={"prepare_threshold": None})
    APP_ENGINE["engine"] = rt.guard(engine)
    try:
        with rt:
            seen = rt.ref(Reader, "r").read_then_look(_libpq(pooled.url))
    finally:
        APP_ENGINE.clear()
        engine.dispose()
        rt.close()
    assert seen == "off/on"  # the other client writable, this one read-only


def test_an_undeclared_transaction_pooler_is_found_by_a_probe_and_polled(
    pooler: Callable[..., Pooled],
) -> None:
    """Without ``pooler=``, but on an application engine that prepares nothing (so
    nothing else fails loudly), the listener's LISTEN succeeds through the pooler:
    its probe NOTIFY from another connection is never heard, so it stops, the
    process polls (calls still complete) and the doctor says why."""
    pooled = pooler("transaction")
    engine = create_engine(pooled.url, connect_args={"prepare_threshold": None})
    rt = Runtime(engine, workers=1, call_timeout=STEP, actors=ACTORS)
    other = Runtime(engine, workers=0, call_timeout=STEP, actors=ACTORS)
    try:
        rt.install()
        with rt, other:
            listener = other.kernel.listener
            assert isinstance(listener, PostgresListener)
            wait_until(lambda: listener.deaf, STEP, "the probe to go unheard")
            assert not listener.listening.is_set()
            assert [other.ref(Tally, "p").add(n=1) for _ in range(3)] == [1, 2, 3]
            check = next(c for c in examine(other, round_trip=False).checks if c.name == "wake-up")
        assert check.status == "warn" and "probe" in check.detail, check
    finally:
        rt.close()
        other.close()
        engine.dispose()


def test_without_listen_url_wakeups_are_polled_and_the_doctor_says_why(
    pooler: Callable[..., Pooled],
) -> None:
    pooled = pooler("transaction")
    rt = runtime(pooled.url, pooler="transaction", workers=1)
    assert rt.kernel.listener is None
    with rt:
        assert rt.ref(Tally, "x").add(n=2) == 2
        wakeup = next(c for c in examine(rt, round_trip=False).checks if c.name == "wake-up")
    assert wakeup.status == "warn"
    assert "pooler='transaction' and no listen_url" in wakeup.detail
    assert wakeup.advice is not None and "listen_url" in wakeup.advice
    rt.close()


def test_the_session_mark_is_held_on_the_direct_connection_or_not_at_all(
    pooler: Callable[..., Pooled],
) -> None:
    pooled = pooler("transaction", pool_size=1)
    direct = runtime(pooled.url, pooler="transaction", listen_url=pooled.direct_url, workers=1)
    without = runtime(pooled.url, pooler="transaction", workers=1)
    with direct, without:
        wait_until(lambda: direct.kernel.pool.presence.mark.held, STEP, "the mark")
        holder = direct.kernel.pool.presence.mark.session_id()
        assert not without.kernel.pool.presence.mark.held
        with psycopg.connect(_libpq(pooled.direct_url), autocommit=True) as conn:
            held = conn.execute(ADVISORY.replace("COUNT(*)", "pid")).fetchall()
            clients = conn.execute(
                "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = %s AND datname = %s",
                (holder, pooled.name),
            ).fetchone()
        assert held == [(holder,)]  # the direct runtime's only; none through the pooler
        assert clients == (1,)
    direct.close()
    without.close()
    with psycopg.connect(_libpq(pooled.direct_url), autocommit=True) as conn:
        left = conn.execute(ADVISORY).fetchone()
    assert left == (0,)  # closing the process's session freed its mark


@pytest.mark.parametrize("wakeups", ["listen_url", "polling"])
def test_worker_processes_behind_the_pooler_are_woken_by_another_process(
    pooler: Callable[..., Pooled], tmp_path: Path, wakeups: str
) -> None:
    """Workers and callers, each its own process, all through the pooler: with
    ``listen_url`` the caller here hears the workers' NOTIFY on its direct connection
    (its counter says so); without it, it polls."""
    pooled = pooler("transaction")
    options: dict[str, Any] = {"pooler": "transaction"}
    if wakeups == "listen_url":
        options.update(listen_url=pooled.direct_url)
    else:
        options.update(poll_interval=0.2)
    cluster = Cluster(tmp_path, pooled.url)
    try:
        caller = cluster.caller(actors=[Tally], **options)
        caller.start()
        if wakeups == "listen_url":
            assert isinstance(caller.kernel.listener, PostgresListener)
            wait_until(caller.kernel.listener.listening.is_set, STEP, "the caller to LISTEN")
        cluster.start_workers(2, **options)
        tally = caller.ref(Tally, "w")
        assert [tally.add(n=1) for _ in range(10)] == list(range(1, 11))
        out, err = tmp_path / "caller.stdout", tmp_path / "caller.stderr"
        with open(out, "wb") as stdout, open(err, "wb") as stderr:
            done = subprocess.run(
                [sys.executable, "-m", "tests.apps.caller", "w", "3", "5"],
                cwd=ROOT,
                env=cluster.env(**options),
                stdout=stdout,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                timeout=120,
            )
        assert done.returncode == 0, err.read_text()
        assert sorted(json.loads(out.read_text())) == list(range(11, 26))
        assert tally.add(n=0) == 25
        if wakeups == "listen_url":
            assert isinstance(caller.kernel.listener, PostgresListener)
            assert caller.kernel.listener.received >= 11  # one outcome per call at least
        else:
            assert caller.kernel.listener is None
    finally:
        cluster.close()


def test_a_session_mode_pooler_needs_no_option(pooler: Callable[..., Pooled]) -> None:
    """``pool_mode = session`` keeps each client's server session: LISTEN, prepared
    statements and session settings work as on a direct connection. Each client
    connection keeps a server session, so the pool covers both runtimes' bounds."""
    pooled = pooler("session", pool_size=120)
    rt = runtime(pooled.url, workers=2)
    other = runtime(pooled.url, workers=0)
    with rt, other:
        assert isinstance(other.kernel.listener, PostgresListener)
        wait_until(other.kernel.listener.listening.is_set, STEP, "LISTEN")
        tally = other.ref(Tally, "s")
        assert [tally.add(n=1) for _ in range(20)] == list(range(1, 21))
        assert other.kernel.listener.received >= 20  # the outcomes came by NOTIFY
    rt.close()
    other.close()


def test_a_listen_url_that_reaches_another_database_is_reported(
    pooler: Callable[..., Pooled],
) -> None:
    pooled = pooler("transaction")
    assert SERVER_URL is not None
    rt = runtime(pooled.url, pooler="transaction", listen_url=SERVER_URL, workers=0)
    with rt:
        listener = rt.kernel.listener
        assert isinstance(listener, PostgresListener)
        # its probe NOTIFY, sent as the runtime's wake-ups are, never reaches it
        wait_until(lambda: listener.deaf, STEP, "the probe to go unheard")
        wakeup = next(c for c in examine(rt, round_trip=False).checks if c.name == "wake-up")
    assert wakeup.status == "fail", wakeup
    assert "listen_url reaches" in wakeup.detail
    rt.close()


def test_pooler_options_are_checked(tmp_path: Path) -> None:
    sqlite = f"sqlite:///{tmp_path / 'a.db'}"
    with pytest.raises(ConfigurationError, match="pooler must be"):
        Runtime(sqlite, pooler="statement")
    with pytest.raises(ConfigurationError, match="listen_url must be a postgresql"):
        Runtime(sqlite, listen_url="redis://localhost")
    with pytest.raises(ConfigurationError, match="pooler is for PostgreSQL"):
        Runtime(sqlite, pooler="transaction")
