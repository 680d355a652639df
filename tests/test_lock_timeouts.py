"""A lock held by a stalled transaction bounds a caller's wait by ``busy_timeout``.

Another connection holds the actor's row lock (the whole file's write lock on
SQLite) in an open transaction, as a stalled process would. The enqueue must fail
with ``DatabaseError`` after about ``busy_timeout``, write nothing, and work again
once the lock is gone. Without the bound PostgreSQL waits forever and MariaDB 50 s.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import sqlalchemy

from solid_objects import Actor, Runtime
from solid_objects.errors import DatabaseError

from .conftest import count_rows


class Slot(Actor):
    n: int = 0

    def take(self) -> int:
        self.n += 1
        return self.n


@pytest.mark.timeout(60)
def test_a_held_row_lock_fails_the_enqueue_after_busy_timeout(
    make_runtime: Callable[..., Runtime], db_url: str
) -> None:
    rt = make_runtime(workers=0, busy_timeout=1.0)
    slot = rt.ref(Slot, "s")
    slot.take.send()
    rt.testing.drain()
    holder = sqlalchemy.create_engine(db_url, poolclass=sqlalchemy.pool.NullPool)
    with holder.connect() as conn:
        if holder.dialect.name == "sqlite":
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        conn.exec_driver_sql("UPDATE solid_actors SET updated_at = updated_at")
        with pytest.raises(DatabaseError):
            slot.take.send()
        conn.rollback()
    holder.dispose()
    assert count_rows(rt, "messages") == 1  # the refused enqueue wrote nothing
    slot.take.send()
    rt.testing.drain()
    assert slot.snapshot() == {"n": 2}
    with rt.store.read() as tx:
        settings = rt.store.dialect.settings(tx)
    if rt.engine.dialect.name == "postgresql":
        assert settings["lock_timeout"] == "1s"
    elif rt.engine.dialect.name == "mysql":
        assert settings["lock_wait_timeout"] == "1"
