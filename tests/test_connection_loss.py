"""The servers kill the library's connections under load: no acknowledged work is lost.

PostgreSQL: ``pg_terminate_backend``; MariaDB: ``KILL``. Calls whose enqueue or
wait hit a dead connection may fail, but every call that returned was committed
exactly once, and every message that was enqueued runs.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

import pytest
import sqlalchemy
from sqlalchemy.engine import make_url

from solid_objects import Actor, Runtime
from solid_objects.errors import SolidObjectsError

from .conftest import BACKENDS, count_rows

SERVERS = [b for b in BACKENDS if b != "sqlite"]


class Account(Actor):
    credits: int = 0

    def credit(self) -> int:
        self.credits += 1
        return self.credits


def tagged(db_url: str, name: str) -> str:
    url = make_url(db_url)
    if url.get_backend_name() == "postgresql":
        return url.update_query_dict({"application_name": name}).render_as_string(False)
    return db_url


def kill_connections(admin: sqlalchemy.Engine, backend: str, name: str, database: str) -> int:
    with admin.connect() as conn:
        if backend == "postgresql":
            rows = conn.exec_driver_sql(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                f"WHERE application_name = '{name}' AND pid <> pg_backend_pid()"
            ).all()
            return len(rows)
        ids = conn.exec_driver_sql(
            "SELECT id FROM information_schema.processlist "
            f"WHERE db = '{database}' AND id <> CONNECTION_ID()"
        ).all()
        for (pid,) in ids:
            try:
                conn.exec_driver_sql(f"KILL {pid}")
            except sqlalchemy.exc.DBAPIError:
                pass  # it ended by itself meanwhile
        return len(ids)


@pytest.mark.parametrize("backend", SERVERS, indirect=True)
def test_killed_connections_lose_no_acknowledged_call(
    backend: str, db_url: str, make_runtime: Callable[..., Runtime]
) -> None:
    name = f"solid-{uuid.uuid4().hex[:8]}"
    database = make_url(db_url).database or ""
    rt = Runtime(
        tagged(db_url, name),
        workers=4,
        call_timeout=30,
        lease_duration=1.0,
        retry_base_delay=0.02,
        retry_max_delay=0.1,
        poll_interval=0.05,
    )
    rt.install()
    admin = sqlalchemy.create_engine(db_url, isolation_level="AUTOCOMMIT")
    results: dict[str, list[int]] = {f"acct{i}": [] for i in range(4)}
    failures: list[BaseException] = []
    stop = threading.Event()

    def caller(actor: str) -> None:
        ref = rt.ref(Account, actor)
        while not stop.is_set():
            try:
                results[actor].append(ref.credit())
            except SolidObjectsError as exc:  # the enqueue itself hit a dead connection
                failures.append(exc)

    killed = 0
    with rt:
        threads = [threading.Thread(target=caller, args=(a,)) for a in results]
        for t in threads:
            t.start()
        for _ in range(8):
            time.sleep(0.25)
            killed += kill_connections(admin, backend, name, database)
        stop.set()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
        deadline = time.monotonic() + 30  # everything enqueued runs
        while count_rows(rt, "messages", "status <> 'completed'") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert count_rows(rt, "messages", "status <> 'completed'") == 0
        for actor, got in results.items():
            committed = count_rows(rt, "messages", f"actor_id = '{actor}'")
            assert rt.ref(Account, actor).snapshot()["credits"] == committed
            assert len(got) == len(set(got))  # no result was handed out twice
            assert set(got) <= set(range(1, committed + 1))
    rt.close()
    admin.dispose()
    assert killed > 0
    assert sum(len(g) for g in results.values()) > 0


@pytest.mark.parametrize("backend", SERVERS, indirect=True)
def test_a_pooled_connection_the_server_closed_while_idle_is_replaced_unseen(
    backend: str, db_url: str
) -> None:
    # The pool pings only connections that sat idle (no ping per transaction): after
    # a restart or an idle-timeout on the server, a read must not fail on a dead one.
    name = f"solid-{uuid.uuid4().hex[:8]}"
    database = make_url(db_url).database or ""
    rt = Runtime(tagged(db_url, name), workers=0, call_timeout=10)
    rt.install()
    admin = sqlalchemy.create_engine(db_url, isolation_level="AUTOCOMMIT")
    try:
        ref = rt.ref(Account, "idle")
        ref.credit.send()
        assert ref.snapshot() == {"credits": 0}
        time.sleep(1.5)  # longer than store.dialect.pool.PING_AFTER_IDLE
        assert kill_connections(admin, backend, name, database) > 0
        for _ in range(3):
            assert ref.snapshot() == {"credits": 0}
            assert ref.credit.send().status() == "queued"
    finally:
        rt.close()
        admin.dispose()
