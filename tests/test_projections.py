"""Projections: values derived from state, in real columns, never out of step with it.

Each check compares the projection rows with the committed state in SQL (one
statement joining both tables, so one snapshot). All run on SQLite, PostgreSQL and
MariaDB.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa

from solid_objects import Actor, AsyncRuntime, AuthorizationRequest, Rejected, Runtime, projection
from solid_objects.engine.turn import Limits, execute
from solid_objects.errors import (
    ConfigurationError,
    InvalidActorDefinition,
    InvalidArguments,
    LeaseLost,
    MessageFailed,
)
from solid_objects.faults import SimulatedCrash
from solid_objects.store import Claimed
from solid_objects.store.dialect import Tx

from .conftest import FAST
from .test_crash_points import crash_once_at


class Till(Actor, auto_register=False):
    """A cart whose projections cover every column kind."""

    projection_table = "till_projection"
    items: dict[str, int] = {}
    cents: int = 0
    placed_at: str | None = None

    def add(self, sku: str, n: int = 1, cents: int = 150) -> int:
        self.items = {**self.items, sku: self.items.get(sku, 0) + n}
        self.cents += n * cents
        return sum(self.items.values())

    def add_then_refuse(self, sku: str) -> None:
        self.items = {**self.items, sku: 99}
        raise Rejected("no", "refused after changing the state")

    def checkout(self) -> None:
        self.placed_at = "2026-12-05T10:00:00+00:00"

    def touch(self) -> int:
        return len(self.items)

    @projection
    def item_count(self) -> int:
        return sum(self.items.values())

    @projection
    def total(self) -> Decimal:
        return Decimal(self.cents) / 100

    @projection
    def weight(self) -> float:
        return self.item_count() * 0.25

    @projection
    def checked_out(self) -> bool:
        return self.placed_at is not None

    @projection
    def placed(self) -> datetime | None:
        return None if self.placed_at is None else datetime.fromisoformat(self.placed_at)

    @projection
    def first_sku(self) -> str | None:
        return min(self.items) if self.items else None


def expected(state: dict[str, Any]) -> tuple[Any, ...]:
    """What the projections of ``state`` are, computed here apart from the library."""
    items = state["items"]
    count = sum(items.values())
    return (count, Decimal(state["cents"]) / 100, count * 0.25, state["placed_at"] is not None)


def out_of_step(url: str) -> list[tuple[Any, ...]]:
    """Actors whose projection row differs from their committed state (one statement)."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT a.actor_id, a.state, p.item_count, p.total, p.weight, p.checked_out "
                    "FROM solid_actors a LEFT JOIN till_projection p ON p.actor_id = a.actor_id "
                    "WHERE a.actor_type = 'Till'"
                )
            ).all()
    finally:
        engine.dispose()
    wrong = []
    for actor_id, state, count, total, weight, checked in rows:
        if state is None:
            continue
        values = json.loads(state) if isinstance(state, str) else state
        want = expected(values)
        got = (count, None if total is None else Decimal(str(total)), weight, bool(checked))
        if got[0] != want[0] or got[1] != want[1] or got[2] != want[2] or got[3] != want[3]:
            wrong.append((actor_id, want, got))
    return wrong


def test_each_turn_writes_the_row_with_its_state_and_every_kind_reads_back(
    make_runtime: Callable[..., Runtime], db_url: str
) -> None:
    rt = make_runtime(workers=0, actors=[Till])
    till = rt.ref(Till, "t1")
    till.add.send(sku="tea", n=2, cents=199)
    till.add.send(sku="jam")
    till.checkout.send()
    rt.testing.drain()
    table = rt.projection_table(Till)
    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as conn:
            row = conn.execute(sa.select(table).where(table.c.actor_id == "t1")).one()
    finally:
        engine.dispose()
    assert row.item_count == 3
    assert Decimal(str(row.total)) == Decimal("5.48")
    assert row.weight == 0.75
    assert bool(row.checked_out) is True
    placed = row.placed  # timestamptz on PostgreSQL; UTC without a zone elsewhere
    assert placed.replace(tzinfo=placed.tzinfo or UTC) == datetime(2026, 12, 5, 10, tzinfo=UTC)
    assert row.first_sku == "jam"
    assert out_of_step(db_url) == []


def test_a_failed_turn_leaves_the_row_as_it_was(
    make_runtime: Callable[..., Runtime], db_url: str
) -> None:
    rt = make_runtime(workers=0, actors=[Till])
    till = rt.ref(Till, "t2")
    till.add.send(sku="tea")
    refused = till.add_then_refuse.send(sku="tea")
    rt.testing.drain()
    with pytest.raises(Rejected):
        refused.result()
    assert out_of_step(db_url) == []
    with rt.store.read() as tx:
        assert tx.scalar("SELECT item_count FROM till_projection WHERE actor_id = 't2'") == 1


