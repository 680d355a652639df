"""State in native JSON columns: queryable by the application, migrated without loss.

PostgreSQL keeps an actor's state as ``jsonb``, MySQL/MariaDB as ``JSON``, SQLite as
text its JSON functions read. All run on SQLite, PostgreSQL and MariaDB.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from solid_objects import Actor, Runtime
from solid_objects.codec import canonical_json
from solid_objects.errors import MessageFailed
from solid_objects.store.schema import SCHEMA_VERSION

from .conftest import count_rows, db_now


class JsonBasket(Actor):
    items: dict[str, int] = {}
    owner: str = ""
    extra: dict[str, Any] = {}

    def add(self, sku: str, n: int = 1) -> int:
        self.items = {**self.items, sku: self.items.get(sku, 0) + n}
        return sum(self.items.values())

    def keep(self, owner: str, extra: dict[str, Any]) -> None:
        self.owner = owner
        self.extra = extra

    def noop(self) -> int:
        return len(self.items)

    def remind(self) -> None:
        self.schedule(delay=timedelta(seconds=60)).add(sku="reminded")


#: Values whose spelling a JSON column may change: key order, unicode, big and small
#: numbers, escapes, empty containers.
AWKWARD: dict[str, Any] = {
    "b": 1,
    "aa": [1, 2.5, 0.1, -7, 10**30, 1e-07, True, False, None],
    "text": 'naïve ✓ 𝄞 "quoted" \\u0000 back\\slash\nnew line',
    "": {"nested": {"z": [], "y": {}}},
}


@pytest.fixture
def app_engine(db_url: str) -> Iterator[sa.Engine]:
    """The application's own engine on the same database."""
    engine = sa.create_engine(db_url)
    yield engine
    engine.dispose()


def state_column_is_json(runtime: Runtime) -> bool:
    backend = runtime.engine.dialect.name
    with runtime.store.read() as tx:
        if backend == "postgresql":
            kind = tx.scalar("SELECT pg_typeof(state)::text FROM solid_actors LIMIT 1")
            return bool(kind == "jsonb")
        if backend in ("mysql", "mariadb"):
            clauses = tx.rows(
                "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS"
                " WHERE CONSTRAINT_SCHEMA = DATABASE() AND TABLE_NAME = 'solid_actors'"
            )
            return any("json_valid(`state`)" in str(row[0]).lower() for row in clauses)
    return False


def test_state_is_a_native_json_column_on_the_servers(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0)
    ref = rt.ref(JsonBasket, "b1")
    ref.add.send(sku="x")
    rt.testing.drain()
    assert state_column_is_json(rt) is (rt.engine.dialect.name != "sqlite")


def test_the_application_queries_and_joins_state_in_sql(
    make_runtime: Callable[..., Runtime], app_engine: sa.Engine
) -> None:
    rt = make_runtime(workers=0)
    for cart, skus in {"c1": ["a"], "c2": ["a", "b", "c", "d"], "c3": ["a", "b", "c"]}.items():
        for sku in skus:
            rt.ref(JsonBasket, cart).add.send(sku=sku)
    rt.testing.drain()
    orders = sa.Table(
        "app_orders",
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("cart_id", sa.String(50)),
        sa.Column("customer", sa.String(50)),
    )
    orders.metadata.create_all(app_engine)
    actors = rt.actors_table
    with app_engine.begin() as conn:
        conn.execute(
            orders.insert(),
            [{"cart_id": "c2", "customer": "ann"}, {"cart_id": "c3", "customer": "bob"}],
        )
        big = conn.execute(
            sa.select(actors.c.actor_id)
            .where(
                actors.c.actor_type == "JsonBasket", actors.c.state["items"]["b"].as_integer() == 1
            )
            .order_by(actors.c.actor_id)
        ).scalars()
        assert list(big) == ["c2", "c3"]
        joined = conn.execute(
            sa.select(orders.c.customer, actors.c.state)
            .join(actors, sa.and_(actors.c.actor_id == orders.c.cart_id))
            .where(
                actors.c.actor_type == "JsonBasket", actors.c.state["items"]["d"].as_integer() == 1
            )
        ).all()
    assert [(customer, sorted(state["items"])) for customer, state in joined] == [
        ("ann", ["a", "b", "c", "d"])
    ]


