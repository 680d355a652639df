"""PostgreSQL failover under load: a Patroni switchover, then the primary killed.

Not part of the ordinary suite: it needs the cluster of ``scripts/patroni`` and is
collected only when ``SOLID_TEST_PATRONI_URL`` holds its multi-host URL::

    scripts/patroni start
    SOLID_TEST_PATRONI_URL=$(scripts/patroni url) python -m pytest -q -s tests/test_patroni.py
    scripts/patroni stop

Two runtimes (two workers each) on the URL ``host=127.0.0.1:5451&host=127.0.0.1:5452
&target_session_attrs=read-write``, six caller threads on one hot identity. Under that
load: a planned switchover, then the new primary SIGKILLed (Patroni promotes the
synchronous replica), then the killed node started again (it rejoins as the
synchronous standby). No acknowledged call is
lost or applied twice, each thread's calls keep their order, a call that raised had
not committed unless its error said the commit's outcome was unknown, both runtimes'
LISTEN connections come back on the new primary, and an enqueue in the application's
own transaction works against the new primary.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy

from solid_objects import Runtime
from solid_objects.errors import DatabaseError

from .conftest import FAST
from .test_conflict_retries import SerialLedger

URL = os.environ.get("SOLID_TEST_PATRONI_URL", "")
if not URL:  # tests/conftest.py does not collect this module then
    raise pytest.UsageError("tests/test_patroni.py needs SOLID_TEST_PATRONI_URL (scripts/patroni)")

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "patroni"
THREADS = 6


@pytest.fixture
def patroni_url() -> Iterator[str]:
    """A fresh schema on the cluster; dropped afterwards, retried while a node restarts."""
    name = f"solid_t_{uuid.uuid4().hex[:12]}"
    admin = sqlalchemy.create_engine(URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"CREATE SCHEMA {name}")
        base = sqlalchemy.engine.make_url(URL)
        yield base.update_query_dict({"options": f"-csearch_path={name}"}).render_as_string(
            hide_password=False
        )
        for attempt in range(20):
            try:
                with admin.connect() as conn:
                    conn.exec_driver_sql(f"DROP SCHEMA {name} CASCADE")
                return
            except sqlalchemy.exc.OperationalError:
                if attempt == 19:
                    raise
                admin.dispose()
                time.sleep(3)
    finally:
        admin.dispose()


def patroni(*args: str) -> None:
    subprocess.run([str(SCRIPT), *args], check=True, timeout=300)


def listeners(url: str) -> int:
    """LISTEN sessions on the server the URL reaches now (the primary)."""
    engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)
    try:
        with engine.connect() as conn:
            return int(
                conn.exec_driver_sql(
                    "SELECT COUNT(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN%%'"
                ).scalar_one()
            )
    finally:
        engine.dispose()


@pytest.mark.timeout(900)
def test_switchover_and_failover_under_load_lose_no_acknowledged_call(patroni_url: str) -> None:
    runtimes: list[Runtime] = []
    stop = threading.Event()
    lock = threading.Lock()
    returned: dict[int, int] = {}
    raised: dict[int, list[str]] = {}
    sent: dict[int, list[int]] = {t: [] for t in range(THREADS)}
    try:
        for i in range(2):
            rt = Runtime(
                patroni_url, **{**FAST, "workers": 2, "call_timeout": 60.0, "lease_duration": 3.0}
            )
            if i == 0:
                rt.install()
            rt.start()
            runtimes.append(rt)

        def caller(t: int) -> None:
            ledger = runtimes[t % 2].ref(SerialLedger, "hot").with_options(timeout=60)
            k = 0
            while not stop.is_set():
                item = t * 100_000 + k
                k += 1
                sent[t].append(item)
                try:
                    position = ledger.add(item)
                except Exception as exc:
                    unknown = isinstance(exc, DatabaseError) and exc.commit_unknown
                    with lock:
                        raised.setdefault(item, []).append(
                            f"{type(exc).__name__}{'(commit_unknown)' if unknown else ''}"
                        )
                    time.sleep(0.2)
                    continue
                with lock:
                    returned[item] = position

        def until(count: int, what: str) -> int:
            deadline = time.monotonic() + 300
            while True:
                with lock:
                    if len(returned) >= count:
                        return len(returned)
                assert time.monotonic() < deadline, f"no progress: {what}"
                time.sleep(0.1)

        app = sqlalchemy.create_engine(patroni_url)
        with app.begin() as conn:  # the runtime now knows which server it reaches
            runtimes[0].ref(SerialLedger, "app").add.with_options(connection=conn).send(0)
        threads = [threading.Thread(target=caller, args=(t,)) for t in range(THREADS)]
        for th in threads:
            th.start()
        before = until(60, "before the switchover")
        patroni("switchover")
        after_switch = until(before + 60, "after the switchover")
        patroni("wait-sync")  # the old primary streams again as the synchronous standby
        patroni("kill-leader")
        after_kill = until(after_switch + 60, "after the primary was killed")
        stop.set()
        for th in threads:
            th.join(timeout=120)
        assert not any(th.is_alive() for th in threads)

        items: list[int] = runtimes[0].ref(SerialLedger, "hot").snapshot()["items"]
        assert len(items) == len(set(items)), "an operation was applied twice"
        position = {item: i + 1 for i, item in enumerate(items)}
        for item, length in returned.items():
            assert position.get(item) == length, f"acknowledged item {item} lost or moved"
        for item in items:
            assert item in returned or item in raised, "applied but never sent"
        for order in sent.values():
            mine = set(order)
            assert [i for i in items if i in mine] == [i for i in order if i in position]
        committed_yet_raised = [
            item
            for item, errors in raised.items()
            if item in position
            and item not in returned
            and not any("commit_unknown" in e for e in errors)
        ]
        assert not committed_yet_raised, f"raised without commit_unknown, yet committed: {raised}"

        # Both runtimes' wake-up listeners came back on the new primary by themselves.
        deadline = time.monotonic() + 120
        while listeners(patroni_url) < 2:
            assert time.monotonic() < deadline, "the LISTEN connections did not come back"
            time.sleep(0.5)
        # An enqueue in the application's transaction reaches the new primary (another
        # server than the one the runtime saw before: not a foreign database).
        app.dispose()
        with app.begin() as conn:
            runtimes[0].ref(SerialLedger, "app").add.with_options(connection=conn).send(1)
        app.dispose()
        assert runtimes[1].ref(SerialLedger, "app").add(2) == 3
        patroni("start")  # the killed node rejoins (pg_rewind) ...
        patroni("wait-sync")  # ... and streams as the synchronous standby again
        print(
            f"patroni: {len(returned)} calls acknowledged ({before} before the switchover, "
            f"{after_switch - before} after it, {after_kill - after_switch} after the "
            f"failover), {len(raised)} raised "
            f"({sorted({e for errors in raised.values() for e in errors})}), "
            f"{len(set(raised) & set(position))} of those committed; 0 acknowledged lost"
        )
    finally:
        stop.set()
        for rt in reversed(runtimes):
            rt.close()
