"""A call from a thread that holds SQLite's write lock is refused at once.

The application writes through its own Engine (the one it gave ``Runtime``) and, before
committing, calls an actor. On SQLite the library's writer then waits for the lock that
very thread holds: the old code blocked for ``busy_timeout`` and raised
``DatabaseError``. Now the call (and ``send()``) raises ``SyncInsideTransaction`` and
writes nothing. On the servers nothing blocks, so nothing is refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import sqlalchemy
from sqlalchemy import Engine, text

from solid_objects import Actor, AsyncRuntime, Runtime, SyncInsideTransaction

from .conftest import FAST, count_rows


class Tally(Actor):
    n: int = 0

    def bump(self) -> int:
        self.n += 1
        return self.n


@pytest.fixture
def app_engine(db_url: str) -> Iterator[Engine]:
    engine = sqlalchemy.create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE notes (body VARCHAR(40))"))
    yield engine
    engine.dispose()


def runtime_on(engine: Engine) -> Runtime:
    # busy_timeout is short only so that the old code's wait ends soon; the outcome
    # (which exception) is what the test checks.
    rt = Runtime(engine, **{**FAST, "workers": 2, "busy_timeout": 3.0})
    rt.install()
    return rt


@pytest.mark.timeout(120)
def test_a_call_inside_the_applications_write_transaction_is_refused_on_sqlite(
    app_engine: Engine, backend: str
) -> None:
    rt = runtime_on(app_engine)
    tally = rt.ref(Tally, "t")
    try:
        with rt:
            assert tally.bump() == 1
            with app_engine.begin() as conn:
                conn.execute(text("INSERT INTO notes VALUES ('before the call')"))
                if backend == "sqlite":
                    with pytest.raises(SyncInsideTransaction):
                        tally.bump()
                    with pytest.raises(SyncInsideTransaction):
                        tally.bump.send()
                else:  # the servers lock rows, not the database: nothing to refuse
                    assert tally.bump() == 2
            expected = 1 if backend == "sqlite" else 2
            assert count_rows(rt, "messages") == expected  # the refused ones wrote nothing
            assert tally.bump() == expected + 1  # committed: calls work again
            with app_engine.connect() as conn:  # a read-only transaction is no obstacle
                conn.execute(text("SELECT COUNT(*) FROM notes")).scalar()
                assert tally.bump() == expected + 2
    finally:
        rt.close()


@pytest.mark.timeout(120)
def test_the_async_face_refuses_it_too(app_engine: Engine, backend: str) -> None:
    art = AsyncRuntime(app_engine, **{**FAST, "workers": 2, "busy_timeout": 3.0})
    art.sync.install()

    async def main() -> None:
        async with art:
            tally = art.ref(Tally, "a")
            with app_engine.begin() as conn:  # held by the event loop's own thread
                conn.execute(text("INSERT INTO notes VALUES ('async')"))
                if backend == "sqlite":
                    with pytest.raises(SyncInsideTransaction):
                        await tally.bump()
                else:
                    assert await tally.bump() == 1
            assert await tally.bump() == (1 if backend == "sqlite" else 2)

    asyncio.run(main())


class _Open:
    """What an integration knows: the application transaction this thread is in."""

    def __init__(self) -> None:
        self.connection: sqlalchemy.Connection | None = None
        self.asked: list[tuple[str, str]] = []

    def finder(self, kind: str, what: str) -> sqlalchemy.Connection | None:
        self.asked.append((kind, what))
        if self.connection is not None and kind == "call":
            raise SyncInsideTransaction(f"{what} inside the open transaction")
        return self.connection


@pytest.mark.timeout(120)
@pytest.mark.parametrize("face", ["sync", "async"])
def test_an_enlisting_finder_puts_sends_in_the_open_transaction_and_refuses_calls(
    app_engine: Engine, face: str
) -> None:
    """``Runtime.enlist_sends``: a send without ``connection=`` is written in the
    transaction the finder names (rolled back: no message; committed: it runs once);
    a call there raises the finder's error and writes nothing."""
    art = AsyncRuntime(app_engine, **{**FAST, "workers": 2, "busy_timeout": 3.0})
    rt = art.sync
    rt.install()
    opened = _Open()
    (rt if face == "sync" else art).enlist_sends(opened.finder)

    async def main() -> None:
        async with art:
            sync_tally, async_tally = rt.ref(Tally, face), art.ref(Tally, face)

            async def send() -> None:
                if face == "sync":
                    sync_tally.bump.send()
                else:
                    await async_tally.bump.send()

            async def call() -> int:
                if face == "sync":
                    return sync_tally.bump()
                return int(await async_tally.bump())

            with app_engine.connect() as conn:
                conn.begin()
                opened.connection = conn
                await send()
                with pytest.raises(SyncInsideTransaction):
                    await call()
                conn.rollback()
            opened.connection = None
            assert count_rows(rt, "messages") == 0  # rolled back with the application
            with app_engine.connect() as conn:
                conn.begin()
                opened.connection = conn
                await send()
                conn.commit()
            opened.connection = None
            assert await call() == 2  # the committed send ran once, then this call
            assert count_rows(rt, "messages") == 2

    try:
        asyncio.run(main())
    finally:
        rt.close()
    assert ("send", "sending Tally.bump()") in opened.asked
    assert ("call", "calling Tally.bump()") in opened.asked
