"""The schema's versioned steps: entry ``n`` of :data:`MIGRATIONS` brings a database
from version ``n`` to ``n + 1``.

Each step is written against the metadata of the current code (``schema.py``) and is
safe to run again after a crash part-way (``checkfirst``, guarded ``ALTER``s), since
``install`` runs them under the install lock but MySQL commits DDL as it goes.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import (
    Connection,
    MetaData,
    text,
)
from sqlalchemy.dialects import postgresql

from .admin_tables import migrate_admin_tables
from .notices import KEY_NAME, new_secret


def _create(conn: Connection, md: MetaData, *names: str) -> None:
    prefix = md.info["prefix"]
    md.create_all(conn, tables=[md.tables[prefix + n] for n in names], checkfirst=True)


def _migrate_to_1(conn: Connection, md: MetaData) -> None:
    """The mailbox: actors and messages."""
    _create(conn, md, "schema", "actors", "messages")


def _migrate_to_2(conn: Connection, md: MetaData) -> None:
    """The transactional outbox: effects and reminders."""
    _create(conn, md, "effects", "reminders")


def _migrate_to_3(conn: Connection, md: MetaData) -> None:
    """Administration: audit log, dead-letter resolutions, index of dead effects."""
    migrate_admin_tables(conn, md)


def _migrate_to_4(conn: Connection, md: MetaData) -> None:
    """Operations: the process registry, pausable reminders, effects by actor, and the
    trace context of messages and effects."""
    from sqlalchemy import inspect

    prefix = md.info["prefix"]
    _create(conn, md, "processes")
    added = {
        "reminders": ("paused", "INTEGER NOT NULL DEFAULT 0"),
        "messages": ("traceparent", "VARCHAR(55) NULL"),
        "effects": ("traceparent", "VARCHAR(55) NULL"),
    }
    for table, (column, definition) in added.items():
        columns = {c["name"] for c in inspect(conn).get_columns(f"{prefix}{table}")}
        if column not in columns:
            conn.execute(text(f"ALTER TABLE {prefix}{table} ADD COLUMN {column} {definition}"))
    for index in md.tables[f"{prefix}effects"].indexes:
        if index.name == f"{prefix}effects_actor":
            index.create(conn, checkfirst=True)


def _migrate_to_5(conn: Connection, md: MetaData) -> None:
    """Byte-exact text everywhere: on MySQL/MariaDB the columns that were created with
    the server's default collation (``reminders.operation`` among them) ignored case and
    accents. Rebuilds each table there; nothing to do elsewhere. Tables of later
    migrations do not exist yet (they are created byte-exact)."""
    from sqlalchemy import inspect

    existing = set(inspect(conn).get_table_names())
    md.info["dialect"].byte_exact_text(conn, sorted(t for t in md.tables if t in existing))


def _migrate_to_6(conn: Connection, md: MetaData) -> None:
    """Mailbox order of messages that enter the mailbox later: ``messages.send_order``.

    Rows written before it have NULL there and sort by their id, as they did.
    """
    from sqlalchemy import inspect

    table = f"{md.info['prefix']}messages"
    if "send_order" not in {c["name"] for c in inspect(conn).get_columns(table)}:
        conn.execute(text(f"ALTER TABLE {table} ADD COLUMN send_order BIGINT NULL"))


def _migrate_to_7(conn: Connection, md: MetaData) -> None:
    """Who sent each message: ``messages.sender`` (``self.current_message.sender``).

    Rows written before it have NULL there and read as sent by a caller.
    """
    from sqlalchemy import inspect

    table = f"{md.info['prefix']}messages"
    if "sender" not in {c["name"] for c in inspect(conn).get_columns(table)}:
        conn.execute(text(f"ALTER TABLE {table} ADD COLUMN sender TEXT NULL"))


def _migrate_to_8(conn: Connection, md: MetaData) -> None:
    """Cron reminders: ``reminders.cron`` and its zone, ``reminders.cron_tz``."""
    from sqlalchemy import inspect

    table = f"{md.info['prefix']}reminders"
    columns = {c["name"] for c in inspect(conn).get_columns(table)}
    for column, size in (("cron", 255), ("cron_tz", 64)):
        if column not in columns:
            conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} VARCHAR({size}) NULL"))


def _migrate_to_9(conn: Connection, md: MetaData) -> None:
    """Realtime: the broadcast outbox, ``broadcasts``."""
    _create(conn, md, "broadcasts")


def _migrate_to_10(conn: Connection, md: MetaData) -> None:
    """The effects each process handles: ``processes.effect_names`` (an effect no live
    process handles is visible, and dies after ``unhandled_effect_timeout``).

    Rows written before it have NULL there: a process of an older version is gone
    once the schema is upgraded (it refuses to run against a newer schema).
    """
    from sqlalchemy import inspect

    table = f"{md.info['prefix']}processes"
    if "effect_names" not in {c["name"] for c in inspect(conn).get_columns(table)}:
        kind = "LONGTEXT" if conn.dialect.name in ("mysql", "mariadb") else "TEXT"
        conn.execute(text(f"ALTER TABLE {table} ADD COLUMN effect_names {kind} NULL"))


def _migrate_to_11(conn: Connection, md: MetaData) -> None:
    """The key of the signed wake-up payloads: ``secrets`` and its ``notice_key`` row.

    A wake-up channel is open to any role that can connect (PostgreSQL) or to any
    Redis client; a payload whose MAC this key does not confirm is only a hint.
    """
    _create(conn, md, "secrets")
    _insert_notice_key(conn, md.info["prefix"])


def _migrate_to_12(conn: Connection, md: MetaData) -> None:
    """Where a failure happened: ``messages.traceback`` and ``effects.traceback``.

    Rows written before it have NULL there: their failures show the error alone.
    """
    from sqlalchemy import inspect

    for name in ("messages", "effects"):
        table = f"{md.info['prefix']}{name}"
        if "traceback" not in {c["name"] for c in inspect(conn).get_columns(table)}:
            kind = "LONGTEXT" if conn.dialect.name in ("mysql", "mariadb") else "TEXT"
            conn.execute(text(f"ALTER TABLE {table} ADD COLUMN traceback {kind} NULL"))


def _migrate_to_13(conn: Connection, md: MetaData) -> None:
    """Fast takeover and rolling deploys: ``processes.session_mark`` (how a peer proves
    the process gone) and ``processes.capabilities`` (what its code can run).

    Rows written before it have NULL in both: such a process is recovered by its
    heartbeat alone, and is taken to run every operation of the types it serves.
    """
    from sqlalchemy import inspect

    table = f"{md.info['prefix']}processes"
    columns = {c["name"] for c in inspect(conn).get_columns(table)}
    if "session_mark" not in columns:
        conn.execute(text(f"ALTER TABLE {table} ADD COLUMN session_mark VARCHAR(255) NULL"))
    if "capabilities" not in columns:
        kind = "LONGTEXT" if conn.dialect.name in ("mysql", "mariadb") else "TEXT"
        conn.execute(text(f"ALTER TABLE {table} ADD COLUMN capabilities {kind} NULL"))


def _migrate_to_14(conn: Connection, md: MetaData) -> None:
    """Native JSON state: ``actors.state`` becomes ``jsonb`` on PostgreSQL and ``JSON``
    on MySQL/MariaDB (every stored state is already valid JSON, so nothing is lost;
    the conversion rewrites the table once). SQLite keeps text."""
    from sqlalchemy import inspect

    table = f"{md.info['prefix']}actors"
    name = conn.dialect.name
    column = next(c for c in inspect(conn).get_columns(table) if c["name"] == "state")
    if name == "postgresql" and not isinstance(column["type"], postgresql.JSONB):
        conn.execute(text(f"ALTER TABLE {table} ALTER COLUMN state TYPE jsonb USING state::jsonb"))
    elif name in ("mysql", "mariadb") and not _mysql_json(conn, table):
        conn.execute(text(f"ALTER TABLE {table} MODIFY state JSON NULL"))


def _migrate_to_15(conn: Connection, md: MetaData) -> None:
    """The per-turn journal of classes that ask for one (``journaled = True``), and the
    record of projection tables (``@projection``)."""
    _create(conn, md, "journal", "projections")


def _migrate_to_16(conn: Connection, md: MetaData) -> None:
    """Broker-less wake-ups: ``peers``, the address of each process's datagram socket."""
    _create(conn, md, "peers")


