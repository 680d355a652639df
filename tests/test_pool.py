"""The servers' connection pool: no round trip wasted, no transaction left open.

The pool neither pings nor rolls back on every checkout and return
(``store.dialect``): a connection whose read left a transaction open must still be
rolled back when it goes back to the pool, or its locks would block others.
"""

from __future__ import annotations

import pytest
import sqlalchemy
from sqlalchemy.engine import make_url

from solid_objects import Actor, Runtime

from .conftest import BACKENDS

SERVERS = [b for b in BACKENDS if b != "sqlite"]


class Tally(Actor):
    n: int = 0

    def add(self) -> int:
        self.n += 1
        return self.n


@pytest.mark.parametrize("backend", SERVERS, indirect=True)
def test_a_read_does_not_leave_its_transaction_open_in_the_pool(
    backend: str, db_url: str
) -> None:
    rt = Runtime(db_url, workers=0)
    rt.install()
    admin = sqlalchemy.create_engine(db_url, isolation_level="AUTOCOMMIT")
    try:
        ref = rt.ref(Tally, "t")
        sent = ref.add.send()
        for _ in range(5):  # reads of both tables, on pooled connections
            assert ref.snapshot() == {"n": 0}
            assert sent.status() == "queued"
        with admin.connect() as conn:
            # A transaction still open on a pooled connection holds a lock on the
            # tables it read: this DDL would wait for it, and time out.
            if backend == "postgresql":
                conn.exec_driver_sql("SET lock_timeout = '3s'")
            else:
                conn.exec_driver_sql("SET SESSION lock_wait_timeout = 3")
            conn.exec_driver_sql("ALTER TABLE solid_actors ADD COLUMN probe INTEGER")
            conn.exec_driver_sql("ALTER TABLE solid_actors DROP COLUMN probe")
        assert make_url(db_url).get_backend_name() in ("postgresql", "mysql")
    finally:
        rt.close()
        admin.dispose()
