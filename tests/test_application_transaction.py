"""send() in the application's own transaction: the message commits or rolls back with its rows."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import (
    Column,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    create_engine,
    event,
    select,
)
from sqlalchemy.orm import Session

from solid_objects import Actor, AsyncRuntime, Runtime
from solid_objects.errors import (
    ConfigurationError,
    ForeignDatabase,
    IdempotencyConflict,
    InvalidArguments,
    MessageNotFound,
    Unauthorized,
)

from .conftest import FAST, count_rows, fresh_database

metadata = MetaData()
orders = Table(
    "app_orders",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("item", String(50), nullable=False),
)


class Fulfilment(Actor):
    shipped: list[str] = []

    def ship(self, item: str) -> int:
        self.shipped.append(item)
        return len(self.shipped)


@pytest.fixture
def app_engine(db_url: str) -> Iterator[Engine]:
    """The application's own engine on the runtime's database, with its own table."""
    engine = create_engine(db_url)
    metadata.create_all(engine)
    yield engine
    engine.dispose()


def order_ids(engine: Engine) -> list[int]:
    with engine.connect() as conn:
        return [row[0] for row in conn.execute(select(orders.c.id).order_by(orders.c.id))]


def test_rollback_drops_the_message_and_commit_runs_it_once_after(
    make_runtime: Callable[..., Runtime], app_engine: Engine
) -> None:
    rt = make_runtime()
    with rt:
        ref = rt.ref(Fulfilment, "f")
        with app_engine.connect() as conn:
            conn.execute(orders.insert().values(id=1, item="apple"))
            dropped = ref.ship.with_options(connection=conn).send(item="apple")
            conn.rollback()
        assert order_ids(app_engine) == []
        assert count_rows(rt, "messages") == 0
        with pytest.raises(MessageNotFound):
            dropped.status()

        # The send as the transaction's first statement: still inside it.
        with app_engine.connect() as conn:
            ref.ship.with_options(connection=conn).send(item="first")
            conn.execute(orders.insert().values(id=1, item="first"))
            conn.rollback()
        assert count_rows(rt, "messages") == 0
        # On the servers the new actor's row is made apart, before the application's
        # transaction (store/application.py): it stays, empty (no state, no message).
        empty = "state IS NULL AND next_seq = 1 AND done_seq = 0"
        assert count_rows(rt, "actors", f"NOT ({empty})") == 0
        assert count_rows(rt, "actors") == (0 if rt.engine.dialect.name == "sqlite" else 1)

        with app_engine.connect() as conn:
            conn.execute(orders.insert().values(id=2, item="pear"))
            sent = ref.ship.with_options(connection=conn).send(item="pear")
            # Not committed: the runtime cannot see it, so no turn can have run it.
            assert count_rows(rt, "messages") == 0
            assert ref.snapshot() == {"shipped": []}
            conn.commit()
        assert sent.wait(timeout=20) == 1
        assert ref.snapshot() == {"shipped": ["pear"]}
        assert order_ids(app_engine) == [2]
        assert count_rows(rt, "messages") == 1

        # Without a commit event in the process (a plain engine.begin() block too).
        with app_engine.begin() as conn:
            conn.execute(orders.insert().values(id=3, item="fig"))
            later = ref.ship.with_options(connection=conn).send(item="fig")
        assert later.wait(timeout=20) == 2
        assert ref.snapshot() == {"shipped": ["pear", "fig"]}


def test_an_orm_session_transaction_carries_the_message(
    make_runtime: Callable[..., Runtime], app_engine: Engine
) -> None:
    rt = make_runtime()
    with rt:
        ref = rt.ref(Fulfilment, "s")
        with Session(app_engine) as session:
            session.execute(orders.insert().values(id=1, item="tea"))
            ref.ship.with_options(connection=session).send(item="tea")
            session.rollback()
        assert count_rows(rt, "messages") == 0 and order_ids(app_engine) == []
        with Session(app_engine) as session:
            session.execute(orders.insert().values(id=2, item="rice"))
            sent = ref.ship.with_options(connection=session).send(item="rice")
            session.commit()
        assert sent.wait(timeout=20) == 1
        assert ref.snapshot() == {"shipped": ["rice"]} and order_ids(app_engine) == [2]


def test_a_connection_to_another_database_is_refused_before_writing(
    make_runtime: Callable[..., Runtime], backend: str, tmp_path: Path
) -> None:
    rt = make_runtime()
    (tmp_path / "other").mkdir()
    with fresh_database(backend, tmp_path / "other") as other_url:
        other = create_engine(other_url)
        metadata.create_all(other)
        try:
            with rt, other.connect() as conn:
                conn.execute(orders.insert().values(id=1, item="x"))
                with pytest.raises(ForeignDatabase):
                    rt.ref(Fulfilment, "f").ship.with_options(connection=conn).send(item="x")
                conn.commit()  # the application's own rows are untouched
            assert order_ids(other) == [1]
            assert count_rows(rt, "messages") == 0 and count_rows(rt, "actors") == 0
        finally:
            other.dispose()


def test_misuse_is_refused_with_typed_errors(
    make_runtime: Callable[..., Runtime], app_engine: Engine
) -> None:
    rt = make_runtime()
    with rt:
        ref = rt.ref(Fulfilment, "f")
        with app_engine.connect() as conn:
            with pytest.raises(InvalidArguments, match="cannot wait for its result"):
                ref.ship.with_options(connection=conn)(item="x")
            with pytest.raises(InvalidArguments, match="Connection or Session"):
                ref.ship.with_options(connection=app_engine).send(item="x")
            auto = conn.execution_options(isolation_level="AUTOCOMMIT")
            with pytest.raises(ConfigurationError, match="AUTOCOMMIT"):
                ref.ship.with_options(connection=auto).send(item="x")
        assert count_rows(rt, "messages") == 0


def test_an_idempotency_conflict_leaves_the_application_transaction_usable(
    make_runtime: Callable[..., Runtime], app_engine: Engine
) -> None:
    rt = make_runtime()
    with rt:
        ref = rt.ref(Fulfilment, "f")
        with app_engine.connect() as conn:
            keyed = ref.ship.with_options(connection=conn, idempotency_key="order-1")
            first = keyed.send(item="a")
            assert keyed.send(item="a").id == first.id  # same key, same request: the same message
            with pytest.raises(IdempotencyConflict):
                keyed.send(item="b")
            conn.execute(orders.insert().values(id=1, item="a"))
            conn.commit()
        assert first.wait(timeout=20) == 1
        assert order_ids(app_engine) == [1] and count_rows(rt, "messages") == 1


def test_the_async_face_enqueues_in_the_application_transaction(
    db_url: str, app_engine: Engine
) -> None:
    async def main() -> None:
        runtime = AsyncRuntime(db_url, workers=2, **FAST)
        await runtime.install()
        async with runtime:
            ref = runtime.ref(Fulfilment, "a")
            with app_engine.connect() as conn:
                conn.execute(orders.insert().values(id=1, item="x"))
                sent = await ref.ship.with_options(connection=conn).send(item="x")
                conn.commit()
            assert await sent.wait(timeout=20) == 1
            assert await ref.snapshot() == {"shipped": ["x"]}

    asyncio.run(main())


def test_a_runtime_built_on_the_application_engine_joins_its_write_transaction(
    app_engine: Engine,
) -> None:
    """The library watches this engine's transactions; a send in one is not refused."""
    rt = Runtime(app_engine, **FAST)
    rt.install()
    try:
        with rt:
            ref = rt.ref(Fulfilment, "e")
            with app_engine.connect() as conn:
                conn.execute(orders.insert().values(id=1, item="x"))  # holds SQLite's lock
                sent = ref.ship.with_options(connection=conn).send(item="x")
                conn.commit()
            assert sent.wait(timeout=20) == 1
            assert order_ids(app_engine) == [1]
    finally:
        rt.close()