def _migrate_to_17(conn: Connection, md: MetaData) -> None:
    """The per-type lock rows of classes that limit their concurrent turns."""
    _create(conn, md, "type_locks")


def _migrate_to_18(conn: Connection, md: MetaData) -> None:
    """Flow control of effects: the ``effect_limits`` table and ``effects.started_at``
    (when the current attempt was claimed). Rows written before it have NULL there."""
    from sqlalchemy import inspect

    _create(conn, md, "effect_limits")
    table = f"{md.info['prefix']}effects"
    if "started_at" not in {c["name"] for c in inspect(conn).get_columns(table)}:
        conn.execute(text(f"ALTER TABLE {table} ADD COLUMN started_at BIGINT NULL"))


def _migrate_to_19(conn: Connection, md: MetaData) -> None:
    """Message priority and coalescing: ``messages.priority``, ``coalesce_key``,
    ``replaced_by`` and the index of urgent messages. Rows written before it are plain
    (priority 0, no key)."""
    from sqlalchemy import inspect

    prefix = md.info["prefix"]
    table = f"{prefix}messages"
    columns = {c["name"] for c in inspect(conn).get_columns(table)}
    text_kind = "VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
    if conn.dialect.name not in ("mysql", "mariadb"):
        text_kind = "VARCHAR(255)"
    added = {
        "priority": "SMALLINT NOT NULL DEFAULT 0",
        "coalesce_key": f"{text_kind} NULL",
        "replaced_by": "VARCHAR(32) NULL",
    }
    for name, kind in added.items():
        if name not in columns:
            conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {name} {kind}"))
    urgent = next(i for i in md.tables[table].indexes if i.name == f"{prefix}messages_urgent")
    urgent.create(conn, checkfirst=True)


