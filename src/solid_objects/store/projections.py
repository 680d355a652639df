"""SQL of projection tables: one row per actor of a type, with a column per projection.

A turn that changed its actor's state upserts the row inside its fenced commit
(:meth:`ProjectionStatements.write`); destroying or expiring an actor deletes the row
in the same transaction. The tables are the application's to read and join; their
names and definitions are recorded in ``{prefix}projections`` (schema 15), so a
changed definition is noticed and the rows are computed again
(``engine/projections.py``), and ``empty_tables`` finds them.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Double,
    Engine,
    MetaData,
    Numeric,
    String,
    Table,
    inspect,
    select,
    text,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.exc import SQLAlchemyError

from ..writes import ProjectionSpec, StagedProjection
from .dialect import Dialect, Tx

_KIND_TYPES: dict[str, Any] = {
    "int": BigInteger(),
    "float": Double(),
    "str": String(255).with_variant(
        mysql.VARCHAR(255, charset="utf8mb4", collation="utf8mb4_bin"), "mysql", "mariadb"
    ),
    "bool": Boolean(),
    "datetime": DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb"),
    "decimal": Numeric(38, 10),
}


class ProjectionStatements:
    """Projection tables of one store: their DDL, the upsert a commit runs, deletes."""

    def __init__(self, engine: Engine, dialect: Dialect, prefix: str) -> None:
        self.engine = engine
        self.dialect = dialect
        self.prefix = prefix
        self._quote = engine.dialect.identifier_preparer.quote
        #: actor type -> its table's name, for every spec this process has made ready.
        self._tables: dict[str, str] = {}
        self._upserts: dict[str, str] = {}
        self._table_objects: dict[str, Table] = {}
        self._lock = threading.Lock()

    # --- the tables ---------------------------------------------------------------------

    def table_name(self, spec: ProjectionSpec) -> str:
        """``projection_table`` when the class sets it, else ``{prefix}{type}_projection``."""
        if spec.table is not None:
            return spec.table
        stem = re.sub(r"[^a-z0-9_]", "_", spec.actor_type.lower())
        return f"{self.prefix}{stem}"[: 63 - len("_projection")] + "_projection"

    def table(self, spec: ProjectionSpec) -> Table:
        """The projection table as SQLAlchemy Core sees it (for DDL and for the
        application's queries): ``actor_id`` and one typed column per projection. The
        same object for the same definition, so a condition built on it applies to
        :meth:`find`'s query."""
        key = f"{spec.actor_type}\0{spec.fingerprint}"
        with self._lock:
            table = self._table_objects.get(key)
            if table is None:
                table = self._table_objects[key] = self._build_table(spec)
        return table

    def _build_table(self, spec: ProjectionSpec) -> Table:
        return Table(
            self.table_name(spec),
            MetaData(),
            Column(
                "actor_id",
                String(255).with_variant(
                    mysql.VARCHAR(255, charset="utf8mb4", collation="utf8mb4_bin"),
                    "mysql",
                    "mariadb",
                ),
                primary_key=True,
            ),
            *(
                # NULL allowed even where the projection is not: a column added to a
                # table that holds rows is NULL until the backfill has run.
                Column(c.name, _KIND_TYPES[c.kind], nullable=True)
                for c in spec.columns
            ),
            info={"actor_type": spec.actor_type},
        )

    def ensure(self, spec: ProjectionSpec) -> bool:
        """Make the table and its columns exist (DDL, outside any turn); True when the
        rows must be computed again: the table is new or the definition changed."""
        table = self.table(spec)
        try:
            found, stored = self._make(table)
        except SQLAlchemyError:  # another process made the same table meanwhile
            found, stored = self._make(table)
        with self._lock:
            self._tables[spec.actor_type] = table.name
        return not found or stored is None or tuple(stored) != (table.name, spec.fingerprint)

    def _make(self, table: Table) -> tuple[bool, Any]:
        with self.engine.begin() as conn:
            found = inspect(conn).has_table(table.name)
            if not found:
                table.create(conn)
            else:
                have = {c["name"] for c in inspect(conn).get_columns(table.name)}
                for column in table.columns:
                    if column.name not in have:
                        kind = column.type.compile(dialect=conn.dialect)
                        conn.execute(
                            text(
                                f"ALTER TABLE {self._quote(table.name)} ADD COLUMN "
                                f"{self._quote(column.name)} {kind} NULL"
                            )
                        )
            stored = conn.execute(
                text(
                    f"SELECT table_name, fingerprint FROM {self.prefix}projections "
                    "WHERE actor_type = :t"
                ),
                {"t": table.info.get("actor_type", "")},
            ).first()
        return found, stored

    def record(self, spec: ProjectionSpec) -> None:
        """Remember the definition the rows were computed with (after a backfill)."""
        name = self.table_name(spec)
        with self.engine.begin() as conn:
            conn.execute(
                text(f"DELETE FROM {self.prefix}projections WHERE actor_type = :t"),
                {"t": spec.actor_type},
            )
            conn.execute(
                text(
                    f"INSERT INTO {self.prefix}projections (actor_type, table_name, fingerprint) "
                    "VALUES (:t, :n, :f)"
                ),
                {"t": spec.actor_type, "n": name, "f": spec.fingerprint},
            )

    def known_tables(self, tx: Tx) -> list[str]:
        """Every projection table recorded in this database (for ``empty_tables``)."""
        return [str(r[0]) for r in tx.rows(f"SELECT table_name FROM {self.prefix}projections")]

    # --- rows ---------------------------------------------------------------------------

    def write(self, tx: Tx, actor_id: str, staged: StagedProjection) -> None:
        """Upsert the actor's row, inside the turn's commit."""
        spec = staged.spec
        params: dict[str, Any] = {"actor_id": actor_id}
        for n, (column, value) in enumerate(zip(spec.columns, staged.values, strict=True)):
            params[f"v{n}"] = self._bind(column.kind, value)
        tx.run(self._upsert(spec), params)

    def _upsert(self, spec: ProjectionSpec) -> str:
        key = f"{spec.actor_type}\0{spec.fingerprint}"
        sql = self._upserts.get(key)
        if sql is None:
            q = self._quote
            names = [q(c.name) for c in spec.columns]
            values = ", ".join(f":v{n}" for n in range(len(names)))
            insert = (
                f"INSERT INTO {q(self.table_name(spec))} (actor_id, {', '.join(names)}) "
                f"VALUES (:actor_id, {values})"
            )
            if self.dialect.family == "mysql":
                sets = ", ".join(f"{n} = VALUES({n})" for n in names)
                sql = f"{insert} ON DUPLICATE KEY UPDATE {sets}"
            else:
                sets = ", ".join(f"{n} = excluded.{n}" for n in names)
                sql = f"{insert} ON CONFLICT (actor_id) DO UPDATE SET {sets}"
            self._upserts[key] = sql
        return sql

    def after_fence(self, staged: StagedProjection, fence: str = "a") -> str:
        """The upsert as a PostgreSQL ``WITH`` part of the one-statement commit
        (``turns._one_statement``, ``finish_direct``): it writes only if the fence
        part (``fence``) returned a row. Each value is cast to its column's type, as a
        ``SELECT`` list gives the server no column to infer it from (a NULL would be
        text)."""
        spec = staged.spec
        key = f"cte\0{fence}\0{spec.actor_type}\0{spec.fingerprint}"
        sql = self._upserts.get(key)
        if sql is None:
            q = self._quote
            table = self.table(spec)
            names = [q(c.name) for c in spec.columns]
            values = ", ".join(
                f"CAST(:p{n} AS {table.c[c.name].type.compile(dialect=self.engine.dialect)})"
                for n, c in enumerate(spec.columns)
            )
            sets = ", ".join(f"{n} = excluded.{n}" for n in names)
            sql = (
                f"INSERT INTO {q(table.name)} (actor_id, {', '.join(names)}) "
                f"SELECT :p_actor_id, {values} WHERE EXISTS (SELECT 1 FROM {fence}) "
                f"ON CONFLICT (actor_id) DO UPDATE SET {sets}"
            )
            self._upserts[key] = sql
        return sql

    def parameters(self, actor_id: str, staged: StagedProjection) -> dict[str, Any]:
        """The parameters of :meth:`after_fence`."""
        params: dict[str, Any] = {"p_actor_id": actor_id}
        for n, (column, value) in enumerate(zip(staged.spec.columns, staged.values, strict=True)):
            params[f"p{n}"] = self._bind(column.kind, value)
        return params

    def _bind(self, kind: str, value: Any) -> Any:
        if value is None:
            return None
        family = self.dialect.family
        if kind == "datetime" and isinstance(value, datetime) and family != "postgresql":
            # UTC without a zone (DATETIME, SQLite's text as SQLAlchemy writes it): the
            # value is already UTC, and the text sorts as the time does.
            naive = value.astimezone(UTC).replace(tzinfo=None)
            return naive if family == "mysql" else naive.isoformat(sep=" ")
        if kind == "decimal" and family == "sqlite":
            return str(value)
        return value

    def delete(self, tx: Tx, actor_type: str, actor_ids: Sequence[str]) -> None:
        """Delete the rows of destroyed or expired actors, in their transaction."""
        name = self._tables.get(actor_type)
        if name is None:
            name = self._recorded_table(tx, actor_type)
        if name is None or not actor_ids:
            return
        placeholders = ", ".join(f":a{n}" for n in range(len(actor_ids)))
        tx.run(
            f"DELETE FROM {self._quote(name)} WHERE actor_id IN ({placeholders})",
            {f"a{n}": actor_id for n, actor_id in enumerate(actor_ids)},
        )

    def _recorded_table(self, tx: Tx, actor_type: str) -> str | None:
        name = tx.scalar(
            f"SELECT table_name FROM {self.prefix}projections WHERE actor_type = :t",
            {"t": actor_type},
        )
        return None if name is None else str(name)

    def states_after(
        self, tx: Tx, actor_type: str, after: str, limit: int
    ) -> list[tuple[str, str | None, int]]:
        """A page of the type's actors for a backfill, locked until the page's commit, so
        a turn committing meanwhile writes its row after the backfill's:
        (actor_id, state, state_version) in actor_id order."""
        return [
            (str(r[0]), r[1], int(r[2]))
            for r in tx.rows(
                "SELECT actor_id, state, state_version FROM {actors} WHERE actor_type = :t "
                "AND actor_id > :after ORDER BY actor_id LIMIT :limit{for_update}",
                {"t": actor_type, "after": after, "limit": limit},
            )
        ]

    def find(
        self, spec: ProjectionSpec, where: Any, after: str | None, limit: int
    ) -> list[tuple[str, dict[str, Any]]]:
        """Actors of the spec's type whose row matches ``where`` (a SQLAlchemy condition
        on :meth:`table`'s columns, or None), after ``after`` in ``actor_id`` order:
        (actor_id, {projection: value})."""
        table = self.table(spec)
        query = select(table).order_by(table.c.actor_id).limit(limit)
        if where is not None:
            query = query.where(where)
        if after is not None:
            query = query.where(table.c.actor_id > after)
        names = [c.name for c in spec.columns]
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [(str(row[0]), dict(zip(names, row[1:], strict=True))) for row in rows]