def test_a_denied_send_writes_nothing_in_the_application_transaction(
    make_runtime: Callable[..., Runtime], app_engine: Engine
) -> None:
    rt = make_runtime(authorize_message=lambda request: request.context == "staff")
    with rt:
        ref = rt.ref(Fulfilment, "f")
        with app_engine.connect() as conn:
            conn.execute(orders.insert().values(id=1, item="x"))
            with pytest.raises(Unauthorized):
                ref.ship.with_options(connection=conn, authorization="guest").send(item="x")
            allowed = ref.ship.with_options(connection=conn, authorization="staff")
            sent = allowed.send(item="y")
            conn.commit()
        assert sent.wait(timeout=20) == 1
        assert count_rows(rt, "messages") == 1 and order_ids(app_engine) == [1]


def test_an_enqueue_in_a_deferred_sqlite_transaction_waits_for_the_write_lock(
    tmp_path: Path,
) -> None:
    """An application transaction begun with a plain BEGIN (as Django's atomic() does)
    enqueues while another connection holds the write lock and then commits: the
    enqueue waits for the lock instead of failing with "database is locked" (it used to
    read first, and a commit in between made its later write fail at once)."""
    url = f"sqlite:///{tmp_path / 'app.db'}"
    rt = Runtime(url, workers=0, **FAST)
    rt.install()
    app = create_engine(url, connect_args={"timeout": 10})

    @event.listens_for(app, "connect")
    def _autocommit_driver(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # SQLAlchemy's recipe: BEGIN issued below

    @event.listens_for(app, "begin")
    def _deferred_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN")

    blocker = sqlite3.connect(tmp_path / "app.db", isolation_level=None)
    errors: list[BaseException] = []
    sent: list[str] = []

    def send_in_the_application_transaction() -> None:
        try:
            with app.begin() as conn:
                ref = rt.ref(Fulfilment, "deferred")
                sent.append(ref.ship.with_options(connection=conn).send(item="tea").id)
        except BaseException as exc:  # reported below
            errors.append(exc)

    try:
        blocker.execute("BEGIN IMMEDIATE")
        blocker.execute("UPDATE solid_schema SET version = version")  # a real write
        thread = threading.Thread(target=send_in_the_application_transaction)
        thread.start()
        time.sleep(0.5)  # the enqueue is now waiting on the lock (or, before, had read)
        blocker.execute("COMMIT")
        thread.join(30)
        assert not errors, errors
        rt.testing.drain()
        assert rt.ref(Fulfilment, "deferred").snapshot() == {"shipped": ["tea"]}
        assert len(sent) == 1
    finally:
        blocker.close()
        app.dispose()
        rt.close()