def _mysql_json(conn: Connection, table: str) -> bool:
    """Whether ``state`` is JSON already: MySQL says so in its column type, MariaDB
    (where JSON is LONGTEXT checked by ``JSON_VALID``) in a check constraint."""
    found = conn.execute(
        text(
            "SELECT DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE()"
            " AND TABLE_NAME = :t AND COLUMN_NAME = 'state'"
        ),
        {"t": table},
    ).scalar()
    if str(found).lower() == "json":
        return True
    checks = conn.execute(
        text(
            "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS"
            " WHERE CONSTRAINT_SCHEMA = DATABASE() AND TABLE_NAME = :t"
        ),
        {"t": table},
    ).scalars()
    return any("json_valid(`state`)" in str(clause).lower() for clause in checks)


def _insert_notice_key(conn: Connection, prefix: str) -> None:
    found = conn.execute(
        text(f"SELECT 1 FROM {prefix}secrets WHERE name = :n"), {"n": KEY_NAME}
    ).first()
    if found is None:
        conn.execute(
            text(f"INSERT INTO {prefix}secrets (name, value) VALUES (:n, :v)"),
            {"n": KEY_NAME, "v": new_secret()},
        )


#: Ordered migrations: entry ``n`` brings the schema from version ``n`` to ``n + 1``.
MIGRATIONS: list[Callable[[Connection, MetaData], None]] = [
    _migrate_to_1,
    _migrate_to_2,
    _migrate_to_3,
    _migrate_to_4,
    _migrate_to_5,
    _migrate_to_6,
    _migrate_to_7,
    _migrate_to_8,
    _migrate_to_9,
    _migrate_to_10,
    _migrate_to_11,
    _migrate_to_12,
    _migrate_to_13,
    _migrate_to_14,
    _migrate_to_15,
    _migrate_to_16,
    _migrate_to_17,
    _migrate_to_18,
    _migrate_to_19,
]