def test_rows_never_go_out_of_step_under_concurrent_calls(
    make_runtime: Callable[..., Runtime], db_url: str
) -> None:
    rt = make_runtime(workers=4, actors=[Till])
    rt.start()
    stop = threading.Event()
    seen: list[list[tuple[Any, ...]]] = []

    def check() -> None:
        while not stop.is_set():
            seen.append(out_of_step(db_url))

    def call(n: int) -> None:
        for i in range(15):
            rt.ref(Till, f"c{(n + i) % 5}").add(sku=f"s{i % 3}", n=1 + i % 2)

    checker = threading.Thread(target=check)
    checker.start()
    callers = [threading.Thread(target=call, args=(n,)) for n in range(6)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    stop.set()
    checker.join()
    assert len(seen) >= 2
    assert [wrong for wrong in seen if wrong] == []
    assert out_of_step(db_url) == []
    with rt.store.read() as tx:
        assert tx.scalar("SELECT SUM(item_count) FROM till_projection") == 6 * (8 * 1 + 7 * 2)


def test_the_application_joins_its_table_with_a_projection(
    make_runtime: Callable[..., Runtime], db_url: str
) -> None:
    rt = make_runtime(workers=0, actors=[Till])
    for cart, n in (("c1", 1), ("c2", 5), ("c3", 3)):
        rt.ref(Till, cart).add.send(sku="tea", n=n)
    rt.testing.drain()
    engine = sa.create_engine(db_url)
    orders = sa.Table(
        "app_customers",
        sa.MetaData(),
        sa.Column("cart_id", sa.String(50), primary_key=True),
        sa.Column("name", sa.String(50)),
    )
    till = rt.projection_table(Till)
    try:
        orders.metadata.create_all(engine)
        with engine.begin() as conn:
            conn.execute(
                orders.insert(),
                [{"cart_id": c, "name": n} for c, n in (("c2", "ann"), ("c3", "bo"))],
            )
            big = conn.execute(
                sa.select(orders.c.name)
                .join(till, till.c.actor_id == orders.c.cart_id)
                .where(till.c.item_count >= 3)
                .order_by(till.c.item_count.desc())
            ).scalars()
            assert list(big) == ["ann", "bo"]
            plain = conn.execute(
                sa.text("SELECT actor_id FROM till_projection WHERE item_count < 3")
            ).scalars()
            assert list(plain) == ["c1"]
    finally:
        engine.dispose()


def test_destroying_or_expiring_an_actor_deletes_its_row(
    make_runtime: Callable[..., Runtime], db_url: str
) -> None:
    rt = make_runtime(workers=0, actors=[Till])
    for cart in ("d1", "d2", "keep"):
        rt.ref(Till, cart).add.send(sku="tea")
    rt.testing.drain()
    rt.ref(Till, "d1").destroy()
    with rt.store.read() as tx:
        assert sorted(r[0] for r in tx.rows("SELECT actor_id FROM till_projection")) == [
            "d2",
            "keep",
        ]
    assert out_of_step(db_url) == []


class Plain(Actor, auto_register=False):
    actor_type = "Shelf"
    items: list[str] = []

    def put(self, sku: str) -> int:
        self.items.append(sku)
        return len(self.items)


def shelf_with(*projections: str) -> type[Actor]:
    """The class of type Shelf, a later version declaring ``projections``."""

    class Shelf(Actor, auto_register=False):
        actor_type = "Shelf"
        items: list[str] = []

        def put(self, sku: str) -> int:
            self.items.append(sku)
            return len(self.items)

        if "count" in projections:

            @projection
            def count(self) -> int:
                return len(self.items)

        if "first" in projections:

            @projection
            def first(self) -> str | None:
                return self.items[0] if self.items else None

    return Shelf


def test_declaring_or_changing_projections_backfills_every_actor(
    make_runtime: Callable[..., Runtime],
) -> None:
    old = make_runtime(workers=0, actors=[Plain])
    for shelf, skus in {"s1": ["a"], "s2": ["b", "c"], "s3": []}.items():
        for sku in skus:
            old.ref(Plain, shelf).put.send(sku=sku)
    old.ref(Plain, "s3").put.send(sku="z")
    old.testing.drain()

    counted = make_runtime(workers=0, actors=[shelf_with("count")])  # install() backfills
    with counted.store.read() as tx:
        rows = dict(tx.rows("SELECT actor_id, count FROM solid_shelf_projection"))
    assert rows == {"s1": 1, "s2": 2, "s3": 1}

    cls = shelf_with("count", "first")
    both = make_runtime(workers=0, actors=[cls])  # a new column
    with both.store.read() as tx:
        rows = {
            r[0]: (r[1], r[2])
            for r in tx.rows("SELECT actor_id, count, first FROM solid_shelf_projection")
        }
    assert rows == {"s1": (1, "a"), "s2": (2, "b"), "s3": (1, "z")}
    both.ref(cls, "s1").put.send(sku="q")
    both.testing.drain()
    with both.store.read() as tx:
        assert tx.row("SELECT count, first FROM solid_shelf_projection WHERE actor_id = 's1'") == (
            2,
            "a",
        )


def test_a_projection_that_cannot_be_stored_fails_its_turn_and_writes_nothing(
    make_runtime: Callable[..., Runtime],
) -> None:
    class Wrong(Actor, auto_register=False):
        n: int = 0

        def bump(self) -> int:
            self.n += 1
            return self.n

        @projection
        def label(self) -> str:
            return "x" * (300 if self.n > 1 else 1)

    rt = make_runtime(workers=0, actors=[Wrong])
    ok = rt.ref(Wrong, "w").bump.send()
    too_long = rt.ref(Wrong, "w").bump.send()
    rt.testing.drain()
    assert ok.result() == 1
    with pytest.raises(MessageFailed) as info:
        too_long.result()
    assert info.value.error["type"] == "InvalidState"
    assert "at most 255" in info.value.error["message"]
    assert rt.ref(Wrong, "w").snapshot() == {"n": 1}
    with rt.store.read() as tx:
        assert tx.scalar("SELECT label FROM solid_wrong_projection") == "x"


def test_a_projection_without_a_storable_annotation_is_refused_at_definition() -> None:
    with pytest.raises(InvalidActorDefinition, match="must be annotated"):

        class NoType(Actor, auto_register=False):
            n: int = 0

            @projection
            def doubled(self):  # type: ignore[no-untyped-def]
                return self.n * 2

    with pytest.raises(InvalidActorDefinition, match="must be annotated"):

        class ListType(Actor, auto_register=False):
            n: int = 0

            @projection
            def many(self) -> list[int]:
                return [self.n]


def test_a_class_without_projections_has_no_projection_table(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0, actors=[Plain])
    with pytest.raises(ConfigurationError, match="no @projection"):
        rt.projection_table(Plain)


@pytest.mark.parametrize(
    "point", ["turn.executed", "commit.body", "commit.committed", "claim.committed"]
)
def test_a_crash_at_a_turn_point_leaves_rows_in_step(db_url: str, point: str) -> None:
    options = {**FAST, "workers": 0, "lease_duration": 0.3, "actors": [Till]}
    dead = Runtime(db_url, **options)
    dead.install()
    with crash_once_at(point) as hit:
        try:
            for n in range(4):
                dead.ref(Till, f"k{n % 2}").add.send(sku=f"s{n}")
            dead.testing.drain()
        except SimulatedCrash:
            pass
    assert hit == [point]
    assert out_of_step(db_url) == []
    survivor = Runtime(db_url, **options)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            time.sleep(0.35)
            survivor.testing.drain()
            with survivor.store.read() as tx:
                if not tx.scalar("SELECT COUNT(*) FROM solid_messages WHERE status = 'queued'"):
                    break
        assert out_of_step(db_url) == []
        with survivor.store.read() as tx:
            assert tx.scalar("SELECT SUM(item_count) FROM till_projection") == 4
    finally:
        survivor.close()
        dead.store.close()
        dead.engine.dispose()


def test_find_pages_through_matching_actors_in_id_order(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0, actors=[Till])
    for n in range(7):
        rt.ref(Till, f"f{n}").add.send(sku="tea", n=n + 1)
    rt.testing.drain()
    till = rt.projection_table(Till)
    first = rt.find(Till, till.c.item_count >= 3, limit=2)
    assert [(f.actor_id, f.values["item_count"]) for f in first.items] == [("f2", 3), ("f3", 4)]
    assert first.next_cursor == "f3"
    rest = rt.find(Till, till.c.item_count >= 3, limit=2, cursor=first.next_cursor)
    last = rt.find(Till, till.c.item_count >= 3, limit=2, cursor=rest.next_cursor)
    assert [f.actor_id for f in rest.items + last.items] == ["f4", "f5", "f6"]
    assert last.next_cursor is None
    assert len(rt.find(Till).items) == 7
    with pytest.raises(InvalidArguments):
        rt.find(Till, limit=0)


def test_find_shows_only_actors_the_query_policy_allows(
    make_runtime: Callable[..., Runtime],
) -> None:
    asked: list[tuple[str, Any]] = []

    def policy(request: AuthorizationRequest) -> bool:
        asked.append((request.actor_id, request.context))
        return request.actor_id.startswith(str(request.context))

    rt = make_runtime(workers=0, actors=[Till], authorize_query=policy)
    for cart in ("ann-1", "ann-2", "bo-1"):
        rt.ref(Till, cart).add.send(sku="tea")
    rt.testing.drain()
    found = rt.find(Till, authorization="ann")
    assert [f.actor_id for f in found.items] == ["ann-1", "ann-2"]
    assert ("bo-1", "ann") in asked
    assert rt.find(Till, authorization="carl").items == []


def test_find_on_the_async_face_is_the_same(
    make_runtime: Callable[..., Runtime], db_url: str
) -> None:
    rt = make_runtime(workers=0, actors=[Till])
    rt.ref(Till, "a1").add.send(sku="tea", n=4)
    rt.testing.drain()

    async def main() -> Any:
        face = AsyncRuntime(db_url, workers=0, actors=[Till])
        try:
            till = face.projection_table(Till)
            return await face.find(Till, till.c.item_count == 4)
        finally:
            await face.close()

    page = asyncio.run(main())
    till = rt.projection_table(Till)
    assert page == rt.find(Till, till.c.item_count == 4)
    assert [f.actor_id for f in page.items] == ["a1"]


def claim_till(rt: Runtime, actor_id: str, owner: str) -> Claimed:
    store = rt.store
    with store.read() as tx:
        pk, generation = tx.row(
            "SELECT pk, lease_generation FROM {actors} WHERE actor_id = :i", {"i": actor_id}
        )
    store.transact(
        lambda tx: tx.run("UPDATE {actors} SET lease_expires_at = 0 WHERE pk = :pk", {"pk": pk})
    )
    claimed = store.transact(
        lambda tx: store.leases.claim(tx, int(pk), int(generation), owner, 60_000)
    )
    assert claimed is not None and claimed.head is not None
    return claimed


def test_a_projection_turn_is_one_statement_on_postgresql_and_a_refused_fence_writes_no_row(
    make_runtime: Callable[..., Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker commits several actors' turns in one transaction and goes on past a
    refused fence: the refused turn's projection row must not be written."""
    rt = make_runtime(workers=0, actors=[Till])
    for actor_id in ("stale", "held"):
        rt.ref(Till, actor_id).add.send(sku="tea")
    claims = {actor_id: claim_till(rt, actor_id, "worker-a") for actor_id in ("stale", "held")}
    definition = rt.registry.get("Till")
    outcomes = {}
    for actor_id, claimed in claims.items():
        assert claimed.head is not None
        instance = definition.instantiate(actor_id, definition.load_state(claimed.state, 1))
        outcome = execute(
            definition, instance, claimed.state, claimed.head, Limits(1 << 20, 1 << 20)
        )
        assert outcome.staged is not None and outcome.staged.projection is not None
        outcomes[actor_id] = outcome
    claim_till(rt, "stale", "worker-b")  # took over between worker-a's turn and its commit

    statements: list[str] = []
    for name in ("run", "row", "rows"):
        original = getattr(Tx, name)

        def counted(self: Tx, template: str, params: Any = None, _original: Any = original) -> Any:
            statements.append(template.split()[0])
            return _original(self, template, params)

        monkeypatch.setattr(Tx, name, counted)
    refused: list[str] = []

    def commit_both(tx: Tx) -> None:
        for actor_id, claimed in claims.items():
            assert claimed.head is not None
            try:
                rt.store.turns.finish_turn(
                    tx,
                    claimed.lease,
                    claimed.head,
                    status="completed",
                    state=outcomes[actor_id].state,
                    state_version=1,
                    result=outcomes[actor_id].result,
                    error=None,
                    attempt=1,
                    lease_ms=60_000,
                    staged=outcomes[actor_id].staged,
                )
            except LeaseLost:
                refused.append(actor_id)

    rt.store.transact(commit_both)
    assert refused == ["stale"]
    if rt.store.dialect.writable_cte:
        assert statements == ["WITH", "WITH"]  # fence, message, projection row: one each
    with rt.store.read() as tx:
        assert tx.rows("SELECT actor_id, item_count FROM till_projection") == [("held", 1)]
        assert tx.scalar("SELECT state FROM {actors} WHERE actor_id = 'stale'") is None
