"""runtime.guard(engine): writes that would escape a turn's commit are refused, reads are not."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import Engine, create_engine, text

from solid_objects import Actor, Runtime, guard
from solid_objects.engine.actions import CommitContext
from solid_objects.errors import ConfigurationError, MessageFailed

APP: list[Engine] = []  # the application's own engine, as actor code would import it
RUNTIMES: list[Runtime] = []


def escape(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO app_log (note) VALUES ('escaped')"))


def app_rows() -> int:
    with APP[0].connect() as conn:
        return int(conn.execute(text("SELECT COUNT(*) FROM app_log")).scalar_one())


class Writer(Actor):
    seen: int = 0

    def write(self) -> None:
        escape(APP[0])

    def read(self) -> int:
        self.seen = app_rows()  # reading the application's tables is fine
        return self.seen

    def order(self, via: str) -> None:
        self.commit_action("record", via=via)


def record(ctx: CommitContext, via: str) -> None:
    app_rows()  # a read through another connection is allowed here too
    if via == "ctx":
        ctx.connection.execute(text("INSERT INTO app_log (note) VALUES ('with the turn')"))
    else:
        escape(RUNTIMES[0].engine if via == "runtime" else APP[0])


class Versioned(Actor):
    actor_type = "Versioned"
    count: int = 0

    def bump(self) -> int:
        self.count += 1
        return self.count


def _escaping_migration(state: dict[str, int]) -> dict[str, int]:
    app_rows()
    escape(APP[0])
    return {"total": state["count"]}


def _reading_migration(state: dict[str, int]) -> dict[str, int]:
    return {"total": state["count"] + app_rows()}


class VersionedEscaping(Actor):
    actor_type = "Versioned"
    state_version = 2
    migrations = {1: _escaping_migration}
    total: int = 0

    def bump(self) -> int:
        self.total += 1
        return self.total


class VersionedReading(Actor):
    actor_type = "Versioned"
    state_version = 2
    migrations = {1: _reading_migration}
    total: int = 0

    def bump(self) -> int:
        self.total += 1
        return self.total


@pytest.fixture
def app(db_url: str) -> Iterator[Engine]:
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE app_log (note VARCHAR(50) NOT NULL)"))
    APP[:] = [engine]
    yield engine
    APP.clear()
    RUNTIMES.clear()
    engine.dispose()


def failure(runtime: Runtime, send: Callable[[], object]) -> MessageFailed:
    message = send()
    runtime.testing.drain()
    with pytest.raises(MessageFailed) as info:
        message.result()  # type: ignore[attr-defined]
    return info.value


def test_actor_code_cannot_write_through_a_guarded_engine_but_can_read(
    make_runtime: Callable[..., Runtime], app: Engine
) -> None:
    rt = make_runtime(workers=0, max_attempts=1)
    assert rt.guard(app) is app
    rt.guard(app)  # twice is once
    failed = failure(rt, rt.ref(Writer, "w").write.send)
    assert failed.error["type"] == "ApplicationWriteForbidden"
    assert app_rows() == 0
    read = rt.ref(Writer, "w").read.send()
    rt.testing.drain()
    assert read.result() == 0
    escape(app)  # outside a turn the engine is the application's as ever
    assert app_rows() == 1
    with pytest.raises(ConfigurationError):
        rt.guard("sqlite:///x.db")  # type: ignore[arg-type]


@pytest.mark.parametrize("via", ["runtime", "app"])
def test_a_commit_action_writes_only_through_its_own_connection(
    make_runtime: Callable[..., Runtime], app: Engine, via: str
) -> None:
    rt = make_runtime(workers=0, max_attempts=1)
    RUNTIMES[:] = [rt]
    rt.guard(app)
    rt.commit_action("record")(record)
    failed = failure(rt, lambda: rt.ref(Writer, "w").order.send(via=via))
    assert "ApplicationWriteForbidden" in str(failed.error)
    assert app_rows() == 0
    done = rt.ref(Writer, "w").order.send(via="ctx")
    rt.testing.drain()
    done.result()
    assert app_rows() == 1


def test_a_state_migration_cannot_write_through_a_guarded_engine(
    make_runtime: Callable[..., Runtime], app: Engine
) -> None:
    old = make_runtime(workers=0)
    old.ref(Versioned, "v").bump.send()
    old.testing.drain()
    new = make_runtime(workers=0, max_attempts=1)
    new.guard(app)
    failed = failure(new, new.ref(VersionedEscaping, "v").bump.send)
    assert failed.error["type"] == "StateMigrationError"
    assert "ApplicationWriteForbidden" in str(failed.error)
    assert app_rows() == 0
    reading = make_runtime(workers=0)
    reading.guard(app)
    message = reading.ref(VersionedReading, "v").bump.send()
    reading.testing.drain()
    assert message.result() == 2


def raw_escape(engine: Engine) -> None:
    """A write through a DB-API connection, which passes no SQLAlchemy event."""
    conn = engine.raw_connection()
    try:
        cursor = conn.cursor()
        cursor.execute("INSERT INTO app_log (note) VALUES ('raw')")
        conn.commit()
    finally:
        conn.close()


def raw_read(engine: Engine) -> int:
    conn = engine.raw_connection()
    try:
        cursor = conn.cursor()
        cursor.execute("SELECT COUNT(*) FROM app_log")
        return int(cursor.fetchone()[0])
    finally:
        conn.close()


class RawWriter(Actor):
    def raw(self, via: str) -> None:
        raw_escape(RUNTIMES[0].engine if via == "runtime" else APP[0])

    def raw_read(self) -> int:
        return raw_read(APP[0])

    def hidden(self, statement: str) -> None:
        with APP[0].connect() as conn:
            conn.execute(text(statement))
            conn.commit()


@pytest.mark.parametrize("via", ["app", "runtime"])
def test_a_raw_connection_cannot_write_from_actor_code_but_can_read(
    make_runtime: Callable[..., Runtime], app: Engine, via: str
) -> None:
    rt = make_runtime(workers=0, max_attempts=1)
    RUNTIMES[:] = [rt]
    rt.guard(app)
    failure(rt, lambda: rt.ref(RawWriter, "w").raw.send(via=via))
    assert app_rows() == 0
    read = rt.ref(RawWriter, "w").raw_read.send()
    rt.testing.drain()
    assert read.result() == 0
    # The connections go back to the pool writable: the application writes as ever.
    raw_escape(app)
    raw_escape(rt.engine)
    escape(app)
    assert app_rows() == 3


def test_writes_hidden_in_a_select_are_refused(
    make_runtime: Callable[..., Runtime], app: Engine, backend: str
) -> None:
    rt = make_runtime(workers=0, max_attempts=1)
    rt.guard(app)
    statements = {
        "postgresql": ["SELECT note INTO app_copy FROM app_log", "SELECT setval('app_seq', 5)"],
        "mysql": ["SELECT COUNT(*) INTO @n FROM app_log"],
        "sqlite": [],
    }[backend]
    if backend == "postgresql":
        with app.begin() as conn:
            conn.execute(text("CREATE SEQUENCE app_seq"))
    for statement in statements:
        failed = failure(rt, lambda s=statement: rt.ref(RawWriter, "w").hidden.send(statement=s))
        assert failed.error["type"] == "ApplicationWriteForbidden", statement
    if backend == "postgresql":
        with app.connect() as conn:
            assert conn.execute(text("SELECT to_regclass('app_copy')")).scalar() is None
            assert conn.execute(text("SELECT last_value FROM app_seq")).scalar() == 1


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT note FROM app_log WHERE note LIKE '%walked into the room%'",
        "SELECT note FROM app_log WHERE note = 'please update me'",
        'SELECT note AS "into" FROM app_log',
    ],
)
def test_words_inside_quoted_strings_do_not_make_a_read_a_write(statement: str) -> None:
    assert guard.is_read(statement)
    assert not guard.is_read("SELECT note INTO app_copy FROM app_log")
