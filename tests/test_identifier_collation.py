"""Every identifier compares byte by byte, on every database.

MariaDB's default collation ignores case and accents, so reminders for ``tick`` and
``Tick`` (or ``cafe`` and ``café``) were one row there. Schema 5 makes every text
column of the library's tables ``utf8mb4_bin`` on MySQL/MariaDB, converting an
existing install; SQLite (BINARY) and PostgreSQL (deterministic collations) already
compare bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import JSON, String, Text

from solid_objects import Actor, EffectContext, Runtime
from solid_objects.store.schema import SCHEMA_VERSION, build_metadata

from .conftest import count_rows, db_now


class Clock(Actor):
    fired: list[str] = []

    def arm(self) -> None:
        for name in ("tick", "Tick", "cafe", "café"):
            getattr(self.schedule(delay=timedelta(hours=1)), name)()
        self.emit("ring", on_success="tick")
        self.emit("Ring", on_success="Tick")

    def tick(self, effect_id: str = "") -> None:
        self.fired.append("tick" + ("!" if effect_id else ""))

    def Tick(self, effect_id: str = "") -> None:  # differs from tick by case only
        self.fired.append("Tick" + ("!" if effect_id else ""))

    def cafe(self) -> None:
        self.fired.append("cafe")

    def café(self) -> None:
        self.fired.append("café")


def _text_columns(dialect: Any) -> set[tuple[str, str]]:
    """Every text column of the library's tables, from the schema the code declares; a
    JSON column (an actor's state on the servers) compares values, not collated text."""
    md = build_metadata("solid_")
    return {
        (table.name, column.name)
        for table in md.tables.values()
        for column in table.columns
        if isinstance(column.type, String | Text)
        and not isinstance(column.type.dialect_impl(dialect), JSON)
    }


def _collations(rt: Runtime) -> dict[tuple[str, str], str | None]:
    """(table, column) -> collation of every text column, as the database reports it."""
    name = rt.store.dialect.name
    with rt.store.read() as tx:
        if name == "mysql":
            rows = tx.rows(
                "SELECT table_name, column_name, collation_name FROM information_schema.columns "
                "WHERE table_schema = DATABASE() AND table_name LIKE 'solid%%' "
                "AND collation_name IS NOT NULL"
            )
        elif name == "postgresql":
            rows = tx.rows(
                "SELECT table_name, column_name, collation_name FROM information_schema.columns "
                "WHERE table_schema = current_schema() AND table_name LIKE 'solid%%' "
                "AND data_type IN ('character varying', 'character', 'text')"
            )
        else:
            tables = [r[0] for r in tx.rows("SELECT name FROM sqlite_master WHERE type = 'table'")]
            rows = []
            for table in tables:
                sql = str(tx.scalar(f"SELECT sql FROM sqlite_master WHERE name = '{table}'"))
                assert "collate" not in sql.lower(), sql  # BINARY, the default, everywhere
                for column in tx.rows(f"SELECT name, type FROM pragma_table_info('{table}')"):
                    if "CHAR" in column[1].upper() or "TEXT" in column[1].upper():
                        rows.append((table, column[0], None))
    return {(str(t), str(c)): None if k is None else str(k) for t, c, k in rows}


def _assert_byte_exact(rt: Runtime) -> None:
    found = _collations(rt)
    expected = _text_columns(rt.engine.dialect)
    assert expected <= set(found), expected - set(found)
    name = rt.store.dialect.name
    if name == "mysql":
        assert {k: v for k, v in found.items() if v != "utf8mb4_bin"} == {}
    elif name == "postgresql":
        with rt.store.read() as tx:
            for collation in {v for v in found.values() if v is not None}:
                assert tx.scalar(
                    "SELECT collisdeterministic FROM pg_collation WHERE collname = :c",
                    {"c": collation},
                )
    for column in [
        ("solid_reminders", "operation"),
        ("solid_reminders", "rkey"),
        ("solid_messages", "operation"),
        ("solid_messages", "idempotency_key"),
        ("solid_effects", "name"),
        ("solid_effects", "on_success"),
        ("solid_effects", "on_failure"),
        ("solid_actors", "actor_type"),
        ("solid_actors", "actor_id"),
    ]:
        assert column in found, column


def test_every_text_column_compares_byte_by_byte(make_runtime: Callable[..., Runtime]) -> None:
    _assert_byte_exact(make_runtime(workers=0))


def _arm_and_fire(rt: Runtime) -> list[str]:
    rt.ref(Clock, "c").arm.send()
    rt.testing.drain()
    assert count_rows(rt, "reminders") == 4
    assert count_rows(rt, "effects") == 2
    later = datetime.fromtimestamp(db_now(rt) / 1000, UTC) + timedelta(hours=2)
    rt.testing.run_due_reminders(later)
    return sorted(rt.ref(Clock, "c").snapshot()["fired"])


def _runtime_with_effects(make_runtime: Callable[..., Runtime]) -> Runtime:
    rt = make_runtime(workers=0)

    @rt.effect("ring")
    def ring(ctx: EffectContext) -> None:
        pass

    @rt.effect("Ring")
    def ring_upper(ctx: EffectContext) -> None:
        pass

    return rt


EXPECTED = sorted(["tick", "Tick", "cafe", "café", "tick!", "Tick!"])


def test_names_that_differ_in_case_or_accents_are_different(
    make_runtime: Callable[..., Runtime],
) -> None:
    assert _arm_and_fire(_runtime_with_effects(make_runtime)) == EXPECTED


def test_an_install_of_schema_4_is_converted_to_byte_exact_text(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = _runtime_with_effects(make_runtime)
    with rt.store.engine.begin() as conn:
        if rt.store.dialect.name == "mysql":
            # What schema 4 created: columns without a collation of their own took the
            # server's default, which ignores case and accents.
            for table in ("solid_reminders", "solid_messages", "solid_effects"):
                conn.exec_driver_sql(
                    f"ALTER TABLE {table} CONVERT TO CHARACTER SET utf8mb4 "
                    "COLLATE utf8mb4_general_ci"
                )
        conn.exec_driver_sql("UPDATE solid_schema SET version = 4")
    upgraded = _runtime_with_effects(make_runtime)  # install() runs the migration
    with upgraded.store.read() as tx:
        assert tx.scalar("SELECT version FROM solid_schema") == SCHEMA_VERSION
    _assert_byte_exact(upgraded)
    assert _arm_and_fire(upgraded) == EXPECTED
