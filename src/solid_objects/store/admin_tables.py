"""The administration API's own tables (schema version 3):

- ``{prefix}audit``: one row per change made through the administration API
  (who, what, when, which target, details as JSON).
- ``{prefix}resolutions``: what an operator did with a dead letter
  (``retried`` with the id of the new message, or ``discarded``). The dead
  message itself keeps ``status = 'dead'``, because its original caller may
  still read that outcome; a dead letter with a resolution no longer lists
  as open.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import BigInteger, Column, Index, MetaData, String, Table, Text, text

if TYPE_CHECKING:
    from sqlalchemy import Connection


# --- schema (version 3) ---------------------------------------------------------------


def define_admin_tables(md: MetaData, prefix: str) -> None:
    """Add the administration tables, and the dead-effects index, to ``md``.

    ``md`` must already hold the ``{prefix}effects`` table (``schema.build_metadata``).
    """
    from .schema import big_text, ident  # lazy: schema imports this module

    if f"{prefix}audit" in md.tables:
        return
    Table(
        f"{prefix}audit",
        md,
        # Time-ordered (store.new_id), so the primary key is also the log's order.
        Column("id", String(32), primary_key=True),
        Column("at", BigInteger, nullable=False),
        Column("principal", ident(255), nullable=False),
        Column("action", String(64), nullable=False),
        # message | effect | actor
        Column("target_kind", String(16), nullable=False),
        Column("target_id", ident(255), nullable=False),
        Column("actor_type", ident(128), nullable=True),
        Column("actor_id", ident(255), nullable=True),
        Column("detail", big_text(), nullable=True),
        Index(f"{prefix}audit_target", "target_kind", "target_id"),
        sqlite_with_rowid=False,
    )
    Table(
        f"{prefix}resolutions",
        md,
        Column("message_id", String(32), primary_key=True),
        # retried | discarded
        Column("resolution", String(16), nullable=False),
        Column("retry_message_id", String(32), nullable=True),
        Column("principal", ident(255), nullable=False),
        Column("reason", Text(), nullable=True),
        Column("resolved_at", BigInteger, nullable=False),
        sqlite_with_rowid=False,
    )
    Index(
        f"{prefix}effects_dead",
        md.tables[f"{prefix}effects"].c.status,
        md.tables[f"{prefix}effects"].c.completed_at,
        sqlite_where=text("status = 'dead'"),
        postgresql_where=text("status = 'dead'"),
    )


def migrate_admin_tables(conn: Connection, md: MetaData) -> None:
    """Schema migration 2 -> 3: create the audit and resolutions tables and the index.

    The index is created explicitly because ``create_all`` skips tables that
    already exist (``effects`` was created by migration 2), and with it their
    new indexes.
    """
    prefix = md.info["prefix"]
    define_admin_tables(md, prefix)
    md.create_all(
        conn,
        tables=[md.tables[f"{prefix}audit"], md.tables[f"{prefix}resolutions"]],
        checkfirst=True,
    )
    for index in md.tables[f"{prefix}effects"].indexes:
        if index.name == f"{prefix}effects_dead":
            index.create(conn, checkfirst=True)


def admin_sql(prefix: str, template: str) -> str:
    """Fill in the admin tables' names; ``Store.sql`` fills in the rest."""
    return template.replace("{audit}", f"{prefix}audit").replace(
        "{resolutions}", f"{prefix}resolutions"
    )


def insert_ignore(family: str, table: str, columns: str, values: str, key: str) -> str:
    """An ``INSERT`` that writes nothing when ``key`` already holds the row."""
    if family == "postgresql":
        return f"INSERT INTO {table} ({columns}) VALUES ({values}) ON CONFLICT ({key}) DO NOTHING"
    if family == "mysql":
        return f"INSERT IGNORE INTO {table} ({columns}) VALUES ({values})"
    return f"INSERT OR IGNORE INTO {table} ({columns}) VALUES ({values})"