def test_state_reads_back_in_the_library_spelling(make_runtime: Callable[..., Runtime]) -> None:
    """A JSON column hands back its own spelling; the library reads the canonical one
    it writes (a turn compares them to skip writing an unchanged state)."""
    rt = make_runtime(workers=0)
    ref = rt.ref(JsonBasket, "s")
    ref.keep.send(owner="o", extra=AWKWARD)
    rt.testing.drain()
    with rt.store.read() as tx:
        stored = tx.scalar("SELECT state FROM solid_actors WHERE actor_id = 's'")
    assert isinstance(stored, str)
    assert stored == canonical_json({"items": {}, "owner": "o", "extra": AWKWARD})

    cold = make_runtime(workers=0)
    cold.ref(JsonBasket, "s").noop.send()
    cold.testing.drain()
    with cold.store.read() as tx:
        again = tx.scalar("SELECT state FROM solid_actors WHERE actor_id = 's'")
    assert again == stored


def test_a_state_holding_u0000_is_refused_on_every_database(
    make_runtime: Callable[..., Runtime],
) -> None:
    """PostgreSQL's jsonb cannot store U+0000; refusing it everywhere keeps state
    portable between databases. The turn fails as invalid state and writes nothing."""
    rt = make_runtime(workers=0)
    ref = rt.ref(JsonBasket, "nul")
    ref.keep.send(owner="fine", extra={})
    in_value = ref.keep.send(owner="a\x00b", extra={})
    in_key = ref.keep.send(owner="x", extra={"k\x00": 1})
    escaped = ref.keep.send(owner="\\u0000 is six characters", extra={})
    rt.testing.drain()
    for refused in (in_value, in_key):
        with pytest.raises(MessageFailed) as info:
            refused.result()
        assert info.value.error["type"] == "InvalidState"
        assert "U+0000" in info.value.error["message"]
    assert escaped.result() is None
    assert ref.snapshot()["owner"] == "\\u0000 is six characters"


def test_a_text_state_database_upgrades_to_json_and_loses_nothing(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0)
    ids = ["plain", "awkward", "empty"]
    rt.ref(JsonBasket, "plain").add.send(sku="p", n=3)
    rt.ref(JsonBasket, "awkward").keep.send(owner="ünï", extra=AWKWARD)
    rt.ref(JsonBasket, "empty").noop.send()
    rt.ref(JsonBasket, "plain").remind.send()
    waiting = rt.ref(JsonBasket, "awkward").add.with_options(delay=60).send(sku="later")
    rt.testing.drain()
    before = {actor_id: rt.ref(JsonBasket, actor_id).snapshot() for actor_id in ids}
    with rt.store.read() as tx:
        texts = dict(tx.rows("SELECT actor_id, state FROM solid_actors"))

    backend = rt.engine.dialect.name
    with rt.store.engine.begin() as conn:  # the column as schema 13 made it
        if backend == "postgresql":
            conn.exec_driver_sql("ALTER TABLE solid_actors ALTER COLUMN state TYPE text")
        elif backend in ("mysql", "mariadb"):
            conn.exec_driver_sql("ALTER TABLE solid_actors MODIFY state LONGTEXT NULL")
        for actor_id, state in texts.items():
            conn.execute(
                sa.text("UPDATE solid_actors SET state = :s WHERE actor_id = :a"),
                {"s": state, "a": actor_id},
            )
        conn.exec_driver_sql("UPDATE solid_schema SET version = 13")
    assert not state_column_is_json(rt)

    upgraded = make_runtime(workers=0)  # install() upgrades
    with upgraded.store.read() as tx:
        assert tx.scalar("SELECT version FROM solid_schema") == SCHEMA_VERSION
        assert dict(tx.rows("SELECT actor_id, state FROM solid_actors")) == texts
    assert state_column_is_json(upgraded) is (backend != "sqlite")
    assert {a: upgraded.ref(JsonBasket, a).snapshot() for a in ids} == before
    assert before["awkward"]["extra"] == AWKWARD

    later = db_now(upgraded) + 61_000
    assert upgraded.testing.run_due_reminders(datetime.fromtimestamp(later / 1000, UTC)) >= 1
    assert upgraded.ref(JsonBasket, "plain").snapshot()["items"] == {"p": 3, "reminded": 1}
    assert upgraded.message(JsonBasket, waiting.id).result() == 1
    assert upgraded.ref(JsonBasket, "awkward").snapshot()["extra"] == AWKWARD
    assert count_rows(upgraded, "messages", "status = 'dead'") == 0
